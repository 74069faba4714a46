"""Discordant counts by block matrix products (captioneval.stats.blockpairs) against a pair-by-pair
count and against scipy.stats.kendalltau on the real Flickr8k-CrowdFlower rows, and the permutation
test's block path against its bit-level path (issue 35: the same integers, so the same numbers)."""
import numpy as np
import pytest
import scipy.stats as st

from captioneval.stats.blockpairs import BlockDiscordance, integer_cumsum
from captioneval.stats.engine import reference_path
from captioneval.stats.significance import _mixed_distribution, _MixedStatistic, _SwapDraws, _zscore

from .conftest import FLICKR8K


def brute_discordant(gold: np.ndarray, weights: np.ndarray) -> int:
    reps = np.repeat(np.arange(gold.size), weights)
    g = gold[reps]
    i, j = np.triu_indices(g.size, k=1)
    # i < j in the fixed order; repeats of one entry are equal in x: never discordant
    return int(((g[i] > g[j]) & (reps[i] != reps[j])).sum())


@pytest.mark.parametrize("block", [4, 7, 64])
def test_counts_equal_the_pair_by_pair_count(block):
    rng = np.random.default_rng(block)
    for length in (1, 5, 63, 64, 65, 200):
        gold = rng.integers(0, 6, length)
        bd = BlockDiscordance(gold, block=block)
        sel = rng.random((5, length)) < 0.5
        counts = rng.integers(0, 4, size=(4, length))
        assert bd.counts(sel).tolist() == [brute_discordant(gold, w.astype(int)) for w in sel]
        assert bd.counts(counts).tolist() == [brute_discordant(gold, w) for w in counts]
        assert bd.counts_columns(counts.T).tolist() == bd.counts(counts).tolist()


def test_large_weights_take_the_float64_products():
    """Weights whose total leaves float32's exact integers (2**24) are counted in float64; large
    weights below that total stay exact in the float32 products, and their within-block sums (here
    up to 9000 * 28,003, past 2**24) leave the per-block float32 sums for float64 ones."""
    gold = np.array([3, 1, 2, 0, 2, 1, 0, 3])
    bd = BlockDiscordance(gold, block=8)
    for w in (np.array([[5000, 7000, 3000, 9000, 1, 0, 4000, 2]]),
              np.array([[5_000_000, 7_000_000, 3, 9_000_001, 1, 0, 4000, 2]])):
        expected = sum(int(w[0, q]) * int(w[0, p]) for q in range(8) for p in range(q + 1, 8) if gold[q] > gold[p])
        assert bd.counts(w).tolist() == [expected]
        assert bd.counts(w.astype(np.float64)).tolist() == [expected]
    assert w.sum() > 2 ** 24 and bd._m64 is not None  # the second took the float64 products


def test_matrices_are_bounded():
    """The constant matrices stay under MAX_MATRIX_BYTES; a caller keeps its loop beyond (a
    1M-row permutation test has 2M entries: 700 MB with 12 classes)."""
    assert BlockDiscordance.fits(95_660, 12)
    assert not BlockDiscordance.fits(2_000_000, 12)


def test_bad_gold_is_refused():
    with pytest.raises(ValueError):
        BlockDiscordance(np.array([0.5, 1.0]))
    with pytest.raises(ValueError):
        BlockDiscordance(np.array([-1, 2]))
    with pytest.raises(ValueError):
        BlockDiscordance(np.array([0, 1])).counts(np.ones((2, 3)))


def crowdflower_rows():
    """Per judged pair of Flickr8k-CrowdFlower: the fraction of yes votes (12 distinct values) and
    the caption's length in words (a stand-in metric with many ties), from the bundled files."""
    captions = {}
    for line in (FLICKR8K / "Flickr8k.token.txt").read_text().splitlines():
        key, text = line.split("\t", 1)
        captions[key] = text
    votes = {}
    for line in (FLICKR8K / "CrowdFlowerAnnotations.txt").read_text().splitlines():
        image, caption_key, _, yes, no = line.split("\t")[:5]
        votes[(image, caption_key)] = int(yes) / (int(yes) + int(no))
    keys = sorted(votes)
    y = np.array([votes[k] for k in keys])
    x = np.array([len(captions[k[1]].split()) for k in keys], dtype=float)
    return x, y


def test_kendall_discordance_of_real_rows_equals_scipy():
    x, y = crowdflower_rows()
    assert np.unique(y).size == 12 and x.size > 40_000
    _, g = np.unique(y, return_inverse=True)
    order = np.lexsort((g, x))  # by metric value, ties by gold
    d = int(BlockDiscordance(g[order]).counts(np.ones((1, x.size), dtype=bool))[0])
    n = x.size
    total = n * (n - 1) // 2
    _, cx = np.unique(x, return_counts=True)
    _, cy = np.unique(y, return_counts=True)
    _, cxy = np.unique(np.stack([x, y]), axis=1, return_counts=True)
    tx, ty, txy = ((c * (c - 1) // 2).sum() for c in (cx, cy, cxy))
    c = total - d - tx - ty + txy
    tau_b = (c - d) / np.sqrt(total - tx) / np.sqrt(total - ty)
    assert tau_b == pytest.approx(st.kendalltau(x, y).statistic, abs=1e-15)


def assert_block_counts_equal_the_bit_level_counts(engine, swaps):
    """D, ties and surplus counts of both metrics: block products against the bit-level loop."""
    with reference_path():
        old = engine._kendall_counts(swaps)
    new = engine._kendall_counts(swaps)
    for metric_old, metric_new in zip(old, new):
        for a, b in zip(metric_old, metric_new):
            assert np.array_equal(a, b)


@pytest.mark.parametrize("statistic", ["kendall_tau_b", "kendall_tau_c", "kendall_tau_23", "pairwise_accuracy"])
def test_permutation_block_path_equals_the_bit_level_path_on_real_rows(statistic):
    x, y = crowdflower_rows()
    rng = np.random.default_rng(0)
    other = np.round(x + rng.normal(0, 2, x.size), 0)  # a second metric, correlated, with ties
    engine = _MixedStatistic(_zscore(x), _zscore(other), y, statistic)
    assert engine.blocks is not None
    swaps = _SwapDraws(x.size, 4).next(6)
    assert_block_counts_equal_the_bit_level_counts(engine, swaps)
    with reference_path():
        o1, d1 = _mixed_distribution(_zscore(x), _zscore(other), y, statistic, 30, 2)
    o2, d2 = _mixed_distribution(_zscore(x), _zscore(other), y, statistic, 30, 2)
    assert o1 == o2 and np.array_equal(d1, d2, equal_nan=True)


def test_permutation_block_path_without_tied_values():
    """Metric values without ties (no runs: the tie terms are zero) and gold with ties only."""
    x, y = crowdflower_rows()
    rng = np.random.default_rng(1)
    z1, z2 = rng.normal(size=x.size), rng.normal(size=x.size)
    engine = _MixedStatistic(z1, z2, y, "kendall_tau_b")
    assert engine.blocks is not None and engine.vb is None and engine.tie_runs is None
    swaps = _SwapDraws(x.size, 5).next(4)
    assert_block_counts_equal_the_bit_level_counts(engine, swaps)


@pytest.mark.parametrize("rows", [0, 1, 63, 64, 65, 47_830])
def test_integer_cumsum_equals_numpys(rows):
    """The blocked cumulative sum of counts equals np.cumsum bit for bit (floats holding integers, and ints)."""
    counts = np.random.default_rng(rows).poisson(3.0, size=(rows, 7))
    for x in (counts.astype(np.float64), counts):
        out = integer_cumsum(x)
        assert out.dtype == x.dtype and np.array_equal(out, np.cumsum(x, axis=0))
    with pytest.raises(ValueError):
        integer_cumsum(np.zeros(5))
