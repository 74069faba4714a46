"""The shared result type (Estimate), the shared helpers, the agreement report structure and the
level parameter (mt-metrics-eval's ``average_by``) of captioneval.stats.

Expected values come from google-research/mt-metrics-eval's own tests (cited per test: file and
test name; the literal numbers are copied from there), from brute-force enumeration, or from numpy
/ scipy on the materialised data; real data: THumB 1.0 (data/thumb). No database.
"""
from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest
import scipy.stats as st

from captioneval.stats import (
    AVERAGES,
    STATISTICS,
    AgreementReport,
    Estimate,
    average_statistic,
    bootstrap_mean,
    correlate,
    finite_or_none,
    forced_choice_accuracy,
    forced_choice_credit,
    kendall_tau_23,
    metric_agreement,
    pair_counts,
    pairwise_accuracy,
    per_group_correlation,
    percentile_interval,
    permutation_test,
    tie_calibrated_accuracy,
)
from captioneval.stats.pairwise import _PairCounter

REPO = Path(__file__).resolve().parents[1]
THUMB = REPO / "data" / "thumb" / "mscoco_THumB-1.0.jsonl"


def load_thumb():
    rows = [json.loads(line) for line in THUMB.read_text().splitlines() if line.strip()]
    sys_ = np.array([r["SYS"] for r in rows])
    img = np.array([r["image"] for r in rows])
    p = np.array([r["P"] for r in rows], float)
    h = np.array([r["human_score"] for r in rows], float)
    return sys_, img, p, h


def packed(num_sys, gold, metric):
    """mt-metrics-eval's packed layout: num_sys consecutive rows of one system each; None = missing.
    Returns (metric x, gold y, item labels, system labels) without the missing entries."""
    n_items = len(gold) // num_sys
    keep = [k for k, g in enumerate(gold) if g is not None and metric[k] is not None]
    x = np.array([metric[k] for k in keep], float)
    y = np.array([gold[k] for k in keep], float)
    items = np.array([k % n_items for k in keep])
    systems = np.array([k // n_items for k in keep])
    return x, y, items, systems


# ----------------------------------------------------------------------------- helpers


def test_finite_or_none_turns_nan_and_infinities_into_none():
    assert finite_or_none(math.nan) is None
    assert finite_or_none(math.inf) is None
    assert finite_or_none(-np.inf) is None
    assert finite_or_none(None) is None
    assert finite_or_none(np.float32(0.25)) == 0.25
    assert finite_or_none(3) == 3.0
    json.dumps([finite_or_none(v) for v in (math.inf, -math.inf, math.nan, 1.5)], allow_nan=False)


def test_estimate_to_json_is_json_safe_and_complete():
    est = Estimate(0.5, -math.inf, math.nan, 0.9, 12, 100, 7)
    assert est.interval[0] == -math.inf and math.isnan(est.interval[1])
    assert est.interval_json() == [None, None]
    assert json.loads(json.dumps(est.to_json(), allow_nan=False)) == {
        "value": 0.5, "low": None, "high": None, "confidence_level": 0.9, "n": 12, "n_resamples": 100, "seed": 7,
    }


def test_percentile_interval_is_numpy_quantile_of_finite_values():
    rng = np.random.default_rng(0)
    v = rng.normal(size=501)
    with_nan = np.concatenate([v, [np.nan, np.inf]])
    assert percentile_interval(with_nan, 0.9) == tuple(np.quantile(v, [0.05, 0.95]))
    assert all(math.isnan(b) for b in percentile_interval([np.nan, np.nan]))
    with pytest.raises(ValueError):
        percentile_interval(v, 1.0)


def test_bootstrap_mean_is_the_mean_of_values_drawn_with_replacement():
    values = np.arange(10, dtype=float)
    means, ci = bootstrap_mean(values, 50, np.random.default_rng(3), 0.95)
    idx = np.random.default_rng(3).integers(0, 10, size=(50, 10))
    assert np.array_equal(means, values[idx].mean(axis=1))
    assert ci == tuple(np.quantile(means, [0.025, 0.975]))
    assert bootstrap_mean([], 50, np.random.default_rng(3))[0].size == 0


def test_forced_choice_credit_counts_a_tie_one_half():
    sb = [1.0, 1.0, 0.0, 2.0, 2.0]
    sc = [0.0, 1.0, 1.0, 1.0, 3.0]
    hb = [1.0, 0.0, 1.0, 0.2, 0.0]
    assert forced_choice_credit(sb, sc, hb).tolist() == [1.0, 0.5, 0.0, 0.0, 1.0]
    res = forced_choice_accuracy(sb, sc, hb, n_resamples=0)
    assert res.accuracy == pytest.approx(2.5 / 5)
    assert res.estimate.value == res.accuracy and res.estimate.n == 5


# ----------------------------------------------------------------------------- one result type


def test_every_interval_result_exposes_an_estimate():
    sys_, img, p, h = load_thumb()
    res = correlate(p, h, img, STATISTICS, n_resamples=50, seed=1)
    for s, est in res.estimates.items():
        assert isinstance(est, Estimate)
        assert (est.value, est.interval) == (res.values[s], res.ci95[s])
        assert (est.n, est.n_resamples, est.seed, est.confidence_level) == (len(p), 50, 1, 0.95)
    grp = per_group_correlation(p, h, img, "spearman", n_resamples=50, seed=2)
    assert (grp.estimate.value, grp.estimate.interval, grp.estimate.n) == (grp.value, grp.ci95, grp.n_groups_used)


# ----------------------------------------------------------------------------- report structure


def test_metric_agreement_json_has_the_documented_correlate_keys():
    sys_, img, p, h = load_thumb()
    entry = metric_agreement("P", p, h, img, n_resamples=40, seed=0, info={"run": 1}, extra={"per_image": {}})
    js = json.loads(json.dumps(entry.to_json(), allow_nan=False))
    assert list(js) == ["name", "run", *STATISTICS, "ci95", "per_image"]
    ref = correlate(p, h, img, STATISTICS, n_resamples=40, seed=0)
    for s in STATISTICS:
        assert js[s] == ref.values[s]
        assert js["ci95"][s] == list(ref.ci95[s])
    block = entry.level_block()
    assert block == {"values": {s: js[s] for s in STATISTICS}, "ci95": js["ci95"]}
    report = AgreementReport({"dataset": "thumb"}, {"n_resamples": 40}, {"P": entry}, {"weighting": None})
    assert list(report.to_json()) == ["dataset", "bootstrap", "weighting", "metrics"]
    assert report.to_json()["metrics"]["P"] == entry.to_json()


# ----------------------------------------------------------------------------- average_by


def test_average_by_matches_mt_metrics_eval_correlation_test():
    # mt_metrics_eval/stats_test.py, CorrelationTest.testPearson / testKendall / testKendallC:
    # Correlation(2, [1, 2, 3, 4, 5, 6], [2, 1, 4, 3, 3, 7])
    x, y, items, systems = packed(2, [1, 2, 3, 4, 5, 6], [2, 1, 4, 3, 3, 7])
    published = {
        "pearson": {"none": 0.776, "system": 0.760, "item": 1.00},
        "kendall_tau_b": {"none": 0.552, "system": 0.575, "item": 1.00},
        "kendall_tau_c": {"none": 0.556, "system": 0.611, "item": 1.00},
    }
    for statistic, by_level in published.items():
        for level, want in by_level.items():
            got = average_statistic(x, y, statistic, level, items=items, systems=systems)
            assert got == pytest.approx(want, abs=5e-4), (statistic, level)


def test_kendall_variants_match_mt_metrics_eval():
    # mt_metrics_eval/stats_test.py, CorrelationTest.testKendallVariants and testKendallWithTiesOpt:
    # Correlation(1, [1, 2, 2, 3, 4], [2, 1, 1.5, 5, 3])
    gold, metric = [1, 2, 2, 3, 4], [2, 1, 1.5, 5, 3]
    assert average_statistic(metric, gold, "kendall_tau_b") == pytest.approx(0.316227766)
    assert average_statistic(metric, gold, "kendall_tau_c") == pytest.approx(0.32)
    assert kendall_tau_23(metric, gold) == pytest.approx(0.2)
    assert pairwise_accuracy(metric, gold) == pytest.approx(0.6)
    assert pairwise_accuracy(metric, gold, epsilon=2) == pytest.approx(0.4)
    assert tie_calibrated_accuracy(metric, gold).accuracy == pytest.approx(0.7)
    # CorrelationFunctionsTest.testKendallVariantsWithPositiveEpsilon
    x, y = [1, 1, 1, 2, 2, 3, 4], [1, 1, 2, 2, 4, 3, 3]
    assert kendall_tau_23(x, y) == pytest.approx((14 - 7) / 21)
    assert kendall_tau_23(x, y, epsilon=0.1) == pytest.approx((14 - 7) / 21)
    # epsilon = 1: 21 pairs, 13 tied in x, 3 in y, 3 in both, 1 discordant -> C = 21 - 1 - 10 - 0 - 3
    assert kendall_tau_23(x, y, epsilon=1.0) == pytest.approx((7 + 3 - 1 - 10 - 0) / 21)


def test_micro_average_matches_mt_metrics_eval():
    # mt_metrics_eval/stats_test.py, AverageCorrelationTest.testMicroAveraging:
    # g = [1, None, 3, 4, 5, 6], m = [2, 1, 8, 3, 5, 6], average_by='sys', macro=False
    x, y, items, systems = packed(2, [1, None, 3, 4, 5, 6], [2, 1, 8, 3, 5, 6])
    p1 = st.pearsonr([1, 3], [2, 8]).statistic
    p2 = st.pearsonr([4, 5, 6], [3, 5, 6]).statistic
    got = average_statistic(x, y, "pearson", "system", systems=systems, average="micro")
    assert got == pytest.approx((2 * p1 + 3 * p2) / 5, abs=1e-12)
    # AverageCorrelationTest.testAverageByItemWithMissingEntries (macro, an item with one row dropped)
    x, y, items, systems = packed(2, [1, None, 3, 4, 5, 6], [2, 1, 8, 3, 5, 6])
    want = (st.pearsonr([1, 4], [2, 3]).statistic + st.pearsonr([3, 6], [8, 6]).statistic) / 2
    assert average_statistic(x, y, "pearson", "item", items=items) == pytest.approx(want)


# The tie-calibration example of mt_metrics_eval/tau_optimization_test.py,
# TauOptimizationTest.test_regression_example (rows = items; None = missing).
TAU_OPT_METRIC = [[0, 5, 2, 3, 2], [None, 2, 1, 5, 3], [9, 1, 5, 3, 8], [9, 3, 4, 4, 1], [None] * 5]
TAU_OPT_HUMAN = [[1, 5, 2, 1, 1], [4, 2, 2, 1, 4], [5, 9, 2, 8, 7], [7, 6, None, 3, 2], [None] * 5]
# Its published expected_taus at thresholds 0..8 and expected_best_tau (threshold 1).
TAU_OPT_EXPECTED = [
    0.4666666666666667, 0.4916666666666668, 0.38333333333333347, 0.29166666666666674, 0.2666666666666667,
    0.2, 0.15833333333333335, 0.15833333333333335, 0.1166666666666667,
]


def tau_opt_rows():
    x, y, g = [], [], []
    for row, (ms, hs) in enumerate(zip(TAU_OPT_METRIC, TAU_OPT_HUMAN)):
        for m, h in zip(ms, hs):
            if m is not None and h is not None:
                x.append(m), y.append(h), g.append(row)
    return np.array(x, float), np.array(y, float), np.array(g)


def test_tie_calibration_per_item_average_matches_mt_metrics_eval():
    x, y, g = tau_opt_rows()
    for eps, want in enumerate(TAU_OPT_EXPECTED):
        assert pairwise_accuracy(x, y, g, epsilon=eps) == pytest.approx(want, abs=1e-12)
    res = tie_calibrated_accuracy(x, y, g)  # default: the per-group mean, as mt-metrics-eval
    assert res.accuracy == pytest.approx(0.4916666666666668, abs=1e-12)
    assert res.epsilon == 1.0
    # The pooled form (all within-group pairs summed) is a different number on the same epsilon:
    pooled = tie_calibrated_accuracy(x, y, g, average="pooled_pairs")
    assert pooled.epsilon == 1.0
    assert pooled.accuracy == pytest.approx(0.46875, abs=1e-15)
    c = pair_counts(x, y, g, epsilon=1.0)
    assert pooled.accuracy == (c.concordant + c.ties_xy) / c.total


def test_averages_against_brute_force_per_group_values():
    rng = np.random.default_rng(11)
    for trial in range(4):
        n = 40
        x = rng.integers(0, 6, size=n).astype(float)
        y = rng.integers(0, 3, size=n).astype(float)
        g = rng.integers(0, 7, size=n)
        eps = [0.0, 1.0][trial % 2]
        per, sizes, pairs = [], [], []
        for label in np.unique(g):
            rows = np.flatnonzero(g == label)
            if rows.size < 2:
                continue
            c = d = tx = ty = txy = 0
            for i, j in itertools.combinations(rows, 2):
                xt, yt = abs(x[i] - x[j]) <= eps, y[i] == y[j]
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
            t = c + d + tx + ty + txy
            per.append((c + txy) / t), sizes.append(rows.size), pairs.append(t)
        per, sizes, pairs = map(np.array, (per, sizes, pairs))
        want = {"macro": per.mean(), "micro": (sizes * per).sum() / sizes.sum(), "pooled_pairs": (pairs * per).sum() / pairs.sum()}
        for average in AVERAGES:
            acc = pairwise_accuracy(x, y, g, epsilon=eps, average=average)
            assert acc == pytest.approx(want[average], abs=1e-12), average
            assert kendall_tau_23(x, y, g, epsilon=eps, average=average) == pytest.approx(2 * acc - 1, abs=1e-12)
            assert average_statistic(x, y, "pairwise_accuracy", "item", items=g, average=average, epsilon=eps) == acc


def test_per_group_counts_add_up_to_the_pooled_counts_on_thumb():
    sys_, img, p, h = load_thumb()
    _, codes = np.unique(img, return_inverse=True)
    counter = _PairCounter(p, h, codes.astype(np.int64))
    for eps in (0.0, 0.05):
        pc = counter.counts(eps)
        assert tuple(counter.group_counts(eps).sum(axis=0)) == (
            pc.concordant, pc.discordant, pc.ties_x, pc.ties_y, pc.ties_xy, pc.total)


def test_average_by_levels_on_thumb():
    sys_, img, p, h = load_thumb()
    assert average_statistic(p, h, "kendall_tau_b") == pytest.approx(st.kendalltau(p, h).statistic, abs=1e-12)
    per_system = [st.pearsonr(p[sys_ == s], h[sys_ == s]).statistic for s in np.unique(sys_)]
    assert average_statistic(p, h, "pearson", "system", systems=sys_) == pytest.approx(np.mean(per_system), abs=1e-12)
    # Per image, Spearman of constant groups is undefined and left out: per_group_correlation agrees.
    ref = per_group_correlation(p, h, img, "spearman", n_resamples=0)
    assert average_statistic(p, h, "spearman", "item", items=img) == pytest.approx(ref.value, abs=1e-12)
    with pytest.raises(ValueError):
        average_statistic(p, h, "pearson", "item")  # items missing
    with pytest.raises(ValueError):
        average_statistic(p, h, "pearson", "none", average="pooled_pairs")
    with pytest.raises(ValueError):
        average_statistic(p, h, "pearson", "sys")


def test_permutation_test_average_by_names_the_level():
    sys_, img, p, h = load_thumb()
    r = np.random.default_rng(0).normal(size=p.size)
    a = permutation_test(p, r, h, "kendall_tau_b", groups=img, level="group", n_resamples=50, seed=3)
    b = permutation_test(p, r, h, "kendall_tau_b", groups=img, n_resamples=50, seed=3, average_by="item")
    assert (a.delta, a.p_value, a.level) == (b.delta, b.p_value, b.level)
    c = permutation_test(p, r, h, "pearson", n_resamples=50, seed=3, average_by="none")
    assert c.level == "item"
