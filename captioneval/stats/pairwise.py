"""Pairwise (Kendall-family) meta-evaluation statistics: pair counts, tau_23, pairwise accuracy,
tie calibration and forced-choice accuracy.

Django-free: only numpy and scipy are imported.

Definitions (Deutsch, Foster & Freitag 2023, "Ties Matter:
Meta-Evaluating Modern Metrics with Pairwise Accuracy and Tie Calibration", EMNLP 2023, Sec. 3-5;
reference implementation google-research/mt-metrics-eval, ``stats.KendallVariants`` and
``tau_optimization.py``). For metric scores x and gold (human) scores y, every unordered pair of
rows {i, j} is exactly one of

* C   concordant: ``|x_i - x_j| > eps``, ``y_i != y_j`` and the signs of x_i - x_j and y_i - y_j agree;
* D   discordant: ``|x_i - x_j| > eps``, ``y_i != y_j`` and the signs differ;
* Tx  tied only in the metric: ``|x_i - x_j| <= eps`` and ``y_i != y_j``;
* Ty  tied only in the gold: ``|x_i - x_j| > eps`` and ``y_i == y_j``;
* Txy tied in both: ``|x_i - x_j| <= eps`` and ``y_i == y_j``;

``T = C + D + Tx + Ty + Txy``. With ``eps = 0`` a metric tie is an exact tie (x_i == x_j).

* ``tau_b  = (C - D) / sqrt((T - Tx - Txy) (T - Ty - Txy))`` (Kendall 1945; = scipy variant 'b').
* ``tau_23 = (C + Txy - D - Tx - Ty) / T`` (Deutsch et al. 2023, Eq. 4 / mt-metrics-eval '23').
* ``acc_23 = (C + Txy) / T`` (Deutsch et al. 2023, Eq. 5 / mt-metrics-eval 'acc23').

Grouping (mt-metrics-eval ``average_by``, :data:`AVERAGE_BY`): with ``groups`` only pairs of rows
in the same group are counted, and the groups are combined as ``average`` says (:data:`AVERAGES`):

* ``"macro"`` (default): the unweighted mean of the per-group values, as mt-metrics-eval's
  ``AverageCorrelation`` (``macro=True``) and ``tau_optimization`` (average over rows) compute it;
* ``"micro"``: the mean weighted by each group's number of rows (mt-metrics-eval ``macro=False``);
* ``"pooled_pairs"``: the statistic of the pair counts summed over groups, i.e. a mean weighted by
  each group's number of pairs (it is neither of mt-metrics-eval's two forms).

:func:`average_statistic` takes the level itself as a parameter (``average_by`` = "none", "item"
or "system") for every statistic of :data:`META_STATISTICS`.

Algorithm (O(n log n) for pooled data, no n x n matrix). Rows get dense ranks ``xr`` (of x) and
``yc`` (of y). Tie counts come from run lengths / binary searches on sorted keys. The discordant
count uses the binary digits of ``yc``: a pair with ``y_i < y_j`` differs first at some bit b of
(yc_i, yc_j), where the two share the prefix ``yc >> (b + 1)``, yc_i has bit b = 0 and yc_j bit b = 1.
So ``D = sum_b sum_{rows e with bit b = 0} #{rows e' in the same (group, prefix) class with bit b
= 1 and x_e - x_e' > eps}``; each level is one sort plus one ``searchsorted``, giving
O(n log n log K) with K distinct gold values (one level for binary gold). For eps > 0 the
threshold "x_e - v > eps" is turned into a rank by a vectorised binary search with exactly that
floating-point predicate, so the counts equal a brute-force count of ``abs(x_i - x_j) <= eps``.

Many epsilons (tie calibration): the ranks are computed once per distinct x value (``searchsorted``
of ``xd -/+ eps``, then moved to where the exact predicate puts them), and every window / level
count once per distinct (group or cell or prefix, x rank) key, looked up in a table of "rows with a
smaller key" (or binary-searched with sorted queries when that table would be large). The integers
are those of the row-wise path, which :func:`captioneval.stats.engine.reference_path` runs.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Hashable, Sequence

import numpy as np

from captioneval.stats.correlation import _as_scores, _encode_groups, _scipy_statistic
from captioneval.stats.batched import group_statistic
from captioneval.stats.engine import vectorised
from captioneval.stats.results import Estimate, EstimateResult, bootstrap_mean, finite_or_none, forced_choice_credit

__all__ = [
    "META_STATISTICS",
    "PairCounts",
    "pair_counts",
    "kendall_tau_23",
    "pairwise_accuracy",
    "TieCalibration",
    "tie_calibrated_accuracy",
    "ForcedChoiceResult",
    "forced_choice_accuracy",
    "statistic_value",
    "AVERAGE_BY",
    "AVERAGES",
    "average_statistic",
]

#: Statistics understood by the meta-evaluation functions (significance tests, ceilings).
META_STATISTICS = (
    "pearson",
    "spearman",
    "kendall_tau_b",
    "kendall_tau_c",
    "kendall_tau_23",
    "pairwise_accuracy",
)

#: Levels of :func:`average_statistic`, named as mt-metrics-eval's ``average_by`` ('sys' spelt out).
AVERAGE_BY = ("none", "item", "system")

#: How per-group values are combined: "macro" (unweighted mean, mt-metrics-eval's default),
#: "micro" (weighted by rows per group, mt-metrics-eval ``macro=False``), "pooled_pairs" (summed
#: within-group pair counts; kendall_tau_23 / pairwise_accuracy / tie calibration only).
AVERAGES = ("macro", "micro", "pooled_pairs")

_PAIR_STATISTICS = ("kendall_tau_23", "pairwise_accuracy")

#: tie_calibrated_accuracy enumerates all (within-group) pairs up to this many; above, it samples
#: ``_SAMPLED_PAIRS`` pairs to place the candidate thresholds.
_MAX_ENUMERATED_PAIRS = 2_000_000
#: the vectorised pair counts look window bounds up in a table over all keys up to this many
_DENSE_KEYS = 4_000_000
_SAMPLED_PAIRS = 1_000_000


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def _check_meta_statistic(statistic: str) -> str:
    if statistic not in META_STATISTICS:
        raise ValueError(f"unknown statistic {statistic!r}; expected one of {META_STATISTICS}")
    return statistic


def _check_epsilon(epsilon: float) -> float:
    try:
        eps = float(epsilon)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"epsilon must be a number, got {epsilon!r}") from exc
    if not (eps >= 0.0 and math.isfinite(eps)):
        raise ValueError(f"epsilon must be finite and >= 0, got {epsilon!r}")
    return eps


def _dense(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct sorted values, int64 dense codes)."""
    distinct, codes = np.unique(values, return_inverse=True)
    return distinct, codes.astype(np.int64).ravel()


def _pairs_of_runs(keys: np.ndarray) -> int:
    """Number of unordered pairs of equal keys: sum over runs of m (m - 1) / 2."""
    if keys.size < 2:
        return 0
    _, counts = np.unique(keys, return_counts=True)
    counts = counts.astype(np.int64)
    return int((counts * (counts - 1) // 2).sum())


def _count_prefix(sorted_vals: np.ndarray, queries: np.ndarray, pred) -> np.ndarray:
    """For each query q: the number of leading elements v of ``sorted_vals`` with pred(q, v) True.

    ``pred`` must be vectorised and monotone along ``sorted_vals`` (True on a prefix, then False).
    Vectorised binary search: about log2(len) passes over the queries.
    """
    m = sorted_vals.size
    lo = np.zeros(queries.shape[0], dtype=np.int64)
    hi = np.full(queries.shape[0], m, dtype=np.int64)
    if m == 0:
        return lo
    open_ = lo < hi
    while open_.any():
        idx = np.flatnonzero(open_)
        mid = (lo[idx] + hi[idx]) // 2
        ok = pred(queries[idx], sorted_vals[mid])
        lo[idx] = np.where(ok, mid + 1, lo[idx])
        hi[idx] = np.where(ok, hi[idx], mid)
        open_[idx] = lo[idx] < hi[idx]
    return lo


def _fix_prefix(sorted_vals: np.ndarray, guess: np.ndarray, pred) -> np.ndarray:
    """The prefix lengths :func:`_count_prefix` would return for the queries ``sorted_vals``
    themselves, starting from a guess that is off by at most a few positions (floating-point
    rounding of ``q -/+ eps``): moved down while ``pred`` fails just below, up while it holds."""
    m = sorted_vals.size
    lo = np.clip(np.asarray(guess, dtype=np.int64), 0, m)
    q = sorted_vals
    while True:
        down = lo > 0
        down[down] = ~pred(q[down], sorted_vals[lo[down] - 1])
        if not down.any():
            break
        lo[down] -= 1
    while True:
        up = lo < m
        up[up] = pred(q[up], sorted_vals[lo[up]])
        if not up.any():
            break
        lo[up] += 1
    return lo


# --------------------------------------------------------------------------------------------
# Pair counting
# --------------------------------------------------------------------------------------------


@dataclass
class PairCounts:
    """Pair counts of (metric x, gold y); see the module docstring for the definitions.

    concordant, discordant, ties_x (tied only in x), ties_y (only in y), ties_xy (in both), total
    (= the sum of the five; n (n - 1) / 2 pooled, sum of m_g (m_g - 1) / 2 within groups).
    """

    concordant: int
    discordant: int
    ties_x: int
    ties_y: int
    ties_xy: int
    total: int

    def to_dict(self) -> dict:
        """Plain dict of Python ints (JSON-serialisable)."""
        return {k: int(v) for k, v in asdict(self).items()}

    def tau_b(self) -> float:
        """Kendall tau-b from the counts (nan if x or y has only ties)."""
        tx = self.ties_x + self.ties_xy
        ty = self.ties_y + self.ties_xy
        if self.total == 0 or tx == self.total or ty == self.total:
            return math.nan
        return (self.concordant - self.discordant) / math.sqrt(self.total - tx) / math.sqrt(self.total - ty)

    def tau_23(self) -> float:
        """``(C + Txy - D - Tx - Ty) / T`` (nan if T = 0)."""
        if self.total == 0:
            return math.nan
        c, d = self.concordant, self.discordant
        return (c + self.ties_xy - d - self.ties_x - self.ties_y) / self.total

    def acc_23(self) -> float:
        """``(C + Txy) / T`` (nan if T = 0)."""
        if self.total == 0:
            return math.nan
        return (self.concordant + self.ties_xy) / self.total


class _PairCounter:
    """Precomputed structures answering :func:`pair_counts` for many epsilons (see module doc)."""

    def __init__(self, x: np.ndarray, y: np.ndarray, gcodes: np.ndarray | None = None):
        n = x.shape[0]
        self.n = n
        self.x = x
        self.xd, self.xr = _dense(x)
        self.kx1 = np.int64(self.xd.size + 1)
        _, yc = _dense(y)
        k = int(yc.max()) + 1 if n else 1
        g = np.zeros(n, dtype=np.int64) if gcodes is None else np.asarray(gcodes, dtype=np.int64)
        self.g = g
        sizes = np.bincount(g).astype(np.int64)
        self.sizes = sizes
        self.group_total = sizes * (sizes - 1) // 2
        self.total = int(self.group_total.sum())
        # ties in y (and group): cells (g, yc)
        _, cell = _dense(g * k + yc)
        self.cell = cell
        self.ties_y_all = _pairs_of_runs(cell)
        # sorted keys for window counts of x within group / within (group, y) cell
        self.keys_g = np.sort(g * self.kx1 + self.xr)
        self.keys_c = np.sort(cell * self.kx1 + self.xr)
        # exact-tie counts (eps = 0)
        self.ties_x_all0 = _pairs_of_runs(g * self.kx1 + self.xr)
        self.ties_xy0 = _pairs_of_runs(cell * self.kx1 + self.xr)
        # levels of the discordance count
        self.levels = []
        for b in range(int(k - 1).bit_length()):
            prefix = yc >> (b + 1)
            width = ((k - 1) >> (b + 1)) + 1
            _, pg = _dense(g * width + prefix)
            bit = ((yc >> b) & 1).astype(bool)
            ones_keys = np.sort(pg[bit] * self.kx1 + self.xr[bit])
            zeros = np.flatnonzero(~bit)
            zbase = pg[zeros] * self.kx1
            base = np.searchsorted(ones_keys, zbase, side="left")
            self.levels.append((ones_keys, zeros, zbase, base))

    def _ranks(self, eps: float) -> tuple[np.ndarray, np.ndarray]:
        """lo = #distinct x values v with x_e - v > eps; hi = #distinct v with v - x_e <= eps."""
        if eps == 0.0:
            return self.xr, self.xr + 1
        if vectorised():
            lo_d, hi_d = self._distinct_ranks(eps)
            return lo_d[self.xr], hi_d[self.xr]
        lo = _count_prefix(self.xd, self.x, lambda q, v: (q - v) > eps)
        hi = _count_prefix(self.xd, self.x, lambda q, v: (v - q) <= eps)
        return lo, hi

    def _distinct_ranks(self, eps: float) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`_ranks` for each distinct x value (rows read theirs through ``xr``).

        ``searchsorted`` on ``xd -/+ eps`` gives a first guess; it is then moved until the exact
        floating-point predicates of :meth:`_ranks` (``(q - v) > eps``, ``(v - q) <= eps``, both
        monotone along the sorted ``xd``) hold on the prefix and fail right after it, so the
        ranks are those of the binary search of the reference path, not an approximation.
        """
        xd = self.xd
        lo = _fix_prefix(xd, np.searchsorted(xd, xd - eps, side="left"), lambda q, v: (q - v) > eps)
        hi = _fix_prefix(xd, np.searchsorted(xd, xd + eps, side="right"), lambda q, v: (v - q) <= eps)
        return lo, hi

    def _distinct_structures(self):
        """Run-length forms of the sorted keys (built on first use by the vectorised counts).

        Each of the sorted key arrays (``keys_g``: (group, x rank), ``keys_c``: (cell, x rank),
        the per-level one-keys) is replaced by its distinct keys and the number of rows before
        each, and each query set by its distinct (key, x rank) with multiplicities: a window count
        is then one ``searchsorted`` of sorted queries per distinct key instead of per row.
        """
        if getattr(self, "_distinct", None) is not None:
            return self._distinct
        kx1 = self.kx1

        def table(keys_sorted, n_bases):
            # "rows with a smaller key" for every possible key (n_bases x kx1 of them) when that array
            # is small (a lookup), else for the distinct keys (a binary search)
            span = int(n_bases) * int(kx1) + 1
            if span <= _DENSE_KEYS:
                return None, np.concatenate(([0], np.cumsum(np.bincount(keys_sorted, minlength=span - 1)))).astype(np.int64)
            uk, first = np.unique(keys_sorted, return_index=True)
            return uk, np.append(first, keys_sorted.size).astype(np.int64)

        def queries(keys):
            uk, mult = np.unique(keys, return_counts=True)
            return uk // kx1 * kx1, uk % kx1, mult.astype(np.int64)

        g_table = table(self.keys_g, self.sizes.shape[0])
        g_base, g_xr, g_mult = queries(self.g * kx1 + self.xr)
        c_table = table(self.keys_c, int(self.cell.max()) + 1 if self.n else 1)
        c_base, c_xr, c_mult = queries(self.cell * kx1 + self.xr)
        cell_group = np.zeros(int(self.cell.max()) + 1 if self.n else 1, dtype=np.int64)
        cell_group[self.cell] = self.g
        levels = []
        for ones_keys, zeros, zbase, base in self.levels:
            z_base, z_xr, z_mult = queries(zbase + self.xr[zeros])
            # the group of each distinct zero key: every row of a (group, prefix) class is in one group
            zg = np.zeros(z_base.size, dtype=np.int64)
            pos = np.searchsorted(z_base + z_xr, zbase + self.xr[zeros])
            zg[pos] = self.g[zeros]
            top = max(int(ones_keys[-1]) if ones_keys.size else 0, int(zbase.max()) if zbase.size else 0) // kx1 + 1
            levels.append((table(ones_keys, top), z_base, z_xr, z_mult, zg))
        self._distinct = (g_table, g_base, g_xr, g_mult, c_table, c_base, c_xr, c_mult, cell_group, levels)
        return self._distinct

    def _vector_counts(self, eps: float, per_group: bool):
        """(tx_all, txy, d) summed (``per_group`` False: Python ints) or per group (int64 (G,))
        from the run-length structures; the same integers as the row-wise reference path."""
        g_table, g_base, g_xr, g_mult, c_table, c_base, c_xr, c_mult, cell_group, levels = self._distinct_structures()
        if eps == 0.0:
            lo_d = np.arange(self.xd.size, dtype=np.int64)
            hi_d = lo_d + 1
        else:
            lo_d, hi_d = self._distinct_ranks(eps)
        n_groups = self.sizes.shape[0]

        def below(tab, q):
            uk, first = tab
            return first[q] if uk is None else first[np.searchsorted(uk, q, side="left")]

        def total(values, mult, groups):
            if not per_group:
                return int((values * mult).sum())
            return np.bincount(groups, weights=values * mult, minlength=n_groups).astype(np.int64)

        win_g = below(g_table, g_base + hi_d[g_xr]) - below(g_table, g_base + lo_d[g_xr])
        win_c = below(c_table, c_base + hi_d[c_xr]) - below(c_table, c_base + lo_d[c_xr])
        tx_w = total(win_g, g_mult, g_base // self.kx1)
        txy_w = total(win_c, c_mult, cell_group[c_base // self.kx1])
        d = 0 if not per_group else np.zeros(n_groups, dtype=np.int64)
        for tab, z_base, z_xr, z_mult, zg in levels:
            k = below(tab, z_base + lo_d[z_xr]) - below(tab, z_base)
            d = d + total(k, z_mult, zg)
        return tx_w, txy_w, d

    def group_counts(self, eps: float = 0.0) -> np.ndarray:
        """Per-group counts: int64 array (G, 6) of (C, D, Tx, Ty, Txy, T) for each group code.

        The same window / bit-level counts as :meth:`counts`, summed per group with ``bincount``
        instead of over all rows, so ``group_counts(eps).sum(axis=0)`` equals ``counts(eps)``.
        """
        n_groups = self.sizes.shape[0]
        g = self.g
        if vectorised():
            tx_w, txy_w, d = self._vector_counts(eps, per_group=True)
            tx_all = (tx_w - self.sizes) // 2
            txy = (txy_w - self.sizes) // 2
            cell_size = np.bincount(self.cell)[self.cell]
            ty_all = np.bincount(g, weights=cell_size - 1, minlength=n_groups).astype(np.int64) // 2
            tx = tx_all - txy
            ty = ty_all - txy
            c = self.group_total - d - tx - ty - txy
            return np.stack([c, d, tx, ty, txy, self.group_total], axis=1)
        lo, hi = self._ranks(eps)
        gb = g * self.kx1
        win = np.searchsorted(self.keys_g, gb + hi) - np.searchsorted(self.keys_g, gb + lo)
        tx_all = (np.bincount(g, weights=win, minlength=n_groups).astype(np.int64) - self.sizes) // 2
        cb = self.cell * self.kx1
        win = np.searchsorted(self.keys_c, cb + hi) - np.searchsorted(self.keys_c, cb + lo)
        txy = (np.bincount(g, weights=win, minlength=n_groups).astype(np.int64) - self.sizes) // 2
        # rows sharing a (group, y) cell: sum over rows of (cell size - 1), halved
        cell_size = np.bincount(self.cell)[self.cell]
        ty_all = np.bincount(g, weights=cell_size - 1, minlength=n_groups).astype(np.int64) // 2
        d = np.zeros(n_groups, dtype=np.int64)
        for ones_keys, zeros, zbase, base in self.levels:
            k = np.searchsorted(ones_keys, zbase + lo[zeros], side="left") - base
            d += np.bincount(g[zeros], weights=k, minlength=n_groups).astype(np.int64)
        tx = tx_all - txy
        ty = ty_all - txy
        c = self.group_total - d - tx - ty - txy
        return np.stack([c, d, tx, ty, txy, self.group_total], axis=1)

    def counts(self, eps: float = 0.0) -> PairCounts:
        if vectorised():
            tx_w, txy_w, d = self._vector_counts(eps, per_group=False)
            tx_all = (tx_w - self.n) // 2
            txy = (txy_w - self.n) // 2
            tx = tx_all - txy
            ty = self.ties_y_all - txy
            c = self.total - d - tx - ty - txy
            return PairCounts(int(c), int(d), int(tx), int(ty), int(txy), int(self.total))
        lo, hi = self._ranks(eps)
        if eps == 0.0:
            tx_all, txy = self.ties_x_all0, self.ties_xy0
        else:
            gb = self.g * self.kx1
            win = np.searchsorted(self.keys_g, gb + hi) - np.searchsorted(self.keys_g, gb + lo)
            tx_all = int((win.sum() - self.n) // 2)
            cb = self.cell * self.kx1
            win = np.searchsorted(self.keys_c, cb + hi) - np.searchsorted(self.keys_c, cb + lo)
            txy = int((win.sum() - self.n) // 2)
        d = 0
        for ones_keys, zeros, zbase, base in self.levels:
            d += int((np.searchsorted(ones_keys, zbase + lo[zeros], side="left") - base).sum())
        tx = tx_all - txy
        ty = self.ties_y_all - txy
        c = self.total - d - tx - ty - txy
        return PairCounts(int(c), int(d), int(tx), int(ty), int(txy), int(self.total))


def _prepare(x: Any, y: Any, groups: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    xa, ya = _as_scores(x, y)
    if groups is None:
        return xa, ya, None
    codes, _ = _encode_groups(groups, xa.shape[0])
    return xa, ya, codes


def pair_counts(
    x: Sequence[float] | np.ndarray,
    y: Sequence[float] | np.ndarray,
    groups: Sequence[Hashable] | np.ndarray | None = None,
    epsilon: float = 0.0,
) -> PairCounts:
    """Concordant / discordant / tied pair counts of metric scores x against gold scores y.

    Parameters
    ----------
    x, y : array-like of float, shape (n,), n >= 2, finite
        Metric scores and gold (human) scores.
    groups : array-like of hashable labels, shape (n,), optional
        If given, only pairs of rows with the same label are counted (mt-metrics-eval "item"
        grouping, e.g. rows = systems' captions of one image); counts are summed over groups.
    epsilon : float >= 0
        Metric tie threshold: a pair is tied in x when ``abs(x_i - x_j) <= epsilon`` (evaluated
        exactly in float64, as mt-metrics-eval's ``_MatrixSufficientStatistics``); 0 = exact ties.
        Gold ties are always exact.

    Returns
    -------
    PairCounts with ``total = C + D + Tx + Ty + Txy``. ``PairCounts.tau_b()`` equals
    ``scipy.stats.kendalltau(x, y).statistic`` for epsilon = 0 and no groups.

    Cost O(n log n log K) time, O(n) memory (K = distinct gold values); see the module docstring.
    Definitions: Deutsch et al. (2023, Sec. 3) and google-research/mt-metrics-eval
    ``stats._FenwickTreeSufficientStatistics`` / ``_MatrixSufficientStatistics``.

    Raises
    ------
    ValueError
        x/y not 1-D numeric finite arrays of equal length >= 2, groups of the wrong length,
        epsilon negative or not finite.
    """
    eps = _check_epsilon(epsilon)
    xa, ya, codes = _prepare(x, y, groups)
    return _PairCounter(xa, ya, codes).counts(eps)


def _check_average(average: str, statistic: str | None = None) -> str:
    if average not in AVERAGES:
        raise ValueError(f"unknown average {average!r}; expected one of {AVERAGES}")
    if average == "pooled_pairs" and statistic is not None and statistic not in _PAIR_STATISTICS:
        raise ValueError(f'average="pooled_pairs" applies to {_PAIR_STATISTICS} only, not {statistic!r}')
    return average


def _counts_statistic(counts: np.ndarray, statistic: str) -> np.ndarray:
    """tau_23 or acc_23 of each row of a (G, 6) count array (nan where T = 0)."""
    c, d, tx, ty, txy, t = (counts[:, k].astype(np.float64) for k in range(6))
    with np.errstate(invalid="ignore", divide="ignore"):
        if statistic == "kendall_tau_23":
            return np.where(t > 0, (c + txy - d - tx - ty) / t, np.nan)
        return np.where(t > 0, (c + txy) / t, np.nan)


def _average_pair_counts(counter: "_PairCounter", eps: float, statistic: str, average: str) -> float:
    """tau_23 / acc_23 over the within-group pairs of ``counter`` averaged as ``average`` says."""
    if average == "pooled_pairs":
        pc = counter.counts(eps)
        return pc.tau_23() if statistic == "kendall_tau_23" else pc.acc_23()
    per_group = counter.group_counts(eps)
    vals = _counts_statistic(per_group, statistic)
    ok = np.isfinite(vals)
    if not ok.any():
        return math.nan
    if average == "macro":
        return float(vals[ok].mean())
    weights = counter.sizes[ok].astype(np.float64)
    return float((weights * vals[ok]).sum() / weights.sum())


def _pair_statistic(x: Any, y: Any, groups: Any, epsilon: float, statistic: str, average: str) -> float:
    eps = _check_epsilon(epsilon)
    _check_average(average, statistic)
    xa, ya, codes = _prepare(x, y, groups)
    counter = _PairCounter(xa, ya, codes)
    if codes is None:
        pc = counter.counts(eps)
        return pc.tau_23() if statistic == "kendall_tau_23" else pc.acc_23()
    return _average_pair_counts(counter, eps, statistic, average)


def kendall_tau_23(
    x: Sequence[float] | np.ndarray,
    y: Sequence[float] | np.ndarray,
    groups: Sequence[Hashable] | np.ndarray | None = None,
    epsilon: float = 0.0,
    *,
    average: str = "macro",
) -> float:
    """Kendall tau_23 = (C + Txy - D - Tx - Ty) / T (Deutsch et al. 2023, "Ties Matter", Eq. 4;
    mt-metrics-eval ``KendallVariants(variant='23')``).

    Rewards correctly predicted ties (Txy) and penalises ties predicted only by the metric (Tx) or
    missed by it (Ty). Range [-1, 1]. Without ``groups`` the counts are over all pairs of rows
    (mt-metrics-eval ``average_by='none'``). With ``groups`` (e.g. the image of each row: the
    candidates of one item) only pairs within a group count, and ``average`` combines the groups
    (see :data:`AVERAGES`): ``"macro"`` (default) is the unweighted mean of the per-group values,
    mt-metrics-eval's ``average_by='item'``; ``"micro"`` weights each group by its rows
    (mt-metrics-eval ``macro=False``); ``"pooled_pairs"`` sums the pair counts of all groups first
    (a mean weighted by pairs). Groups with a single row have no pair and are left out; nan if no
    group has a pair. ``epsilon``: metric tie threshold, see :func:`pair_counts`, whose errors it
    raises (and ValueError for an unknown ``average``).
    """
    return _pair_statistic(x, y, groups, epsilon, "kendall_tau_23", average)


def pairwise_accuracy(
    x: Sequence[float] | np.ndarray,
    y: Sequence[float] | np.ndarray,
    groups: Sequence[Hashable] | np.ndarray | None = None,
    epsilon: float = 0.0,
    *,
    average: str = "macro",
) -> float:
    """Pairwise accuracy with ties acc_23 = (C + Txy) / T (Deutsch et al. 2023, Eq. 5;
    mt-metrics-eval ``KendallVariants(variant='acc23')``).

    Share of pairs whose ordering (or tie) the metric gets right. Range [0, 1]; nan if there are
    no pairs. ``groups`` / ``average`` as in :func:`kendall_tau_23` (default with groups: the
    unweighted mean over groups, mt-metrics-eval ``average_by='item'``); ``epsilon`` as in
    :func:`pair_counts`, whose errors it raises. ``2 acc_23 - 1 = tau_23`` for every ``average``.
    """
    return _pair_statistic(x, y, groups, epsilon, "pairwise_accuracy", average)


def average_statistic(
    x: Sequence[float] | np.ndarray,
    y: Sequence[float] | np.ndarray,
    statistic: str,
    average_by: str = "none",
    *,
    items: Sequence[Hashable] | np.ndarray | None = None,
    systems: Sequence[Hashable] | np.ndarray | None = None,
    average: str = "macro",
    epsilon: float = 0.0,
) -> float:
    """One meta-evaluation statistic at the level chosen by ``average_by``, as mt-metrics-eval's
    ``stats.AverageCorrelation`` (google-research/mt-metrics-eval, ``stats.py``).

    Rows are (system, item) outputs with metric score x and gold score y.

    * ``average_by="none"``: the statistic over all rows (``items`` / ``systems`` unused).
    * ``average_by="item"``: for each item, the statistic over its rows (the systems' outputs for
      that item, e.g. the candidate captions of one image), then averaged over items.
    * ``average_by="system"``: for each system, the statistic over its rows (its outputs for all
      items), then averaged over systems.

    Averaging (``average``, :data:`AVERAGES`): ``"macro"`` unweighted mean over groups
    (mt-metrics-eval's default ``macro=True``); ``"micro"`` mean weighted by the group's rows
    (``macro=False``); ``"pooled_pairs"`` (kendall_tau_23 / pairwise_accuracy only) the statistic
    of the summed within-group pair counts. Groups with fewer than 2 rows and groups where the
    statistic is undefined (nan: e.g. Pearson with a constant input) are left out, as
    mt-metrics-eval does with ``replace_nans_with_zeros=False``; tau_23 and acc_23 are defined on
    constant groups, so such groups count. Result nan if no group is left.

    Parameters
    ----------
    x, y : float arrays of shape (n,), n >= 2, finite.
    statistic : one of :data:`META_STATISTICS`.
    average_by : one of :data:`AVERAGE_BY`.
    items, systems : labels of shape (n,); the one named by ``average_by`` is required.
    average, epsilon : keyword-only; epsilon (metric tie threshold, :func:`pair_counts`) applies to
        kendall_tau_23 / pairwise_accuracy only.

    Raises ValueError for invalid arrays or labels, an unknown statistic / average_by / average,
    a missing label array, "pooled_pairs" with another statistic, or epsilon > 0 with a statistic
    that has no tie threshold.
    """
    _check_meta_statistic(statistic)
    if average_by not in AVERAGE_BY:
        raise ValueError(f"unknown average_by {average_by!r}; expected one of {AVERAGE_BY}")
    _check_average(average, statistic)
    eps = _check_epsilon(epsilon)
    if eps > 0 and statistic not in _PAIR_STATISTICS:
        raise ValueError(f"epsilon applies to {_PAIR_STATISTICS} only, not {statistic!r}")
    xa, ya = _as_scores(x, y)
    if average_by == "none":
        if statistic in _PAIR_STATISTICS:
            return _pair_statistic(xa, ya, None, eps, statistic, average)
        return _statistic_value(xa, ya, statistic)
    labels = items if average_by == "item" else systems
    if labels is None:
        raise ValueError(f'average_by="{average_by}" needs {"items" if average_by == "item" else "systems"}')
    codes, _ = _encode_groups(labels, xa.shape[0])
    if statistic in _PAIR_STATISTICS:
        return _average_pair_counts(_PairCounter(xa, ya, codes), eps, statistic, average)
    vals, sizes = [], []
    for rows in _group_rows(codes):
        if rows.size < 2:
            continue
        gx, gy = xa[rows], ya[rows]
        v = math.nan if (gx == gx[0]).all() or (gy == gy[0]).all() else _statistic_value(gx, gy, statistic)
        if math.isfinite(v):
            vals.append(v)
            sizes.append(rows.size)
    if not vals:
        return math.nan
    if average == "macro":
        return float(np.mean(vals))
    w = np.asarray(sizes, dtype=np.float64)
    return float((w * np.asarray(vals)).sum() / w.sum())


# --------------------------------------------------------------------------------------------
# Statistic dispatch used by the significance tests and ceilings
# --------------------------------------------------------------------------------------------


def _statistic_value(x: np.ndarray, y: np.ndarray, statistic: str) -> float:
    """Value of one of :data:`META_STATISTICS` on validated arrays.

    pearson/spearman/kendall_tau_b/kendall_tau_c: scipy (nan for constant x or y);
    kendall_tau_23/pairwise_accuracy: from :class:`_PairCounter` (defined for constant input).
    """
    if statistic in ("kendall_tau_23", "pairwise_accuracy"):
        counts = _PairCounter(x, y).counts(0.0)
        return counts.tau_23() if statistic == "kendall_tau_23" else counts.acc_23()
    return _scipy_statistic(x, y, statistic)


def statistic_value(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray, statistic: str) -> float:
    """Value of ``statistic`` (one of :data:`META_STATISTICS`) between metric x and gold y.

    x, y: float arrays of shape (n,), n >= 2, finite. pearson / spearman / kendall_tau_b /
    kendall_tau_c are scipy.stats values (nan if x or y is constant, see
    :func:`captioneval.stats.correlation`); kendall_tau_23 / pairwise_accuracy are
    :func:`kendall_tau_23` / :func:`pairwise_accuracy` with epsilon = 0.
    Raises ValueError for an unknown statistic or invalid x/y.
    """
    _check_meta_statistic(statistic)
    xa, ya = _as_scores(x, y)
    return _statistic_value(xa, ya, statistic)


def _group_values(x: np.ndarray, y: np.ndarray, codes: np.ndarray, statistic: str) -> np.ndarray:
    """Per-group statistic (nan for groups with < 2 rows or constant x or y), shape (G,)."""
    if vectorised():
        out, big = group_statistic(x, y, codes, statistic)
        order = np.argsort(codes, kind="stable")
        for code in big:  # groups too large to stack: one by one, as below
            rows = order[codes[order] == code]
            gx, gy = x[rows], y[rows]
            if not ((gx == gx[0]).all() or (gy == gy[0]).all()):
                out[code] = _statistic_value(gx, gy, statistic)
        return out
    n_groups = int(codes.max()) + 1 if codes.size else 0
    out = np.full(n_groups, np.nan)
    order = np.argsort(codes, kind="stable")
    bounds = np.flatnonzero(np.diff(codes[order])) + 1
    for rows in np.split(order, bounds):
        if rows.size < 2:
            continue
        gx, gy = x[rows], y[rows]
        if (gx == gx[0]).all() or (gy == gy[0]).all():
            continue
        out[codes[rows[0]]] = _statistic_value(gx, gy, statistic)
    return out


# --------------------------------------------------------------------------------------------
# Tie calibration
# --------------------------------------------------------------------------------------------


@dataclass
class TieCalibration:
    """Result of :func:`tie_calibrated_accuracy`.

    accuracy : acc_23 at the chosen epsilon ("acc_eq"), in [0, 1].
    epsilon : the metric tie threshold that maximises acc_23 (the smallest one on ties).
    n_candidates : number of distinct thresholds evaluated (including 0).
    counts_at_zero : without groups, the :class:`PairCounts` at epsilon = 0 that the sweep computed
        (their ``tau_23()`` and ``acc_23()`` are :func:`kendall_tau_23` and :func:`pairwise_accuracy`
        of the same rows); None with groups. Not part of :meth:`to_dict`.
    """

    accuracy: float
    epsilon: float
    n_candidates: int
    counts_at_zero: PairCounts | None = None

    def to_dict(self) -> dict:
        return {
            "accuracy": finite_or_none(self.accuracy),
            "epsilon": finite_or_none(self.epsilon),
            "n_candidates": int(self.n_candidates),
        }


def _group_rows(codes: np.ndarray) -> list[np.ndarray]:
    order = np.argsort(codes, kind="stable")
    bounds = np.flatnonzero(np.diff(codes[order])) + 1
    return np.split(order, bounds)


def _all_pair_diffs(x: np.ndarray, codes: np.ndarray | None) -> np.ndarray:
    """|x_i - x_j| over all pairs i < j (within groups if codes is given)."""
    if codes is None:
        i, j = np.triu_indices(x.shape[0], k=1)
        return np.abs(x[i] - x[j])
    out = []
    for rows in _group_rows(codes):
        if rows.size >= 2:
            i, j = np.triu_indices(rows.size, k=1)
            out.append(np.abs(x[rows[i]] - x[rows[j]]))
    return np.concatenate(out) if out else np.empty(0)


def _sampled_pair_diffs(x: np.ndarray, codes: np.ndarray | None, size: int, seed: int) -> np.ndarray:
    """|x_i - x_j| of ``size`` random pairs (uniform over the within-group pairs), fixed seed."""
    rng = np.random.default_rng(seed)
    if codes is None:
        starts = np.zeros(1, dtype=np.int64)
        sizes = np.array([x.shape[0]], dtype=np.int64)
        order = np.arange(x.shape[0])
    else:
        order = np.argsort(codes, kind="stable")
        sizes = np.bincount(codes).astype(np.int64)
        starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    pairs = (sizes * (sizes - 1) / 2.0).astype(np.float64)
    grp = rng.choice(sizes.size, size=size, p=pairs / pairs.sum())
    m = sizes[grp]
    a = (rng.random(size) * m).astype(np.int64)
    b = (rng.random(size) * (m - 1)).astype(np.int64)
    b = b + (b >= a)  # second row distinct from the first
    i = order[starts[grp] + a]
    j = order[starts[grp] + b]
    return np.abs(x[i] - x[j])


def tie_calibrated_accuracy(
    x: Sequence[float] | np.ndarray,
    y: Sequence[float] | np.ndarray,
    groups: Sequence[Hashable] | np.ndarray | None = None,
    max_candidates: int = 100,
    *,
    seed: int = 0,
    average: str = "macro",
) -> TieCalibration:
    """Tie-calibrated pairwise accuracy "acc_eq": acc_23 at the metric tie threshold epsilon that
    maximises it (Deutsch et al. 2023, Sec. 5 "Tie Calibration"; mt-metrics-eval
    ``tau_optimization.tau_optimization`` with ``TauSufficientStats.acc_23``).

    Candidate thresholds are 0 plus the quantiles of ``|x_i - x_j|`` over the (within-group)
    pairs at ``max_candidates - 1`` evenly spaced levels in [0, 1] (numpy ``method='lower'``, so
    every candidate is an observed difference); duplicates are dropped. mt-metrics-eval sweeps
    every observed difference instead; with many distinct differences the quantile grid is an
    approximation from below of that optimum. If there are more than 2,000,000 pairs, the
    quantiles are taken over 1,000,000 pairs drawn uniformly at random (with replacement)
    with ``numpy.random.default_rng(seed)`` (``seed`` fixed to 0 by default, so the result is
    deterministic). Every candidate is then evaluated exactly with :func:`pair_counts`. Since
    epsilon = 0 is a candidate, the result is >= ``pairwise_accuracy(x, y, groups)``.

    Parameters
    ----------
    x, y : array-like of float, shape (n,), n >= 2, finite
    groups : optional labels of shape (n,): only within-group pairs count, as in :func:`pair_counts`.
    max_candidates : int >= 1 (1 means only epsilon = 0).
    seed : int, keyword-only; seed of the pair sample (only used above 2,000,000 pairs).
    average : keyword-only, with groups: how the per-group acc_23 values at one common epsilon are
        combined (:data:`AVERAGES`). "macro" (default) maximises their unweighted mean, exactly
        what mt-metrics-eval's ``tau_optimization`` optimises (the average over rows at a single
        threshold); "pooled_pairs" maximises acc_23 of the summed within-group counts.

    Returns
    -------
    TieCalibration(accuracy in [0, 1] (nan if there are no pairs), epsilon >= 0, n_candidates).

    Raises
    ------
    ValueError
        Invalid x/y/groups (see :func:`pair_counts`) or max_candidates < 1.
    """
    if isinstance(max_candidates, bool) or int(max_candidates) != max_candidates or max_candidates < 1:
        raise ValueError(f"max_candidates must be a positive integer, got {max_candidates!r}")
    _check_average(average, "pairwise_accuracy")
    xa, ya, codes = _prepare(x, y, groups)
    counter = _PairCounter(xa, ya, codes)
    if codes is None:
        average = "pooled_pairs"  # one group: every average is the plain acc_23
    candidates = np.zeros(1)
    if counter.total > 0 and max_candidates > 1:
        if counter.total <= _MAX_ENUMERATED_PAIRS:
            diffs = _all_pair_diffs(xa, codes)
        else:
            diffs = _sampled_pair_diffs(xa, codes, _SAMPLED_PAIRS, seed)
        levels = np.linspace(0.0, 1.0, int(max_candidates) - 1)
        q = np.quantile(diffs, levels, method="lower")
        candidates = np.unique(np.concatenate(([0.0], q)))
    best_acc, best_eps = -math.inf, 0.0
    # one group: the counts at eps = 0 (the first candidate) are kept for tau_23 and acc_23
    at_zero = counter.counts(0.0) if codes is None else None
    for eps in candidates:
        if at_zero is not None and eps == 0.0:
            acc = at_zero.acc_23()  # what _average_pair_counts gives for one group
        else:
            acc = _average_pair_counts(counter, float(eps), "pairwise_accuracy", average)
        if math.isnan(acc):
            return TieCalibration(math.nan, 0.0, int(candidates.size), at_zero)
        if acc > best_acc:
            best_acc, best_eps = acc, float(eps)
    return TieCalibration(float(best_acc), best_eps, int(candidates.size), at_zero)


# --------------------------------------------------------------------------------------------
# Forced choice (PASCAL-50S)
# --------------------------------------------------------------------------------------------


@dataclass
class ForcedChoiceResult(EstimateResult):
    """Result of :func:`forced_choice_accuracy`.

    estimate : :class:`Estimate` -- value = accuracy in [0, 1] (nan if no pair is left), low/high =
        percentile bootstrap interval at ``confidence_level``, n = pairs used, n_resamples, seed.
        Also readable as ``accuracy`` / ``value``, ``ci95``, ``n_pairs``, ``n_resamples``, ``seed``,
        ``confidence``.
    n_excluded : pairs left out because the human vote share was exactly 0.5.
    category_estimates : category -> :class:`Estimate` of that category's pairs (empty without
        categories); also readable as ``per_category``: category -> {"accuracy", "n_pairs", "ci95"}.
    """

    estimate: Estimate
    n_excluded: int
    category_estimates: dict = field(default_factory=dict)

    @property
    def accuracy(self) -> float:
        """``estimate.value``."""
        return self.estimate.value

    @property
    def n_pairs(self) -> int:
        """Pairs used (human vote not tied): ``estimate.n``."""
        return self.estimate.n

    @property
    def per_category(self) -> dict:
        """category -> {"accuracy", "n_pairs", "ci95": (low, high)}."""
        return {c: {"accuracy": e.value, "n_pairs": e.n, "ci95": e.interval} for c, e in self.category_estimates.items()}

    def to_dict(self) -> dict:
        """JSON-safe dict (nan -> None, tuples -> lists)."""
        est = self.estimate
        return {
            "accuracy": finite_or_none(est.value),
            "n_pairs": int(self.n_pairs),
            "n_excluded": int(self.n_excluded),
            "ci95": est.interval_json(),
            "per_category": {
                str(c): {"accuracy": finite_or_none(e.value), "n_pairs": int(e.n), "ci95": e.interval_json()}
                for c, e in self.category_estimates.items()
            },
            "n_resamples": int(self.n_resamples),
            "seed": int(self.seed),
            "confidence": float(self.confidence),
        }


def _check_resampling(n_resamples: Any, confidence: Any) -> tuple[int, float]:
    if isinstance(n_resamples, bool) or int(n_resamples) != n_resamples or n_resamples < 0:
        raise ValueError(f"n_resamples must be a non-negative integer, got {n_resamples!r}")
    if not (0.0 < float(confidence) < 1.0):
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    return int(n_resamples), float(confidence)


def forced_choice_accuracy(
    score_b: Sequence[float] | np.ndarray,
    score_c: Sequence[float] | np.ndarray,
    human_b: Sequence[float] | np.ndarray,
    categories: Sequence[Hashable] | np.ndarray | None = None,
    n_resamples: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
) -> ForcedChoiceResult:
    """Forced-choice accuracy of a metric on (B, C) caption pairs: the PASCAL-50S protocol
    (Vedantam, Zitnick & Parikh 2015, "CIDEr: Consensus-based Image Description Evaluation",
    CVPR, Sec. 4 / 5.2; categories HC, HI, HM, MM).

    A pair is correct when the metric prefers the caption the human majority preferred:
    ``score_b > score_c`` and ``human_b > 0.5``, or ``score_b < score_c`` and ``human_b < 0.5``.
    A metric tie (``score_b == score_c``) counts as half correct (the expected accuracy of
    breaking the tie at random). Pairs whose human vote is tied (``human_b == 0.5``) have no
    correct answer; they are left out and counted in ``n_excluded``.

    Parameters
    ----------
    score_b, score_c : array-like of float, shape (n,), finite
        Metric scores of captions B and C of each pair.
    human_b : array-like of float in [0, 1] or bool, shape (n,)
        Share of human votes for B (True = B preferred, False = C preferred).
    categories : optional array-like of labels, shape (n,)
        Pair category (e.g. "HC", "HI", "HM", "MM"); per-category results are keyed by ``str``.
    n_resamples : int >= 0
        Bootstrap resamples (0: no interval, ci95 = (nan, nan)).
    seed : int
        ``numpy.random.default_rng(seed)``; the overall interval is drawn first, then one per
        category in sorted label order, each from the same generator.
    confidence : float in (0, 1)

    Returns
    -------
    ForcedChoiceResult. Intervals are percentile bootstrap intervals (Efron & Tibshirani 1993,
    ch. 13) resampling the used pairs with replacement (within the category for per-category
    intervals). accuracy is nan (and the interval (nan, nan)) when no pair is left.

    Raises
    ------
    ValueError
        Arrays not 1-D or of unequal length, non-finite scores, human_b outside [0, 1] or nan,
        invalid n_resamples / confidence.
    """
    n_resamples, conf = _check_resampling(n_resamples, confidence)
    try:
        sb = np.asarray(score_b, dtype=np.float64)
        sc = np.asarray(score_c, dtype=np.float64)
        hb = np.asarray(human_b, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"scores and human_b must be numeric: {exc}") from exc
    if sb.ndim != 1 or sc.ndim != 1 or hb.ndim != 1:
        raise ValueError("score_b, score_c and human_b must be 1-D")
    n = sb.shape[0]
    if sc.shape[0] != n or hb.shape[0] != n:
        raise ValueError(f"score_b, score_c and human_b differ in length: {n}, {sc.shape[0]}, {hb.shape[0]}")
    if not (np.isfinite(sb).all() and np.isfinite(sc).all()):
        raise ValueError("scores must be finite (no nan or inf)")
    if not (np.isfinite(hb).all() and (hb >= 0).all() and (hb <= 1).all()):
        raise ValueError("human_b must be in [0, 1] (share of votes for B)")
    if categories is not None:
        cat_list = categories.tolist() if isinstance(categories, np.ndarray) else list(categories)
        if len(cat_list) != n:
            raise ValueError(f"categories has length {len(cat_list)}, expected {n}")
    keep = hb != 0.5
    correct = forced_choice_credit(sb, sc, hb)
    rng = np.random.default_rng(seed)
    used = correct[keep]
    acc = float(used.mean()) if used.size else math.nan
    _, ci = bootstrap_mean(used, n_resamples, rng, conf)
    per_cat: dict[str, Estimate] = {}
    if categories is not None:
        codes, labels = _encode_groups(cat_list, n)
        for code, label in enumerate(labels):
            sel = keep & (codes == code)
            vals = correct[sel]
            cat_ci = bootstrap_mean(vals, n_resamples, rng, conf)[1]
            per_cat[str(label)] = Estimate(
                float(vals.mean()) if vals.size else math.nan, *cat_ci, conf, int(vals.size), n_resamples, int(seed)
            )
    return ForcedChoiceResult(
        estimate=Estimate(acc, *ci, conf, int(keep.sum()), n_resamples, int(seed)),
        n_excluded=int(n - keep.sum()),
        category_estimates=per_cat,
    )
