"""Human ceilings (how well one group of humans agrees with another) and aggregated correlations.

Django-free: only numpy and scipy are imported.

* :func:`leave_one_rater_out` -- each rater against the mean of the other raters on the same items.
* :func:`split_half_ceiling` -- random halves of each item's raters against each other, with an
  item-bootstrap interval (wraps the split machinery of
  :func:`captioneval.stats.agreement.split_half_reliability`).
* :func:`forced_choice_ceiling` -- leave-one-vote-out accuracy of pairwise (B vs C) human votes, the
  human counterpart of :func:`captioneval.stats.pairwise.forced_choice_accuracy`.
* :func:`system_level_correlation` -- correlation of per-system mean scores (WMT "system level"),
  with image or system bootstrap.
* :func:`per_group_correlation` -- mean over groups (images) of the within-group correlation
  (Wang & Chan 2019, Table 2 "per-image"; mt-metrics-eval ``average_by='item'``) with a group
  bootstrap interval.

A metric whose agreement with the human mean reaches the ceiling agrees with the humans about as
well as humans agree with each other. All intervals are percentile bootstrap intervals (Efron &
Tibshirani 1993, ch. 13) with ``numpy.random.default_rng``; every function is deterministic given
its ``seed``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Hashable, Sequence

import numpy as np

from captioneval.stats.agreement import _split_half_cells, _split_half_distribution
from captioneval.stats.batched import row_statistic, weighted_kendall_bootstrap, weighted_kendall_scipy, weighted_pair_sums
from captioneval.stats.correlation import (
    KENDALL_FAST_MAX_CLASSES,
    STATISTICS,
    _WeightedSample,
    _as_scores,
    _encode_groups,
)
from captioneval.stats.engine import vectorised
from captioneval.stats.pairwise import _check_meta_statistic, _check_resampling, _group_values, _statistic_value
from captioneval.stats.results import Estimate, EstimateResult, bootstrap_mean, finite_or_none, percentile_interval

__all__ = [
    "CeilingResult",
    "leave_one_rater_out",
    "split_half_ceiling",
    "forced_choice_ceiling",
    "SystemLevelResult",
    "system_level_correlation",
    "GroupMeanResult",
    "per_group_correlation",
]

# Resamples handled per block in the item bootstraps (bounds the (resamples x items) count array).
_RESAMPLE_BLOCK = 100


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def _weighted_statistic(x: np.ndarray, y: np.ndarray, counts: np.ndarray, statistic: str) -> np.ndarray:
    """Statistic of (x, y) with integer row weights ``counts`` (b, m): as if row k were repeated
    counts[:, k] times. nan where undefined. Uses the weighted-count bootstrap engine of
    :mod:`captioneval.stats.correlation` for its four statistics, else materialises."""
    b, m = counts.shape
    if statistic in ("kendall_tau_b", "kendall_tau_c") and vectorised():
        # the same integer counts in row form (no per-call count matrices), then the formula of
        # the engine's fast path or of scipy on the materialised resample, as the engine chooses
        sums = weighted_pair_sums(x, y, counts.astype(np.int64))
        if min(np.unique(x).size, np.unique(y).size) <= KENDALL_FAST_MAX_CLASSES:
            return weighted_kendall_bootstrap(sums, statistic)
        return weighted_kendall_scipy(sums, statistic)
    if statistic in STATISTICS:
        sample = _WeightedSample(x, y, np.arange(m), m)
        return sample.statistics(counts, (statistic,), KENDALL_FAST_MAX_CLASSES)[statistic]
    out = np.full(b, np.nan)
    for i in range(b):
        w = counts[i].astype(np.int64)
        if w.sum() < 2:
            continue
        xr, yr = np.repeat(x, w), np.repeat(y, w)
        if (xr == xr[0]).all() or (yr == yr[0]).all():
            continue
        out[i] = _statistic_value(xr, yr, statistic)
    return out


def _item_counts(rng: np.random.Generator, n_items: int, b: int) -> np.ndarray:
    """(b, n_items) float counts of items drawn with replacement (n_items draws per resample)."""
    draws = rng.integers(0, n_items, size=(b, n_items))
    flat = (draws + (np.arange(b) * n_items)[:, None]).ravel()
    return np.bincount(flat, minlength=b * n_items).reshape(b, n_items).astype(np.float64)


def _ratings(item_ids: Any, rater_ids: Any, y: Any) -> np.ndarray:
    try:
        ya = np.asarray(y, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"y must be numeric: {exc}") from exc
    if ya.ndim != 1:
        raise ValueError(f"y must be 1-D, got shape {ya.shape}")
    if len(item_ids) != ya.shape[0] or len(rater_ids) != ya.shape[0]:
        raise ValueError(
            f"item_ids, rater_ids and y differ in length: {len(item_ids)}, {len(rater_ids)}, {ya.shape[0]}"
        )
    if not np.isfinite(ya).all():
        raise ValueError("y must be finite (no nan or inf)")
    return ya


def _check_positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or int(value) != value or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


# --------------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------------


@dataclass
class CeilingResult(EstimateResult):
    """A human ceiling with its bootstrap interval.

    estimate : :class:`Estimate` -- value = the ceiling (nan if undefined), low/high = percentile
        interval at ``confidence_level`` ((nan, nan) without resamples), n = items (pairs) used,
        n_resamples, seed. Also readable as ``value``, ``ci95``, ``n_items``, ``n_resamples``,
        ``seed``, ``confidence``.
    method : "leave_one_rater_out", "split_half" or "forced_choice_leave_one_vote_out".
    statistic : correlation statistic (or "accuracy" for the forced-choice ceiling).
    n_raters : raters used (leave-one-rater-out), else 0.
    details : method-specific extras (JSON-safe after ``to_dict``).
    """

    estimate: Estimate
    method: str
    statistic: str
    n_raters: int = 0
    details: dict = field(default_factory=dict)

    @property
    def n_items(self) -> int:
        """Items (pairs) used: ``estimate.n``."""
        return self.estimate.n

    def to_dict(self) -> dict:
        """JSON-safe dict (nan -> None)."""
        est = self.estimate
        return {
            "value": finite_or_none(est.value),
            "ci95": est.interval_json(),
            "method": self.method,
            "statistic": self.statistic,
            "n_items": int(self.n_items),
            "n_resamples": int(self.n_resamples),
            "seed": int(self.seed),
            "n_raters": int(self.n_raters),
            "confidence": float(self.confidence),
            "details": {k: (finite_or_none(v) if isinstance(v, float) else v) for k, v in self.details.items()},
        }


# --------------------------------------------------------------------------------------------
# Leave one rater out
# --------------------------------------------------------------------------------------------


def leave_one_rater_out(
    item_ids: Sequence[Hashable] | np.ndarray,
    rater_ids: Sequence[Hashable] | np.ndarray,
    y: Sequence[float] | np.ndarray,
    statistic: str = "kendall_tau_b",
    n_resamples: int = 1000,
    seed: int = 0,
    *,
    confidence: float = 0.95,
) -> CeilingResult:
    """Leave-one-rater-out human ceiling: each rater against the mean of the other raters.

    Repeated ratings of one item by one rater are averaged first; items rated by fewer than 2
    distinct raters are dropped. For each rater r: x = r's score on each item r rated, o = the
    mean of the *other* raters' scores on that item; ``stat_r = statistic(x, o)`` pooled over r's
    items. Raters with fewer than 2 items, or whose statistic is undefined (constant x or o), are
    left out. The ceiling is the item-weighted mean ``sum_r n_r stat_r / sum_r n_r`` (n_r = items
    of rater r), so a rater who judged many items counts more (as pooling the rows would); with a
    fixed set of rater slots (e.g. "expert_1..3" in Flickr8k-Expert) it is the plain mean. This
    is the leave-one-annotator-out agreement used as human upper bound e.g. in WMT / Freitag et
    al. (2021, TACL, "Experts, Errors, and Context", Sec. 5) and Wang & Chan (2019, Sec. 5.2).

    Interval: percentile bootstrap over items: each resample redraws the used items with
    replacement (a drawn item keeps all its ratings, so a rater's and the others' scores move
    together), every rater's statistic is recomputed on its drawn items (with multiplicity) and
    the weighted mean taken with weights = r's drawn items.

    Parameters
    ----------
    item_ids, rater_ids : labels of shape (n,) (item = e.g. image-caption pair; rater = person
        or anonymous vote slot).
    y : float array (n,), finite ratings.
    statistic : one of :data:`captioneval.stats.pairwise.META_STATISTICS` (default Kendall tau-b).
    n_resamples : int >= 0; seed : int; confidence : keyword-only, in (0, 1).

    Returns
    -------
    CeilingResult(method="leave_one_rater_out", n_items = items with >= 2 raters, n_raters = raters
    used; details = {"per_rater": {rater: value}, "n_raters_skipped": k}).

    Raises
    ------
    ValueError
        Unequal lengths, non-finite y, unknown statistic, invalid n_resamples/confidence, fewer than
        2 items rated by at least 2 raters, or no rater with a defined statistic.
    """
    _check_meta_statistic(statistic)
    n_resamples, conf = _check_resampling(n_resamples, confidence)
    ya = _ratings(item_ids, rater_ids, y)
    cells = _split_half_cells(item_ids, rater_ids, ya)
    if cells.n_items < 2:
        raise ValueError(f"need at least 2 items rated by at least 2 distinct raters, got {cells.n_items}")
    item = cells.item
    total = np.bincount(item, weights=cells.score)
    count = np.bincount(item).astype(np.float64)
    others = (total[item] - cells.score) / (count[item] - 1.0)
    rater_codes, rater_labels = _encode_groups(cells.rater_label, item.size)

    used: list[tuple[Any, np.ndarray, float]] = []
    skipped = 0
    for code, label in enumerate(rater_labels):
        rows = np.flatnonzero(rater_codes == code)
        if rows.size < 2:
            skipped += 1
            continue
        x, o = cells.score[rows], others[rows]
        if (x == x[0]).all() or (o == o[0]).all():
            skipped += 1
            continue
        v = _statistic_value(x, o, statistic)
        if math.isnan(v):
            skipped += 1
            continue
        used.append((label, rows, v))
    if not used:
        raise ValueError("no rater has at least 2 items and a defined statistic")
    weights = np.array([rows.size for _, rows, _ in used], dtype=np.float64)
    vals = np.array([v for _, _, v in used])
    value = float((weights * vals).sum() / weights.sum())

    ci = (math.nan, math.nan)
    if n_resamples > 0:
        rng = np.random.default_rng(seed)
        dist = np.empty(n_resamples)
        for s in range(0, n_resamples, _RESAMPLE_BLOCK):
            b = min(_RESAMPLE_BLOCK, n_resamples - s)
            counts = _item_counts(rng, cells.n_items, b)
            num = np.zeros(b)
            den = np.zeros(b)
            for _, rows, _ in used:
                c = counts[:, item[rows]]
                stat = _weighted_statistic(cells.score[rows], others[rows], c, statistic)
                w = c.sum(axis=1)
                ok = np.isfinite(stat) & (w > 0)
                num += np.where(ok, stat * w, 0.0)
                den += np.where(ok, w, 0.0)
            with np.errstate(invalid="ignore", divide="ignore"):
                dist[s:s + b] = np.where(den > 0, num / den, np.nan)
        ci = percentile_interval(dist, conf)
    return CeilingResult(
        estimate=Estimate(value, ci[0], ci[1], conf, int(cells.n_items), n_resamples, int(seed)),
        method="leave_one_rater_out",
        statistic=statistic,
        n_raters=len(used),
        details={
            "per_rater": {str(label): float(v) for label, _, v in used},
            "n_raters_skipped": int(skipped),
        },
    )


# --------------------------------------------------------------------------------------------
# Split half
# --------------------------------------------------------------------------------------------


def split_half_ceiling(
    item_ids: Sequence[Hashable] | np.ndarray,
    rater_ids: Sequence[Hashable] | np.ndarray,
    y: Sequence[float] | np.ndarray,
    statistic: str = "kendall_tau_b",
    n_splits: int = 200,
    n_resamples: int = 1000,
    seed: int = 0,
    *,
    confidence: float = 0.95,
    spearman_brown: bool = False,
) -> CeilingResult:
    """Split-half human ceiling: half of each item's raters against the other half.

    The splits are exactly those of :func:`captioneval.stats.agreement.split_half_reliability`
    (same ``n_splits`` and ``seed`` give the same splits): per item, its distinct raters are
    shuffled and divided into halves of sizes floor(m/2) and ceil(m/2) (the larger half chosen
    at random), repeated ratings of an item by one rater averaged first, items with < 2 raters
    dropped. Each split correlates the two halves' item means across items with ``statistic``;
    ``value`` is the mean over splits (splits where the statistic is undefined are left out), so for
    "pearson", "spearman" and "kendall_tau_b" it equals the corresponding field of
    ``split_half_reliability(item_ids, rater_ids, y, n_splits=n_splits, seed=seed)``.

    No Spearman-Brown step by default: the value is the agreement of one half-panel with another,
    comparable to a metric's agreement with a (full-panel) mean only approximately (it is lower when
    panels are small). The Spearman-Brown prophecy ``2 r / (1 + r)`` (Spearman 1910; Brown 1910)
    is derived for Pearson correlations of sums of parallel measurements; it has no such
    justification for rank statistics, so ``spearman_brown=True`` is only accepted with "pearson"
    and then transforms the value and the interval bounds.

    Interval: percentile bootstrap over items, resample b using split ``b mod n_splits``: the used
    items are redrawn with replacement (from ``numpy.random.default_rng([seed, 1, b])``) and the
    split's half means correlated on the drawn items. Each resample thus varies both the items and the
    split, so the interval covers sampling and split variability (it is conservative for the
    split-averaged value).

    Parameters
    ----------
    item_ids, rater_ids : labels of shape (n,); y : float array (n,), finite ratings.
    statistic : one of META_STATISTICS; n_splits : int >= 1; n_resamples : int >= 0; seed : int.
    confidence, spearman_brown : keyword-only.

    Returns
    -------
    CeilingResult(method="split_half", n_items = items with >= 2 raters; details = {"n_splits",
    "n_ratings", "spearman_brown"}).

    Raises
    ------
    ValueError
        Unequal lengths, non-finite y, unknown statistic, n_splits < 1, invalid
        n_resamples/confidence, fewer than 3 items rated by at least 2 raters, spearman_brown with a
        statistic other than pearson.
    """
    _check_meta_statistic(statistic)
    n_resamples, conf = _check_resampling(n_resamples, confidence)
    n_splits = _check_positive_int("n_splits", n_splits)
    if spearman_brown and statistic != "pearson":
        raise ValueError("spearman_brown=True is only defined for the pearson statistic")
    ya = _ratings(item_ids, rater_ids, y)
    cells = _split_half_cells(item_ids, rater_ids, ya)
    if cells.n_items < 3:
        raise ValueError(
            f"split-half needs at least 3 items rated by at least 2 distinct raters, got {cells.n_items}"
        )
    fast = vectorised()
    # the vectorised path computes only the statistic asked for (Kendall below, per split)
    want = ((statistic,) if statistic in ("pearson", "spearman") else ()) if fast else ("pearson", "spearman", "kendall_tau_b")
    pearson, spearman, kendall, masks = _split_half_distribution(cells.item, cells.score, n_splits, seed, keep_masks=True, want=want)
    m = np.bincount(cells.item).astype(np.float64)
    start = np.concatenate(([0], np.cumsum(m)[:-1])).astype(np.int64)
    total = np.bincount(cells.item, weights=cells.score)

    def halves(s: int) -> tuple[np.ndarray, np.ndarray]:
        in_a = masks[s]
        size_a = np.add.reduceat(in_a.astype(np.float64), start)
        sum_a = np.add.reduceat(cells.score * in_a, start)
        return sum_a / size_a, (total - sum_a) / (m - size_a)

    if fast and statistic in ("kendall_tau_b", "kendall_tau_c"):
        # one pass of exact integer pair counts per split for the split's value (unweighted, scipy's
        # formula, as the loops) and for its bootstrap resamples (weighted, the engine's formula)
        return _split_half_kendall(cells, halves, statistic, n_splits, n_resamples, seed, conf, spearman_brown)
    if statistic == "pearson":
        per_split = pearson
    elif statistic == "spearman":
        per_split = spearman
    elif statistic == "kendall_tau_b":
        per_split = kendall
    else:
        per_split = np.array([_statistic_value(*halves(s), statistic) for s in range(n_splits)])
    finite = per_split[np.isfinite(per_split)]
    value = float(finite.mean()) if finite.size else math.nan

    ci = (math.nan, math.nan)
    if n_resamples > 0:
        dist = np.empty(n_resamples)
        split_of = np.arange(n_resamples) % n_splits
        for s in range(min(n_splits, n_resamples)):
            idx = np.flatnonzero(split_of == s)
            # resample r draws its items from default_rng([seed, 1, r]): independent of n_splits
            counts = np.concatenate([_item_counts(np.random.default_rng([int(seed), 1, int(r)]), cells.n_items, 1) for r in idx])
            a, b = halves(s)
            dist[idx] = _weighted_statistic(a, b, counts, statistic)
        ci = percentile_interval(dist, conf)
    details = {"n_splits": n_splits, "n_ratings": int(cells.n_ratings), "spearman_brown": bool(spearman_brown)}
    if spearman_brown:
        sb = lambda r: 2.0 * r / (1.0 + r) if r != -1.0 and math.isfinite(r) else math.nan  # noqa: E731
        value = sb(value)
        ci = (sb(ci[0]), sb(ci[1]))
    return CeilingResult(
        estimate=Estimate(value, ci[0], ci[1], conf, int(cells.n_items), n_resamples, int(seed)),
        method="split_half",
        statistic=statistic,
        details=details,
    )


def _split_half_kendall(cells, halves, statistic: str, n_splits: int, n_resamples: int, seed: int, conf: float,
                        spearman_brown: bool) -> "CeilingResult":
    """The Kendall tau-b / tau-c branch of :func:`split_half_ceiling` in the vectorised engine: the
    same splits, resample draws and numbers, with each split's unweighted value and its resamples
    from one :func:`captioneval.stats.batched.weighted_pair_sums` call."""
    per_split = np.empty(n_splits)
    dist = np.empty(n_resamples)
    split_of = np.arange(n_resamples) % n_splits
    ones = np.ones((1, cells.n_items), dtype=np.int64)
    for s in range(n_splits):
        idx = np.flatnonzero(split_of == s)
        a, b = halves(s)
        weights = [ones] + [_item_counts(np.random.default_rng([int(seed), 1, int(r)]), cells.n_items, 1).astype(np.int64) for r in idx]
        sums = weighted_pair_sums(a, b, np.concatenate(weights))
        per_split[s] = weighted_kendall_scipy({k: v[:1] for k, v in sums.items()}, statistic)[0]
        if idx.size:
            rest = {k: v[1:] for k, v in sums.items()}
            # distinct values of a and b: those with weight in the all-ones row 0
            fast_formula = min(int(sums["kx"][0]), int(sums["ky"][0])) <= KENDALL_FAST_MAX_CLASSES
            dist[idx] = weighted_kendall_bootstrap(rest, statistic) if fast_formula else weighted_kendall_scipy(rest, statistic)
    finite = per_split[np.isfinite(per_split)]
    value = float(finite.mean()) if finite.size else math.nan
    ci = percentile_interval(dist, conf) if n_resamples > 0 else (math.nan, math.nan)
    details = {"n_splits": n_splits, "n_ratings": int(cells.n_ratings), "spearman_brown": bool(spearman_brown)}
    return CeilingResult(
        estimate=Estimate(value, ci[0], ci[1], conf, int(cells.n_items), n_resamples, int(seed)),
        method="split_half",
        statistic=statistic,
        details=details,
    )


# --------------------------------------------------------------------------------------------
# Forced choice
# --------------------------------------------------------------------------------------------


def forced_choice_ceiling(
    votes_b: Sequence[Sequence[int] | np.ndarray],
    n_resamples: int = 1000,
    seed: int = 0,
    *,
    confidence: float = 0.95,
    exclude_tied: bool = True,
) -> CeilingResult:
    """Leave-one-vote-out human accuracy on forced-choice (B vs C) pairs (PASCAL-50S style).

    For every pair and every one of its m votes: does the vote agree with the majority of the
    remaining m - 1 votes? Agreement counts 1, a tied remainder counts 1/2 (as a metric tie in
    :func:`captioneval.stats.pairwise.forced_choice_accuracy`), disagreement 0. A pair's value
    is the mean over its votes; the ceiling is the mean over pairs, so every pair weighs the same
    (as in the metric's accuracy, where each pair counts once), whatever its number of votes.
    With k votes for B: a B vote agrees iff ``k - 1 > (m - 1) / 2``, a C vote iff ``k < (m - 1) / 2``.
    This mirrors the human-agreement baseline of Vedantam et al. (2015, CVPR, Sec. 4/5), where a
    held-out human is scored against the consensus of the others.

    Pairs with fewer than 2 votes are skipped. With ``exclude_tied=True`` (default) pairs whose full
    vote is tied (k = m / 2) are skipped too, because :func:`forced_choice_accuracy` excludes them
    (the ceiling and the metric accuracy are then computed on the same pairs); a tied pair would
    otherwise score 0 (every held-out vote disagrees with the remaining majority).

    Parameters
    ----------
    votes_b : sequence of 1-D arrays of 0/1 (or bool), one per pair; 1 = vote for caption B.
    n_resamples : int >= 0; seed : int (``numpy.random.default_rng(seed)``, bootstrap over pairs).
    confidence, exclude_tied : keyword-only.

    Returns
    -------
    CeilingResult(method="forced_choice_leave_one_vote_out", statistic="accuracy", n_items = pairs
    used; details = {"n_votes": used votes, "n_pairs_skipped": k}); value nan if no pair is usable.

    Raises
    ------
    ValueError
        A vote that is not 0/1, a pair that is not 1-D, invalid n_resamples/confidence.
    """
    n_resamples, conf = _check_resampling(n_resamples, confidence)
    ks, ms = [], []
    for p, votes in enumerate(votes_b):
        v = np.asarray(votes)
        if v.ndim != 1:
            raise ValueError(f"votes of pair {p} must be 1-D, got shape {v.shape}")
        if v.dtype != bool:
            try:
                vf = v.astype(np.float64)
            except (TypeError, ValueError) as exc:
                raise ValueError(f"votes of pair {p} must be 0/1: {exc}") from exc
            if not np.isin(vf, (0.0, 1.0)).all():
                raise ValueError(f"votes of pair {p} must be 0/1 (or bool)")
            v = vf
        ks.append(int(v.sum()))
        ms.append(int(v.size))
    k = np.array(ks, dtype=np.float64)
    m = np.array(ms, dtype=np.float64)
    keep = m >= 2
    if exclude_tied:
        keep &= 2 * k != m
    k, m = k[keep], m[keep]
    half_rest = (m - 1.0) / 2.0
    agree_b = np.where(k - 1.0 > half_rest, 1.0, np.where(k - 1.0 == half_rest, 0.5, 0.0))
    agree_c = np.where(k < half_rest, 1.0, np.where(k == half_rest, 0.5, 0.0))
    per_pair = (k * agree_b + (m - k) * agree_c) / m if k.size else np.empty(0)
    value = float(per_pair.mean()) if per_pair.size else math.nan
    ci = (math.nan, math.nan)
    if n_resamples > 0 and per_pair.size:
        _, ci = bootstrap_mean(per_pair, n_resamples, np.random.default_rng(seed), conf)
    return CeilingResult(
        estimate=Estimate(value, ci[0], ci[1], conf, int(per_pair.size), n_resamples, int(seed)),
        method="forced_choice_leave_one_vote_out",
        statistic="accuracy",
        details={"n_votes": int(m.sum()), "n_pairs_skipped": int((~keep).sum())},
    )


# --------------------------------------------------------------------------------------------
# System level
# --------------------------------------------------------------------------------------------


@dataclass
class SystemLevelResult(EstimateResult):
    """Result of :func:`system_level_correlation`.

    estimate : :class:`Estimate` -- value = correlation of the per-system means (nan if
        undefined), low/high = percentile interval over the valid resamples, n = n_systems.
        Also readable as ``value``, ``ci95``, ``n_resamples``, ``seed``, ``confidence``.
    n_systems, n_images : distinct systems / images.
    resample : "images" or "systems". statistic : the statistic.
    n_valid_resamples : resamples that gave a defined value (others are skipped).
    system_x, system_y : system label (str) -> mean metric / human score.
    """

    estimate: Estimate
    n_systems: int
    n_images: int
    resample: str
    statistic: str
    n_valid_resamples: int = 0
    system_x: dict = field(default_factory=dict)
    system_y: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        """JSON-safe dict (nan -> None)."""
        est = self.estimate
        return {
            "value": finite_or_none(est.value),
            "ci95": est.interval_json(),
            "n_systems": int(self.n_systems),
            "n_images": int(self.n_images),
            "resample": self.resample,
            "statistic": self.statistic,
            "n_resamples": int(self.n_resamples),
            "seed": int(self.seed),
            "confidence": float(self.confidence),
            "n_valid_resamples": int(self.n_valid_resamples),
            "system_x": {k: finite_or_none(v) for k, v in self.system_x.items()},
            "system_y": {k: finite_or_none(v) for k, v in self.system_y.items()},
        }


def _small_statistic(x: np.ndarray, y: np.ndarray, statistic: str) -> float:
    if x.size < 2 or (x == x[0]).all() or (y == y[0]).all():
        return math.nan
    return _statistic_value(x, y, statistic)


def system_level_correlation(
    x: Sequence[float] | np.ndarray,
    y: Sequence[float] | np.ndarray,
    systems: Sequence[Hashable] | np.ndarray,
    images: Sequence[Hashable] | np.ndarray,
    statistic: str = "pearson",
    resample: str = "images",
    n_resamples: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
) -> SystemLevelResult:
    """System-level correlation: one score per system (the mean of its rows), correlated across
    systems (WMT system-level meta-evaluation, e.g. Freitag et al. 2021 / mt-metrics-eval
    ``Correlation(num_sys, ...)`` with system-level scores).

    The system's metric score is the mean of x over its rows and its human score the mean of y
    over the same rows; ``value = statistic(system means of x, system means of y)``.

    Resampling (percentile bootstrap):

    * ``"images"`` (default): redraw the distinct images with replacement, recompute every system's
      means from the rows of the drawn images (with multiplicity), correlate. A system without rows
      among the drawn images is left out of that resample. Captures the uncertainty from the choice
      of test images (Koehn 2004-style; Deutsch et al. 2021, "boot-inputs").
    * ``"systems"``: redraw the systems with replacement (their means fixed) and correlate the drawn
      systems' means (duplicates included). Captures the choice of systems ("boot-systems").

    Resamples with fewer than 3 distinct systems, or where the statistic is undefined (constant
    means), are skipped; ``n_valid_resamples`` counts the rest and the interval uses only those.
    The resamples of a block are evaluated together (:func:`captioneval.stats.batched.row_statistic`,
    exactly the per-resample values; the loop runs inside
    :func:`captioneval.stats.engine.reference_path`).

    Parameters
    ----------
    x, y : float arrays (n,), finite; systems, images : labels (n,).
    statistic : one of META_STATISTICS (default "pearson", the WMT convention).
    resample : "images" or "systems"; n_resamples : int >= 0; seed : int; confidence in (0, 1).

    Raises
    ------
    ValueError
        Invalid arrays, unknown statistic or resample mode, fewer than 3 systems.
    """
    _check_meta_statistic(statistic)
    if resample not in ("images", "systems"):
        raise ValueError(f"resample must be 'images' or 'systems', got {resample!r}")
    n_resamples, conf = _check_resampling(n_resamples, confidence)
    xa, ya = _as_scores(x, y)
    n = xa.shape[0]
    s_codes, s_labels = _encode_groups(systems, n)
    i_codes, i_labels = _encode_groups(images, n)
    n_sys, n_img = len(s_labels), len(i_labels)
    if n_sys < 3:
        raise ValueError(f"system-level correlation needs at least 3 systems, got {n_sys}")
    cnt = np.zeros((n_sys, n_img))
    sx = np.zeros((n_sys, n_img))
    sy = np.zeros((n_sys, n_img))
    np.add.at(cnt, (s_codes, i_codes), 1.0)
    np.add.at(sx, (s_codes, i_codes), xa)
    np.add.at(sy, (s_codes, i_codes), ya)
    mx = sx.sum(axis=1) / cnt.sum(axis=1)
    my = sy.sum(axis=1) / cnt.sum(axis=1)
    value = _small_statistic(mx, my, statistic)

    dist = np.full(n_resamples, np.nan)
    rng = np.random.default_rng(seed)
    fast = vectorised()
    for s in range(0, n_resamples, _RESAMPLE_BLOCK):
        b = min(_RESAMPLE_BLOCK, n_resamples - s)
        if resample == "images":
            c = _item_counts(rng, n_img, b)  # (b, n_img)
            w = c @ cnt.T  # (b, n_sys) rows per system
            bx = c @ sx.T
            by = c @ sy.T
            if fast:
                # resamples with the same systems present are one batch of rows
                present = w > 0
                patterns, which = np.unique(present, axis=0, return_inverse=True)
                for p, ok in enumerate(patterns):
                    if ok.sum() < 3:
                        continue
                    rows = np.flatnonzero(which.ravel() == p)
                    dist[s + rows] = row_statistic(bx[rows][:, ok] / w[rows][:, ok], by[rows][:, ok] / w[rows][:, ok], statistic)
                continue
            for k in range(b):
                ok = w[k] > 0
                if ok.sum() < 3:
                    continue
                dist[s + k] = _small_statistic(bx[k, ok] / w[k, ok], by[k, ok] / w[k, ok], statistic)
        else:
            idx = rng.integers(0, n_sys, size=(b, n_sys))
            if fast:
                srt = np.sort(idx, axis=1)
                distinct = 1 + (srt[:, 1:] != srt[:, :-1]).sum(axis=1)
                rows = np.flatnonzero(distinct >= 3)
                dist[s + rows] = row_statistic(mx[idx[rows]], my[idx[rows]], statistic)
                continue
            for k in range(b):
                if np.unique(idx[k]).size < 3:
                    continue
                dist[s + k] = _small_statistic(mx[idx[k]], my[idx[k]], statistic)
    ci = percentile_interval(dist, conf) if n_resamples else (math.nan, math.nan)
    return SystemLevelResult(
        estimate=Estimate(float(value), ci[0], ci[1], conf, n_sys, n_resamples, int(seed)),
        n_systems=n_sys,
        n_images=n_img,
        resample=resample,
        statistic=statistic,
        n_valid_resamples=int(np.isfinite(dist).sum()),
        system_x={str(l): float(v) for l, v in zip(s_labels, mx)},
        system_y={str(l): float(v) for l, v in zip(s_labels, my)},
    )


# --------------------------------------------------------------------------------------------
# Mean over groups
# --------------------------------------------------------------------------------------------


@dataclass
class GroupMeanResult(EstimateResult):
    """Result of :func:`per_group_correlation`.

    estimate : :class:`Estimate` -- value = mean over the used groups of the within-group
        statistic (nan if none is usable), low/high = percentile interval (bootstrap over the used
        groups), n = n_groups_used. Also readable as ``value``, ``ci95``, ``n_resamples``,
        ``seed``, ``confidence``.
    n_groups_used, n_groups_skipped : groups averaged / left out (< 2 rows, constant x or y).
    statistic : the statistic.
    """

    estimate: Estimate
    n_groups_used: int
    n_groups_skipped: int
    statistic: str

    def to_dict(self) -> dict:
        """JSON-safe dict (nan -> None)."""
        est = self.estimate
        return {
            "value": finite_or_none(est.value),
            "ci95": est.interval_json(),
            "n_groups_used": int(self.n_groups_used),
            "n_groups_skipped": int(self.n_groups_skipped),
            "statistic": self.statistic,
            "n_resamples": int(self.n_resamples),
            "seed": int(self.seed),
            "confidence": float(self.confidence),
        }


def per_group_correlation(
    x: Sequence[float] | np.ndarray,
    y: Sequence[float] | np.ndarray,
    groups: Sequence[Hashable] | np.ndarray,
    statistic: str = "spearman",
    n_resamples: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
) -> GroupMeanResult:
    """Mean over groups of the within-group statistic, with a group-bootstrap interval.

    The "per-image" correlation of Wang & Chan (2019, CVPR, Table 2) and mt-metrics-eval's
    ``average_by='item'`` (unweighted mean of per-item correlations, nan items dropped). Groups
    with fewer than 2 rows or with constant x or y are skipped (for every statistic, also
    kendall_tau_23 / pairwise_accuracy, which would be defined there), exactly like
    :func:`captioneval.stats.correlation.per_group_rank_agreement`, whose spearman /
    kendall_tau_b values this reproduces. (mt-metrics-eval keeps constant groups for tau_23 and
    acc_23; :func:`captioneval.stats.average_statistic` with ``average_by="item"`` is that form,
    without an interval.) Interval: the used groups' values are redrawn with replacement
    (``numpy.random.default_rng(seed)``) and averaged (:func:`captioneval.stats.bootstrap_mean`).
    Groups of equal size are evaluated together (:func:`captioneval.stats.batched.group_statistic`,
    exactly the per-group values of the loop kept in :func:`captioneval.stats.engine.reference_path`).

    Parameters: x, y float arrays (n,), finite; groups labels (n,); statistic one of
    META_STATISTICS; n_resamples >= 0; seed; confidence in (0, 1).
    Raises ValueError on invalid input.
    """
    _check_meta_statistic(statistic)
    n_resamples, conf = _check_resampling(n_resamples, confidence)
    xa, ya = _as_scores(x, y)
    codes, labels = _encode_groups(groups, xa.shape[0])
    vals = _group_values(xa, ya, codes, statistic)
    used = vals[np.isfinite(vals)]
    value = float(used.mean()) if used.size else math.nan
    ci = (math.nan, math.nan)
    if n_resamples > 0 and used.size:
        _, ci = bootstrap_mean(used, n_resamples, np.random.default_rng(seed), conf)
    return GroupMeanResult(
        estimate=Estimate(value, ci[0], ci[1], conf, int(used.size), n_resamples, int(seed)),
        n_groups_used=int(used.size),
        n_groups_skipped=int(len(labels) - used.size),
        statistic=statistic,
    )
