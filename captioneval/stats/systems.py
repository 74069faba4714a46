"""Corpus-level scores of captioning systems, their intervals and paired significance tests.

Django-free: only numpy and scipy are imported.

Data layout
-----------
A system's evaluation is an array ``stats`` of shape (n, k): one row per *resampling unit* (an
image: the row holds that system's per-caption sufficient statistics summed over the image's
captions), one column per sufficient statistic. A corpus score is a function of the column sums:
``score_fn(sums)`` maps an array of shape (b, k) to shape (b,) (it may accept any (..., k)); it is
called only with 2-D arrays (the full-sample score with b = 1). Examples: corpus BLEU from
[hypothesis length, reference length, matches_1..4, totals_1..4] (Papineni et al. 2002), or the
mean of per-caption scores from the columns [sum of scores, number of captions]
(:func:`mean_score_fn`). Two systems compared by a *paired* test must have the same units in the
same order (row i of ``stats_a`` and of ``stats_b`` describe the same image).

Results are deterministic given the inputs and the seed. The draws do not depend on the block
size; the float64 sums (matrix products) may differ in the last bit between block sizes.

Tests (replicating sacrebleu 2.6.0, ``sacrebleu/significance.py``, which follows Clark et al. 2011
"Better Hypothesis Testing for Statistical Machine Translation" / MultEval and the Moses script
``bootstrap-hypothesis-difference-significance.pl``):

* :func:`paired_bootstrap` -- paired bootstrap resampling (Koehn 2004, "Statistical Significance
  Tests for Machine Translation Evaluation", EMNLP), as ``sacrebleu --paired-bs``
  (``_paired_bs_test``).
* :func:`approximate_randomization` -- paired approximate randomization (Riezler & Maxwell 2005,
  "On Some Pitfalls in Automatic Evaluation and Significance Testing for MT", ACL workshop;
  Noreen 1989), as ``sacrebleu --paired-ar`` (``_paired_ar_test``).
* :func:`corpus_estimate` -- the corpus score with a percentile bootstrap interval over units
  (the resampling of sacrebleu's ``_bootstrap_resample``).

Random numbers are drawn exactly as sacrebleu draws them, from ``numpy.random.default_rng(seed)``:
bootstrap indices ``rng.choice(n, size=(B, n), replace=True)``; randomization masks
``rng.integers(2, size=(T, n), dtype=bool)``. Given the same seed and the same per-unit
statistics, the p-values equal sacrebleu's (up to floating-point rounding of the scores: sacrebleu
sums the bootstrap statistics in float32, we sum in float64). The draws are made in blocks of
whole resamples (for the masks, blocks of a multiple of 32 rows, since numpy packs 32 booleans in
one 32-bit draw), which yields the same numbers as one call for all resamples. Each block's
statistic sums are one matrix product (resample counts or swap masks) x stats.

Also here: :func:`significance_clusters` (WMT-style clusters of systems, the rank rule of
:func:`captioneval.stats.significance.significance_clusters`) and :func:`system_agreement`
(system-level Kendall tau-b and Pearson between metric and human means).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import scipy  # scipy.stats loads on first use (scipy's lazy submodules): half a second of start-up

from captioneval.stats.results import finite_or_none, percentile_interval
from captioneval.stats.significance import significance_clusters as _rank_clusters

__all__ = [
    "CorpusEstimate",
    "corpus_estimate",
    "PairedTest",
    "PAIRED_TESTS",
    "P_METHODS",
    "paired_bootstrap",
    "approximate_randomization",
    "paired_test",
    "significance_clusters",
    "system_agreement",
    "mean_score_fn",
    "FEW_SYSTEMS",
]

PAIRED_TESTS = ("bootstrap", "randomization")

#: p-value methods of :func:`paired_bootstrap`.
P_METHODS = ("sacrebleu", "centred")

#: Below this number of systems :func:`system_agreement` adds a caveat.
FEW_SYSTEMS = 5

# Target number of (resample x unit) entries per block of draws.
_BLOCK_ELEMENTS = 2_000_000

ScoreFn = Callable[[np.ndarray], Any]


# --------------------------------------------------------------------------------------------
# Validation and helpers
# --------------------------------------------------------------------------------------------


def mean_score_fn(sums: np.ndarray) -> np.ndarray:
    """Mean score from summed statistics with columns [sum of scores, count].

    ``sums``: array (..., 2) (extra columns are ignored); returns ``sums[..., 0] / sums[..., 1]``,
    shape (...). A resample always has a positive count when every unit has one. Used for metrics
    whose corpus score is the mean of per-caption scores (CIDEr-D in pycocoevalcap, Vedantam et
    al. 2015, is the mean of the per-caption scores).
    """
    s = np.asarray(sums, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return s[..., 0] / s[..., 1]


def _as_stats(stats: Any, name: str) -> np.ndarray:
    try:
        arr = np.asarray(stats, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a numeric array of shape (n_units, n_statistics): {exc}") from None
    if arr.ndim == 1:
        arr = arr[:, None]
    if arr.ndim != 2:
        raise ValueError(f"{name} must have shape (n_units, n_statistics), got shape {arr.shape}")
    if arr.shape[0] < 2:
        raise ValueError(f"{name} needs at least 2 resampling units (rows), got {arr.shape[0]}")
    if arr.shape[1] < 1:
        raise ValueError(f"{name} needs at least 1 statistic (column)")
    if not np.all(np.isfinite(arr)):
        bad = int(np.argwhere(~np.isfinite(arr))[0][0])
        raise ValueError(f"{name} has a non-finite value in row {bad}")
    return arr


def _as_pair(stats_a: Any, stats_b: Any) -> tuple[np.ndarray, np.ndarray]:
    a = _as_stats(stats_a, "stats_a")
    b = _as_stats(stats_b, "stats_b")
    if a.shape != b.shape:
        raise ValueError(
            f"paired test: stats_a has shape {a.shape} but stats_b has shape {b.shape}; both systems "
            "need the same resampling units in the same order and the same statistics"
        )
    return a, b


def _check_count(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or int(value) < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def _check_seed(seed: Any) -> int:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or int(seed) < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    return int(seed)


def _check_level(level: Any) -> float:
    try:
        c = float(level)
    except (TypeError, ValueError):
        raise ValueError(f"level must be a number in (0, 1), got {level!r}") from None
    if not 0.0 < c < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    return c


def _scores(score_fn: ScoreFn, sums: np.ndarray) -> np.ndarray:
    """score_fn on (b, k) sums, checked to return b finite values."""
    out = np.asarray(score_fn(sums), dtype=np.float64)
    if out.shape != (sums.shape[0],):
        raise ValueError(f"score_fn must map sums of shape (b, k) to shape (b,), got {out.shape} for b={sums.shape[0]}")
    if not np.all(np.isfinite(out)):
        raise ValueError("score_fn returned a non-finite corpus score (check the statistics, e.g. zero counts)")
    return out


def _score(score_fn: ScoreFn, stats: np.ndarray) -> float:
    return float(_scores(score_fn, stats.sum(axis=0)[None, :])[0])


def _bootstrap_blocks(rng: np.random.Generator, n: int, n_resamples: int):
    """Yield resample-count matrices (b, n) (float64) for ``rng.choice(n, (B, n), replace=True)``.

    Blocks are runs of whole resamples, so the indices equal those of a single call (numpy draws
    bounded integers one after the other from the bit generator).
    """
    block = max(1, _BLOCK_ELEMENTS // n)
    for start in range(0, n_resamples, block):
        b = min(block, n_resamples - start)
        idx = rng.choice(n, size=(b, n), replace=True)
        flat = (idx + (np.arange(b, dtype=np.int64) * n)[:, None]).ravel()
        yield np.bincount(flat, minlength=b * n).reshape(b, n).astype(np.float64)


def _bootstrap_scores(stats_list: Sequence[np.ndarray], score_fn: ScoreFn, n_resamples: int, seed: int) -> list[np.ndarray]:
    """Bootstrap scores of each array in ``stats_list`` on the SAME resamples, shape (n_resamples,)."""
    n = stats_list[0].shape[0]
    rng = np.random.default_rng(seed)
    out = [np.empty(n_resamples) for _ in stats_list]
    pos = 0
    for counts in _bootstrap_blocks(rng, n, n_resamples):
        b = counts.shape[0]
        for arr, dest in zip(stats_list, out):
            dest[pos:pos + b] = _scores(score_fn, counts @ arr)
        pos += b
    return out


def _p_value(draws: np.ndarray, observed: float) -> float:
    """sacrebleu ``_compute_p_value`` (after MultEval, Clark et al. 2011): ``(#{draws > observed} + 1)
    / (len(draws) + 1)`` -- strictly greater, "+1" so that the test is never anti-conservative from
    the finite number of draws."""
    return (int(np.sum(draws > observed)) + 1) / (draws.shape[0] + 1)


# --------------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CorpusEstimate:
    """Corpus score of one system with a percentile bootstrap interval.

    score : ``score_fn(stats.sum(0))``, the full-sample corpus score (units of score_fn).
    ci95 : (lo, hi) percentile interval of the bootstrap scores at coverage ``level`` (the field
        name keeps the default 95%).
    n_units : rows (resampling units); n_resamples, seed : bootstrap settings.
    """

    score: float
    ci95: tuple[float, float]
    n_units: int
    n_resamples: int
    seed: int

    def to_dict(self) -> dict:
        """JSON-safe dict (nan -> None)."""
        return {
            "score": finite_or_none(self.score),
            "ci95": [finite_or_none(self.ci95[0]), finite_or_none(self.ci95[1])],
            "n_units": int(self.n_units),
            "n_resamples": int(self.n_resamples),
            "seed": int(self.seed),
        }


@dataclass(frozen=True)
class PairedTest:
    """Result of a paired test between systems a and b on the same units.

    delta : ``score(a) - score(b)`` on the full sample (signed).
    ci95 : (lo, hi) percentile interval of the paired-bootstrap deltas ``score(a*) - score(b*)``.
    p_value : two-sided p-value in (0, 1] (H0: the systems' scores do not differ), see
        :func:`paired_bootstrap` / :func:`approximate_randomization`.
    test : "bootstrap" or "randomization"; n_resamples : bootstrap resamples or randomization
        trials; seed : seed of ``numpy.random.default_rng``.
    """

    delta: float
    ci95: tuple[float, float]
    p_value: float
    test: str
    n_resamples: int
    seed: int

    def to_dict(self) -> dict:
        """JSON-safe dict (nan -> None)."""
        return {
            "delta": finite_or_none(self.delta),
            "ci95": [finite_or_none(self.ci95[0]), finite_or_none(self.ci95[1])],
            "p_value": finite_or_none(self.p_value),
            "test": self.test,
            "n_resamples": int(self.n_resamples),
            "seed": int(self.seed),
        }


# --------------------------------------------------------------------------------------------
# Corpus estimate and paired tests
# --------------------------------------------------------------------------------------------


def corpus_estimate(stats: Any, score_fn: ScoreFn, n_resamples: int = 1000, seed: int = 0, level: float = 0.95) -> CorpusEstimate:
    """Corpus score of one system with a percentile bootstrap interval over resampling units.

    Resamples are drawn as sacrebleu's ``_bootstrap_resample`` draws them
    (``default_rng(seed).choice(n, size=(n_resamples, n), replace=True)``; sacrebleu's default seed
    is 12345, ours is the ``seed`` argument); each resample's score is ``score_fn`` of the summed
    statistics of the drawn units (with multiplicity).

    Difference from sacrebleu: sacrebleu's ``estimate_ci`` reports the MEAN of the bootstrap scores
    and a half-width ``(s[B - 1 - B//40] - s[B//40]) / 2`` of sorted scores s ("mean ± CI"). We
    report the full-sample score and the percentile interval [lo, hi] (``numpy.quantile``, linear
    interpolation, at (1 - level) / 2 and (1 + level) / 2; Efron & Tibshirani 1993, Sec. 13.3),
    which need not be symmetric around the score.

    Parameters
    ----------
    stats : array (n, k), n >= 2, finite. score_fn : (b, k) -> (b,), see the module docstring.
    n_resamples : int >= 1; seed : int >= 0; level : coverage in (0, 1).

    Raises ValueError for invalid stats or settings, or a score_fn returning the wrong shape or a
    non-finite score.
    """
    arr = _as_stats(stats, "stats")
    n_resamples = _check_count("n_resamples", n_resamples)
    seed = _check_seed(seed)
    c = _check_level(level)
    score = _score(score_fn, arr)
    (draws,) = _bootstrap_scores([arr], score_fn, n_resamples, seed)
    return CorpusEstimate(score=score, ci95=percentile_interval(draws, c), n_units=arr.shape[0], n_resamples=n_resamples, seed=seed)


def _paired_bootstrap_deltas(a: np.ndarray, b: np.ndarray, score_fn: ScoreFn, n_resamples: int, seed: int) -> np.ndarray:
    sa, sb = _bootstrap_scores([a, b], score_fn, n_resamples, seed)
    return sa - sb


def paired_bootstrap(
    stats_a: Any, stats_b: Any, score_fn: ScoreFn, n_resamples: int = 1000, seed: int = 0, level: float = 0.95,
    *, p_method: str = "sacrebleu",
) -> PairedTest:
    """Paired bootstrap resampling test (Koehn 2004), exactly as sacrebleu 2.6.0 ``_paired_bs_test``.

    1. Draw ``idx = default_rng(seed).choice(n, size=(B, n), replace=True)`` (B = n_resamples);
       the same units are drawn for both systems (paired).
    2. Bootstrap deltas ``d*_r = score_fn(a[idx_r].sum) - score_fn(b[idx_r].sum)``.
    3. p-value as sacrebleu: with ``x_r = |d*_r|`` the statistic is the MEAN-SHIFTED absolute
       delta ``x_r - mean(x)``, and ``p = (#{x_r - mean(x) > |delta|} + 1) / (B + 1)``
       (:func:`_p_value`; sacrebleu centres the bootstrap distribution to simulate the null
       hypothesis, following Clark et al. 2011 / MultEval). Note that the centring is of the
       absolute deltas, not of the deltas: when the systems differ little, ``mean(x)`` is about
       0.8 standard errors, so p stays well below 1, and the test rejects more often than
       ``alpha`` under H0 (about twice as often at alpha = 0.05 for a smooth score; see
       docs/meta-evaluation.md). We replicate it so that p-values match sacrebleu's; use
       :func:`approximate_randomization` (or ``p_method="centred"``) for a test that holds its
       level.
    4. ``p_method="centred"`` (keyword-only, not sacrebleu): the deltas are centred at the observed
       delta to approximate the null distribution (Efron & Tibshirani 1993, Sec. 16.4; Berg-
       Kirkpatrick et al. 2012, Fig. 1, two-sided): ``p = (#{|d*_r - delta| >= |delta|} + 1) /
       (B + 1)``; approximately uniform under H0.
    5. If ``delta == 0`` exactly, p = 1 (the smallest possible statistic; sacrebleu's strict ">"
       returns 1/(B + 1) when a system is compared with an identical one).
    6. ``ci95``: percentile interval (coverage ``level``) of the deltas d*.

    Parameters
    ----------
    stats_a, stats_b : arrays (n, k) of the same shape (same units, same order), n >= 2, finite.
    score_fn : (b, k) -> (b,) corpus score from summed statistics.
    n_resamples : int >= 1 (sacrebleu default 1000); seed : int >= 0; level : in (0, 1).
    p_method : keyword-only, "sacrebleu" (default) or "centred".

    Returns :class:`PairedTest` with test "bootstrap".

    Raises ValueError for arrays of different shapes, fewer than 2 units, non-finite values,
    invalid settings, or a score_fn giving the wrong shape or a non-finite score.
    """
    if p_method not in P_METHODS:
        raise ValueError(f"unknown p_method {p_method!r}; expected one of {P_METHODS}")
    a, b = _as_pair(stats_a, stats_b)
    n_resamples = _check_count("n_resamples", n_resamples)
    seed = _check_seed(seed)
    c = _check_level(level)
    delta = _score(score_fn, a) - _score(score_fn, b)
    deltas = _paired_bootstrap_deltas(a, b, score_fn, n_resamples, seed)
    if delta == 0.0:
        p = 1.0
    elif p_method == "sacrebleu":
        x = np.abs(deltas)
        p = _p_value(x - x.mean(), abs(delta))
    else:
        tol = 1e-12 * max(1.0, abs(delta))
        p = (int(np.sum(np.abs(deltas - delta) >= abs(delta) - tol)) + 1) / (n_resamples + 1)
    return PairedTest(delta=delta, ci95=percentile_interval(deltas, c), p_value=p, test="bootstrap", n_resamples=n_resamples, seed=seed)


def approximate_randomization(
    stats_a: Any, stats_b: Any, score_fn: ScoreFn, n_trials: int = 10000, seed: int = 0, level: float = 0.95,
    *, n_ci_resamples: int = 1000,
) -> PairedTest:
    """Paired two-sided approximate randomization test (Riezler & Maxwell 2005), exactly as
    sacrebleu 2.6.0 ``_paired_ar_test``.

    1. Draw ``swap = default_rng(seed).integers(2, size=(T, n), dtype=bool)`` (T = n_trials).
    2. Trial t builds two pseudo-systems: unit i of pseudo-system A takes a's statistics where
       ``swap[t, i]`` and b's otherwise; pseudo-system B the opposite
       (``A_t = swap_t @ a + ~swap_t @ b``, ``B_t = ~swap_t @ a + swap_t @ b``).
    3. ``p = (#{|score(A_t) - score(B_t)| > |delta|} + 1) / (T + 1)`` (no centring; sacrebleu's
       ``_compute_p_value``, after MultEval, Clark et al. 2011).
    4. ``ci95``: the randomization distribution is centred at 0 and gives no interval for the
       delta, so the interval is the paired bootstrap percentile interval of :func:`paired_bootstrap`
       with ``n_ci_resamples`` resamples drawn from a FRESH ``default_rng(seed)`` (identical to
       ``paired_bootstrap(a, b, score_fn, n_ci_resamples, seed, level).ci95``). sacrebleu's optional
       ``--paired-ar-confidence-n`` instead draws bootstrap indices from the same generator after the
       masks and reports a per-system mean ± half-width, not a delta interval.
    5. If ``delta == 0`` exactly, p = 1 (sacrebleu: 1/(T + 1) for identical systems, see
       :func:`paired_bootstrap`).

    Parameters
    ----------
    stats_a, stats_b : arrays (n, k) of the same shape, n >= 2, finite. score_fn : as
    :func:`paired_bootstrap`. n_trials : int >= 1 (sacrebleu default 10000); seed : int >= 0;
    level : in (0, 1); n_ci_resamples : keyword-only, int >= 1.

    Returns :class:`PairedTest` with test "randomization" and n_resamples = n_trials.

    Raises ValueError as :func:`paired_bootstrap`.
    """
    a, b = _as_pair(stats_a, stats_b)
    n_trials = _check_count("n_trials", n_trials)
    n_ci_resamples = _check_count("n_ci_resamples", n_ci_resamples)
    seed = _check_seed(seed)
    c = _check_level(level)
    total_a, total_b = a.sum(axis=0), b.sum(axis=0)
    delta = float(_scores(score_fn, total_a[None, :])[0] - _scores(score_fn, total_b[None, :])[0])
    diff = a - b
    n = a.shape[0]
    rng = np.random.default_rng(seed)
    # blocks of a multiple of 32 rows: numpy draws 32 booleans per 32-bit word (see module docstring)
    block = max(32, (_BLOCK_ELEMENTS // n) // 32 * 32)
    draws = np.empty(n_trials)
    for start in range(0, n_trials, block):
        t = min(block, n_trials - start)
        swap = rng.integers(2, size=(t, n), dtype=bool)
        moved = swap.astype(np.float64) @ diff  # (t, k): sum over swapped units of (a - b)
        draws[start:start + t] = np.abs(_scores(score_fn, total_b + moved) - _scores(score_fn, total_a - moved))
    p = 1.0 if delta == 0.0 else _p_value(draws, abs(delta))
    deltas = _paired_bootstrap_deltas(a, b, score_fn, n_ci_resamples, seed)
    return PairedTest(delta=delta, ci95=percentile_interval(deltas, c), p_value=p, test="randomization", n_resamples=n_trials, seed=seed)


def paired_test(test: str, stats_a: Any, stats_b: Any, score_fn: ScoreFn, n_resamples: int, seed: int,
                *, p_method: str = "centred") -> PairedTest:
    """Dispatch: ``test="bootstrap"`` -> :func:`paired_bootstrap` (n_resamples resamples, its
    p-value by ``p_method``); ``test="randomization"`` -> :func:`approximate_randomization`
    (n_resamples trials). Level 0.95.

    ``p_method`` defaults to ``"centred"`` here (what the system leaderboard uses): sacrebleu's
    bootstrap p-value is not uniform under the null hypothesis (see :func:`paired_bootstrap`),
    the centred one is, as is the randomization test's. ``p_method="sacrebleu"`` reproduces
    sacrebleu's ``--paired-bs`` p-value digit for digit.

    Raises ValueError for an unknown test or p_method (and as the called test).
    """
    if test == "bootstrap":
        return paired_bootstrap(stats_a, stats_b, score_fn, n_resamples=n_resamples, seed=seed, p_method=p_method)
    if test == "randomization":
        return approximate_randomization(stats_a, stats_b, score_fn, n_trials=n_resamples, seed=seed)
    raise ValueError(f"unknown paired test {test!r}; expected one of {PAIRED_TESTS}")


# --------------------------------------------------------------------------------------------
# Clusters and system-level agreement
# --------------------------------------------------------------------------------------------


def significance_clusters(
    names: Sequence[str],
    scores: Sequence[float],
    p_values: Mapping[tuple[str, str], float],
    alpha: float = 0.05,
    higher_is_better: bool = True,
) -> dict[str, int]:
    """WMT-style significance clusters of systems: name -> cluster rank (1 = best).

    Systems are sorted by score, best first (descending if ``higher_is_better``; ties keep the
    input order; non-finite scores last). Walking down the list, a system starts a new cluster if
    it is significantly worse (``p < alpha``) than ANY system from the first system of the current
    cluster down to it; otherwise it joins the current cluster. This is the rule of
    mt-metrics-eval ``AssignRanks`` (google-research/mt-metrics-eval), implemented by
    :func:`captioneval.stats.significance.significance_clusters`, which this function calls.

    Parameters
    ----------
    names : distinct system names (m >= 1); scores : their corpus scores (same length).
    p_values : two-sided p-value of each pair, keyed ``(a, b)`` or ``(b, a)`` (either order is
        read; e.g. :attr:`PairedTest.p_value`). nan counts as not significant.
    alpha : significance level in (0, 1); higher_is_better : direction of the scores.

    Raises ValueError for unequal lengths, duplicate names, alpha outside (0, 1), a p-value
    outside [0, 1], or a missing pair.
    """
    names = [str(x) for x in names]
    vals = [float(v) for v in scores]
    if len(names) != len(vals):
        raise ValueError(f"{len(names)} names but {len(vals)} scores")
    if len(set(names)) != len(names):
        raise ValueError("system names must be distinct")
    if not 0.0 < float(alpha) < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    sign = -1.0 if higher_is_better else 1.0

    def key(item):
        idx, v = item
        return (1, 0.0, idx) if not math.isfinite(v) else (0, sign * v, idx)

    order = [i for i, _ in sorted(enumerate(vals), key=key)]
    sorted_names = [names[i] for i in order]
    m = len(names)
    p = np.full((m, m), np.nan)
    for i in range(m):
        for j in range(i + 1, m):
            a, b = sorted_names[i], sorted_names[j]
            if (a, b) in p_values:
                v = p_values[(a, b)]
            elif (b, a) in p_values:
                v = p_values[(b, a)]
            else:
                raise ValueError(f"no p-value for the pair ({a!r}, {b!r})")
            v = math.nan if v is None else float(v)
            if not math.isnan(v) and not 0.0 <= v <= 1.0:
                raise ValueError(f"p-value of ({a!r}, {b!r}) must be in [0, 1], got {v!r}")
            p[i, j] = p[j, i] = v
    return _rank_clusters(sorted_names, p, float(alpha))


def system_agreement(metric_means: Mapping[str, float], human_means: Mapping[str, float]) -> dict:
    """System-level agreement between a metric and human judgments.

    Uses the systems present in both mappings with finite values (n of them): Kendall tau-b
    (``scipy.stats.kendalltau``, default variant "b": ties in either ranking adjust the
    denominator) and Pearson r (``scipy.stats.pearsonr``) between the systems' metric scores and
    mean human scores (WMT system-level meta-evaluation, e.g. Freitag et al. 2021).

    Returns ``{"n_systems": n, "kendall_tau": float | None, "pearson": float | None,
    "caveat": str | None}``; a correlation is None when undefined (n < 2, or a constant side).
    ``caveat`` is set when n < :data:`FEW_SYSTEMS` (5): with n systems Kendall's tau takes at most
    n(n-1)/2 + 1 values and a system-level correlation is very unreliable.
    """
    common = []
    for name, mv in metric_means.items():
        if name in human_means:
            x, y = mv, human_means[name]
            if x is not None and y is not None and math.isfinite(float(x)) and math.isfinite(float(y)):
                common.append((float(x), float(y)))
    n = len(common)
    tau = r = None
    if n >= 2:
        x = np.array([c[0] for c in common])
        y = np.array([c[1] for c in common])
        if not (np.all(x == x[0]) or np.all(y == y[0])):
            tau = finite_or_none(float(scipy.stats.kendalltau(x, y).statistic))
            r = finite_or_none(float(scipy.stats.pearsonr(x, y).statistic))
    caveat = None
    if n < FEW_SYSTEMS:
        caveat = (
            f"with {n} systems a system-level correlation is very unreliable "
            f"(Kendall tau can take at most {n * (n - 1) // 2 + 1} values); read it as anecdotal"
        )
    return {"n_systems": n, "kendall_tau": tau, "pearson": r, "caveat": caveat}
