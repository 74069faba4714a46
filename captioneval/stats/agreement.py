"""Inter-rater agreement, split-half reliability (human ceiling) and aggregation of categorical votes.

Django-free: only numpy and scipy are imported.

Contents and sources:

* :func:`krippendorff_alpha` / :func:`krippendorff_alpha_from_triples` -- Krippendorff's alpha for
  nominal, ordinal, interval and ratio data with missing values, in the coincidence-matrix
  formulation of Krippendorff (2011), "Computing Krippendorff's Alpha-Reliability", Annenberg
  School for Communication, University of Pennsylvania, and Krippendorff (2004), *Content Analysis:
  An Introduction to Its Methodology*, 2nd ed., ch. 11 (section 11.3).
* :func:`split_half_reliability` / :class:`SplitHalfResult` -- split-half correlation of per-item
  mean human scores, with the Spearman-Brown correction (Spearman 1910, "Correlation calculated
  from faulty data", Brit. J. Psychol. 3:271-295; Brown 1910, "Some experimental results in the
  correlation of mental abilities", Brit. J. Psychol. 3:296-322). Used as the human ceiling for
  metric-human correlations.
* :func:`majority_vote` / :func:`majority_vote_shares` -- plurality label per item.
* :func:`dawid_skene` / :class:`DawidSkeneResult` -- Dawid & Skene (1979), "Maximum likelihood
  estimation of observer error-rates using the EM algorithm", J. Roy. Stat. Soc. C (Applied
  Statistics) 28(1):20-28.

Krippendorff's alpha (Krippendorff 2011, section "C. Data with missing values"; 2004, eq. 11.3-11.9)
------------------------------------------------------------------------------------------------------
Reliability data: ``m_u`` values in unit u (one per coder who coded u). Only *pairable* values
count: values in units with ``m_u >= 2``. ``n = sum_u m_u`` over those units. Coincidences

    o_ck = sum_u (number of ordered pairs (c, k) of values from different coders in u) / (m_u - 1),

marginals ``n_c = sum_k o_ck`` (how often value c occurs among the pairable values), and

    alpha = 1 - D_o / D_e = 1 - (n - 1) * sum_c sum_k o_ck delta2_ck / sum_c sum_k n_c n_k delta2_ck.

Difference functions (Krippendorff 2011, section E; 2004, section 11.3.3):

* nominal:  ``delta2_ck = 0 if c == k else 1``
* ordinal:  ``delta2_ck = (sum_{g=c..k} n_g - (n_c + n_k) / 2)^2`` over the values present
* interval: ``delta2_ck = (c - k)^2``
* ratio:    ``delta2_ck = ((c - k) / (c + k))^2`` (values must be >= 0; 0 when c == k == 0)

Computation (all vectorised, and equal to the coincidence-matrix result up to rounding):

* nominal: ``sum_ck o_ck delta2_ck = n - sum_c o_cc`` with ``o_cc = sum_u n_uc (n_uc - 1) / (m_u - 1)``
  (``n_uc`` = count of value c in unit u) and ``sum_ck n_c n_k delta2_ck = n^2 - sum_c n_c^2``.
* interval: ``sum_{i != j in u} (x_i - x_j)^2 = 2 m_u SS_u`` with ``SS_u`` the sum of squared
  deviations from the unit mean, so ``sum_ck o_ck delta2_ck = sum_u 2 m_u SS_u / (m_u - 1)``; likewise
  ``sum_ck n_c n_k delta2_ck = 2 n SS`` over the pooled pairable values. No V x V matrix is needed,
  so continuous values (e.g. sliders in [0, 1]) cost O(N).
* ordinal: with ``C_g = sum_{h < g} n_h + n_g / 2`` (the mid-point of value g in the cumulative
  marginal counts), ``sum_{g=c..k} n_g - (n_c + n_k) / 2 = C_k - C_c`` for c <= k, so the ordinal
  metric is the interval metric applied to the values replaced by ``C_g``.
* ratio: observed disagreement from the sparse coincidence matrix (only value pairs that co-occur
  in a unit; ``o_cc`` need not be corrected since ``delta2_cc = 0``). Expected disagreement: with
  V <= :data:`RATIO_EXACT_MAX_VALUES` distinct pairable values, summed over all V x V pairs;
  above, from ``1 / (c + k)^2 = int_0^inf t exp(-(c + k) t) dt`` (c + k > 0; pairs with
  c + k = 0 have c = k = 0 and contribute 0):

      sum_ck n_c n_k (c - k)^2 / (c + k)^2 = int_0^inf t * 2 W(t) S(t) dt,

  ``w_c(t) = n_c exp(-c t)``, ``W = sum_c w_c``, ``S = sum_c w_c (c - mean_w)^2`` (a weighted sum of
  squares, no cancellation). Substituting ``t = exp(s)`` gives an integrand that is analytic and
  decays like ``exp(2 s)`` on the left and double-exponentially on the right; the trapezoidal rule
  with step 0.15 on ``s in [-22 - log(2 v_max), 5 - log(v_min+)]`` converges exponentially
  (Trefethen & Weideman 2014, "The exponentially convergent trapezoidal rule", SIAM Review
  56(3):385-458) and agrees with the V x V sum to about 1e-14 relative. Cost O(V log(v_max/v_min+)).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Any, Hashable, Iterable, Sequence

import numpy as np
import scipy.sparse as sparse
import scipy  # scipy.stats loads on first use (scipy's lazy submodules): half a second of start-up

from captioneval.stats.batched import weighted_kendall_scipy, weighted_pair_sums
from captioneval.stats.correlation import _encode_groups
from captioneval.stats.engine import vectorised
from captioneval.stats.results import Estimate, finite_or_none, percentile_interval

__all__ = [
    "ALPHA_LEVELS",
    "RATIO_EXACT_MAX_VALUES",
    "krippendorff_alpha",
    "krippendorff_alpha_from_triples",
    "SplitHalfResult",
    "split_half_reliability",
    "majority_vote",
    "majority_vote_shares",
    "DawidSkeneResult",
    "dawid_skene",
]

ALPHA_LEVELS = ("nominal", "ordinal", "interval", "ratio")

#: Up to this many distinct pairable values, the ratio-level expected disagreement is summed over all
#: V x V value pairs; above, by the exact-to-rounding quadrature described in the module docstring.
RATIO_EXACT_MAX_VALUES = 2048

# Step of the trapezoidal rule in s = log t for the ratio-level expected disagreement.
_RATIO_STEP = 0.15

# Target number of float64 elements per work array (ratio expected disagreement, split-half chunks).
_CHUNK_ELEMENTS = 2_000_000
#: items with at most this many raters get their split ranks by comparisons (vectorised engine)
_MAX_COMPARED_ITEM = 16


def _is_missing(v: Any) -> bool:
    """None or a float nan (numpy floats included)."""
    if v is None:
        return True
    try:
        return isinstance(v, (float, np.floating)) and math.isnan(v)
    except TypeError:  # pragma: no cover - defensive
        return False


def _check_level(level: str) -> str:
    if level not in ALPHA_LEVELS:
        raise ValueError(f"unknown level {level!r}; expected one of {ALPHA_LEVELS}")
    return level


# --------------------------------------------------------------------------------------------
# Krippendorff's alpha
# --------------------------------------------------------------------------------------------


def _alpha_core(units: np.ndarray, values: np.ndarray, level: str) -> float:
    """Alpha from one row per coded value.

    ``units`` int64 codes (n_values,), ``values`` float64 (n_values,) finite; for the nominal level
    ``values`` may be any numbers standing for categories (only equality is used).
    Raises ValueError if fewer than 2 values are pairable; returns nan if D_e = 0.
    """
    if units.size:
        _, units = np.unique(units, return_inverse=True)
        m = np.bincount(units)
        keep = m[units] >= 2
        units, values = units[keep], values[keep]
    if units.size < 2:
        raise ValueError(
            "fewer than 2 pairable values: alpha needs at least one unit coded by at least 2 coders"
        )
    _, units = np.unique(units, return_inverse=True)  # compact codes of the pairable units
    m_u = np.bincount(units).astype(np.float64)  # all >= 2
    n = float(units.size)
    distinct, vcode = np.unique(values, return_inverse=True)
    if distinct.size < 2:
        # Every pairable value is the same: D_e = 0 and alpha is undefined (Krippendorff 2011).
        return math.nan
    n_c = np.bincount(vcode).astype(np.float64)

    if level == "nominal":
        keys, n_uc = np.unique(units * np.int64(distinct.size) + vcode, return_counts=True)
        n_uc = n_uc.astype(np.float64)
        o_diag = (n_uc * (n_uc - 1.0) / (m_u[keys // distinct.size] - 1.0)).sum()
        observed = n - o_diag  # sum_ck o_ck delta2_ck
        expected = n * n - (n_c * n_c).sum()  # sum_ck n_c n_k delta2_ck
        return float(1.0 - (n - 1.0) * observed / expected)

    if level == "ratio":
        if (distinct < 0).any():
            raise ValueError("ratio-level alpha needs non-negative values")
        return _ratio_alpha(units, vcode, distinct, m_u, n_c, n)

    if level == "ordinal":
        mid = np.cumsum(n_c) - n_c / 2.0  # C_g
        x = mid[vcode]
    else:  # interval
        x = values.astype(np.float64)
    unit_mean = np.bincount(units, weights=x) / m_u
    ss_u = np.bincount(units, weights=(x - unit_mean[units]) ** 2)
    ss = ((x - x.mean()) ** 2).sum()
    if ss == 0.0:  # pragma: no cover - distinct.size >= 2 implies ss > 0
        return math.nan
    # (n-1) * [sum_u 2 m_u SS_u / (m_u-1)] / [2 n SS]
    return float(1.0 - (n - 1.0) * (m_u * ss_u / (m_u - 1.0)).sum() / (n * ss))


def _ratio_delta2(c: np.ndarray, k: np.ndarray) -> np.ndarray:
    """((c - k) / (c + k))^2 with 0 where c + k == 0 (then c == k == 0)."""
    s = c + k
    with np.errstate(invalid="ignore", divide="ignore"):
        d = ((c - k) / s) ** 2
    return np.where(s == 0, 0.0, d)


def _ratio_alpha(units: np.ndarray, vcode: np.ndarray, distinct: np.ndarray, m_u: np.ndarray, n_c: np.ndarray, n: float) -> float:
    n_units, n_vals = int(m_u.size), int(distinct.size)
    counts = sparse.csr_matrix(
        (np.ones(units.size), (units, vcode)), shape=(n_units, n_vals)
    )  # n_uc
    weighted = sparse.diags(1.0 / (m_u - 1.0)) @ counts
    # (N^T D N)_ck differs from o_ck only on the diagonal, where delta2 = 0.
    coinc = (counts.T @ weighted).tocoo()
    observed = float((coinc.data * _ratio_delta2(distinct[coinc.row], distinct[coinc.col])).sum())
    if n_vals <= RATIO_EXACT_MAX_VALUES:
        expected = _ratio_expected_exact(distinct, n_c)
    else:
        expected = _ratio_expected_quadrature(distinct, n_c)
    return float(1.0 - (n - 1.0) * observed / expected)


def _ratio_expected_exact(distinct: np.ndarray, n_c: np.ndarray) -> float:
    """``sum_c sum_k n_c n_k ((c - k) / (c + k))^2`` over all V x V value pairs, in row blocks."""
    expected = 0.0
    block = max(1, _CHUNK_ELEMENTS // distinct.size)
    for start in range(0, distinct.size, block):
        c = distinct[start:start + block, None]
        expected += float(n_c[start:start + block] @ _ratio_delta2(c, distinct[None, :]) @ n_c)
    return expected


def _ratio_expected_quadrature(distinct: np.ndarray, n_c: np.ndarray) -> float:
    """The same sum in O(V) per quadrature node (see the module docstring, "ratio")."""
    positive = distinct[distinct > 0]
    s = np.arange(-22.0 - math.log(2.0 * distinct[-1]), 5.0 - math.log(positive[0]) + _RATIO_STEP, _RATIO_STEP)
    t = np.exp(s)
    total = 0.0
    block = max(1, _CHUNK_ELEMENTS // distinct.size)
    for start in range(0, t.size, block):
        tb = t[start:start + block, None]
        w = n_c[None, :] * np.exp(-tb * distinct[None, :])  # (nodes, V)
        weight = w.sum(axis=1)
        mean = (w @ distinct) / weight
        var = (w * (distinct[None, :] - mean[:, None]) ** 2).sum(axis=1)
        total += float((tb[:, 0] ** 2 * 2.0 * weight * var).sum())
    return total * _RATIO_STEP


def _alpha_inputs_from_matrix(data: Any, level: str) -> tuple[np.ndarray, np.ndarray]:
    """(unit codes, values) of the non-missing cells of a (n_coders, n_units) matrix."""
    try:
        arr = np.asarray(data, dtype=np.float64)
        numeric = True
    except (TypeError, ValueError):
        if level != "nominal":
            raise ValueError(f"{level}-level alpha needs numeric values (nan or None for missing)")
        arr = np.asarray(data, dtype=object)
        numeric = False
    if arr.ndim != 2:
        raise ValueError(f"data must be 2-D (n_coders, n_units), got shape {arr.shape}")
    if numeric:
        if np.isinf(arr).any():
            raise ValueError("data must not contain inf (use nan or None for missing values)")
        coder_idx, unit_idx = np.nonzero(~np.isnan(arr))
        return unit_idx.astype(np.int64), arr[coder_idx, unit_idx]
    units: list[int] = []
    labels: list[Hashable] = []
    for (_, u), v in np.ndenumerate(arr):
        if not _is_missing(v):
            units.append(u)
            labels.append(v)
    codes, _ = _encode_groups(labels, len(labels))
    return np.asarray(units, dtype=np.int64), codes.astype(np.float64)


def krippendorff_alpha(data: Any, level: str = "interval") -> float:
    """Krippendorff's alpha of a reliability-data matrix (coincidence-matrix formulation).

    Parameters
    ----------
    data : array-like, shape (n_coders, n_units)
        Krippendorff's reliability data: row = coder (observer, rater), column = unit (item);
        ``nan`` or ``None`` marks a value the coder did not supply. Values must be numbers for the
        ordinal, interval and ratio levels; at the nominal level any hashable category labels are
        accepted (e.g. strings, with ``None`` for missing). Units with fewer than 2 values are not
        pairable and are ignored. For data given as (unit, coder, value) triples use
        :func:`krippendorff_alpha_from_triples` (a separate function, so that a matrix with 3
        columns is never mistaken for triples).
    level : {"nominal", "ordinal", "interval", "ratio"}
        Metric difference function (see the module docstring; Krippendorff 2011, section E).
        Ordinal ranks use the cumulative marginal counts of the values present among the pairable
        values; ratio needs non-negative values.

    Returns
    -------
    float, at most 1 (1 = perfect agreement, 0 = agreement at chance level, negative =
    systematic disagreement). ``nan`` when every pairable value is identical: the expected
    disagreement D_e is then 0 and Krippendorff (2011) deems alpha undefined.

    Raises
    ------
    ValueError
        Unknown level; data not 2-D; non-numeric values at a non-nominal level; inf values;
        negative values at the ratio level; fewer than 2 pairable values (no unit has values from
        at least 2 coders).

    Source: Krippendorff (2011), "Computing Krippendorff's Alpha-Reliability", section C,
    ``alpha = 1 - (n - 1) sum_ck o_ck delta2_ck / sum_ck n_c n_k delta2_ck``; Krippendorff (2004),
    Content Analysis, 2nd ed., section 11.3. Cost O(N log N) in the number N of values (the ratio
    level adds O(sum_u m_u^2) for the within-unit pairs).
    """
    _check_level(level)
    units, values = _alpha_inputs_from_matrix(data, level)
    return _alpha_core(units, values, level)


def krippendorff_alpha_from_triples(triples: Iterable[Sequence[Any]] | np.ndarray, level: str = "interval") -> float:
    """Krippendorff's alpha of data given as one ``(unit, coder, value)`` triple per coded value.

    Parameters
    ----------
    triples : iterable of 3-sequences, or array of shape (n, 3)
        ``(unit, coder, value)``: unit (item) and coder ids are any hashable labels; ``value`` is
        as for :func:`krippendorff_alpha` (numbers, or any hashable labels at the nominal level).
        Triples whose value is ``None`` or ``nan`` count as missing and are dropped. The result
        equals :func:`krippendorff_alpha` of the (n_coders, n_units) matrix built from the triples.
    level : {"nominal", "ordinal", "interval", "ratio"}

    Returns
    -------
    float, see :func:`krippendorff_alpha` (``nan`` if all pairable values are identical).

    Raises
    ------
    ValueError
        As :func:`krippendorff_alpha`; also if an element is not a 3-sequence or if a coder has
        more than one non-missing value for the same unit (reliability data has one value per
        coder and unit).
    """
    _check_level(level)
    if isinstance(triples, np.ndarray) and triples.dtype != object:
        if triples.ndim != 2 or triples.shape[1] != 3:
            raise ValueError(f"triples array must have shape (n, 3), got {triples.shape}")
        unit_col, coder_col, value_col = triples[:, 0].tolist(), triples[:, 1].tolist(), triples[:, 2]
    else:
        rows = list(triples)
        for row in rows:
            if isinstance(row, (str, bytes)) or not hasattr(row, "__len__") or len(row) != 3:
                raise ValueError(f"each triple must be (unit, coder, value), got {row!r}")
        if rows:
            unit_col, coder_col, value_col = (list(col) for col in zip(*rows))
        else:
            unit_col, coder_col, value_col = [], [], []
    try:
        values = np.asarray(value_col, dtype=np.float64)
    except (TypeError, ValueError):
        values = None  # non-numeric labels: allowed at the nominal level only
    if values is not None:
        if values.ndim != 1:
            raise ValueError("each value must be a scalar")
        if np.isinf(values).any():
            raise ValueError("values must not contain inf (use nan or None for missing values)")
        present = ~np.isnan(values)
    if values is None:
        if level != "nominal":
            raise ValueError(f"{level}-level alpha needs numeric values (nan or None for missing)")
        objs = list(value_col)
        present = np.fromiter((not _is_missing(v) for v in objs), dtype=bool, count=len(objs))
        kept = [v for v, p in zip(objs, present) if p]
        codes, _ = _encode_groups(kept, len(kept))
        values = np.full(len(objs), np.nan)
        values[present] = codes
    idx = np.flatnonzero(present)
    unit_kept = [unit_col[i] for i in idx]
    coder_kept = [coder_col[i] for i in idx]
    unit_codes, _ = _encode_groups(unit_kept, len(unit_kept))
    coder_codes, coder_labels = _encode_groups(coder_kept, len(coder_kept))
    if unit_codes.size:
        pair = unit_codes * np.int64(len(coder_labels)) + coder_codes
        uniq, counts = np.unique(pair, return_counts=True)
        if (counts > 1).any():
            first = int(np.flatnonzero(pair == uniq[counts > 1][0])[0])
            raise ValueError(
                f"coder {coder_kept[first]!r} has more than one value for unit {unit_kept[first]!r}"
            )
    return _alpha_core(unit_codes, values[idx], level)


# --------------------------------------------------------------------------------------------
# Split-half reliability
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SplitHalfResult:
    """Split-half reliability of per-item mean scores (see :func:`split_half_reliability`).

    Attributes
    ----------
    n_items : int
        Items used (those with ratings from at least 2 distinct raters).
    n_ratings : int
        Rating rows of the used items.
    n_splits, seed : int
        Number of random splits and the numpy Generator seed.
    pearson, spearman, kendall_tau_b : float in [-1, 1]
        Mean over splits of the correlation between the two halves' item means (splits where a
        statistic is undefined, i.e. a half's item means are constant, are left out; nan if all).
    spearman_brown : float
        ``2 r / (1 + r)`` of the mean Pearson ``r``: estimated reliability of the full-size mean
        (Spearman 1910; Brown 1910).
    ci : dict[str, tuple[float, float]]
        statistic -> (lo, hi) percentile interval of the per-split values at ``confidence``, for
        "pearson", "spearman", "kendall_tau_b" and "spearman_brown" (the Pearson bounds
        transformed). It describes the variability over random splits, not sampling uncertainty.
    confidence : float
        Coverage of the percentile interval.
    """

    n_items: int
    n_ratings: int
    n_splits: int
    seed: int
    pearson: float
    spearman: float
    kendall_tau_b: float
    spearman_brown: float
    ci: dict[str, tuple[float, float]] = field(default_factory=dict)
    confidence: float = 0.95

    @property
    def estimates(self) -> dict[str, Estimate]:
        """statistic -> :class:`Estimate` over the splits ("pearson", "spearman", "kendall_tau_b",
        "spearman_brown"; n = ``n_items``, n_resamples = ``n_splits``: the interval describes the
        split-to-split variability, see ``ci``)."""
        nan2 = (math.nan, math.nan)
        return {
            name: Estimate(getattr(self, name), *self.ci.get(name, nan2), self.confidence, self.n_items, self.n_splits, self.seed)
            for name in ("pearson", "spearman", "kendall_tau_b", "spearman_brown")
        }

    def to_dict(self) -> dict:
        """JSON-serialisable dict (nan becomes None; intervals become [lo, hi] lists)."""
        return {
            "n_items": int(self.n_items),
            "n_ratings": int(self.n_ratings),
            "n_splits": int(self.n_splits),
            "seed": int(self.seed),
            "pearson": finite_or_none(self.pearson),
            "spearman": finite_or_none(self.spearman),
            "kendall_tau_b": finite_or_none(self.kendall_tau_b),
            "spearman_brown": finite_or_none(self.spearman_brown),
            "ci": {k: [finite_or_none(lo), finite_or_none(hi)] for k, (lo, hi) in self.ci.items()},
            "confidence": float(self.confidence),
        }


def _spearman_brown(r: np.ndarray | float) -> np.ndarray:
    r = np.asarray(r, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(r == -1.0, np.nan, 2.0 * r / (1.0 + r))


def _rowwise_pearson(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """scipy.stats.pearsonr along axis 1 (nan for a constant row, without warnings)."""
    out = np.full(a.shape[0], np.nan)
    ok = (np.ptp(a, axis=1) > 0) & (np.ptp(b, axis=1) > 0)
    if ok.any():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out[ok] = scipy.stats.pearsonr(a[ok], b[ok], axis=1).statistic
    return out


def _summary(values: np.ndarray, confidence: float) -> tuple[float, tuple[float, float]]:
    """Mean of the finite values and their :func:`percentile_interval` ((nan, (nan, nan)) if none)."""
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return math.nan, (math.nan, math.nan)
    return float(finite.mean()), percentile_interval(finite, confidence)


@dataclass(frozen=True)
class _Cells:
    """Distinct (item, rater) pairs of the items rated by >= 2 distinct raters, sorted by item.

    ``item`` int64 codes 0..n_items-1 (non-decreasing), ``score`` the mean of the pair's ratings,
    ``item_label`` / ``rater_label`` the original labels of each cell.
    """

    item: np.ndarray
    score: np.ndarray
    item_label: list
    rater_label: list
    n_items: int
    n_ratings: int


def _split_half_cells(item_ids: Any, rater_ids: Any, y: np.ndarray) -> _Cells:
    n = y.shape[0]
    items, item_labels = _encode_groups(item_ids, n)
    raters, rater_labels = _encode_groups(rater_ids, n)
    n_r = np.int64(max(len(rater_labels), 1))
    cell_key, cell_of_row = np.unique(items * n_r + raters, return_inverse=True)
    cell_score = np.bincount(cell_of_row, weights=y) / np.bincount(cell_of_row)
    cell_item = cell_key // n_r
    per_item = np.bincount(cell_item)
    keep = per_item[cell_item] >= 2
    _, item_codes = np.unique(cell_item[keep], return_inverse=True)
    return _Cells(
        item=item_codes.astype(np.int64),
        score=cell_score[keep],
        item_label=[item_labels[i] for i in cell_item[keep].tolist()],
        rater_label=[rater_labels[r] for r in (cell_key[keep] % n_r).tolist()],
        n_items=int((per_item >= 2).sum()),
        n_ratings=int(keep[cell_of_row].sum()),
    )


def _rank_within_items(sort_keys: np.ndarray, by_size: list[np.ndarray]) -> np.ndarray:
    """Position of each cell within its item after ``np.argsort(sort_keys, axis=1, kind="stable")``
    (items are contiguous blocks that the sort keeps apart): the number of cells of the same item with
    a smaller key, or an equal key and a smaller index. ``by_size``: per item size m, the (items, m)
    cell indices. Returns int64 (b, n_cells); m (m - 1) / 2 comparisons per item instead of a sort."""
    rank = np.empty(sort_keys.shape, dtype=np.int64)
    for idx in by_size:
        k = sort_keys[:, idx]  # (b, items, m)
        size = idx.shape[1]
        r = np.zeros(k.shape, dtype=np.int16 if size < 2 ** 15 else np.int64)
        for i in range(1, size):  # each pair j < i once: j sorts first unless its key is larger
            ki = k[:, :, i]
            for j in range(i):
                j_first = k[:, :, j] <= ki
                r[:, :, i] += j_first
                r[:, :, j] += ~j_first
        rank[:, idx] = r
    return rank


def _split_half_distribution(
    cell_item: np.ndarray, cell_score: np.ndarray, n_splits: int, seed: int, keep_masks: bool = False,
    want: tuple[str, ...] = ("pearson", "spearman", "kendall_tau_b"),
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """Per-split Pearson, Spearman and Kendall tau-b between the two halves' item means.

    ``cell_item`` (n_cells,) non-decreasing item codes 0..I-1, every item with >= 2 cells;
    ``cell_score`` (n_cells,). Returns three float64 arrays (n_splits,) (nan where undefined) and,
    if ``keep_masks``, the bool array (n_splits, n_cells) telling which cells were in half A.
    ``want``: the statistics computed (the others are returned as nan); the splits (random draws)
    do not depend on it.
    """
    m = np.bincount(cell_item)  # raters per item, >= 2
    n_items, n_cells = int(m.size), int(cell_item.size)
    start = np.concatenate(([0], np.cumsum(m)[:-1]))
    pos_rank = np.arange(n_cells) - start[cell_item]  # rank of a position within its item
    total = np.bincount(cell_item, weights=cell_score)
    lo_size, hi_size = m // 2, m - m // 2
    item_offset = cell_item.astype(np.float64)

    rng = np.random.default_rng(seed)
    pearson = np.empty(n_splits)
    spearman = np.empty(n_splits)
    kendall = np.empty(n_splits)
    masks = np.empty((n_splits, n_cells), dtype=bool) if keep_masks else None
    fast = vectorised() and int(m.max()) <= _MAX_COMPARED_ITEM
    by_size = [start[m == size][:, None] + np.arange(size)[None, :] for size in np.unique(m)] if fast else None
    chunk = max(1, min(n_splits, _CHUNK_ELEMENTS // n_cells))
    for s0 in range(0, n_splits, chunk):
        b = min(chunk, n_splits - s0)
        keys = rng.random((b, n_cells))
        extra_in_a = rng.random((b, n_items)) < 0.5  # which half gets the extra rater (odd m)
        size_a = np.where(extra_in_a, hi_size[None, :], lo_size[None, :])  # (b, n_items)
        if fast:
            # the rank of each cell within its item in that stable sort, by comparisons inside items
            in_a = _rank_within_items(item_offset[None, :] + keys, by_size) < size_a[:, cell_item]
        else:
            # a uniform random permutation of the cells within each item: sort by (item, key)
            order = np.argsort(item_offset[None, :] + keys, axis=1, kind="stable")
            # the first size_a positions of each item go to half A
            in_a = np.empty((b, n_cells), dtype=bool)
            np.put_along_axis(in_a, order, pos_rank[None, :] < size_a[:, cell_item], axis=1)
        if masks is not None:
            masks[s0:s0 + b] = in_a
        if not want:  # only the splits were asked for (the masks)
            pearson[s0:s0 + b] = spearman[s0:s0 + b] = kendall[s0:s0 + b] = np.nan
            continue
        sum_a = np.add.reduceat(cell_score[None, :] * in_a, start, axis=1)
        mean_a = sum_a / size_a
        mean_b = (total[None, :] - sum_a) / (m[None, :] - size_a)
        pearson[s0:s0 + b] = _rowwise_pearson(mean_a, mean_b) if "pearson" in want else np.nan
        spearman[s0:s0 + b] = (_rowwise_pearson(scipy.stats.rankdata(mean_a, axis=1), scipy.stats.rankdata(mean_b, axis=1))
                               if "spearman" in want else np.nan)
        if "kendall_tau_b" not in want:
            kendall[s0:s0 + b] = np.nan
            continue
        if vectorised():
            # scipy's tau-b from the exact integer pair counts of each split (batched.weighted_pair_sums)
            for i in range(b):
                sums = weighted_pair_sums(mean_a[i], mean_b[i], np.ones((1, n_items), dtype=np.int64))
                kendall[s0 + i] = weighted_kendall_scipy(sums, "kendall_tau_b")[0]
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for i in range(b):
                kendall[s0 + i] = scipy.stats.kendalltau(mean_a[i], mean_b[i], variant="b").statistic
    return pearson, spearman, kendall, masks


def split_half_reliability(
    item_ids: Sequence[Hashable] | np.ndarray,
    rater_ids: Sequence[Hashable] | np.ndarray,
    scores: Sequence[float] | np.ndarray,
    *,
    n_splits: int = 200,
    seed: int = 0,
    confidence: float = 0.95,
) -> SplitHalfResult:
    """Split-half reliability of per-item mean human scores: the ceiling for metric-human correlation.

    For each of ``n_splits`` random splits, the raters of *each item* are divided at random into two
    halves (with an odd number m of raters one half, chosen at random per item, gets the extra
    rater: halves of sizes floor(m/2) and ceil(m/2)); each half's mean score per item is
    computed, and the two vectors of item means are correlated with Pearson
    (:func:`scipy.stats.pearsonr`), Spearman (Pearson of :func:`scipy.stats.rankdata` average
    ranks, i.e. :func:`scipy.stats.spearmanr`) and Kendall tau-b (:func:`scipy.stats.kendalltau`).
    Splitting per item is the standard design for crowd data, where each item is rated by a
    different set of raters, so no global partition of the raters exists. A metric that correlates
    with the human means about as well as one half of the raters correlates with the other is at
    the human ceiling. The mean Pearson r is also reported Spearman-Brown corrected,
    ``2 r / (1 + r)`` (Spearman 1910; Brown 1910), estimating the reliability of the mean of the
    full rater pool rather than of a half.

    Parameters
    ----------
    item_ids, rater_ids : array-like of hashable labels, shape (n,)
        Item (e.g. image-caption pair) and rater of each rating row.
    scores : array-like of float, shape (n,), finite
        The ratings. Repeated ratings of one item by the same rater are averaged first, so every
        rater counts once per item and stays in one half. Items rated by fewer than 2 distinct
        raters are dropped.
    n_splits : int >= 1
    seed : int
        Seed of :func:`numpy.random.default_rng`; identical inputs and seed give identical
        results, independently of the order of the rows.
    confidence : float in (0, 1)
        Coverage of the percentile interval over splits.

    Returns
    -------
    SplitHalfResult

    Raises
    ------
    ValueError
        Inputs not 1-D or of unequal length; scores not numeric or not finite; n_splits < 1;
        confidence outside (0, 1); fewer than 3 items rated by at least 2 distinct raters.
    """
    try:
        y = np.asarray(scores, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"scores must be numeric: {exc}") from exc
    if y.ndim != 1:
        raise ValueError(f"scores must be 1-D, got shape {y.shape}")
    n = y.shape[0]
    lengths = {len(item_ids), len(rater_ids), n}
    if len(lengths) != 1:
        raise ValueError(
            f"item_ids, rater_ids and scores differ in length: {len(item_ids)}, {len(rater_ids)}, {n}"
        )
    if not np.isfinite(y).all():
        raise ValueError("scores must be finite (no nan or inf)")
    if isinstance(n_splits, bool) or int(n_splits) != n_splits or n_splits < 1:
        raise ValueError(f"n_splits must be a positive integer, got {n_splits!r}")
    n_splits = int(n_splits)
    if not (0.0 < float(confidence) < 1.0):
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")

    cells = _split_half_cells(item_ids, rater_ids, y)
    if cells.n_items < 3:
        raise ValueError(
            "split-half reliability needs at least 3 items rated by at least 2 distinct raters, "
            f"got {cells.n_items}"
        )
    pearson, spearman, kendall, _ = _split_half_distribution(cells.item, cells.score, n_splits, seed)

    conf = float(confidence)
    p_mean, p_ci = _summary(pearson, conf)
    s_mean, s_ci = _summary(spearman, conf)
    k_mean, k_ci = _summary(kendall, conf)
    sb = float(_spearman_brown(p_mean))
    sb_ci = (float(_spearman_brown(p_ci[0])), float(_spearman_brown(p_ci[1])))
    return SplitHalfResult(
        n_items=cells.n_items,
        n_ratings=cells.n_ratings,
        n_splits=n_splits,
        seed=int(seed),
        pearson=p_mean,
        spearman=s_mean,
        kendall_tau_b=k_mean,
        spearman_brown=sb,
        ci={"pearson": p_ci, "spearman": s_ci, "kendall_tau_b": k_ci, "spearman_brown": sb_ci},
        confidence=conf,
    )


# --------------------------------------------------------------------------------------------
# Aggregation of categorical votes
# --------------------------------------------------------------------------------------------


def _vote_codes(item_ids: Any, labels: Any, extra: tuple[Any, ...] = ()) -> tuple:
    """Encode items/labels (sorted order when comparable). Validates lengths and missing labels."""
    label_list = labels.tolist() if isinstance(labels, np.ndarray) else list(labels)
    n = len(label_list)
    if n == 0:
        raise ValueError("no votes given")
    for other in (item_ids, *extra):
        if len(other) != n:
            raise ValueError(f"inputs differ in length: {len(other)} != {n}")
    if any(_is_missing(v) for v in label_list):
        raise ValueError("labels must not contain None or nan")
    item_codes, item_labels = _encode_groups(item_ids, n)
    label_codes, label_values = _encode_groups(label_list, n)
    return item_codes, item_labels, label_codes, label_values


def _vote_counts(item_codes: np.ndarray, label_codes: np.ndarray, n_items: int, n_labels: int) -> np.ndarray:
    flat = item_codes * np.int64(n_labels) + label_codes
    return np.bincount(flat, minlength=n_items * n_labels).reshape(n_items, n_labels).astype(np.float64)


def majority_vote_shares(
    item_ids: Sequence[Hashable] | np.ndarray, labels: Sequence[Hashable] | np.ndarray
) -> dict[Hashable, dict[Hashable, float]]:
    """Share of the votes each label received, per item.

    Parameters: ``item_ids`` and ``labels`` of shape (n,), one row per vote; labels any hashable
    values except None/nan. Returns item -> {label: share in (0, 1]} listing only labels with at
    least one vote for that item (shares sum to 1), labels in sorted order when comparable.
    Raises ValueError for unequal lengths, no votes, or None/nan labels.
    """
    item_codes, item_labels, label_codes, label_values = _vote_codes(item_ids, labels)
    counts = _vote_counts(item_codes, label_codes, len(item_labels), len(label_values))
    shares = counts / counts.sum(axis=1, keepdims=True)
    return {
        item: {label_values[k]: float(shares[i, k]) for k in np.flatnonzero(counts[i])}
        for i, item in enumerate(item_labels)
    }


def majority_vote(
    item_ids: Sequence[Hashable] | np.ndarray,
    labels: Sequence[Hashable] | np.ndarray,
    *,
    tie: str = "first",
    seed: int = 0,
) -> dict[Hashable, Hashable]:
    """Most frequent label per item (plurality vote).

    Parameters
    ----------
    item_ids, labels : array-like, shape (n,)
        One row per vote; labels any hashable values except None/nan.
    tie : {"first", "random"}
        Among labels tied for the most votes, ``"first"`` picks the smallest label in sorted order
        (first appearance order if the labels are not mutually comparable), which is deterministic;
        ``"random"`` picks one uniformly at random with ``numpy.random.default_rng(seed)``
        (deterministic given the seed and the set of items and labels, not their row order).
    seed : int
        Used only when ``tie="random"``.

    Returns
    -------
    dict item -> winning label. See :func:`majority_vote_shares` for the vote shares.

    Raises
    ------
    ValueError
        Unknown ``tie``; unequal lengths; no votes; None/nan labels.
    """
    if tie not in ("first", "random"):
        raise ValueError(f"tie must be 'first' or 'random', got {tie!r}")
    item_codes, item_labels, label_codes, label_values = _vote_codes(item_ids, labels)
    counts = _vote_counts(item_codes, label_codes, len(item_labels), len(label_values))
    if tie == "first":
        winner = counts.argmax(axis=1)  # first maximum = smallest label code
    else:
        tied = counts == counts.max(axis=1, keepdims=True)
        noise = np.random.default_rng(seed).random(counts.shape)
        winner = np.where(tied, noise, -1.0).argmax(axis=1)
    return {item: label_values[k] for item, k in zip(item_labels, winner.tolist())}


@dataclass(frozen=True)
class DawidSkeneResult:
    """Output of :func:`dawid_skene`.

    Attributes
    ----------
    classes : tuple
        The labels (classes) in the order used by the arrays below (sorted when comparable).
    posteriors : dict item -> {label: probability}
        Posterior class probabilities of each item (sum to 1).
    labels : dict item -> label
        MAP label of each item (the first class in ``classes`` order on exact ties).
    priors : dict label -> probability
        Estimated class prevalences p_j.
    confusion : dict worker -> numpy array (K, K)
        ``confusion[w][j, l]`` = estimated P(worker w answers classes[l] | true class classes[j]);
        rows sum to 1.
    worker_accuracy : dict worker -> float
        ``sum_j p_j confusion[w][j, j]``: probability that w's answer is correct on an item drawn
        from the estimated class distribution.
    n_iter : int
        EM iterations performed (each an M-step followed by an E-step).
    converged : bool
        Whether the largest change of any posterior probability fell below ``tol``.
    log_likelihood : float
        Log-likelihood of the observed labels under the returned parameters (smoothing terms
        excluded), ``sum_i log sum_j p_j prod_{votes (w, l) on i} confusion[w][j, l]``.
    """

    classes: tuple
    posteriors: dict
    labels: dict
    priors: dict
    confusion: dict
    worker_accuracy: dict
    n_iter: int
    converged: bool
    log_likelihood: float

    def to_dict(self) -> dict:
        """JSON-friendly dict; confusion matrices as nested lists (rows = true class). Item,
        worker and label keys are converted with ``str`` (JSON object keys are strings)."""
        return {
            "classes": [c if isinstance(c, (str, int, float, bool)) else str(c) for c in self.classes],
            "posteriors": {str(i): {str(k): float(p) for k, p in d.items()} for i, d in self.posteriors.items()},
            "labels": {str(i): (v if isinstance(v, (str, int, float, bool)) else str(v)) for i, v in self.labels.items()},
            "priors": {str(k): float(p) for k, p in self.priors.items()},
            "confusion": {str(w): np.asarray(c, dtype=float).tolist() for w, c in self.confusion.items()},
            "worker_accuracy": {str(w): float(a) for w, a in self.worker_accuracy.items()},
            "n_iter": int(self.n_iter),
            "converged": bool(self.converged),
            "log_likelihood": finite_or_none(self.log_likelihood),
        }


def dawid_skene(
    item_ids: Sequence[Hashable] | np.ndarray,
    worker_ids: Sequence[Hashable] | np.ndarray,
    labels: Sequence[Hashable] | np.ndarray,
    *,
    max_iter: int = 100,
    tol: float = 1e-6,
    smoothing: float = 0.01,
) -> DawidSkeneResult:
    """Dawid-Skene EM estimate of true labels and per-worker confusion matrices.

    Model (Dawid & Skene 1979, eq. 2.1-2.5): item i has a latent true class j with prior p_j;
    worker w, given true class j, answers l with probability pi^w_jl independently of other
    answers. EM (their section 2.3):

    * initialise the posteriors ``T_ij`` with the majority-vote shares of item i (their eq. 2.6
      suggests this start);
    * M-step: ``p_j = (sum_i T_ij + s) / (I + K s)``,
      ``pi^w_jl = (sum_i T_ij n^w_il + s) / (sum_l sum_i T_ij n^w_il + K s)`` (eq. 2.3-2.4), where
      ``n^w_il`` is how often w answered l on item i and ``s = smoothing`` is a pseudo-count added
      to every cell (a symmetric Dirichlet(1 + s) prior, i.e. MAP-EM), which keeps every
      probability positive, so no log(0) arises for classes a worker never used;
    * E-step: ``T_ij proportional to p_j prod_w prod_l (pi^w_jl)^(n^w_il)`` (eq. 2.5), in logs;
    * stop when ``max |T_new - T_old| < tol`` or after ``max_iter`` iterations.

    Parameters
    ----------
    item_ids, worker_ids, labels : array-like, shape (n,)
        One row per answer. Labels any hashable values except None/nan; the classes are the
        distinct labels (sorted when comparable). A worker may answer an item more than once.
    max_iter : int >= 1
    tol : float >= 0
    smoothing : float > 0
        Pseudo-count added to every confusion-matrix cell and class count.

    Returns
    -------
    DawidSkeneResult. Deterministic (no randomness is used).

    Raises
    ------
    ValueError
        Unequal lengths, no answers, None/nan labels, max_iter < 1, tol < 0 or smoothing <= 0.
    """
    if isinstance(max_iter, bool) or int(max_iter) != max_iter or max_iter < 1:
        raise ValueError(f"max_iter must be a positive integer, got {max_iter!r}")
    if not (float(tol) >= 0.0):
        raise ValueError(f"tol must be >= 0, got {tol!r}")
    if not (float(smoothing) > 0.0 and math.isfinite(float(smoothing))):
        raise ValueError(f"smoothing must be a positive finite number, got {smoothing!r}")
    ii, item_labels, ll, classes = _vote_codes(item_ids, labels, extra=(worker_ids,))
    n_obs = ii.size
    ww, worker_labels = _encode_groups(worker_ids, n_obs)
    n_items, n_classes, n_workers = len(item_labels), len(classes), len(worker_labels)
    s = float(smoothing)

    obs = np.arange(n_obs)
    item_by_obs = sparse.csr_matrix((np.ones(n_obs), (ii, obs)), shape=(n_items, n_obs))
    cell_by_obs = sparse.csr_matrix(
        (np.ones(n_obs), (ww * np.int64(n_classes) + ll, obs)), shape=(n_workers * n_classes, n_obs)
    )
    counts = _vote_counts(ii, ll, n_items, n_classes)
    post = counts / counts.sum(axis=1, keepdims=True)  # majority-vote shares

    converged = False
    n_iter = 0
    log_lik = math.nan
    for n_iter in range(1, max_iter + 1):
        # M-step
        priors = (post.sum(axis=0) + s) / (n_items + n_classes * s)
        soft = (cell_by_obs @ post[ii]).reshape(n_workers, n_classes, n_classes)  # [w, l, j]
        soft = soft.transpose(0, 2, 1)  # [w, j, l]
        confusion = (soft + s) / (soft.sum(axis=2, keepdims=True) + n_classes * s)
        # E-step
        log_conf = np.log(confusion)
        log_joint = np.log(priors)[None, :] + item_by_obs @ log_conf[ww, :, ll]  # (I, K)
        top = log_joint.max(axis=1, keepdims=True)
        weights = np.exp(log_joint - top)
        norm = weights.sum(axis=1, keepdims=True)
        new_post = weights / norm
        log_lik = float((top[:, 0] + np.log(norm[:, 0])).sum())
        change = float(np.abs(new_post - post).max())
        post = new_post
        if change < tol:
            converged = True
            break

    map_codes = post.argmax(axis=1)
    accuracy = (priors[None, :] * np.diagonal(confusion, axis1=1, axis2=2)).sum(axis=1)
    return DawidSkeneResult(
        classes=tuple(classes),
        posteriors={
            item: {c: float(post[i, k]) for k, c in enumerate(classes)} for i, item in enumerate(item_labels)
        },
        labels={item: classes[k] for item, k in zip(item_labels, map_codes.tolist())},
        priors={c: float(priors[k]) for k, c in enumerate(classes)},
        confusion={w: confusion[k].copy() for k, w in enumerate(worker_labels)},
        worker_accuracy={w: float(accuracy[k]) for k, w in enumerate(worker_labels)},
        n_iter=int(n_iter),
        converged=converged,
        log_likelihood=log_lik,
    )
