"""Correlation of metric scores with human judgments, with group (cluster) bootstrap intervals.

Django-free: only numpy and scipy are imported.

Statistics (point estimates always come from :mod:`scipy.stats`):

* ``pearson``       -- :func:`scipy.stats.pearsonr`.
* ``spearman``      -- :func:`scipy.stats.spearmanr` (Pearson correlation of average ranks).
* ``kendall_tau_b`` -- :func:`scipy.stats.kendalltau` with ``variant='b'`` (Kendall 1945):
  ``tau_b = (C - D) / sqrt((T - Tx - Txy) (T - Ty - Txy))``.
* ``kendall_tau_c`` -- :func:`scipy.stats.kendalltau` with ``variant='c'`` (Stuart 1953):
  ``tau_c = 2 (C - D) / (n^2 (k - 1) / k)``, ``k = min(#distinct x, #distinct y)``.

Here C/D are the numbers of concordant/discordant pairs, Tx/Ty pairs tied only in x/only in y,
Txy pairs tied in both, T = n (n - 1) / 2 (the notation of Deutsch, Foster & Freitag 2023, "Ties
Matter", EMNLP, Sec. 3).

Confidence intervals are percentile bootstrap intervals (Efron & Tibshirani 1993, ch. 13) where the
resampling unit is a *group* (typically an image): a cluster bootstrap. Rows of one image share the
image (and often the same candidate captions), so they are not independent; resampling rows would
understate the uncertainty.

Speed. Calling scipy on every materialised resample costs ~10 ms per resample at n = 17k (all
four statistics), i.e. ~10 s per metric for 1,000 resamples. The bootstrap here instead treats a
resample as integer weights ``c_g`` (how often group g was drawn) and computes every statistic
from weighted counts, exactly as if the drawn rows had been concatenated:

* Pearson: weighted first and second moments from per-group sums (one matrix product).
* Spearman: average ranks of a weighted sample are ``(weight of smaller values) + (M_v + 1) / 2``
  where ``M_v`` is the total weight of value v; they are recomputed for every resample
  (cumulative sums over the sorted distinct values), then a weighted Pearson of the ranks.
* Kendall: with ``M_v`` / ``M_u`` / ``M_vu`` the weights of x values / y values / (x, y) cells
  and N the resample size, pairs untied in both = ``(N^2 - sum M_v^2 - sum M_u^2 + sum M_vu^2) / 2``
  (a row paired with its own copy is tied in both), and the discordant count D is
  ``sum_i w_i * (weight of rows j with y_j > y_i and x_j < x_i)``, computed with cumulative sums over
  the distinct x values, one per distinct value of the variable with fewer distinct values
  (the human score). ``C - D`` = untied pairs - 2 D. All counts are integers held exactly in float64.

If both variables have more than ``KENDALL_FAST_MAX_CLASSES`` distinct values, the Kendall
statistics of each resample fall back to scipy on the materialised resample (slow but exact).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any, Hashable, Iterable, Sequence

import numpy as np
import scipy.sparse as sparse
import scipy  # scipy.stats loads on first use (scipy's lazy submodules): half a second of start-up

from captioneval.stats.blockpairs import BlockDiscordance, integer_cumsum
from captioneval.stats.engine import vectorised
from captioneval.stats.results import Estimate, finite_or_none, percentile_interval

__all__ = [
    "STATISTICS",
    "CorrelationResult",
    "RankAgreement",
    "correlation",
    "correlate",
    "per_group_rank_agreement",
]

STATISTICS = ("pearson", "spearman", "kendall_tau_b", "kendall_tau_c")

#: Above this many distinct values in *both* x and y, bootstrap Kendall values are computed by
#: scipy on materialised resamples instead of the vectorised weighted-count path.
KENDALL_FAST_MAX_CLASSES = 256

# Target number of float64 elements per (cells x resamples) work array in the fast path.
_CHUNK_ELEMENTS = 1_000_000
#: y classes up to which the Kendall D of the resamples comes from block matrix products
_BLOCK_MAX_CLASSES = 64


# --------------------------------------------------------------------------------------------
# Input validation
# --------------------------------------------------------------------------------------------


def _as_scores(x: Any, y: Any) -> tuple[np.ndarray, np.ndarray]:
    """Validate and convert ``x``/``y`` to 1-D float64 arrays of equal length n >= 2."""
    try:
        xa = np.asarray(x, dtype=np.float64)
        ya = np.asarray(y, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"x and y must be numeric: {exc}") from exc
    if xa.ndim != 1 or ya.ndim != 1:
        raise ValueError(f"x and y must be 1-D, got shapes {xa.shape} and {ya.shape}")
    if xa.shape[0] != ya.shape[0]:
        raise ValueError(f"x and y differ in length: {xa.shape[0]} != {ya.shape[0]}")
    if xa.shape[0] < 2:
        raise ValueError(f"need at least 2 rows, got {xa.shape[0]}")
    if not (np.isfinite(xa).all() and np.isfinite(ya).all()):
        raise ValueError("x and y must be finite (no nan or inf)")
    return xa, ya


def _check_statistic(statistic: str) -> str:
    if statistic not in STATISTICS:
        raise ValueError(f"unknown statistic {statistic!r}; expected one of {STATISTICS}")
    return statistic


def _check_statistics(statistics: str | Iterable[str]) -> tuple[str, ...]:
    if isinstance(statistics, str):
        statistics = (statistics,)
    out: list[str] = []
    for s in statistics:
        _check_statistic(s)
        if s not in out:
            out.append(s)
    if not out:
        raise ValueError("at least one statistic is required")
    return tuple(out)


def _encode_groups(groups: Any, n: int) -> tuple[np.ndarray, list]:
    """Map group labels to integer codes 0..G-1.

    Labels are any hashable values (compared with ``==``/``hash``). Codes follow the sorted
    order of the labels when they are mutually comparable, else their first appearance, so the
    bootstrap draws for a given seed do not depend on the row order.

    Returns ``(codes, labels)``: ``codes`` int64 of shape (n,), ``labels[code]`` the label.
    Raises ValueError if ``groups`` is not 1-D or its length is not n.
    """
    if isinstance(groups, np.ndarray):
        if groups.ndim != 1:
            raise ValueError(f"groups must be 1-D, got shape {groups.shape}")
        items = groups.tolist()
    else:
        items = list(groups)
    if len(items) != n:
        raise ValueError(f"groups has length {len(items)}, expected {n}")
    try:
        distinct = sorted(set(items))
    except TypeError:
        distinct = list(dict.fromkeys(items))
    index = {label: i for i, label in enumerate(distinct)}
    codes = np.fromiter((index[label] for label in items), dtype=np.int64, count=n)
    return codes, distinct


# --------------------------------------------------------------------------------------------
# Point estimates (scipy)
# --------------------------------------------------------------------------------------------


def _scipy_statistic(x: np.ndarray, y: np.ndarray, statistic: str) -> float:
    """scipy value of ``statistic`` on validated arrays; nan if x or y is constant."""
    if (x == x[0]).all() or (y == y[0]).all():
        return math.nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", scipy.stats.ConstantInputWarning)
        if statistic == "pearson":
            value = scipy.stats.pearsonr(x, y).statistic
        elif statistic == "spearman":
            value = scipy.stats.spearmanr(x, y).statistic
        elif statistic == "kendall_tau_b":
            value = scipy.stats.kendalltau(x, y, variant="b").statistic
        elif statistic == "kendall_tau_c":
            value = scipy.stats.kendalltau(x, y, variant="c").statistic
        else:  # pragma: no cover - guarded by _check_statistic
            raise ValueError(f"unknown statistic {statistic!r}")
    return float(value)


def correlation(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray, statistic: str) -> float:
    """Correlation between metric scores ``x`` and human scores ``y``.

    Parameters
    ----------
    x, y : array-like of float, shape (n,), n >= 2
        Metric scores and human scores of the same n items (rows). Must be finite.
    statistic : str
        One of :data:`STATISTICS`: ``"pearson"`` (:func:`scipy.stats.pearsonr`),
        ``"spearman"`` (:func:`scipy.stats.spearmanr`), ``"kendall_tau_b"`` (Kendall 1945) or
        ``"kendall_tau_c"`` (Stuart 1953), both via :func:`scipy.stats.kendalltau`.

    Returns
    -------
    float in [-1, 1], or nan when the statistic is undefined (x or y constant); no warning is
    emitted in that case.

    Raises
    ------
    ValueError
        Unknown statistic, x/y not 1-D, of different lengths, shorter than 2, not numeric,
        or containing nan/inf.
    """
    _check_statistic(statistic)
    xa, ya = _as_scores(x, y)
    return _scipy_statistic(xa, ya, statistic)


# --------------------------------------------------------------------------------------------
# Bootstrap machinery
# --------------------------------------------------------------------------------------------


def _bootstrap_draws(n_groups: int, n_resamples: int, seed: int) -> np.ndarray:
    """Group indices drawn with replacement: int64 array of shape (n_resamples, n_groups).

    Row b lists the groups of resample b (each resample has as many draws as there are groups).
    Uses ``numpy.random.default_rng(seed)``, so it is deterministic for a given seed.
    """
    rng = np.random.default_rng(seed)
    return rng.integers(0, n_groups, size=(n_resamples, n_groups), dtype=np.int64)


def _draw_counts(draws: np.ndarray, n_groups: int) -> np.ndarray:
    """How often each group was drawn: float64 array (n_resamples, n_groups)."""
    n_resamples = draws.shape[0]
    flat = (draws + (np.arange(n_resamples, dtype=np.int64) * n_groups)[:, None]).ravel()
    counts = np.bincount(flat, minlength=n_resamples * n_groups)
    return counts.reshape(n_resamples, n_groups).astype(np.float64)


def _count_matrix(row_keys: np.ndarray, codes: np.ndarray, n_keys: int, n_groups: int) -> sparse.csr_matrix:
    """Sparse (n_keys, n_groups) matrix: number of rows with each (key, group)."""
    ones = np.ones(row_keys.shape[0], dtype=np.float64)
    return sparse.csr_matrix((ones, (row_keys, codes)), shape=(n_keys, n_groups))


class _WeightedSample:
    """Structures precomputed once so that every resample is handled by weighted counts.

    Built from (x, y, group codes). Roles of x and y may be swapped internally (all four
    statistics are symmetric) so that ``y`` is the variable with fewer distinct values.
    """

    def __init__(self, x: np.ndarray, y: np.ndarray, codes: np.ndarray, n_groups: int):
        self.x_orig, self.y_orig, self.codes, self.n_groups = x, y, codes, n_groups
        xv, xc = np.unique(x, return_inverse=True)
        yv, yc = np.unique(y, return_inverse=True)
        if xv.size < yv.size:  # make y the variable with fewer distinct values
            xv, xc, yv, yc = yv, yc, xv, xc
        self.n_x, self.n_y = int(xv.size), int(yv.size)
        # Cells = distinct (x, y) pairs, sorted by x then y.
        cells, cell_of_row = np.unique(xc.astype(np.int64) * self.n_y + yc, return_inverse=True)
        self.cell_x = cells // self.n_y
        self.cell_y = cells % self.n_y
        self.n_cells = int(cells.size)
        self.cells_are_x = self.n_cells == self.n_x  # then cell_x == arange(n_x)
        # Count matrices (key x group).
        self.N_cell = _count_matrix(cell_of_row, codes, self.n_cells, n_groups)
        self.N_x = _count_matrix(xc, codes, self.n_x, n_groups)
        self.N_y = _count_matrix(yc, codes, self.n_y, n_groups)
        # Pearson: per-group sums of standardised x and y (reduces cancellation).
        xs = (x - x.mean()) / (x.std() or 1.0)
        ys = (y - y.mean()) / (y.std() or 1.0)
        cols = np.stack([np.ones_like(xs), xs, ys, xs * xs, ys * ys, xs * ys], axis=1)
        self.group_sums = np.zeros((n_groups, 6))
        np.add.at(self.group_sums, codes, cols)
        # Kendall class structure: for each y class, its cells (in x order), and for each pair
        # k < l the number of class-l cells with strictly smaller x than each class-k cell.
        self.class_cells = [np.flatnonzero(self.cell_y == k) for k in range(self.n_y)]
        self._kendall_index: dict[tuple[int, int], np.ndarray] = {}
        self._blocks: BlockDiscordance | None = None

    def kendall_index(self, k: int, l: int) -> np.ndarray:
        key = (k, l)
        if key not in self._kendall_index:
            xs_l = self.cell_x[self.class_cells[l]]
            xs_k = self.cell_x[self.class_cells[k]]
            self._kendall_index[key] = np.searchsorted(xs_l, xs_k, side="left")
        return self._kendall_index[key]

    def statistics(self, counts: np.ndarray, statistics: tuple[str, ...], max_kendall_classes: int) -> dict[str, np.ndarray]:
        """Statistic values for resamples given as group counts (n_resamples, n_groups)."""
        n_resamples = counts.shape[0]
        out = {s: np.empty(n_resamples) for s in statistics}
        chunk = max(1, min(n_resamples, _CHUNK_ELEMENTS // max(self.n_cells, 1)))
        for start in range(0, n_resamples, chunk):
            block = counts[start:start + chunk]
            values = self._chunk(block, statistics, max_kendall_classes)
            for s in statistics:
                out[s][start:start + block.shape[0]] = values[s]
        return out

    def _chunk(self, counts: np.ndarray, statistics: tuple[str, ...], max_kendall_classes: int) -> dict[str, np.ndarray]:
        ct = np.ascontiguousarray(counts.T)  # (G, b)
        m_x = self.N_x @ ct  # (n_x, b) weight of each distinct x value
        m_y = self.N_y @ ct  # (n_y, b)
        n = m_y.sum(axis=0)  # resample sizes N
        k_x = (m_x > 0).sum(axis=0)
        k_y = (m_y > 0).sum(axis=0)
        defined = (k_x >= 2) & (k_y >= 2)
        res: dict[str, np.ndarray] = {}
        need_cells = any(s != "pearson" for s in statistics)
        m_xy = self.N_cell @ ct if need_cells else None  # (n_cells, b)

        with np.errstate(invalid="ignore", divide="ignore"):
            if "pearson" in statistics:
                s = self.group_sums.T @ ct  # (6, b)
                cnt, sx, sy, sxx, syy, sxy = s
                cov = sxy - sx * sy / cnt
                vx = sxx - sx * sx / cnt
                vy = syy - sy * sy / cnt
                r = cov / np.sqrt(vx * vy)
                res["pearson"] = np.where(defined, np.clip(r, -1.0, 1.0), np.nan)

            if "spearman" in statistics:
                mid = (n + 1.0) / 2.0
                # average rank of each distinct value in the weighted sample, centred
                # (m_x holds counts: integer_cumsum equals np.cumsum exactly)
                rx = integer_cumsum(m_x)
                half = m_x - 1.0
                half /= 2.0
                rx -= half
                rx -= mid  # (cumsum - (m_x - 1) / 2) - mid, in place
                ry = np.cumsum(m_y, axis=0) - (m_y - 1.0) / 2.0 - mid
                var_x = (m_x * rx * rx).sum(axis=0)
                var_y = (m_y * ry * ry).sum(axis=0)
                rx_cells = rx if self.cells_are_x else rx[self.cell_x]
                cov = (m_xy * rx_cells * ry[self.cell_y]).sum(axis=0)
                rho = cov / np.sqrt(var_x * var_y)
                res["spearman"] = np.where(defined, np.clip(rho, -1.0, 1.0), np.nan)

            want_b = "kendall_tau_b" in statistics
            want_c = "kendall_tau_c" in statistics
            if want_b or want_c:
                if self.n_y <= max_kendall_classes:
                    s_x2 = (m_x * m_x).sum(axis=0)
                    s_y2 = (m_y * m_y).sum(axis=0)
                    s_xy2 = (m_xy * m_xy).sum(axis=0)
                    untied = (n * n - s_x2 - s_y2 + s_xy2) / 2.0  # C + D
                    if vectorised() and self.n_y <= _BLOCK_MAX_CLASSES and BlockDiscordance.fits(self.n_cells, self.n_y):
                        discordant = self._block_discordance().counts_columns(m_xy).astype(np.float64)
                    else:
                        discordant = self._discordant(m_xy)
                    s_stat = untied - 2.0 * discordant  # C - D
                    if want_b:
                        denom = np.sqrt((n * n - s_x2) / 2.0) * np.sqrt((n * n - s_y2) / 2.0)
                        res["kendall_tau_b"] = np.where(defined, s_stat / denom, np.nan)
                    if want_c:
                        k = np.minimum(k_x, k_y).astype(np.float64)
                        res["kendall_tau_c"] = np.where(defined, 2.0 * s_stat / (n * n * (k - 1.0) / k), np.nan)
                else:
                    kend = self._kendall_materialised(counts, want_b, want_c)
                    res.update(kend)
        return res

    def _block_discordance(self) -> BlockDiscordance:
        """The cells (sorted by x, then y) as one ordered list with gold classes ``cell_y``."""
        if self._blocks is None:
            self._blocks = BlockDiscordance(self.cell_y)
        return self._blocks

    def _discordant(self, m_xy: np.ndarray) -> np.ndarray:
        """Weighted discordant pair count D per resample (columns of m_xy): the per-class loop
        (the reference path; :meth:`_block_discordance` gives the same integers by matrix products)."""
        b = m_xy.shape[1]
        # cumulative weight (prefixed by a zero row) of the cells of each class, in x order
        cums = []
        for cells in self.class_cells:
            c = np.empty((cells.size + 1, b))
            c[0] = 0.0
            np.cumsum(m_xy[cells], axis=0, out=c[1:])
            cums.append(c)
        d = np.zeros(b)
        for k in range(self.n_y - 1):
            cells_k = self.class_cells[k]
            higher = np.zeros((cells_k.size, b))
            for l in range(k + 1, self.n_y):
                # weight of class-l rows (y larger) with strictly smaller x than each class-k cell
                higher += cums[l][self.kendall_index(k, l)]
            d += np.einsum("ij,ij->j", m_xy[cells_k], higher)
        return d

    def _kendall_materialised(self, counts: np.ndarray, want_b: bool, want_c: bool) -> dict[str, np.ndarray]:
        """Slow exact path: scipy on each materialised resample."""
        b = counts.shape[0]
        out = {}
        if want_b:
            out["kendall_tau_b"] = np.empty(b)
        if want_c:
            out["kendall_tau_c"] = np.empty(b)
        for i in range(b):
            w = counts[i][self.codes].astype(np.int64)
            xr = np.repeat(self.x_orig, w)
            yr = np.repeat(self.y_orig, w)
            for name in out:
                out[name][i] = _scipy_statistic(xr, yr, name)
        return out


def _bootstrap_distribution(
    x: np.ndarray,
    y: np.ndarray,
    codes: np.ndarray,
    n_groups: int,
    draws: np.ndarray,
    statistics: tuple[str, ...] = STATISTICS,
    max_kendall_classes: int | None = None,
) -> dict[str, np.ndarray]:
    """Statistic of every resample (fast weighted-count path).

    ``draws`` (n_resamples, n_draws) lists group codes of each resample; the result equals
    calling scipy on ``concatenate([rows of group g for g in draws[b]])`` (up to rounding), with
    nan where the resample has constant x or y. Returns statistic -> float64 array (n_resamples,).
    ``max_kendall_classes`` (default :data:`KENDALL_FAST_MAX_CLASSES`) selects the Kendall path.
    """
    if max_kendall_classes is None:
        max_kendall_classes = KENDALL_FAST_MAX_CLASSES
    sample = _WeightedSample(x, y, codes, n_groups)
    counts = _draw_counts(draws, n_groups)
    return sample.statistics(counts, statistics, max_kendall_classes)


# --------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------


@dataclass
class CorrelationResult:
    """Point estimates and group-bootstrap percentile intervals, one :class:`Estimate` per statistic.

    Attributes
    ----------
    n_rows, n_groups : int
        Number of rows (x/y pairs) and of distinct groups.
    estimates : dict[str, Estimate]
        statistic -> Estimate(value = scipy point estimate (nan if undefined), low/high = percentile
        interval at ``confidence`` ((nan, nan) without resamples, or if the statistic was undefined
        on every resample), n = n_rows, n_resamples, seed).
    n_resamples, confidence, seed
        Bootstrap settings.

    Read-only views kept for existing callers: ``values`` (statistic -> value) and ``ci95``
    (statistic -> (low, high); empty if ``n_resamples == 0``; the name is historical: it holds the
    interval at whatever confidence was requested).
    """

    n_rows: int
    n_groups: int
    estimates: dict[str, Estimate]
    n_resamples: int = 0
    confidence: float = 0.95
    seed: int = 0

    @property
    def values(self) -> dict[str, float]:
        """statistic -> point estimate."""
        return {name: e.value for name, e in self.estimates.items()}

    @property
    def ci95(self) -> dict[str, tuple[float, float]]:
        """statistic -> (low, high); empty without resamples."""
        if self.n_resamples == 0:
            return {}
        return {name: e.interval for name, e in self.estimates.items()}

    def to_dict(self) -> dict:
        """JSON-serialisable dict (nan becomes None, so ``json.dumps(allow_nan=False)`` works).

        ``{"pearson": r, ..., "ci95": {"pearson": [lo, hi], ...}, "n_rows": n, "n_groups": g,
        "bootstrap": {"n_resamples": B, "confidence": c, "seed": s, "unit": "group"}}``
        """
        d: dict[str, Any] = {name: finite_or_none(v) for name, v in self.values.items()}
        d["ci95"] = {name: [finite_or_none(lo), finite_or_none(hi)] for name, (lo, hi) in self.ci95.items()}
        d["n_rows"] = int(self.n_rows)
        d["n_groups"] = int(self.n_groups)
        d["bootstrap"] = {
            "n_resamples": int(self.n_resamples),
            "confidence": float(self.confidence),
            "seed": int(self.seed),
            "unit": "group",
        }
        return d


def correlate(
    x: Sequence[float] | np.ndarray,
    y: Sequence[float] | np.ndarray,
    groups: Sequence[Hashable] | np.ndarray,
    statistics: Iterable[str] = STATISTICS,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> CorrelationResult:
    """Correlations of metric scores with human scores plus group-bootstrap percentile CIs.

    Parameters
    ----------
    x, y : array-like of float, shape (n,), n >= 2, finite
        Metric scores and human scores; one row per judgment (e.g. each expert rating is a row).
    groups : array-like of hashable labels, shape (n,)
        Resampling unit of each row, e.g. the image id. The bootstrap draws G groups with
        replacement (G = number of distinct labels); every row of a drawn group is included, a
        group drawn twice contributes its rows twice (cluster bootstrap).
    statistics : iterable of str, subset of :data:`STATISTICS` (a single name is accepted)
    n_resamples : int >= 0
        Bootstrap resamples; 0 gives point estimates only (``ci95`` empty).
    confidence : float in (0, 1)
        Coverage of the percentile interval (Efron & Tibshirani 1993): the ``(1-c)/2`` and
        ``(1+c)/2`` quantiles (numpy linear interpolation) of the resampled statistic.
        Resamples on which a statistic is undefined (constant x or y) are left out.
    seed : int
        Seed of ``numpy.random.default_rng``; same inputs and seed give identical results.

    Returns
    -------
    CorrelationResult (point estimates from scipy.stats, see :func:`correlation`).

    Raises
    ------
    ValueError
        Invalid x/y (see :func:`correlation`), unknown or no statistic, groups of wrong length
        or shape, n_resamples < 0, confidence outside (0, 1), or fewer than 2 groups when
        n_resamples > 0 (a one-cluster bootstrap has no variability).
    """
    stats = _check_statistics(statistics)
    xa, ya = _as_scores(x, y)
    codes, labels = _encode_groups(groups, xa.shape[0])
    n_groups = len(labels)
    if isinstance(n_resamples, bool) or int(n_resamples) != n_resamples or n_resamples < 0:
        raise ValueError(f"n_resamples must be a non-negative integer, got {n_resamples!r}")
    n_resamples = int(n_resamples)
    if not (0.0 < float(confidence) < 1.0):
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    if n_resamples > 0 and n_groups < 2:
        raise ValueError("the group bootstrap needs at least 2 groups")

    values = {s: _scipy_statistic(xa, ya, s) for s in stats}
    ci = {s: (math.nan, math.nan) for s in stats}
    if n_resamples > 0:
        draws = _bootstrap_draws(n_groups, n_resamples, seed)
        dist = _bootstrap_distribution(xa, ya, codes, n_groups, draws, stats)
        ci = {s: percentile_interval(dist[s], float(confidence)) for s in stats}
    n_rows = int(xa.shape[0])
    return CorrelationResult(
        n_rows=n_rows,
        n_groups=n_groups,
        estimates={s: Estimate(values[s], *ci[s], float(confidence), n_rows, n_resamples, int(seed)) for s in stats},
        n_resamples=n_resamples,
        confidence=float(confidence),
        seed=int(seed),
    )


@dataclass
class RankAgreement:
    """Average within-group rank correlation (Wang & Chan 2019, CVPR, Table 2 "per-image").

    spearman, kendall_tau_b : float
        Mean over the used groups (nan if no group was usable).
    n_groups_used, n_groups_skipped : int
        Groups averaged / groups left out (fewer than 2 rows, or x or y constant in the group).
    """

    spearman: float
    kendall_tau_b: float
    n_groups_used: int
    n_groups_skipped: int


def per_group_rank_agreement(
    x: Sequence[float] | np.ndarray,
    y: Sequence[float] | np.ndarray,
    groups: Sequence[Hashable] | np.ndarray,
) -> RankAgreement:
    """Spearman and Kendall tau-b between x and y within each group, averaged over groups.

    Follows the "per-image" correlation of Wang & Chan (2019, CVPR, Table 2): rank the systems'
    caption sets of one image by metric and by humans, correlate, then average over images.
    Each group's value is computed from that group's rows as given (aggregate repeated
    ratings beforehand if wanted), with scipy.stats.spearmanr and kendalltau (variant 'b').
    Groups with fewer than 2 rows or with constant x or y (correlation undefined) are skipped and
    counted in ``n_groups_skipped``.

    Parameters: x, y float arrays of shape (n,), n >= 2, finite; groups labels of shape (n,).
    Raises ValueError on invalid input (as :func:`correlation` / :func:`correlate`).
    """
    xa, ya = _as_scores(x, y)
    codes, labels = _encode_groups(groups, xa.shape[0])
    order = np.argsort(codes, kind="stable")
    bounds = np.flatnonzero(np.diff(codes[order])) + 1
    rho_sum = tau_sum = 0.0
    used = skipped = 0
    for rows in np.split(order, bounds):
        if rows.size < 2:
            skipped += 1
            continue
        gx, gy = xa[rows], ya[rows]
        rho = _scipy_statistic(gx, gy, "spearman")
        tau = _scipy_statistic(gx, gy, "kendall_tau_b")
        if math.isnan(rho) or math.isnan(tau):
            skipped += 1
            continue
        rho_sum += rho
        tau_sum += tau
        used += 1
    if used == 0:
        return RankAgreement(math.nan, math.nan, 0, skipped)
    return RankAgreement(rho_sum / used, tau_sum / used, used, skipped)
