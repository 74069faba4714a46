"""captioneval.stats.systems: corpus estimates, paired tests between systems, clusters.

Reference implementation: sacrebleu 2.6.0 ``sacrebleu/significance.py`` (``_paired_bs_test``,
``_paired_ar_test``), run on sacrebleu's own per-sentence BLEU statistics of real captions
(THumB 1.0: MSCOCO captions of 5 systems with 4 COCO references per image). No database needed.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import scipy.stats as st
from sacrebleu.metrics import BLEU
from sacrebleu.significance import Result, _paired_ar_test, _paired_bs_test, estimate_ci

from captioneval.stats import systems as sysmod
from captioneval.stats.systems import (
    CorpusEstimate,
    PairedTest,
    approximate_randomization,
    corpus_estimate,
    mean_score_fn,
    paired_bootstrap,
    paired_test,
    significance_clusters,
    system_agreement,
)

THUMB = Path(__file__).resolve().parent.parent / "data" / "thumb"
SACREBLEU_SEED = 12345  # sacrebleu's default SACREBLEU_SEED


def _thumb():
    """(captions by system: {system: [hyp per image]}, references as sacrebleu streams, human scores)."""
    rows = [json.loads(line) for line in (THUMB / "mscoco_THumB-1.0.jsonl").read_text("utf-8").splitlines() if line.strip()]
    refs = {}
    for line in (THUMB / "mscoco_references.json").read_text("utf-8").splitlines():
        if line.strip():
            rec = json.loads(line)
            refs[str(rec["seg_id"])] = rec["refs"]
    seg_ids = sorted(refs, key=int)
    hyps: dict[str, dict[str, str]] = {}
    human: dict[str, dict[str, float]] = {}
    for r in rows:
        hyps.setdefault(r["SYS"], {})[str(r["seg_id"])] = r["hyp"]
        human.setdefault(r["SYS"], {})[str(r["seg_id"])] = float(r["human_score"])
    captions = {s: [h[i] for i in seg_ids] for s, h in hyps.items()}
    scores = {s: np.array([h[i] for i in seg_ids]) for s, h in human.items()}
    n_refs = len(refs[seg_ids[0]])
    streams = [[refs[i][j] for i in seg_ids] for j in range(n_refs)]
    return captions, streams, scores


CAPTIONS, REF_STREAMS, HUMAN = _thumb()


def _bleu_score_fn(bleu: BLEU):
    """Corpus BLEU (0-100) of sacrebleu from summed statistics, row by row: (b, k) -> (b,)."""

    def score_fn(sums):
        sums = np.asarray(sums, dtype=np.float64)
        return np.array([bleu._compute_score_from_stats([int(round(v)) for v in row]).score for row in sums])

    return score_fn


def _sacrebleu_pair(test_fn, sys_a: str, sys_b: str, n_samples: int):
    """Run sacrebleu's own test with system a as the baseline, as sacrebleu.PairedTest does."""
    bleu = BLEU()
    bl_stats = bleu._extract_corpus_statistics(CAPTIONS[sys_a], REF_STREAMS)
    bl_score = bleu._aggregate_and_compute(bl_stats)
    baseline_info = {bl_score.name: (bl_stats, Result(bl_score.score))}
    sys_stats = bleu._extract_corpus_statistics(CAPTIONS[sys_b], REF_STREAMS)
    sys_score = bleu._aggregate_and_compute(sys_stats)
    _, results = test_fn(
        baseline_info, sys_b, CAPTIONS[sys_b], REF_STREAMS, {bl_score.name: bleu}, n_samples, -1, SACREBLEU_SEED,
    )
    return bleu, np.array(bl_stats, dtype=np.float64), np.array(sys_stats, dtype=np.float64), bl_score.score, sys_score.score, results[bl_score.name]


# Pairs: a close pair (the p-value is not at its minimum) and a clearly different one.
PAIRS = [("VinVL-base", "VinVL-large"), ("Up-Down", "Unified-VLP"), ("VinVL-large", "Human")]


# --------------------------------------------------------------------------------------------
# (a) identical to sacrebleu on the same per-sentence statistics
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("sys_a,sys_b", PAIRS)
def test_paired_bootstrap_matches_sacrebleu(sys_a, sys_b):
    bleu, a, b, score_a, score_b, ref = _sacrebleu_pair(_paired_bs_test, sys_a, sys_b, 1000)
    res = paired_bootstrap(a, b, _bleu_score_fn(bleu), n_resamples=1000, seed=SACREBLEU_SEED)
    assert isinstance(res, PairedTest) and res.test == "bootstrap" and res.n_resamples == 1000
    assert res.p_value == ref.p_value
    assert res.delta == pytest.approx(score_a - score_b, abs=1e-12)
    assert ref.score == score_b
    # sacrebleu's per-system "mean ± 95% CI" of system b comes from the same resamples
    (draws_b,) = sysmod._bootstrap_scores([b], _bleu_score_fn(bleu), 1000, SACREBLEU_SEED)
    mean_b, ci_b = estimate_ci(draws_b)
    assert mean_b == pytest.approx(ref.mean, abs=1e-4) and ci_b == pytest.approx(ref.ci, abs=1e-4)
    lo, hi = res.ci95
    assert lo < res.delta < hi


def test_sacrebleu_pairs_cover_the_p_value_range():
    """The comparison above is informative: one pair is not significant, one is."""
    ps = [_sacrebleu_pair(_paired_bs_test, a, b, 1000)[-1].p_value for a, b in PAIRS]
    assert max(ps) > 0.05 and min(ps) < 0.01


@pytest.mark.parametrize("sys_a,sys_b", PAIRS)
def test_approximate_randomization_matches_sacrebleu(sys_a, sys_b):
    bleu, a, b, score_a, score_b, ref = _sacrebleu_pair(_paired_ar_test, sys_a, sys_b, 10000)
    res = approximate_randomization(a, b, _bleu_score_fn(bleu), n_trials=10000, seed=SACREBLEU_SEED)
    assert res.test == "randomization" and res.n_resamples == 10000
    assert res.p_value == ref.p_value
    assert res.delta == pytest.approx(score_a - score_b, abs=1e-12)
    # the interval is the paired bootstrap interval with the same seed
    pb = paired_bootstrap(a, b, _bleu_score_fn(bleu), n_resamples=1000, seed=SACREBLEU_SEED)
    assert res.ci95 == pb.ci95


def test_paired_test_dispatch():
    a = np.stack([HUMAN["Up-Down"], np.ones(500)], axis=1)
    b = np.stack([HUMAN["VinVL-large"], np.ones(500)], axis=1)
    assert paired_test("bootstrap", a, b, mean_score_fn, 200, 3) == paired_bootstrap(a, b, mean_score_fn, 200, 3)
    assert paired_test("randomization", a, b, mean_score_fn, 500, 3) == approximate_randomization(a, b, mean_score_fn, 500, 3)
    with pytest.raises(ValueError, match="unknown paired test"):
        paired_test("t-test", a, b, mean_score_fn, 100, 0)


def test_blocks_do_not_change_the_draws(monkeypatch):
    """Draws in small blocks equal draws in one call (numpy's bool draws are packed 32 per word)."""
    a = np.stack([HUMAN["Up-Down"], np.ones(500)], axis=1)
    b = np.stack([HUMAN["Unified-VLP"], np.ones(500)], axis=1)
    big = (paired_bootstrap(a, b, mean_score_fn, 700, 5), approximate_randomization(a, b, mean_score_fn, 3000, 5))
    monkeypatch.setattr(sysmod, "_BLOCK_ELEMENTS", 500 * 7)
    small = (paired_bootstrap(a, b, mean_score_fn, 700, 5), approximate_randomization(a, b, mean_score_fn, 3000, 5))
    for x, y in zip(big, small):  # same draws; sums may differ in the last bit (BLAS blocking)
        assert (x.p_value, x.delta, x.n_resamples, x.seed) == (y.p_value, y.delta, y.n_resamples, y.seed)
        assert x.ci95 == pytest.approx(y.ci95, abs=1e-12)


# --------------------------------------------------------------------------------------------
# (b) null hypothesis: p-values uniform; (c) a clear difference is significant
# --------------------------------------------------------------------------------------------

REPS = 300


def _null_p_values(method: str) -> np.ndarray:
    """p-values of REPS pairs where B = A + zero-mean noise on per-image scores (H0 true).

    A: THumB human scores of one system (500 images), B: A + N(0, 0.5^2) per image.
    """
    rng = np.random.default_rng(2024)
    base = HUMAN["VinVL-large"]
    out = np.empty(REPS)
    for r in range(REPS):
        noise = rng.normal(0.0, 0.5, size=(2, base.size))
        a = np.stack([base + noise[0], np.ones(base.size)], axis=1)
        b = np.stack([base + noise[1], np.ones(base.size)], axis=1)
        if method == "randomization":
            out[r] = approximate_randomization(a, b, mean_score_fn, n_trials=2000, seed=r).p_value
        else:
            out[r] = paired_bootstrap(a, b, mean_score_fn, n_resamples=1000, seed=r, p_method=method).p_value
    return out


def _rejections_consistent(p: np.ndarray, alpha: float = 0.05) -> bool:
    k = int(np.sum(p < alpha))
    return st.binomtest(k, p.size, alpha).pvalue > 0.01


@pytest.mark.parametrize("method", ["randomization", "centred"])
def test_p_values_uniform_under_null(method):
    p = _null_p_values(method)
    assert st.kstest(p, "uniform").pvalue > 0.01
    assert _rejections_consistent(p)


def test_sacrebleu_bootstrap_p_value_is_not_uniform_under_null():
    """sacrebleu's paired bootstrap centres the ABSOLUTE deltas (|d*| - mean|d*|), so under H0
    the p-value stays below ~0.5 and the test rejects more often than alpha (documented in
    docs/meta-evaluation.md); we replicate it for comparability with sacrebleu."""
    p = _null_p_values("sacrebleu")
    assert st.kstest(p, "uniform").pvalue < 1e-6
    assert p.max() < 0.6
    k = int(np.sum(p < 0.05))
    assert k > REPS * 0.05 and not _rejections_consistent(p)


def test_clear_difference_is_significant():
    """THumB human scores: Human captions vs Up-Down differ clearly on 500 images."""
    a = np.stack([HUMAN["Human"], np.ones(500)], axis=1)
    b = np.stack([HUMAN["Up-Down"], np.ones(500)], axis=1)
    expected = HUMAN["Human"].mean() - HUMAN["Up-Down"].mean()
    for res in (
        paired_bootstrap(a, b, mean_score_fn, 1000, 0),
        paired_bootstrap(a, b, mean_score_fn, 1000, 0, p_method="centred"),
        approximate_randomization(a, b, mean_score_fn, 10000, 0),
    ):
        assert res.delta == pytest.approx(expected, rel=1e-12)
        assert res.p_value < 0.01
        assert res.ci95[0] > 0 or res.ci95[1] < 0
    # sign: b - a gives the opposite delta and interval, same p-value
    rev = approximate_randomization(b, a, mean_score_fn, 10000, 0)
    fwd = approximate_randomization(a, b, mean_score_fn, 10000, 0)
    assert rev.delta == pytest.approx(-fwd.delta) and rev.p_value == fwd.p_value
    assert rev.ci95 == pytest.approx((-fwd.ci95[1], -fwd.ci95[0]))


def test_identical_systems_are_not_significant():
    a = np.stack([HUMAN["Up-Down"], np.ones(500)], axis=1)
    for res in (paired_bootstrap(a, a.copy(), mean_score_fn), approximate_randomization(a, a.copy(), mean_score_fn)):
        assert res.delta == 0.0 and res.p_value == 1.0 and res.ci95 == (0.0, 0.0)


# --------------------------------------------------------------------------------------------
# (d) corpus estimate
# --------------------------------------------------------------------------------------------


def test_corpus_estimate_mean_matches_numpy_percentiles():
    scores = HUMAN["Unified-VLP"]
    stats = np.stack([scores, np.ones(scores.size)], axis=1)
    est = corpus_estimate(stats, mean_score_fn, n_resamples=2000, seed=11)
    idx = np.random.default_rng(11).choice(scores.size, size=(2000, scores.size), replace=True)
    means = scores[idx].mean(axis=1)
    lo, hi = np.percentile(means, [2.5, 97.5])
    assert isinstance(est, CorpusEstimate)
    assert est.score == pytest.approx(scores.mean(), rel=1e-12)
    assert est.ci95 == pytest.approx((lo, hi), rel=1e-12)
    assert lo < est.score < hi
    assert (est.n_units, est.n_resamples, est.seed) == (500, 2000, 11)
    est90 = corpus_estimate(stats, mean_score_fn, n_resamples=2000, seed=11, level=0.9)
    assert est90.ci95 == pytest.approx(tuple(np.percentile(means, [5, 95])), rel=1e-12)


def test_corpus_estimate_bleu_matches_sacrebleu_resampling():
    """Corpus BLEU and its bootstrap: sacrebleu's _bootstrap_resample draws with the same seed."""
    bleu = BLEU()
    stats = bleu._extract_corpus_statistics(CAPTIONS["Up-Down"], REF_STREAMS)
    full = bleu._aggregate_and_compute(stats).score
    est = corpus_estimate(np.array(stats, dtype=float), _bleu_score_fn(bleu), n_resamples=1000, seed=SACREBLEU_SEED)
    assert est.score == pytest.approx(full, abs=1e-12)
    from sacrebleu.significance import _bootstrap_resample

    _, ref_scores = _bootstrap_resample(stats, bleu, 1000)  # SACREBLEU_SEED default 12345
    ref = np.array([s.score for s in ref_scores])
    assert est.ci95 == pytest.approx(tuple(np.quantile(ref, [0.025, 0.975])), abs=1e-4)
    assert est.ci95[0] < est.score < est.ci95[1]


# --------------------------------------------------------------------------------------------
# (e) clusters and system-level agreement
# --------------------------------------------------------------------------------------------


def test_clusters_follow_constructed_groups():
    """Three groups of systems with well separated mean scores (0.2 apart, per-image noise 0.3 on
    400 images): systems within a group are never significantly different from each other...
    they share their group's cluster, groups get consecutive clusters."""
    rng = np.random.default_rng(7)
    n = 400
    base = rng.normal(0, 1, n)
    groups = {"g1": 1.0, "g2": 0.8, "g3": 0.6}
    stats, truth = {}, {}
    for g, level in groups.items():
        for k in range(2):
            name = f"{g}-{k}"
            stats[name] = np.stack([base + level + 0.001 * k + rng.normal(0, 0.3, n) * 0.1, np.ones(n)], axis=1)
            truth[name] = list(groups).index(g) + 1
    names = list(stats)[::-1]
    scores = [float(mean_score_fn(stats[s].sum(0))) for s in names]
    p = {}
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            p[(a, b)] = approximate_randomization(stats[a], stats[b], mean_score_fn, 2000, 0).p_value
    within = [p.get((a, b), p.get((b, a))) for a in names for b in names if a < b and a[:2] == b[:2]]
    across = [p.get((a, b), p.get((b, a))) for a in names for b in names if a < b and a[:2] != b[:2]]
    assert min(within) > 0.05 and max(across) < 0.05  # the construction does what it says
    assert significance_clusters(names, scores, p) == truth
    # lower is better: the order reverses
    worst_first = significance_clusters(names, [-s for s in scores], p, higher_is_better=False)
    assert worst_first == truth
    flipped = significance_clusters(names, scores, p, higher_is_better=False)
    assert flipped == {s: 4 - r for s, r in truth.items()}


def test_clusters_rule_is_assign_ranks():
    """A system joins the current cluster unless some system from the cluster's start is
    significantly better: the mt-metrics-eval AssignRanks rule of significance.significance_clusters."""
    from captioneval.stats.significance import significance_clusters as metric_clusters

    names = ["A", "B", "C", "D"]
    scores = [4.0, 3.0, 2.0, 1.0]
    # A-C significant, B-C not: C starts a new cluster (worse than A, a member of the current one)
    p = {("A", "B"): 0.3, ("A", "C"): 0.01, ("B", "C"): 0.4, ("A", "D"): 0.001, ("B", "D"): 0.2, ("C", "D"): 0.5}
    matrix = np.full((4, 4), np.nan)
    for (x, y), v in p.items():
        matrix[names.index(x), names.index(y)] = matrix[names.index(y), names.index(x)] = v
    assert significance_clusters(names, scores, p) == metric_clusters(names, matrix, 0.05)
    # keys in either order; input order does not matter
    rev = {(y, x): v for (x, y), v in p.items()}
    assert significance_clusters(names[::-1], scores[::-1], rev) == significance_clusters(names, scores, p)
    with pytest.raises(ValueError, match="no p-value for the pair"):
        significance_clusters(names, scores, {k: v for k, v in p.items() if k != ("B", "D")})
    with pytest.raises(ValueError, match="distinct"):
        significance_clusters(["A", "A"], [1.0, 2.0], {("A", "A"): 0.5})
    with pytest.raises(ValueError, match="must be in"):
        significance_clusters(["A", "B"], [1.0, 2.0], {("A", "B"): 1.5})


def test_system_agreement_matches_scipy():
    names = sorted(HUMAN)
    human = {s: float(HUMAN[s].mean()) for s in names}
    bleu = BLEU()
    metric = {s: bleu.corpus_score(CAPTIONS[s], REF_STREAMS).score for s in names}
    out = system_agreement(metric, human)
    x = [metric[s] for s in names]
    y = [human[s] for s in names]
    assert out["n_systems"] == 5 and out["caveat"] is None
    assert out["kendall_tau"] == pytest.approx(st.kendalltau(x, y).statistic)
    assert out["pearson"] == pytest.approx(st.pearsonr(x, y).statistic)
    few = system_agreement({k: metric[k] for k in names[:3]}, human)
    assert few["n_systems"] == 3 and "with 3 systems" in few["caveat"]
    assert few["kendall_tau"] == pytest.approx(st.kendalltau(x[:3], y[:3]).statistic)
    # systems present on one side only, or with a non-finite value, are left out
    partial = system_agreement({**metric, "extra": 1.0, names[0]: math.nan}, human)
    assert partial["n_systems"] == 4
    const = system_agreement({s: 1.0 for s in names}, human)
    assert const["kendall_tau"] is None and const["pearson"] is None


# --------------------------------------------------------------------------------------------
# (f) validation
# --------------------------------------------------------------------------------------------


def test_input_validation():
    a = np.stack([HUMAN["Up-Down"], np.ones(500)], axis=1)
    with pytest.raises(ValueError, match="same resampling units"):
        paired_bootstrap(a, a[:-1], mean_score_fn)
    with pytest.raises(ValueError, match="same resampling units"):
        approximate_randomization(a, a[:, :1], mean_score_fn)
    with pytest.raises(ValueError, match="at least 2 resampling units"):
        corpus_estimate(a[:1], mean_score_fn)
    bad = a.copy()
    bad[7, 0] = np.nan
    with pytest.raises(ValueError, match="non-finite value in row 7"):
        paired_bootstrap(a, bad, mean_score_fn)
    with pytest.raises(ValueError, match="n_resamples must be a positive integer"):
        paired_bootstrap(a, a, mean_score_fn, n_resamples=0)
    with pytest.raises(ValueError, match="n_trials must be a positive integer"):
        approximate_randomization(a, a, mean_score_fn, n_trials=2.5)
    with pytest.raises(ValueError, match="level must be in"):
        corpus_estimate(a, mean_score_fn, level=95)
    with pytest.raises(ValueError, match="seed"):
        corpus_estimate(a, mean_score_fn, seed=-1)
    with pytest.raises(ValueError, match="p_method"):
        paired_bootstrap(a, a, mean_score_fn, p_method="moses")
    with pytest.raises(ValueError, match="shape"):
        corpus_estimate(a, lambda s: s)  # returns (b, k), not (b,)
    zero = a.copy()
    zero[:, 1] = 0.0
    with pytest.raises(ValueError, match="non-finite corpus score"):
        corpus_estimate(zero, mean_score_fn)
    with pytest.raises(ValueError, match="shape"):
        corpus_estimate(np.zeros((3, 2, 2)), mean_score_fn)
