"""Tests for captioneval.stats (Django-free correlation statistics and group bootstrap).

Reference values come from scipy.stats, from pair counts computed in the tests themselves, or
from hand calculation; never from earlier outputs of the code under test.
"""

from __future__ import annotations

import itertools
import json
import math
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import scipy.stats as st

from captioneval.stats import (
    STATISTICS,
    CorrelationResult,
    RankAgreement,
    correlate,
    correlation,
    per_group_rank_agreement,
)
from captioneval.stats.correlation import (
    _bootstrap_distribution,
    _bootstrap_draws,
    _encode_groups,
)

REPO = Path(__file__).resolve().parents[1]
EXPERT = REPO / "data" / "flickr8k" / "ExpertAnnotations.txt"


# ----------------------------------------------------------------------------- helpers


def scipy_value(x, y, statistic):
    """Independent reference: scipy directly (nan for constant input)."""
    x = np.asarray(x, float)
    y = np.asarray(y, float)
    if np.all(x == x[0]) or np.all(y == y[0]):
        return math.nan
    if statistic == "pearson":
        return float(st.pearsonr(x, y).statistic)
    if statistic == "spearman":
        return float(st.spearmanr(x, y).statistic)
    if statistic == "kendall_tau_b":
        return float(st.kendalltau(x, y, variant="b").statistic)
    return float(st.kendalltau(x, y, variant="c").statistic)


def pair_counts(x, y):
    """C, D, Tx (tied only in x), Ty (only in y), Txy (both) by brute force over pairs."""
    c = d = tx = ty = txy = 0
    for i, j in itertools.combinations(range(len(x)), 2):
        dx = np.sign(x[i] - x[j])
        dy = np.sign(y[i] - y[j])
        if dx == 0 and dy == 0:
            txy += 1
        elif dx == 0:
            tx += 1
        elif dy == 0:
            ty += 1
        elif dx == dy:
            c += 1
        else:
            d += 1
    return c, d, tx, ty, txy


def materialised_distribution(x, y, codes, draws, statistics=STATISTICS):
    """Naive bootstrap: concatenate the drawn groups' rows and call scipy."""
    rows = [np.flatnonzero(codes == g) for g in range(int(codes.max()) + 1)]
    out = {s: np.empty(draws.shape[0]) for s in statistics}
    for b, drawn in enumerate(draws):
        idx = np.concatenate([rows[g] for g in drawn])
        for s in statistics:
            out[s][b] = scipy_value(x[idx], y[idx], s)
    return out


def assert_same_distribution(fast, ref, atol=1e-9):
    for s, want in ref.items():
        got = fast[s]
        assert np.array_equal(np.isnan(got), np.isnan(want)), s
        ok = ~np.isnan(want)
        np.testing.assert_allclose(got[ok], want[ok], rtol=0, atol=atol, err_msg=s)


def percentile_ci(values, confidence=0.95):
    v = values[np.isfinite(values)]
    a = 1 - confidence
    return tuple(np.quantile(v, [a / 2, 1 - a / 2]))


def clustered(n_groups, rows_per_group, seed, group_sd=1.0, row_sd=1.0):
    """Real-ish data: per-group quality shared by metric and (rounded 1..4) human score."""
    rng = np.random.default_rng(seed)
    groups = np.repeat(np.arange(n_groups), rows_per_group)
    quality = rng.normal(scale=group_sd, size=n_groups)[groups] + rng.normal(size=groups.size)
    x = quality + rng.normal(scale=row_sd, size=groups.size)
    y = np.clip(np.round(2.5 + quality), 1, 4)
    return x, y, groups


def load_expert():
    images, r = [], []
    for line in EXPERT.read_text().splitlines():
        if not line.strip():
            continue
        image, _cand, r1, r2, r3 = line.split("\t")
        images.append(image)
        r.append((float(r1), float(r2), float(r3)))
    r = np.array(r)
    return np.array(images), r[:, 0], (r[:, 1] + r[:, 2]) / 2


# ----------------------------------------------------------------------------- correlation()


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("statistic", STATISTICS)
def test_correlation_equals_scipy_random(seed, statistic):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=200)
    y = 0.5 * x + rng.normal(size=200)
    assert correlation(x, y, statistic) == scipy_value(x, y, statistic)


@pytest.mark.parametrize("statistic", STATISTICS)
def test_correlation_equals_scipy_tie_heavy(statistic):
    rng = np.random.default_rng(7)
    x = rng.integers(0, 3, size=300).astype(float)
    x[rng.random(300) < 0.5] = 0.0  # many exact ties, like BLEU-4 zeros
    y = rng.integers(1, 5, size=300).astype(float)
    assert correlation(x, y, statistic) == scipy_value(x, y, statistic)
    assert correlation(list(x), list(y), statistic) == scipy_value(x, y, statistic)


def test_kendall_by_hand_from_pair_counts():
    # x = [1, 1, 2, 3], y = [1, 2, 2, 1]: pairs (0,1) tied in x only; (0,2) concordant;
    # (0,3), (1,2) tied in y only; (1,3), (2,3) discordant -> C=1, D=2, Tx=1, Ty=2, Txy=0.
    x = [1.0, 1.0, 2.0, 3.0]
    y = [1.0, 2.0, 2.0, 1.0]
    assert pair_counts(x, y) == (1, 2, 1, 2, 0)
    # tau_c = 2 (C - D) / (n^2 (k - 1) / k), n = 4, k = min(3 distinct x, 2 distinct y) = 2
    assert correlation(x, y, "kendall_tau_c") == pytest.approx(2 * (1 - 2) / (16 * (2 - 1) / 2), abs=1e-15)
    assert correlation(x, y, "kendall_tau_c") == pytest.approx(-0.25, abs=1e-15)
    # tau_b = (C - D) / sqrt((T - Tx - Txy)(T - Ty - Txy)), T = 6
    assert correlation(x, y, "kendall_tau_b") == pytest.approx(-1 / math.sqrt(5 * 4), abs=1e-15)


@pytest.mark.parametrize("seed", [3, 4])
def test_tau_c_formula_on_small_random_sample(seed):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 4, size=15).astype(float)
    y = rng.integers(0, 6, size=15).astype(float)
    c, d, *_ = pair_counts(x, y)
    n = len(x)
    k = min(len(set(x)), len(set(y)))
    expected = 2 * (c - d) / (n * n * (k - 1) / k)
    assert correlation(x, y, "kendall_tau_c") == pytest.approx(expected, abs=1e-12)


def test_correlation_two_rows():
    assert correlation([1.0, 2.0], [2.0, 5.0], "pearson") == pytest.approx(1.0)
    assert correlation([1.0, 2.0], [5.0, 2.0], "kendall_tau_c") == pytest.approx(-1.0)


@pytest.mark.parametrize("statistic", STATISTICS)
def test_constant_input_gives_nan_without_warnings(statistic):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert math.isnan(correlation([2.0, 2.0, 2.0], [1.0, 2.0, 3.0], statistic))
        assert math.isnan(correlation([1.0, 2.0, 3.0], [4.0, 4.0, 4.0], statistic))


@pytest.mark.parametrize(
    "x, y, statistic",
    [
        ([1.0, 2.0, 3.0], [1.0, 2.0], "pearson"),  # length mismatch
        ([1.0], [1.0], "pearson"),  # n < 2
        ([], [], "spearman"),
        ([1.0, 2.0, 3.0], [1.0, 2.0, 3.0], "kendall"),  # unknown statistic
        ([1.0, np.nan, 3.0], [1.0, 2.0, 3.0], "pearson"),  # non-finite
        ([1.0, 2.0, 3.0], [1.0, np.inf, 3.0], "kendall_tau_b"),
        ([[1.0, 2.0], [3.0, 4.0]], [[1.0, 2.0], [3.0, 4.0]], "pearson"),  # not 1-D
        (["a", "b"], [1.0, 2.0], "pearson"),  # not numeric
    ],
)
def test_correlation_errors(x, y, statistic):
    with pytest.raises(ValueError):
        correlation(x, y, statistic)


# ----------------------------------------------------------------------------- fast bootstrap


def _datasets():
    rng = np.random.default_rng(11)
    out = {}
    # unequal group sizes, continuous metric, human score in {1,2,3,4}
    g = rng.integers(0, 25, size=400)
    x = rng.normal(size=400) + 0.3 * g
    out["continuous_x_y4"] = (x, rng.integers(1, 5, size=400).astype(float), g)
    # tie-heavy: metric with few values and many zeros, human in {1..4}
    g = rng.integers(0, 30, size=350)
    x = rng.integers(0, 5, size=350).astype(float)
    x[rng.random(350) < 0.4] = 0.0
    out["tie_heavy"] = (x, rng.integers(1, 5, size=350).astype(float), g)
    # human score = mean of 3 ratings (thirds), metric continuous
    g = rng.integers(0, 20, size=300)
    y = rng.integers(1, 5, size=(300, 3)).mean(axis=1)
    out["mean_of_ratings"] = (rng.normal(size=300) + y, y, g)
    # metric has fewer distinct values than the human score (internal role swap)
    g = rng.integers(0, 20, size=250)
    out["x_fewer_distinct"] = (rng.integers(0, 2, size=250).astype(float), rng.integers(1, 11, size=250).astype(float), g)
    # both continuous (> KENDALL_FAST_MAX_CLASSES distinct values: scipy fallback for Kendall)
    g = rng.integers(0, 15, size=300)
    x = rng.normal(size=300)
    out["both_continuous"] = (x, x + rng.normal(size=300), g)
    # very few groups, metric constant within each group: resamples without group 1 have
    # constant x -> nan (probability (2/3)^3 per resample)
    g = rng.integers(0, 3, size=24)
    out["degenerate"] = (np.array([0.0, 1.0, 0.0])[g], rng.integers(0, 2, size=24).astype(float), g)
    return out


DATASETS = _datasets()


@pytest.mark.parametrize("name", sorted(DATASETS))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fast_bootstrap_equals_scipy_on_materialised_resamples(name, seed):
    x, y, groups = DATASETS[name]
    codes, labels = _encode_groups(groups, x.size)
    draws = _bootstrap_draws(len(labels), 25, seed)
    fast = _bootstrap_distribution(x, y, codes, len(labels), draws)
    assert_same_distribution(fast, materialised_distribution(x, y, codes, draws))


@pytest.mark.parametrize("max_classes", [1, 10**9])
def test_both_kendall_paths_equal_scipy(max_classes):
    # max_classes=1 forces the materialised scipy fallback, 10**9 forces the weighted-count path
    for name in ("continuous_x_y4", "both_continuous", "tie_heavy"):
        x, y, groups = DATASETS[name]
        codes, labels = _encode_groups(groups, x.size)
        draws = _bootstrap_draws(len(labels), 10, 5)
        stats = ("kendall_tau_b", "kendall_tau_c")
        fast = _bootstrap_distribution(x, y, codes, len(labels), draws, stats, max_kendall_classes=max_classes)
        assert_same_distribution(fast, materialised_distribution(x, y, codes, draws, stats))


def test_degenerate_data_has_nan_resamples():
    x, y, groups = DATASETS["degenerate"]
    codes, labels = _encode_groups(groups, x.size)
    draws = _bootstrap_draws(len(labels), 200, 0)
    fast = _bootstrap_distribution(x, y, codes, len(labels), draws)
    assert np.isnan(fast["kendall_tau_b"]).any()
    assert np.isfinite(fast["kendall_tau_b"]).any()


def test_correlate_ci_equals_naive_percentile_bootstrap():
    x, y, groups = DATASETS["tie_heavy"]
    res = correlate(x, y, groups, n_resamples=150, confidence=0.9, seed=3)
    codes, labels = _encode_groups(groups, x.size)
    naive = materialised_distribution(x, y, codes, _bootstrap_draws(len(labels), 150, 3))
    for s in STATISTICS:
        assert res.values[s] == scipy_value(x, y, s)
        np.testing.assert_allclose(res.ci95[s], percentile_ci(naive[s], 0.9), rtol=0, atol=1e-9)


# ----------------------------------------------------------------------------- correlate()


def test_ci_contains_estimate_and_narrows_with_more_groups():
    x, y, groups = clustered(1600, 8, seed=1)
    small = groups < 100
    res_small = correlate(x[small], y[small], groups[small], n_resamples=400, seed=0)
    res_big = correlate(x, y, groups, n_resamples=400, seed=0)
    assert res_small.n_groups == 100 and res_big.n_groups == 1600
    for s in STATISTICS:
        for res in (res_small, res_big):
            lo, hi = res.ci95[s]
            assert -1 <= lo < res.values[s] < hi <= 1, (s, res.values[s], lo, hi)
        width_small = res_small.ci95[s][1] - res_small.ci95[s][0]
        width_big = res_big.ci95[s][1] - res_big.ci95[s][0]
        # 16x the groups: the width should shrink roughly 4x; require at least 2x
        assert width_big < 0.5 * width_small, s


def test_determinism_by_seed():
    x, y, groups = clustered(60, 5, seed=2)
    a = correlate(x, y, groups, n_resamples=200, seed=42)
    b = correlate(x, y, groups, n_resamples=200, seed=42)
    c = correlate(x, y, groups, n_resamples=200, seed=43)
    assert a.to_dict() == b.to_dict()
    assert a.values == c.values
    assert a.ci95 != c.ci95
    # row order does not matter for a given seed (group codes follow sorted labels)
    perm = np.random.default_rng(0).permutation(x.size)
    d = correlate(x[perm], y[perm], groups[perm], n_resamples=200, seed=42)
    for s in STATISTICS:
        assert d.values[s] == pytest.approx(a.values[s], abs=1e-12)
        np.testing.assert_allclose(d.ci95[s], a.ci95[s], rtol=0, atol=1e-12)


def test_group_bootstrap_wider_than_row_bootstrap_for_clustered_data():
    # 30 images x 20 rows; metric and human share a strong per-image component, so the
    # effective sample size is ~30 images, not 600 rows.
    x, y, groups = clustered(30, 20, seed=5, group_sd=3.0, row_sd=2.0)
    by_group = correlate(x, y, groups, n_resamples=500, seed=1)
    by_row = correlate(x, y, np.arange(x.size), n_resamples=500, seed=1)
    assert by_group.values == by_row.values
    for s in STATISTICS:
        wg = by_group.ci95[s][1] - by_group.ci95[s][0]
        wr = by_row.ci95[s][1] - by_row.ci95[s][0]
        assert wg > 2 * wr, (s, wg, wr)


def test_n_resamples_zero_and_to_dict():
    x, y, groups = clustered(10, 4, seed=3)
    res = correlate(x, y, groups, statistics=["pearson", "kendall_tau_c"], n_resamples=0)
    assert isinstance(res, CorrelationResult)
    assert res.ci95 == {}
    assert set(res.values) == {"pearson", "kendall_tau_c"}
    d = res.to_dict()
    assert d["ci95"] == {} and d["n_rows"] == 40 and d["n_groups"] == 10
    assert d["bootstrap"] == {"n_resamples": 0, "confidence": 0.95, "seed": 0, "unit": "group"}

    res = correlate(x, y, [f"img{g}" for g in groups], n_resamples=50, seed=9)
    d = json.loads(json.dumps(res.to_dict(), allow_nan=False))
    for s in STATISTICS:
        assert d[s] == pytest.approx(res.values[s])
        assert d["ci95"][s] == pytest.approx(list(res.ci95[s]))
    assert d["bootstrap"]["n_resamples"] == 50 and d["bootstrap"]["seed"] == 9


def test_single_statistic_name_and_hashable_labels():
    x, y, groups = clustered(12, 3, seed=4)
    labels = [(int(g), "a") for g in groups]  # tuples are hashable labels
    res = correlate(x, y, labels, statistics="spearman", n_resamples=20)
    assert list(res.values) == ["spearman"] and res.n_groups == 12


def test_constant_human_scores_give_nan_and_json_null():
    x = np.arange(20, dtype=float)
    y = np.full(20, 3.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = correlate(x, y, np.arange(20) // 4, n_resamples=30)
    assert all(math.isnan(v) for v in res.values.values())
    assert all(math.isnan(lo) and math.isnan(hi) for lo, hi in res.ci95.values())
    d = json.loads(json.dumps(res.to_dict(), allow_nan=False))
    assert d["pearson"] is None and d["ci95"]["pearson"] == [None, None]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"groups": [0, 1, 2]},  # wrong length
        {"groups": np.zeros((4, 1))},  # not 1-D
        {"statistics": ["pearson", "bogus"]},
        {"statistics": []},
        {"n_resamples": -1},
        {"n_resamples": 2.5},
        {"confidence": 1.0},
        {"confidence": 0.0},
        {"groups": [7, 7, 7, 7]},  # one group cannot be bootstrapped
    ],
)
def test_correlate_errors(kwargs):
    args = {"x": [1.0, 2.0, 3.0, 4.0], "y": [1.0, 3.0, 2.0, 4.0], "groups": [0, 0, 1, 1]}
    args.update(kwargs)
    with pytest.raises(ValueError):
        correlate(**args)


def test_one_group_allowed_without_resampling():
    res = correlate([1.0, 2.0, 3.0], [1.0, 3.0, 2.0], ["a", "a", "a"], n_resamples=0)
    assert res.n_groups == 1 and res.values["kendall_tau_b"] == pytest.approx(1 / 3)


# ----------------------------------------------------------------------------- per-group agreement


def test_per_group_rank_agreement_by_hand():
    # A: x=[1,2,3], y=[1,2,3] -> rho 1, tau 1
    # B: x=[1,2,3], y=[3,1,2] -> rank differences (-2, 1, 1): rho = 1 - 6*6/(3*8) = -0.5;
    #    pairs (0,1) D, (0,2) D, (1,2) C -> tau = -1/3
    # C: constant x -> skipped;  D: single row -> skipped
    rows = [
        ("A", 1, 1), ("B", 1, 3), ("C", 5, 1), ("A", 2, 2), ("B", 2, 1),
        ("D", 1, 1), ("C", 5, 2), ("A", 3, 3), ("B", 3, 2),
    ]
    groups = [r[0] for r in rows]
    x = [float(r[1]) for r in rows]
    y = [float(r[2]) for r in rows]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        agg = per_group_rank_agreement(x, y, groups)
    assert isinstance(agg, RankAgreement)
    assert agg.spearman == pytest.approx((1 - 0.5) / 2)
    assert agg.kendall_tau_b == pytest.approx((1 - 1 / 3) / 2)
    assert (agg.n_groups_used, agg.n_groups_skipped) == (2, 2)


def test_per_group_rank_agreement_matches_scipy_loop():
    rng = np.random.default_rng(8)
    groups = np.repeat(np.arange(40), 9)  # e.g. 40 images x 9 caption sets
    x = rng.normal(size=groups.size)
    y = np.round(x + rng.normal(size=groups.size), 1)
    agg = per_group_rank_agreement(x, y, groups)
    rhos = [st.spearmanr(x[groups == g], y[groups == g]).statistic for g in range(40)]
    taus = [st.kendalltau(x[groups == g], y[groups == g]).statistic for g in range(40)]
    assert agg.spearman == pytest.approx(np.mean(rhos), abs=1e-12)
    assert agg.kendall_tau_b == pytest.approx(np.mean(taus), abs=1e-12)
    assert (agg.n_groups_used, agg.n_groups_skipped) == (40, 0)


def test_per_group_rank_agreement_all_skipped_and_errors():
    agg = per_group_rank_agreement([1.0, 1.0, 2.0], [1.0, 2.0, 3.0], [0, 0, 1])
    assert math.isnan(agg.spearman) and math.isnan(agg.kendall_tau_b)
    assert (agg.n_groups_used, agg.n_groups_skipped) == (0, 2)
    with pytest.raises(ValueError):
        per_group_rank_agreement([1.0, 2.0], [1.0, 2.0], [0])
    with pytest.raises(ValueError):
        per_group_rank_agreement([1.0, np.nan], [1.0, 2.0], [0, 0])


# ----------------------------------------------------------------------------- real data


def test_real_data_expert_agreement():
    images, first, others = load_expert()
    assert images.size > 5000
    # fast bootstrap == scipy on materialised resamples of the real data
    codes, labels = _encode_groups(images, images.size)
    draws = _bootstrap_draws(len(labels), 8, 123)
    assert_same_distribution(
        _bootstrap_distribution(first, others, codes, len(labels), draws),
        materialised_distribution(first, others, codes, draws),
    )

    res = correlate(first, others, images, n_resamples=1000, seed=0)
    assert res.n_rows == images.size and res.n_groups == np.unique(images).size
    for s in STATISTICS:
        assert res.values[s] == scipy_value(first, others, s)
        lo, hi = res.ci95[s]
        # experts agree clearly but not perfectly
        assert 0 < lo < res.values[s] < hi < 1, (s, lo, res.values[s], hi)

    # a quarter of the images -> clearly wider intervals (about 2x expected)
    keep = np.isin(images, np.unique(images)[::4])
    sub = correlate(first[keep], others[keep], images[keep], n_resamples=1000, seed=0)
    for s in STATISTICS:
        w_all = res.ci95[s][1] - res.ci95[s][0]
        w_sub = sub.ci95[s][1] - sub.ci95[s][0]
        assert 1.4 * w_all < w_sub < 3.0 * w_all, (s, w_all, w_sub)


# ----------------------------------------------------------------------------- packaging


def test_package_does_not_import_django():
    code = (
        "import sys, captioneval.stats as s; "
        "assert not any(m == 'django' or m.startswith('django.') for m in sys.modules), 'django imported'; "
        "print(s.STATISTICS)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "kendall_tau_c" in out.stdout
