"""One statistic over many small samples at once (rows of a 2-D array), with exactly the numbers
the one-sample path (:func:`captioneval.stats.pairwise._statistic_value` behind the "constant input
is nan" guard of :func:`captioneval.stats.ceiling._small_statistic`) gives on each row.

Django-free: only numpy and scipy are imported. Used by the system-level bootstrap (one row per
resample: the systems' means) and the per-group correlations (one row per group of equal size).

How each statistic stays exactly equal to the scalar path:

* ``pearson`` -- :func:`scipy.stats.pearsonr` with ``axis=1``: the same scipy code as the 1-D
  call, the reductions running along contiguous rows (checked against the 1-D call by
  ``tests/test_report_speed_paths.py``).
* ``spearman`` -- average ranks of every row at once (:func:`scipy.stats.rankdata` ``axis=1``;
  ranks are exact half-integers), then per row the ``numpy.corrcoef`` of the two rank vectors that
  :func:`scipy.stats.spearmanr` computes (scipy 1.17 ``_stats_py.spearmanr``: ``rankdata`` then
  ``np.corrcoef``), skipping scipy's argument handling.
* ``kendall_tau_b``, ``kendall_tau_c``, ``kendall_tau_23``, ``pairwise_accuracy`` -- the integer
  pair counts C, D, Tx, Ty, Txy of each row from the signs of all within-row differences
  (O(k^2) per row of length k, in blocks of bounded memory), then the formulas of
  :func:`scipy.stats.kendalltau` (scipy 1.17 ``_stats_py.kendalltau``: ``tau_b = (C - D) /
  sqrt(T - Tx) / sqrt(T - Ty)`` with Tx, Ty including joint ties, ``tau_c = 2 (C - D) / (k^2 (m -
  1) / m)``, both clipped to [-1, 1]) and of :class:`captioneval.stats.pairwise.PairCounts`
  (``tau_23``, ``acc_23``; Deutsch et al. 2023, Eq. 4-5). The counts are integers, so every
  operation after them is the same IEEE operation on the same operands.
"""
from __future__ import annotations

import warnings

import numpy as np
import scipy  # scipy.stats loads on first use

__all__ = ["row_statistic", "group_statistic", "weighted_pair_sums", "weighted_kendall_bootstrap", "weighted_kendall_scipy"]

#: bound on the (rows x k x k) sign arrays of the Kendall family
_PAIR_ELEMENTS = 2_000_000
#: bound on the (samples x distinct x x distinct y) cell tables of weighted_pair_sums
_CELL_ELEMENTS = 4_000_000


def _constant_rows(a: np.ndarray) -> np.ndarray:
    return (a == a[:, :1]).all(axis=1)


def _pair_counts(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, ...]:
    """Per row: (C, D, Tx only, Ty only, Txy, T) as int64 arrays (b,), over the pairs i < j."""
    b, k = x.shape
    iu, ju = np.triu_indices(k, k=1)
    out = [np.zeros(b, dtype=np.int64) for _ in range(5)]
    step = max(1, _PAIR_ELEMENTS // max(iu.size, 1))
    for s in range(0, b, step):
        xs, ys = x[s:s + step], y[s:s + step]
        dx = np.sign(xs[:, ju] - xs[:, iu]).astype(np.int8)
        dy = np.sign(ys[:, ju] - ys[:, iu]).astype(np.int8)
        prod = dx * dy
        tx0, ty0 = dx == 0, dy == 0
        out[0][s:s + step] = (prod > 0).sum(axis=1)
        out[1][s:s + step] = (prod < 0).sum(axis=1)
        out[2][s:s + step] = (tx0 & ~ty0).sum(axis=1)
        out[3][s:s + step] = (ty0 & ~tx0).sum(axis=1)
        out[4][s:s + step] = (tx0 & ty0).sum(axis=1)
    total = np.full(b, k * (k - 1) // 2, dtype=np.int64)
    return (*out, total)


def _distinct_per_row(a: np.ndarray) -> np.ndarray:
    s = np.sort(a, axis=1)
    return 1 + (s[:, 1:] != s[:, :-1]).sum(axis=1)


def row_statistic(x: np.ndarray, y: np.ndarray, statistic: str) -> np.ndarray:
    """``statistic`` of (x[i], y[i]) for every row i: float64 array (b,).

    x, y: float arrays of shape (b, k), finite. A row with k < 2 or with constant x or y is nan
    (for every statistic, as :func:`captioneval.stats.ceiling._small_statistic`); the other rows
    get exactly the value of ``_statistic_value(x[i], y[i], statistic)`` (see the module
    docstring). ``statistic``: one of ``captioneval.stats.META_STATISTICS`` (ValueError otherwise).
    """
    x = np.ascontiguousarray(x, dtype=np.float64)
    y = np.ascontiguousarray(y, dtype=np.float64)
    b, k = x.shape
    out = np.full(b, np.nan)
    if b == 0 or k < 2:
        return out
    ok = ~(_constant_rows(x) | _constant_rows(y))
    if not ok.any():
        return out
    xs, ys = x[ok], y[ok]
    if statistic == "pearson":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out[ok] = scipy.stats.pearsonr(xs, ys, axis=1).statistic
        return out
    if statistic == "spearman":
        rx = scipy.stats.rankdata(xs, axis=1)
        ry = scipy.stats.rankdata(ys, axis=1)
        vals = np.empty(xs.shape[0])
        for i in range(xs.shape[0]):
            vals[i] = np.corrcoef(np.vstack((rx[i], ry[i])))[1, 0]
        out[ok] = vals
        return out
    c, d, tx, ty, txy, total = _pair_counts(xs, ys)
    with np.errstate(invalid="ignore", divide="ignore"):
        if statistic == "kendall_tau_b":
            cmd = (c - d).astype(np.float64)
            tau = cmd / np.sqrt((total - tx - txy).astype(np.float64)) / np.sqrt((total - ty - txy).astype(np.float64))
            out[ok] = np.minimum(1.0, np.maximum(-1.0, tau))
        elif statistic == "kendall_tau_c":
            m = np.minimum(_distinct_per_row(xs), _distinct_per_row(ys))
            den = (k * k * (m - 1)).astype(np.float64) / m.astype(np.float64)
            tau = (2 * (c - d)).astype(np.float64) / den
            out[ok] = np.minimum(1.0, np.maximum(-1.0, tau))
        elif statistic == "kendall_tau_23":
            out[ok] = (c + txy - d - tx - ty).astype(np.float64) / total.astype(np.float64)
        elif statistic == "pairwise_accuracy":
            out[ok] = (c + txy).astype(np.float64) / total.astype(np.float64)
        else:
            raise ValueError(f"unknown statistic {statistic!r}")
    return out


def group_statistic(x: np.ndarray, y: np.ndarray, codes: np.ndarray, statistic: str, max_size: int = 2000) -> np.ndarray:
    """Per-group ``statistic``: float64 array (G,) (G = codes.max() + 1), nan for groups with < 2
    rows or constant x or y; each group's rows in their original order (ascending row index), as
    :func:`captioneval.stats.pairwise._group_values` takes them. Groups of equal size are stacked
    and handled by :func:`row_statistic`; groups larger than ``max_size`` (their O(k^2) pair
    arrays would be large) are left nan for the caller to compute one by one.

    Returns (values, big) where ``big`` lists the group codes left to the caller.
    """
    n_groups = int(codes.max()) + 1 if codes.size else 0
    out = np.full(n_groups, np.nan)
    order = np.argsort(codes, kind="stable")
    sizes = np.bincount(codes, minlength=n_groups)
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    big = []
    for size in np.unique(sizes):
        if size < 2:
            continue
        groups = np.flatnonzero(sizes == size)
        if size > max_size:
            big.extend(groups.tolist())
            continue
        rows = order[(starts[groups][:, None] + np.arange(size)[None, :])]
        out[groups] = row_statistic(x[rows], y[rows], statistic)
    return out, big


def _dense_ranks(v: np.ndarray) -> tuple[np.ndarray, int]:
    """Dense ranks 0..K-1 of v (as ``np.unique(v, return_inverse=True)``) and K: with few distinct
    values (item means, rating scales) a sort of the values and a binary search of each, else one
    argsort (a sort of values is about half an argsort's time; the search pays only when K is small)."""
    distinct = np.unique(v) if v.size else v
    if distinct.size <= _FEW_DISTINCT:
        return np.searchsorted(distinct, v).astype(np.int64, copy=False), int(distinct.size)
    order = np.argsort(v, kind="stable")
    sv = v[order]
    ranks = np.empty(v.size, dtype=np.int64)
    ranks[order] = np.cumsum(np.r_[False, sv[1:] != sv[:-1]])
    return ranks, int(ranks[order[-1]]) + 1


#: :func:`_dense_ranks` searches the sorted distinct values up to this many of them
_FEW_DISTINCT = 1024


def _small_ints(v: np.ndarray, k: int) -> np.ndarray:
    """v as the smallest unsigned type holding 0..k-1 (numpy sorts 8/16-bit keys by radix)."""
    if k <= 256:
        return v.astype(np.uint8)
    if k <= 65536:
        return v.astype(np.uint16)
    return v


def weighted_pair_sums(x: np.ndarray, y: np.ndarray, weights: np.ndarray) -> dict[str, np.ndarray]:
    """Integer pair sums of weighted samples: row k repeated ``weights[r, k]`` times in sample r.

    x, y: float arrays (m,); weights: non-negative integer array (b, m). Returns int64 arrays (b,):
    ``n`` (sample size N), ``sx2`` / ``sy2`` / ``sxy2`` (sums of squared weights of the distinct x
    values / y values / (x, y) cells; ``(sx2 - N) / 2`` pairs are tied in x), ``d`` (discordant
    pairs: ``sum w_i w_j`` over x_i < x_j, y_i > y_j), ``kx`` / ``ky`` (distinct x / y values with
    positive weight). These are the weighted counts of the bootstrap engine of
    :mod:`captioneval.stats.correlation` (``_WeightedSample``), computed here in row form: D
    from the binary digits of the dense y rank (as :mod:`captioneval.stats.pairwise`), one
    cumulative sum per digit over the rows ordered by (y prefix, x, y).
    """
    w = np.asarray(weights, dtype=np.int64)
    b, m = w.shape
    xr, kx_all = _dense_ranks(x)
    yr, ky_all = _dense_ranks(y)
    if b * kx_all * ky_all <= _CELL_ELEMENTS:
        return _dense_cell_sums(w, xr, yr, kx_all, ky_all)
    # rows in (x, y) order: y first (stable), then x (stable)
    by_y = np.argsort(_small_ints(yr, ky_all), kind="stable")
    order_xy = by_y[np.argsort(_small_ints(xr[by_y], kx_all), kind="stable")]
    key = xr[order_xy] * ky_all + yr[order_xy]
    run_start = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    w_xy = w[:, order_xy]
    m_xy = np.add.reduceat(w_xy, run_start, axis=1)
    m_x = np.stack([np.bincount(xr, weights=w[r], minlength=kx_all) for r in range(b)]).astype(np.int64)
    m_y = np.stack([np.bincount(yr, weights=w[r], minlength=ky_all) for r in range(b)]).astype(np.int64)
    d = np.zeros(b, dtype=np.int64)
    y_sorted = yr[order_xy]
    for level in range(int(ky_all - 1).bit_length()):
        prefix = y_sorted >> (level + 1)
        # (prefix, x, y) order: a stable sort of the (x, y) order by prefix
        perm = np.argsort(_small_ints(prefix, int(prefix.max()) + 1), kind="stable")
        ws = w_xy[:, perm]
        p = prefix[perm]
        ones = ((y_sorted[perm] >> level) & 1).astype(bool)
        cs = np.cumsum(np.where(ones[None, :], ws, 0), axis=1)
        new_group = np.r_[True, p[1:] != p[:-1]]
        starts = np.flatnonzero(new_group)
        base = np.zeros((b, starts.size), dtype=np.int64)
        base[:, 1:] = cs[:, starts[1:] - 1]
        group = np.cumsum(new_group) - 1
        zeros = ~ones
        d += (ws[:, zeros] * (cs[:, zeros] - base[:, group[zeros]])).sum(axis=1)
    return {
        "n": w.sum(axis=1), "sx2": (m_x * m_x).sum(axis=1), "sy2": (m_y * m_y).sum(axis=1),
        "sxy2": (m_xy * m_xy).sum(axis=1), "d": d, "kx": (m_x > 0).sum(axis=1), "ky": (m_y > 0).sum(axis=1),
    }


def _dense_cell_sums(w: np.ndarray, xr: np.ndarray, yr: np.ndarray, kx: int, ky: int) -> dict[str, np.ndarray]:
    """:func:`weighted_pair_sums` from the (b, kx, ky) table of cell weights M (sufficient
    statistics of the sample): D = sum_{i,j} M[i, j] * (weight of cells with smaller x and larger y),
    two exclusive cumulative sums."""
    b = w.shape[0]
    cell = xr * ky + yr
    flat = (cell[None, :] + (np.arange(b, dtype=np.int64) * (kx * ky))[:, None]).ravel()
    M = np.bincount(flat, weights=w.ravel().astype(np.float64), minlength=b * kx * ky).astype(np.int64).reshape(b, kx, ky)
    above = np.zeros_like(M)  # weight of cells with the same x and strictly larger y
    above[:, :, :-1] = np.cumsum(M[:, :, :0:-1], axis=2)[:, :, ::-1]
    left = np.zeros_like(M)  # ... and strictly smaller x
    left[:, 1:, :] = np.cumsum(above[:, :-1, :], axis=1)
    m_x = M.sum(axis=2)
    m_y = M.sum(axis=1)
    return {
        "n": w.sum(axis=1), "sx2": (m_x * m_x).sum(axis=1), "sy2": (m_y * m_y).sum(axis=1),
        "sxy2": (M * M).sum(axis=(1, 2)), "d": (M * left).sum(axis=(1, 2)), "kx": (m_x > 0).sum(axis=1),
        "ky": (m_y > 0).sum(axis=1),
    }


def weighted_kendall_bootstrap(s: dict[str, np.ndarray], statistic: str) -> np.ndarray:
    """Kendall tau-b / tau-c of weighted samples from :func:`weighted_pair_sums`, with the float
    operations of ``_WeightedSample._chunk`` (:mod:`captioneval.stats.correlation`): nan unless
    both x and y take >= 2 values; tau-b not clipped."""
    n = s["n"].astype(np.float64)
    s_x2, s_y2, s_xy2 = (s[k].astype(np.float64) for k in ("sx2", "sy2", "sxy2"))
    defined = (s["kx"] >= 2) & (s["ky"] >= 2)
    with np.errstate(invalid="ignore", divide="ignore"):
        untied = (n * n - s_x2 - s_y2 + s_xy2) / 2.0
        s_stat = untied - 2.0 * s["d"].astype(np.float64)
        if statistic == "kendall_tau_b":
            denom = np.sqrt((n * n - s_x2) / 2.0) * np.sqrt((n * n - s_y2) / 2.0)
            return np.where(defined, s_stat / denom, np.nan)
        k = np.minimum(s["kx"], s["ky"]).astype(np.float64)
        return np.where(defined, 2.0 * s_stat / (n * n * (k - 1.0) / k), np.nan)


def weighted_kendall_scipy(s: dict[str, np.ndarray], statistic: str) -> np.ndarray:
    """Kendall tau-b / tau-c of weighted samples with the operations :func:`scipy.stats.kendalltau`
    applies to the materialised sample (scipy 1.17 ``_stats_py.kendalltau``: Python integer counts,
    ``tau_b = (C - D) / sqrt(T - Tx) / sqrt(T - Ty)``, ``tau_c = 2 (C - D) / (N^2 (m - 1) / m)``,
    clipped to [-1, 1]); nan where x or y is constant."""
    out = np.full(s["n"].shape[0], np.nan)
    for r in range(out.size):
        n, d = int(s["n"][r]), int(s["d"][r])
        if s["kx"][r] < 2 or s["ky"][r] < 2:
            continue
        tot = n * (n - 1) // 2
        xtie, ytie, ntie = ((int(s[k][r]) - n) // 2 for k in ("sx2", "sy2", "sxy2"))
        cmd = tot - xtie - ytie + ntie - 2 * d
        if statistic == "kendall_tau_b":
            tau = cmd / np.sqrt(tot - xtie) / np.sqrt(tot - ytie)
        else:
            mc = min(int(s["kx"][r]), int(s["ky"][r]))
            tau = 2 * cmd / (n ** 2 * (mc - 1) / mc)
        out[r] = float(np.minimum(1.0, max(-1.0, tau)))
    return out
