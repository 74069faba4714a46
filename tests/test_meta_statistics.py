"""Tests for the meta-evaluation statistics (captioneval.stats.pairwise / significance / ceiling).

Reference values come from hand calculation (pairs written out in comments), from brute-force
O(n^2) pair enumeration, from scipy.stats on materialised data, or from published examples; never
from earlier outputs of the code under test. No database, no wall-clock assertions (speed is
measured in benchmarks/significance_speed.py).
"""

from __future__ import annotations

import itertools
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.stats as st

from captioneval.stats import (
    META_STATISTICS,
    CeilingResult,
    ForcedChoiceResult,
    MetricComparison,
    PairCounts,
    PermutationResult,
    TieCalibration,
    compare_metrics,
    forced_choice_accuracy,
    forced_choice_ceiling,
    kendall_tau_23,
    leave_one_rater_out,
    pair_counts,
    pairwise_accuracy,
    per_group_correlation,
    per_group_rank_agreement,
    permutation_test,
    significance_clusters,
    split_half_ceiling,
    split_half_reliability,
    system_level_correlation,
    tie_calibrated_accuracy,
    williams_test,
)
from captioneval.stats.significance import _SwapDraws, _mixed_distribution, _zscore, pair_seed

REPO = Path(__file__).resolve().parents[1]
THUMB = REPO / "data" / "thumb" / "mscoco_THumB-1.0.jsonl"
sys.path.insert(0, str(REPO / "tests"))
from flickr8k_data import load_flickr8k_expert  # noqa: E402


# ----------------------------------------------------------------------------- references


def brute_counts(x, y, groups=None, eps=0.0):
    """(C, D, Tx, Ty, Txy, T) by enumerating every pair (i < j), metric tie = |x_i - x_j| <= eps."""
    c = d = tx = ty = txy = t = 0
    for i, j in itertools.combinations(range(len(x)), 2):
        if groups is not None and groups[i] != groups[j]:
            continue
        t += 1
        xt = abs(x[i] - x[j]) <= eps
        yt = y[i] == y[j]
        if xt and yt:
            txy += 1
        elif xt:
            tx += 1
        elif yt:
            ty += 1
        elif (x[i] - x[j]) * (y[i] - y[j]) > 0:
            c += 1
        else:
            d += 1
    return c, d, tx, ty, txy, t


def as_tuple(pc: PairCounts):
    return (pc.concordant, pc.discordant, pc.ties_x, pc.ties_y, pc.ties_xy, pc.total)


def ref_statistic(x, y, statistic):
    """Independent reference value: scipy, or brute-force pair counts for the '23' variants."""
    x = np.asarray(x, float)
    y = np.asarray(y, float)
    if statistic in ("kendall_tau_23", "pairwise_accuracy"):
        c, d, tx, ty, txy, t = brute_counts(x, y)
        return (c + txy - d - tx - ty) / t if statistic == "kendall_tau_23" else (c + txy) / t
    if (x == x[0]).all() or (y == y[0]).all():
        return math.nan
    if statistic == "pearson":
        return float(st.pearsonr(x, y).statistic)
    if statistic == "spearman":
        return float(st.spearmanr(x, y).statistic)
    return float(st.kendalltau(x, y, variant="b" if statistic == "kendall_tau_b" else "c").statistic)


def naive_deltas(x1, x2, y, statistic, swaps):
    """stat(x1', y) - stat(x2', y) on materialised swapped z-scores (scipy.stats.zscore)."""
    z1, z2 = st.zscore(x1), st.zscore(x2)
    out = np.empty(swaps.shape[0])
    for b, s in enumerate(swaps):
        out[b] = ref_statistic(np.where(s, z2, z1), y, statistic) - ref_statistic(np.where(s, z1, z2), y, statistic)
    return out


def load_thumb():
    rows = [json.loads(line) for line in THUMB.read_text().splitlines() if line.strip()]
    sys_ = np.array([r["SYS"] for r in rows])
    img = np.array([r["image"] for r in rows])
    p = np.array([r["P"] for r in rows], float)
    r = np.array([r["R"] for r in rows], float)
    h = np.array([row["human_score"] for row in rows], float)
    length = np.array([len(row["hyp"].split()) for row in rows], float)
    return sys_, img, p, r, h, length


def expert_rows():
    pairs = load_flickr8k_expert()
    items, raters, ys = [], [], []
    for k, p in enumerate(pairs):
        for j, rating in enumerate(p.ratings):
            items.append(k)
            raters.append(f"expert_{j + 1}")
            ys.append(float(rating))
    return np.array(items), np.array(raters), np.array(ys)


def json_roundtrip(d):
    return json.loads(json.dumps(d, allow_nan=False))


# ----------------------------------------------------------------------------- pair counts


def test_pair_counts_by_hand_all_five_kinds():
    x = [1, 2, 2, 3, 0, 2]
    y = [1, 1, 2, 2, 2, 2]
    # (0,1) x< y= Ty   (0,2) x< y< C   (0,3) x< y< C   (0,4) x> y< D   (0,5) x< y< C
    # (1,2) x= y< Tx   (1,3) x< y< C   (1,4) x> y< D   (1,5) x= y< Tx
    # (2,3) x< y= Ty   (2,4) x> y= Ty  (2,5) x= y= Txy
    # (3,4) x> y= Ty   (3,5) x> y= Ty  (4,5) x< y= Ty
    pc = pair_counts(x, y)
    assert as_tuple(pc) == (4, 2, 2, 6, 1, 15)
    assert pc.to_dict() == {"concordant": 4, "discordant": 2, "ties_x": 2, "ties_y": 6, "ties_xy": 1, "total": 15}
    # tau_23 = (4 + 1 - 2 - 2 - 6) / 15, acc_23 = (4 + 1) / 15
    assert kendall_tau_23(x, y) == pytest.approx(-5 / 15, abs=1e-15)
    assert pairwise_accuracy(x, y) == pytest.approx(5 / 15, abs=1e-15)
    # tau_b = (C - D) / sqrt((T - Tx - Txy)(T - Ty - Txy)) = 2 / sqrt(12 * 8) = scipy
    assert pc.tau_b() == pytest.approx(2 / math.sqrt(96), abs=1e-15)
    assert pc.tau_b() == pytest.approx(st.kendalltau(x, y).statistic, abs=1e-15)


def test_pair_counts_epsilon_by_hand():
    x = [0.0, 0.5, 1.0, 3.0]
    y = [0, 1, 1, 0]
    # eps = 0.5: (0,1) |dx|=.5 tie, y differ -> Tx; (0,2) |dx|=1 C; (0,3) y= -> Ty;
    #            (1,2) |dx|=.5 tie, y= -> Txy; (1,3) dx>0 dy<0 D; (2,3) D
    assert as_tuple(pair_counts(x, y, epsilon=0.5)) == (1, 2, 1, 1, 1, 6)
    assert pairwise_accuracy(x, y, epsilon=0.5) == pytest.approx(2 / 6)
    # eps = 0: (0,1) becomes C, (1,2) becomes Ty
    assert as_tuple(pair_counts(x, y)) == (2, 2, 0, 2, 0, 6)
    assert pairwise_accuracy(x, y) == pytest.approx(2 / 6)
    assert kendall_tau_23(x, y, epsilon=0.5) == pytest.approx((1 + 1 - 2 - 1 - 1) / 6)


def test_pair_counts_groups_by_hand():
    x = [1, 2, 3, 1, 2, 3]
    y = [1, 2, 3, 3, 2, 1]
    g = ["a", "a", "a", "b", "b", "b"]
    # group a: (0,1) (0,2) (1,2) concordant; group b: (3,4) (3,5) (4,5) discordant; 6 pairs in all
    assert as_tuple(pair_counts(x, y, g)) == (3, 3, 0, 0, 0, 6)
    assert kendall_tau_23(x, y, g) == 0.0
    assert pairwise_accuracy(x, y, g) == 0.5
    # pooled over all 15 pairs it is different
    assert pair_counts(x, y).total == 15


def test_pair_counts_float_boundary_is_exact():
    # 0.3 - 0.2 = 0.09999999999999998 <= 0.1 but 0.4 - 0.3 = 0.10000000000000003 > 0.1:
    # a metric tie is decided by the float value of |x_i - x_j|, exactly as brute force does.
    x = [0.2, 0.3, 0.4]
    y = [0, 1, 2]
    assert abs(0.3 - 0.2) <= 0.1 and abs(0.4 - 0.3) > 0.1
    assert as_tuple(pair_counts(x, y, epsilon=0.1)) == brute_counts(x, y, eps=0.1) == (2, 0, 1, 0, 0, 3)


@pytest.mark.parametrize("seed", range(8))
def test_pair_counts_equal_brute_force_on_tie_heavy_random_data(seed):
    rng = np.random.default_rng(seed)
    for trial in range(25):
        n = int(rng.integers(2, 45))
        x = np.round(rng.integers(0, 12, size=n) * 0.1, 1) if trial % 2 else rng.normal(size=n).round(1)
        y = rng.integers(0, int(rng.integers(1, 7)), size=n).astype(float)
        groups = rng.integers(0, 4, size=n) if trial % 3 == 0 else None
        eps = [0.0, 0.1, 0.2, 0.35][trial % 4]
        got = as_tuple(pair_counts(x, y, groups, epsilon=eps))
        assert got == brute_counts(x, y, groups, eps), (seed, trial, eps)


def test_pair_counts_continuous_gold_and_many_groups_equal_brute_force():
    rng = np.random.default_rng(11)
    n = 400
    x = rng.normal(size=n).round(2)
    y = rng.normal(size=n).round(2)  # many distinct gold values: many bit levels
    g = rng.integers(0, 30, size=n)
    for eps in (0.0, 0.05):
        assert as_tuple(pair_counts(x, y, epsilon=eps)) == brute_counts(x, y, eps=eps)
        assert as_tuple(pair_counts(x, y, g, epsilon=eps)) == brute_counts(x, y, g, eps)


@pytest.mark.parametrize("seed", [0, 1])
def test_tau_b_and_tau_c_from_counts_equal_scipy(seed):
    rng = np.random.default_rng(seed)
    n = 3000
    x = rng.integers(0, 25, size=n).astype(float)
    x[rng.random(n) < 0.3] = 0.0  # BLEU-like zeros
    y = rng.integers(1, 5, size=n).astype(float)
    pc = pair_counts(x, y)
    assert pc.total == n * (n - 1) // 2
    assert pc.tau_b() == pytest.approx(st.kendalltau(x, y, variant="b").statistic, abs=1e-12)
    k = min(np.unique(x).size, np.unique(y).size)
    tau_c = 2 * (pc.concordant - pc.discordant) / (n * n * (k - 1) / k)
    assert tau_c == pytest.approx(st.kendalltau(x, y, variant="c").statistic, abs=1e-12)
    assert 2 * pairwise_accuracy(x, y) - 1 == pytest.approx(kendall_tau_23(x, y), abs=1e-12)


def test_pair_counts_pooled_50k_rows_match_scipy():
    # n = 50,000 pooled rows: 1.25e9 pairs, impossible to enumerate; O(n log n) counting
    rng = np.random.default_rng(5)
    n = 50_000
    y = rng.integers(0, 4, size=n) / 3.0
    x = np.round(y + rng.normal(size=n), 2)
    pc = pair_counts(x, y)
    assert pc.total == n * (n - 1) // 2
    assert pc.tau_b() == pytest.approx(st.kendalltau(x, y).statistic, abs=1e-12)
    # ties: Tx + Txy = sum over x values of m(m-1)/2
    _, cx = np.unique(x, return_counts=True)
    assert pc.ties_x + pc.ties_xy == int((cx * (cx - 1) // 2).sum())


def test_perfect_and_reversed_metric():
    y = [1, 2, 2, 3]
    assert kendall_tau_23(y, y) == 1.0 and pairwise_accuracy(y, y) == 1.0
    rev = [-v for v in y]
    # ties in y are tied in the reversed metric too (Txy = 1); the other 5 pairs are discordant
    assert pairwise_accuracy(rev, y) == pytest.approx(1 / 6)


@pytest.mark.parametrize(
    "args",
    [
        ([1, 2], [1], None, 0.0),
        ([1, 2, 3], [1, 2, float("nan")], None, 0.0),
        ([1], [1], None, 0.0),
        ([1, 2, 3], [1, 2, 3], [1, 2], 0.0),
        ([1, 2, 3], [1, 2, 3], None, -0.1),
        ([1, 2, 3], [1, 2, 3], None, float("inf")),
    ],
)
def test_pair_counts_errors(args):
    with pytest.raises(ValueError):
        pair_counts(*args)


# ----------------------------------------------------------------------------- tie calibration


def test_tie_calibration_by_hand():
    y = [0, 0, 1, 1]
    x = [0.0, 0.01, 1.0, 1.02]
    # eps = 0: (0,1) and (2,3) are tied only in y -> acc = 4/6.
    # eps = |1.02 - 1.0|: both become ties in both -> acc = 6/6 (eps = 0.01 only ties (0,1): 5/6)
    assert pairwise_accuracy(x, y) == pytest.approx(4 / 6)
    res = tie_calibrated_accuracy(x, y)
    assert isinstance(res, TieCalibration)
    assert res.accuracy == 1.0
    assert res.epsilon == abs(1.02 - 1.0)
    assert res.n_candidates == 7  # 0 and the 6 observed differences
    assert json_roundtrip(res.to_dict())["accuracy"] == 1.0


def test_tie_calibration_equals_exhaustive_search_when_all_differences_are_candidates():
    rng = np.random.default_rng(3)
    for trial in range(5):
        n = 14
        x = rng.normal(size=n).round(1)
        y = rng.integers(0, 3, size=n).astype(float)
        g = rng.integers(0, 2, size=n) if trial % 2 else None
        diffs = sorted({abs(x[i] - x[j]) for i, j in itertools.combinations(range(n), 2) if g is None or g[i] == g[j]})
        best = max((lambda c: (c[0] + c[4]) / c[5])(brute_counts(x, y, g, e)) for e in [0.0] + diffs)
        # brute_counts pools the within-group pairs: the "pooled_pairs" average
        res = tie_calibrated_accuracy(x, y, g, max_candidates=200, average="pooled_pairs")
        assert res.accuracy == pytest.approx(best, abs=1e-15)
        assert res.accuracy >= pairwise_accuracy(x, y, g, average="pooled_pairs")
        assert pairwise_accuracy(x, y, g, epsilon=res.epsilon, average="pooled_pairs") == res.accuracy
        if g is None:  # the sweep's counts at epsilon 0 are those of tau_23 and acc_23, by hand too
            assert res.counts_at_zero == pair_counts(x, y) and res.counts_at_zero.to_dict() == dict(zip(
                ("concordant", "discordant", "ties_x", "ties_y", "ties_xy", "total"), brute_counts(x, y, None, 0.0)))
            assert res.counts_at_zero.tau_23() == kendall_tau_23(x, y)
            assert res.counts_at_zero.acc_23() == pairwise_accuracy(x, y)
        else:
            assert res.counts_at_zero is None


def test_tie_calibration_sampled_candidates_large_n():
    rng = np.random.default_rng(4)
    n = 2500  # > 2e6 pairs: candidate quantiles from a fixed-seed pair sample
    y = rng.integers(0, 3, size=n).astype(float)
    x = y + rng.normal(scale=0.6, size=n)
    x[y == 1] = 1.0 + rng.normal(scale=0.05, size=int((y == 1).sum()))  # metric nearly ties class 1
    res = tie_calibrated_accuracy(x, y, max_candidates=30)
    assert 1 < res.n_candidates <= 30
    assert res.accuracy > pairwise_accuracy(x, y)  # tying the flat region helps
    assert res.accuracy == pairwise_accuracy(x, y, epsilon=res.epsilon)
    assert tie_calibrated_accuracy(x, y, max_candidates=30) == res  # deterministic
    assert tie_calibrated_accuracy(x, y, max_candidates=1).epsilon == 0.0
    with pytest.raises(ValueError):
        tie_calibrated_accuracy(x, y, max_candidates=0)


# ----------------------------------------------------------------------------- forced choice


def test_forced_choice_accuracy_by_hand():
    score_b = [0.9, 0.2, 0.5, 0.7, 0.1, 0.3]
    score_c = [0.1, 0.8, 0.5, 0.6, 0.4, 0.3]
    human_b = [1.0, 0.0, 0.8, 0.5, 0.75, 0.2]
    cats = ["HC", "HC", "HI", "HI", "MM", "MM"]
    # pair 0: metric B, humans B -> 1      pair 1: metric C, humans C -> 1
    # pair 2: metric tie -> 1/2            pair 3: humans tied (0.5) -> excluded
    # pair 4: metric C, humans B -> 0      pair 5: metric tie -> 1/2
    res = forced_choice_accuracy(score_b, score_c, human_b, cats, n_resamples=500, seed=1)
    assert isinstance(res, ForcedChoiceResult)
    assert res.accuracy == pytest.approx(3 / 5)
    assert (res.n_pairs, res.n_excluded) == (5, 1)
    assert res.per_category["HC"]["accuracy"] == 1.0 and res.per_category["HC"]["n_pairs"] == 2
    assert res.per_category["HI"]["accuracy"] == 0.5 and res.per_category["HI"]["n_pairs"] == 1
    assert res.per_category["MM"]["accuracy"] == 0.25
    assert res.per_category["HC"]["ci95"] == (1.0, 1.0)  # all resamples of [1, 1]
    lo, hi = res.ci95
    assert 0 <= lo <= res.accuracy <= hi <= 1
    d = json_roundtrip(res.to_dict())
    assert d["per_category"]["MM"]["n_pairs"] == 2
    # bool human votes give the same result as shares 1.0 / 0.0
    # pair 0: metric C, humans B -> 0; pair 1: metric B, humans B -> 1; pair 2: metric tie -> 1/2
    b = forced_choice_accuracy([1, 2, 3], [2, 1, 3], [True, True, False], n_resamples=0)
    assert b.accuracy == pytest.approx((0 + 1 + 0.5) / 3)
    assert math.isnan(b.ci95[0]) and json_roundtrip(b.to_dict())["ci95"] == [None, None]


def test_forced_choice_ci_equals_naive_percentile_bootstrap_and_is_reproducible():
    rng = np.random.default_rng(2)
    n = 300
    hb = rng.random(n)
    sb = hb + rng.normal(scale=0.5, size=n)
    sc = np.zeros(n)
    cats = rng.choice(["HC", "HI", "HM", "MM"], size=n)
    res = forced_choice_accuracy(sb, sc, hb, cats, n_resamples=400, seed=9)
    correct = np.where(sb == sc, 0.5, ((sb > sc) == (hb > 0.5)).astype(float))
    gen = np.random.default_rng(9)
    means = correct[gen.integers(0, n, size=(400, n))].mean(axis=1)
    assert res.ci95 == pytest.approx(tuple(np.quantile(means, [0.025, 0.975])))
    assert res.to_dict() == forced_choice_accuracy(sb, sc, hb, cats, n_resamples=400, seed=9).to_dict()
    assert res.to_dict() != forced_choice_accuracy(sb, sc, hb, cats, n_resamples=400, seed=10).to_dict()
    with pytest.raises(ValueError):
        forced_choice_accuracy(sb, sc, hb + 1.0)
    with pytest.raises(ValueError):
        forced_choice_accuracy(sb, sc[:-1], hb)


# ----------------------------------------------------------------------------- permutation test


@pytest.mark.parametrize("statistic", META_STATISTICS)
def test_fast_permutation_draws_equal_materialised_scipy(statistic):
    rng = np.random.default_rng(21)
    n = 70
    latent = rng.normal(size=n)
    y = np.clip(np.round(2.5 + latent), 1, 4)
    x1 = np.round(latent + rng.normal(size=n), 1)  # ties within metric 1
    x2 = latent + rng.normal(size=n)
    x2[:10] = x2[0]  # a block of ties in metric 2
    b = 40
    obs, deltas = _mixed_distribution(_zscore(x1), _zscore(x2), y, statistic, b, seed=5)
    swaps = _SwapDraws(n, 5).next(b)
    want = naive_deltas(x1, x2, y, statistic, swaps)
    np.testing.assert_allclose(deltas, want, rtol=0, atol=1e-10)
    assert obs == pytest.approx(ref_statistic(x1, y, statistic) - ref_statistic(x2, y, statistic), abs=1e-10)


def test_fast_permutation_equal_scipy_on_real_thumb_data():
    sys_, img, p, r, h, length = load_thumb()
    swaps = _SwapDraws(h.size, 3).next(6)
    for statistic in ("kendall_tau_b", "spearman", "pairwise_accuracy"):
        _, deltas = _mixed_distribution(_zscore(p), _zscore(length), h, statistic, 6, seed=3)
        if statistic == "pairwise_accuracy":  # brute force over 3M pairs is slow: use tau_23 identity
            z1, z2 = st.zscore(p), st.zscore(length)
            want = [pairwise_accuracy(np.where(s, z2, z1), h) - pairwise_accuracy(np.where(s, z1, z2), h) for s in swaps]
        else:
            want = naive_deltas(p, length, h, statistic, swaps)
        np.testing.assert_allclose(deltas, want, rtol=0, atol=1e-10)


def test_swap_draws_are_fair_and_chunk_independent():
    a = _SwapDraws(1000, 7)
    first = np.concatenate([a.next(3), a.next(5)])
    b = _SwapDraws(1000, 7).next(8)
    assert np.array_equal(first, b)
    assert abs(b.mean() - 0.5) < 0.02


def test_permutation_p_value_formula():
    rng = np.random.default_rng(8)
    n = 60
    y = rng.normal(size=n)
    x1 = y + rng.normal(size=n)
    x2 = y + rng.normal(scale=1.3, size=n)
    res = permutation_test(x1, x2, y, "pearson", n_resamples=300, seed=4)
    assert isinstance(res, PermutationResult)
    swaps = _SwapDraws(n, 4).next(300)
    d = naive_deltas(x1, x2, y, "pearson", swaps)
    obs = ref_statistic(x1, y, "pearson") - ref_statistic(x2, y, "pearson")
    assert res.delta == pytest.approx(obs, abs=1e-12)
    assert res.p_value == (1 + int((np.abs(d) >= abs(obs) - 1e-12).sum())) / 301
    assert res.p_greater == (1 + int((d >= obs - 1e-12).sum())) / 301
    assert (res.n_resamples, res.seed, res.statistic) == (300, 4, "pearson")


def test_permutation_identical_metrics_give_p_one():
    rng = np.random.default_rng(1)
    y = rng.normal(size=50)
    x = y + rng.normal(size=50)
    res = permutation_test(x, x.copy(), y, n_resamples=200)
    assert res.delta == 0.0 and res.p_value == 1.0


def _null_dataset(rng, n):
    latent = rng.normal(size=n)
    y = np.clip(np.round(2.5 + latent + rng.normal(scale=0.5, size=n)), 1, 4)
    x1 = latent + rng.normal(size=n)
    x2 = latent + rng.normal(size=n)  # same noise level: no true difference
    return x1, x2, y


@pytest.mark.parametrize("statistic", ["kendall_tau_b", "pearson"])
def test_permutation_test_is_calibrated_under_the_null(statistic):
    rng = np.random.default_rng(2024)
    n_sets, n_draws = 200, 200
    p = np.empty(n_sets)
    for k in range(n_sets):
        x1, x2, y = _null_dataset(rng, 80)
        p[k] = permutation_test(x1, x2, y, statistic, n_resamples=n_draws, seed=k).p_value
    assert st.kstest(p, "uniform").pvalue > 0.01
    lo, hi = st.binom.interval(0.999, n_sets, 0.05)
    assert lo <= int((p < 0.05).sum()) <= hi


def test_group_level_permutation_is_calibrated_under_the_null():
    rng = np.random.default_rng(7)
    p = np.empty(200)
    for k in range(200):
        groups = np.repeat(np.arange(30), 6)
        x1, x2, y = _null_dataset(rng, groups.size)
        p[k] = permutation_test(x1, x2, y, "spearman", groups=groups, level="group", n_resamples=200, seed=k).p_value
    assert st.kstest(p, "uniform").pvalue > 0.01
    lo, hi = st.binom.interval(0.999, 200, 0.05)
    assert lo <= int((p < 0.05).sum()) <= hi


def test_permutation_test_has_power():
    rng = np.random.default_rng(3)
    n = 300
    latent = rng.normal(size=n)
    y = np.clip(np.round(2.5 + latent), 1, 4)
    good = latent + rng.normal(scale=0.3, size=n)
    bad = latent + rng.normal(scale=1.5, size=n)
    for statistic in ("kendall_tau_b", "pairwise_accuracy", "spearman"):
        res = permutation_test(good, bad, y, statistic, n_resamples=1000, seed=0)
        assert res.delta > 0 and res.p_value < 0.01 and res.p_greater < 0.01, statistic
        rev = permutation_test(bad, good, y, statistic, n_resamples=1000, seed=0)
        assert rev.delta == pytest.approx(-res.delta) and rev.p_value == res.p_value


def test_group_level_statistic_and_sign_flip_by_reference():
    rng = np.random.default_rng(12)
    groups = np.repeat(np.arange(12), 5)
    x1, x2, y = _null_dataset(rng, groups.size)
    x1[:5] = 1.0  # constant metric in group 0: left out of metric 1's mean
    res = permutation_test(x1, x2, y, "kendall_tau_b", groups=groups, level="group", n_resamples=100, seed=3)
    g1 = np.array([ref_statistic(x1[groups == g], y[groups == g], "kendall_tau_b") for g in range(12)])
    g2 = np.array([ref_statistic(x2[groups == g], y[groups == g], "kendall_tau_b") for g in range(12)])
    assert res.delta == pytest.approx(np.nanmean(g1) - np.nanmean(g2), abs=1e-12)
    flips = _SwapDraws(12, 3).next(100)
    d = np.array([np.nanmean(np.where(f, g2, g1)) - np.nanmean(np.where(f, g1, g2)) for f in flips])
    assert res.p_value == (1 + int((np.abs(d) >= abs(res.delta) - 1e-12).sum())) / 101
    assert per_group_correlation(x1, y, groups, "kendall_tau_b", n_resamples=0).value == pytest.approx(np.nanmean(g1))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"statistic": "kendall"},
        {"level": "image"},
        {"level": "group"},  # no groups
        {"n_resamples": 0},
    ],
)
def test_permutation_errors(kwargs):
    with pytest.raises(ValueError):
        permutation_test([1, 2, 3, 4], [2, 1, 3, 4], [1, 2, 3, 4], **kwargs)


# ----------------------------------------------------------------------------- Williams


def test_williams_hand_computed():
    # r12 = .5, r13 = .3, r23 = .4, n = 50:
    # K = 1 - .25 - .09 - .16 + 2 * .5 * .3 * .4 = 0.62
    # t = 0.2 * sqrt(49 * 1.4) / sqrt(2 * 0.62 * 49 / 47 + (0.8^2 / 4) * 0.6^3)
    #   = 1.6565023 / sqrt(1.2927660 + 0.03456) = 1.6565023 / 1.1520963 = 1.43781583
    t, p = williams_test(0.5, 0.3, 0.4, 50)
    assert t == pytest.approx(1.43781583, abs=1e-7)
    assert p == pytest.approx(st.t.sf(1.43781583, 47), abs=1e-8)


def test_williams_published_example():
    # Howell, Statistical Methods for Psychology (6th ed., p. 262), as computed by B. Weaver's
    # Williams1959.sps: r12 = .80, r13 = .72, r23 = .89, n = 26 -> t = 1.361, df = 23,
    # two-sided p = .187.
    t, p = williams_test(0.80, 0.72, 0.89, 26)
    assert round(t, 3) == 1.361
    assert round(2 * p, 3) == 0.187
    t2, p2 = williams_test(0.72, 0.80, 0.89, 26)  # reversed: one-sided p of the other direction
    assert t2 == pytest.approx(-t) and p2 == pytest.approx(1 - p)


@pytest.mark.parametrize("args", [(0.5, 0.3, 0.4, 3), (1.2, 0.3, 0.4, 30), (0.5, -1.01, 0.4, 30), (0.9, -0.9, 0.9, 30)])
def test_williams_errors(args):
    with pytest.raises(ValueError):
        williams_test(*args)


def test_williams_agrees_in_direction_with_permutation_on_pearson():
    rng = np.random.default_rng(31)
    n = 400
    y = rng.normal(size=n)
    a = y + rng.normal(scale=0.8, size=n)
    b = y + rng.normal(scale=1.3, size=n)
    r12, r13, r23 = (st.pearsonr(u, v).statistic for u, v in ((y, a), (y, b), (a, b)))
    t, p = williams_test(r12, r13, r23, n)
    perm = permutation_test(a, b, y, "pearson", n_resamples=1000, seed=1)
    assert t > 0 and p < 0.01 and perm.delta > 0 and perm.p_greater < 0.01
    # a weak difference: both tests give moderate one-sided p-values in the same direction
    c = y + rng.normal(scale=0.85, size=n)
    r14, r34 = st.pearsonr(y, c).statistic, st.pearsonr(a, c).statistic
    t2, p2 = williams_test(r12, r14, r34, n)
    perm2 = permutation_test(a, c, y, "pearson", n_resamples=2000, seed=2)
    assert np.sign(t2) == np.sign(perm2.delta)
    assert abs(p2 - perm2.p_greater) < 0.1


# ----------------------------------------------------------------------------- clusters


def test_significance_clusters_by_hand():
    nan = math.nan
    names = ["a", "b", "c", "d"]
    p = [
        [nan, 0.20, 0.01, 0.001],
        [0.9, nan, 0.30, 0.04],
        [1.0, 0.8, nan, 0.50],
        [1.0, 1.0, 0.6, nan],
    ]
    # b: not worse than a -> rank 1; c: worse than a (0.01) -> rank 2, group starts at c;
    # d: only compared with c (0.50): rank 2, although a and b beat it
    assert significance_clusters(names, p, 0.05) == {"a": 1, "b": 1, "c": 2, "d": 2}
    # at alpha = 0.35 b (0.20 vs a) starts rank 2, c (0.30 vs b) rank 3, d (0.50 vs c) stays 3
    assert significance_clusters(names, p, 0.35) == {"a": 1, "b": 2, "c": 3, "d": 3}
    # at alpha = 0.005 only a > d (0.001) is significant; no rank has started since a, so d
    # starts rank 2
    assert significance_clusters(names, p, 0.005) == {"a": 1, "b": 1, "c": 1, "d": 2}
    # everything significant -> 1, 2, 3, 4
    all_sig = np.full((4, 4), 0.001)
    assert significance_clusters(names, all_sig, 0.05) == {"a": 1, "b": 2, "c": 3, "d": 4}
    # p == alpha: not significant by default, significant with mt-metrics-eval's "<="
    edge = [[nan, 0.05], [0.95, nan]]
    assert significance_clusters(["x", "y"], edge, 0.05) == {"x": 1, "y": 1}
    assert significance_clusters(["x", "y"], edge, 0.05, inclusive=True) == {"x": 1, "y": 2}
    with pytest.raises(ValueError):
        significance_clusters(["x"], edge, 0.05)


def test_compare_metrics_ranks_pvalues_and_reproducibility():
    rng = np.random.default_rng(40)
    n = 500
    latent = rng.normal(size=n)
    y = np.clip(np.round(2.5 + latent), 1, 4)
    scores = {
        "noisy": latent + rng.normal(scale=2.0, size=n),
        "best": latent + rng.normal(scale=0.3, size=n),
        "good_a": latent + rng.normal(scale=0.8, size=n),
        "good_b": latent + rng.normal(scale=0.82, size=n),
    }
    res = compare_metrics(scores, y, n_resamples=300, seed=5)
    assert isinstance(res, MetricComparison)
    assert res.names[0] == "best" and res.names[-1] == "noisy"
    assert res.values["best"] == pytest.approx(st.kendalltau(scores["best"], y).statistic)
    assert res.ranks["best"] == 1 and res.ranks["noisy"] == max(res.ranks.values())
    i, j = res.names.index("good_a"), res.names.index("good_b")
    assert res.ranks["good_a"] == res.ranks["good_b"]  # indistinguishable
    p = np.array(res.p_values)
    assert np.isnan(np.diag(p)).all()
    # the p-value of a pair is the one-sided p of permutation_test with the derived pair seed
    a, b = res.names[0], res.names[1]
    single = permutation_test(scores[a], scores[b], y, n_resamples=300, seed=pair_seed(5, a, b))
    assert p[0, 1] == single.p_greater
    # ranks equal the clusters of the reported matrix
    assert res.ranks == significance_clusters(res.names, p, 0.05)
    # deterministic, and independent of the order of the metrics
    again = compare_metrics(dict(reversed(list(scores.items()))), y, n_resamples=300, seed=5)
    assert again.to_dict() == res.to_dict()
    d = json_roundtrip(res.to_dict())
    assert d["p_values"][0][0] is None and d["statistic"] == "kendall_tau_b"
    threaded = compare_metrics(scores, y, n_resamples=300, seed=5, n_jobs=2)
    assert threaded.to_dict() == res.to_dict()


def test_compare_metrics_williams_and_group_level():
    rng = np.random.default_rng(41)
    groups = np.repeat(np.arange(60), 8)
    latent = rng.normal(size=groups.size)
    y = latent + rng.normal(scale=0.3, size=groups.size)
    scores = {"a": latent + rng.normal(scale=0.5, size=groups.size), "b": latent + rng.normal(scale=1.5, size=groups.size)}
    w = compare_metrics(scores, y, statistic="pearson", test="williams")
    r = {k: st.pearsonr(v, y).statistic for k, v in scores.items()}
    t, p = williams_test(r["a"], r["b"], st.pearsonr(scores["a"], scores["b"]).statistic, y.size)
    assert w.names == ["a", "b"] and w.p_values[0][1] == pytest.approx(p) and w.n_resamples == 0
    assert w.ranks == {"a": 1, "b": 2}
    g = compare_metrics(scores, y, statistic="spearman", groups=groups, level="group", n_resamples=300)
    assert g.values["a"] == pytest.approx(per_group_rank_agreement(scores["a"], y, groups).spearman)
    assert g.ranks == {"a": 1, "b": 2}
    with pytest.raises(ValueError):
        compare_metrics(scores, y, statistic="kendall_tau_b", test="williams")
    with pytest.raises(ValueError):
        compare_metrics({"a": scores["a"]}, y)


def test_compare_metrics_on_real_thumb_data():
    sys_, img, p, r, h, length = load_thumb()
    res = compare_metrics({"P": p, "R": r, "length": length}, h, n_resamples=200, seed=0)
    # the human score is (P + R) / 2 plus penalties: P and R beat caption length by far
    assert res.names[-1] == "length"
    assert res.p_values[0][2] < 0.01 and res.p_values[1][2] < 0.01
    assert res.ranks["length"] > res.ranks[res.names[0]]


# ----------------------------------------------------------------------------- ceilings


def test_leave_one_rater_out_by_hand():
    # 4 items x 3 raters (every rater rates every item)
    items = np.repeat([0, 1, 2, 3], 3)
    raters = np.tile(["r1", "r2", "r3"], 4)
    y = np.array([1, 2, 2, 2, 2, 3, 3, 4, 3, 4, 4, 4], float)
    res = leave_one_rater_out(items, raters, y, statistic="pearson", n_resamples=200, seed=0)
    m = y.reshape(4, 3)
    want = []
    for r in range(3):
        others = (m.sum(axis=1) - m[:, r]) / 2
        want.append(st.pearsonr(m[:, r], others).statistic)
    assert res.value == pytest.approx(np.mean(want))  # equal item counts: plain mean
    assert res.n_items == 4 and res.n_raters == 3 and res.method == "leave_one_rater_out"
    assert isinstance(res, CeilingResult)
    json_roundtrip(res.to_dict())


def test_leave_one_rater_out_weights_raters_by_items():
    # r3 rates only items 0-2 (3 items); r1 and r2 rate items 0-4 (5 items)
    items = np.array([0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 4, 4])
    raters = np.array(["r1", "r2", "r3"] * 3 + ["r1", "r2", "r1", "r2"])
    y = np.array([1, 2, 1, 3, 3, 4, 2, 1, 2, 4, 3, 5, 5], float)
    res = leave_one_rater_out(items, raters, y, statistic="spearman", n_resamples=0)
    vals, weights = [], []
    for r in ("r1", "r2", "r3"):
        xs, os_ = [], []
        for it in range(5):
            sel = items == it
            if r not in raters[sel]:
                continue
            mine = y[sel & (raters == r)][0]
            rest = y[sel & (raters != r)]
            xs.append(mine)
            os_.append(rest.mean())
        vals.append(st.spearmanr(xs, os_).statistic)
        weights.append(len(xs))
    assert res.value == pytest.approx(np.average(vals, weights=weights))
    assert math.isnan(res.ci95[0])


def test_ceilings_on_flickr8k_expert():
    items, raters, y = expert_rows()
    loo = leave_one_rater_out(items, raters, y, n_resamples=200, seed=1)
    m = y.reshape(-1, 3)
    want = np.mean([st.kendalltau(m[:, k], (m.sum(axis=1) - m[:, k]) / 2).statistic for k in range(3)])
    assert loo.value == pytest.approx(want, abs=1e-12)
    assert loo.n_items == 5664
    assert loo.ci95[0] < loo.value < loo.ci95[1]
    sh = split_half_ceiling(items, raters, y, n_splits=40, n_resamples=200, seed=2)
    ref = split_half_reliability(items, raters, y, n_splits=40, seed=2)
    assert sh.value == pytest.approx(ref.kendall_tau_b, abs=1e-12)
    assert sh.ci95[0] < sh.value < sh.ci95[1]
    sp = split_half_ceiling(items, raters, y, statistic="pearson", n_splits=40, n_resamples=100, seed=2, spearman_brown=True)
    assert sp.value == pytest.approx(ref.spearman_brown, abs=1e-12)
    # one held-out expert vs the mean of two agrees better than one vs one-or-two (half split)
    assert loo.value > sh.value
    assert leave_one_rater_out(items, raters, y, n_resamples=200, seed=1).to_dict() == loo.to_dict()
    with pytest.raises(ValueError):
        split_half_ceiling(items, raters, y, statistic="spearman", spearman_brown=True)


def test_forced_choice_ceiling_by_hand():
    votes = [
        [1, 1, 1],  # each vote agrees with the remaining two -> 1
        [1, 1, 0],  # B votes: remaining (1, 0) tied -> 1/2 each; C vote: remaining (1, 1) -> 0 => 1/3
        [1, 0, 0, 0, 1],  # B votes: remaining 1 of 4 B -> 0; C votes: remaining 2 of 4 -> 1/2 => 1.5/5
        [1, 0],  # tied pair: excluded by default
        [1],  # a single vote: skipped
    ]
    res = forced_choice_ceiling(votes, n_resamples=300, seed=0)
    assert res.value == pytest.approx((1 + 1 / 3 + 0.3) / 3)
    assert res.n_items == 3 and res.details["n_pairs_skipped"] == 2
    assert res.ci95[0] <= res.value <= res.ci95[1]
    incl = forced_choice_ceiling(votes, n_resamples=0, exclude_tied=False)
    assert incl.value == pytest.approx((1 + 1 / 3 + 0.3 + 0) / 4)
    assert forced_choice_ceiling([np.array([True, True, False])], n_resamples=0).value == pytest.approx(1 / 3)
    with pytest.raises(ValueError):
        forced_choice_ceiling([[1, 2, 0]])


def test_system_level_correlation_on_thumb():
    sys_, img, p, r, h, length = load_thumb()
    res = system_level_correlation(p, h, sys_, img, n_resamples=300, seed=0)
    names = sorted(set(sys_))
    mx = [p[sys_ == s].mean() for s in names]
    my = [h[sys_ == s].mean() for s in names]
    assert res.value == pytest.approx(st.pearsonr(mx, my).statistic, abs=1e-12)
    assert (res.n_systems, res.n_images) == (5, 500)
    assert res.ci95[0] <= res.value <= res.ci95[1] and res.n_valid_resamples == 300
    by_sys = system_level_correlation(p, h, sys_, img, resample="systems", n_resamples=300, seed=0)
    # a draw of 5 systems has < 3 distinct ones with probability (5 + 5*4*15... ) > 0: some skipped
    assert 0 < by_sys.n_valid_resamples < 300
    kt = system_level_correlation(p, h, sys_, img, statistic="kendall_tau_b", n_resamples=50)
    assert kt.value == pytest.approx(st.kendalltau(mx, my).statistic)
    json_roundtrip(res.to_dict())
    keep = np.isin(sys_, names[:2])
    with pytest.raises(ValueError):
        system_level_correlation(p[keep], h[keep], sys_[keep], img[keep])


def test_system_level_image_bootstrap_by_reference():
    # 3 systems x 4 images; resample images and recompute the system means by hand
    x = np.array([1, 2, 3, 4, 2, 2, 3, 5, 0, 1, 1, 2], float)
    y = np.array([1, 1, 2, 3, 2, 3, 3, 4, 1, 0, 1, 1], float)
    systems = np.repeat(["s1", "s2", "s3"], 4)
    images = np.tile(["i1", "i2", "i3", "i4"], 3)
    res = system_level_correlation(x, y, systems, images, n_resamples=50, seed=3)
    gen = np.random.default_rng(3)
    draws = gen.integers(0, 4, size=(50, 4))
    vals = []
    for d in draws:
        idx = np.concatenate([np.flatnonzero(images == f"i{k + 1}") for k in d])
        mx = [x[idx][systems[idx] == s].mean() for s in ("s1", "s2", "s3")]
        my = [y[idx][systems[idx] == s].mean() for s in ("s1", "s2", "s3")]
        vals.append(ref_statistic(mx, my, "pearson"))
    vals = np.array(vals)
    assert res.ci95 == pytest.approx(tuple(np.quantile(vals[np.isfinite(vals)], [0.025, 0.975])))


def test_per_group_correlation_matches_per_group_rank_agreement():
    sys_, img, p, r, h, length = load_thumb()
    ref = per_group_rank_agreement(p, h, img)
    for statistic, want in (("spearman", ref.spearman), ("kendall_tau_b", ref.kendall_tau_b)):
        res = per_group_correlation(p, h, img, statistic, n_resamples=300, seed=0)
        assert res.value == pytest.approx(want, abs=1e-12)
        assert (res.n_groups_used, res.n_groups_skipped) == (ref.n_groups_used, ref.n_groups_skipped)
        assert res.ci95[0] < res.value < res.ci95[1]
    res = per_group_correlation(p, h, img, "kendall_tau_23", n_resamples=0)
    vals = [kendall_tau_23(p[img == g], h[img == g]) for g in np.unique(img)
            if not ((p[img == g] == p[img == g][0]).all() or (h[img == g] == h[img == g][0]).all())]
    assert res.value == pytest.approx(np.mean(vals))
    json_roundtrip(res.to_dict())


# ----------------------------------------------------------------------------- packaging


def test_meta_modules_do_not_import_django():
    code = (
        "import sys, captioneval.stats.pairwise, captioneval.stats.significance, "
        "captioneval.stats.ceiling; "
        "assert not any(m == 'django' or m.startswith('django.') for m in sys.modules), 'django imported'"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


# --------------------------------------------------------------------------------------------
# compare_forced_choice (paired sign-flip test of accuracies)
# --------------------------------------------------------------------------------------------


def test_compare_forced_choice_exact_small_case_and_clusters():
    from captioneval.stats import compare_forced_choice

    # 4 pairs: a right on all, b right on 2 and tied on 1; d = a - b = [0, 0, 1, 0.5], mean 0.375.
    a = np.array([1, 1, 1, 1.0])
    b = np.array([1, 1, 0, 0.5])
    # Exact sign-flip distribution of mean(s d): 4 equally likely sums over signs of (1, 0.5),
    # the two zero rows do not matter: {1.5, 0.5, -0.5, -1.5} / 4; P(>= 0.375) = 1/4.
    res = compare_forced_choice({"b": b, "a": a}, n_resamples=20000, seed=1)
    assert res.names == ["a", "b"] and res.values == {"a": 1.0, "b": 0.625}
    assert res.p_values[0][1] == pytest.approx(0.25, abs=0.01)
    assert res.p_values[1][0] == pytest.approx(1.0, abs=0.01)
    assert res.ranks == {"a": 1, "b": 1}
    # Many pairs, a clearly better: separate clusters; identical copies share one.
    rng = np.random.default_rng(0)
    good = (rng.random(2000) < 0.8).astype(float)
    bad = (rng.random(2000) < 0.6).astype(float)
    res = compare_forced_choice({"good": good, "bad": bad, "copy": good.copy()}, n_resamples=500, seed=0)
    assert res.ranks["good"] == res.ranks["copy"] == 1 and res.ranks["bad"] == 2
    assert res.p_values[res.names.index("good")][res.names.index("bad")] < 0.01
    again = compare_forced_choice({"good": good, "bad": bad, "copy": good.copy()}, n_resamples=500, seed=0)
    assert again.p_values == res.p_values
    with pytest.raises(ValueError):
        compare_forced_choice({"a": a})
    with pytest.raises(ValueError):
        compare_forced_choice({"a": a, "b": b[:3]})
    with pytest.raises(ValueError):
        compare_forced_choice({"a": a, "b": b + 1})


def test_compare_forced_choice_is_calibrated():
    """Two metrics that are equally good (independent outcomes with the same accuracy): p-values uniform."""
    from captioneval.stats import compare_forced_choice

    rng = np.random.default_rng(7)
    ps = []
    for k in range(200):
        a = (rng.random(300) < 0.7).astype(float)
        b = (rng.random(300) < 0.7).astype(float)
        res = compare_forced_choice({"a": a, "b": b}, n_resamples=200, seed=k)
        ps.append(res.p_values[res.names.index("a")][res.names.index("b")])
    # p that "a" beats "b" whichever is ahead: uniform on (0, 1] up to the draw resolution.
    assert st.kstest(ps, "uniform").pvalue > 0.01
    assert np.mean(np.array(ps) < 0.05) < 0.05 + 3 * np.sqrt(0.05 * 0.95 / 200)
