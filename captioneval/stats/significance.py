"""Significance of differences between metrics' agreement with human judgments.

Django-free: only numpy and scipy are imported.

* :func:`permutation_test` / :class:`PermutationResult` -- paired permutation test of
  ``corr(x1, y) - corr(x2, y)`` (the PERM-BOTH test of Deutsch, Dror & Roth 2021, "A Statistical
  Analysis of Summarization Evaluation Metrics Using Resampling Methods", TACL 9, Sec. 4.3, as
  implemented by google-research/mt-metrics-eval ``stats.PermutationSigDiff``).
* :func:`williams_test` -- Williams (1959) t-test for two dependent Pearson correlations sharing the
  human variable (Steiger 1980, Psychol. Bull. 87(2), Eq. 7 "T2"; Graham & Baldwin 2014, EMNLP,
  Sec. 3; mt-metrics-eval ``stats.WilliamsTest``).
* :func:`compare_metrics` / :class:`MetricComparison` -- all pairwise tests among several metrics
  and significance clusters; :func:`significance_clusters` -- the rank assignment alone
  (mt-metrics-eval ``tasks.AssignRanks`` / ``data.ComputeSigMatrix`` + ``AssignRanks``).

Fast exact permutation test (level "item")
------------------------------------------
Both metrics are z-scored once (``(x - mean) / std``, population std, as scipy.stats.zscore);
every draw only decides, per row, which of the two z-scores goes to which metric. So a draw's
metric-1 scores are a selection of one entry per row from the 2n values ``z1 ∪ z2`` ("entries"),
metric 2 gets the complementary entries. The entries are sorted once by (value, gold rank).

* pearson: sums of x, x^2 and x y are linear in the swap indicators: one matrix product per chunk.
* spearman: the average rank of a value block is ``(#selected entries in earlier blocks) +
  (m + 1) / 2`` (m = selected entries in the block): cumulative sums along the sorted entries.
* Kendall family (tau_b, tau_c, tau_23, pairwise accuracy): pair counts C, D, Tx, Ty, Txy. Ties
  come from the selected counts per value block / per (value, gold) block. The discordant count D
  uses the binary digits of the dense gold rank (as :mod:`captioneval.stats.pairwise`): at bit
  b, within entries sharing the gold prefix ``rank >> (b+1)`` (kept in value order), every selected
  entry with bit b = 0 is discordant with each selected entry with bit b = 1 that precedes it
  (strictly smaller metric value: within equal values the lower gold rank comes first, so ties in
  x are never counted). That is one cumulative sum per bit level. With at most
  ``_BLOCK_MAX_CLASSES`` (64) gold values (rating scales, vote fractions) D comes instead from block
  matrix products (:mod:`captioneval.stats.blockpairs`, the same integers in about a third of the
  time on Flickr8k-CrowdFlower); the bit-level loop is the reference path
  (:func:`captioneval.stats.engine.reference_path`).

Each draw therefore costs O(n log K) vectorised operations (K = distinct gold values) after an
O(n log n) set-up, and gives exactly the statistic scipy would return on the materialised swapped
arrays (up to float rounding of the final division). Draws are processed in chunks of rows of a
2-D array.

Random draws: swap indicators are bits of ``numpy.random.default_rng(seed).bit_generator
.random_raw`` words (each draw uses ceil(n / 64) fresh 64-bit words, bit i of the little-endian
bit string = row i), so each row is swapped with probability exactly 1/2, independently, and the
draws do not depend on the chunk size.
"""

from __future__ import annotations

import contextvars
import math
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Hashable, Mapping, Sequence

import numpy as np
import scipy  # scipy.stats loads on first use (scipy's lazy submodules): half a second of start-up

from captioneval.stats.blockpairs import BlockDiscordance
from captioneval.stats.correlation import _as_scores, _encode_groups
from captioneval.stats.engine import vectorised
from captioneval.stats.results import finite_or_none
from captioneval.stats.pairwise import _check_meta_statistic, _group_values, _statistic_value

__all__ = [
    "LEVELS",
    "TESTS",
    "PermutationResult",
    "permutation_test",
    "williams_test",
    "MetricComparison",
    "compare_metrics",
    "significance_clusters",
    "compare_forced_choice",
]

LEVELS = ("item", "group")
TESTS = ("permutation", "williams")

# Target number of entries (rows x 2n) per work array of the fast permutation path.
_CHUNK_ELEMENTS = 1_500_000
#: gold classes up to which the Kendall family's D comes from block matrix products
_BLOCK_MAX_CLASSES = 64
#: (draws x entries) per chunk on that path: about 30 MB of float32 per matrix, GEMMs of ~80 rows
_BLOCK_CHUNK_ELEMENTS = 8_000_000


# --------------------------------------------------------------------------------------------
# Random swap draws
# --------------------------------------------------------------------------------------------


class _SwapDraws:
    """Independent fair coin per row and draw, from ``default_rng(seed).bit_generator.random_raw``."""

    def __init__(self, n: int, seed: int):
        self.n = n
        self.words = max(1, -(-n // 64))
        self.bitgen = np.random.default_rng(seed).bit_generator

    def next(self, b: int) -> np.ndarray:
        raw = np.asarray(self.bitgen.random_raw(b * self.words), dtype=np.uint64)
        bits = np.unpackbits(raw.view(np.uint8), bitorder="little").reshape(b, self.words * 64)
        return bits[:, : self.n].astype(bool)


# --------------------------------------------------------------------------------------------
# Statistic of y against per-row mixtures of two score vectors
# --------------------------------------------------------------------------------------------


def _zscore(x: np.ndarray) -> np.ndarray:
    """scipy.stats.zscore (ddof=0); a constant vector is only centred (all zeros)."""
    sd = x.std()
    return (x - x.mean()) / sd if sd > 0 else x - x.mean()


def _nibble_table(coef: np.ndarray) -> np.ndarray:
    """Lookup table for ``sum_i s_i coef_i`` over packed bits: shape (2 * ceil(n / 8), 16).

    Entry [k, v] is the sum of the coefficients of the 4 rows of nibble k whose bits are set in v
    (nibble 2j = low half of packed byte j, 2j + 1 = high half). coef must be integer-valued.
    """
    n = coef.shape[0]
    padded = np.zeros(-(-n // 8) * 8, dtype=np.int64)
    padded[:n] = np.asarray(coef, dtype=np.int64)
    bits = (np.arange(16)[:, None] >> np.arange(4)[None, :]) & 1  # (16, 4)
    return padded.reshape(-1, 4) @ bits.T  # (n_nibbles, 16)


def _nibble_dot(table: np.ndarray, swaps: np.ndarray) -> np.ndarray:
    """``swaps @ coef`` (exact int64) for bool swaps (b, n) using :func:`_nibble_table`."""
    packed = np.packbits(swaps, axis=1, bitorder="little")  # (b, ceil(n / 8))
    nib = np.empty((packed.shape[0], packed.shape[1] * 2), dtype=np.intp)
    nib[:, 0::2] = packed & 15
    nib[:, 1::2] = packed >> 4
    return table[np.arange(table.shape[0])[None, :], nib].sum(axis=1)


def _block_starts(change: np.ndarray) -> np.ndarray:
    """Start indices of runs, given ``change[i] = key[i + 1] != key[i]`` for a sorted key."""
    return np.concatenate(([0], np.flatnonzero(change) + 1)).astype(np.int64)


def _labels_from_starts(starts: np.ndarray, size: int) -> np.ndarray:
    lab = np.zeros(size, dtype=np.int64)
    lab[starts[1:]] = 1
    return np.cumsum(lab)


class _MixedStatistic:
    """Statistic of (x', y) where x' takes, per row, either z1 or z2 (see module docstring).

    ``values(S)`` with S bool (b, n), True = row swapped, returns two float arrays (b,): the
    statistic of ``where(S, z2, z1)`` (metric 1 after the swaps) and of ``where(S, z1, z2)``.

    Internally the 2n entries (z1 then z2 values) are sorted by (value, gold rank): "U order".
    ``a`` (b, 2n) marks the entries selected by metric 1; metric 2 selects the complement.
    Quantities linear in ``a`` are computed from the swap indicators directly:
    ``sum_u a_u w_u = sum_i w[e1(i)] + sum_i S_i (w[e2(i)] - w[e1(i)])`` (e1(i) / e2(i) = U
    positions of row i's z1 / z2 value), via a lookup table over packed swap bits
    (:func:`_nibble_table`) or ``bincount`` per value block.

    Kendall: per bit level l (entries reordered by gold prefix, value order kept) with ``ones``
    the entries whose gold bit is 1, ``cs = cumsum(a & ones)`` and
    ``X_l = sum_p (a & ~ones)_p cs_p``; metric 1's discordant count is ``sum_l X_l`` minus the pairs
    across prefix groups. Metric 2 uses ``cs' = cumsum(ones) - cs``; expanding
    ``sum_p (~a & ~ones)_p cs'_p`` gives ``K0 + X - sum_u a_u W_u`` with constants K0 and weights
    ``W_p = ones_p * (#zeros after p) + zeros_p * cumsum(ones)_p``, so one cumulative sum per level
    serves both metrics. Ties: selected counts per run of equal value (and equal (value, gold)),
    read from ``cumsum(a)`` at the run bounds.
    """

    def __init__(self, z1: np.ndarray, z2: np.ndarray, y: np.ndarray, statistic: str):
        n = y.shape[0]
        self.n = n
        self.statistic = statistic
        if statistic == "pearson":
            sd = y.std()
            ys = (y - y.mean()) / sd if sd > 0 else np.zeros(n)
            self.syy = float((ys * ys).sum())
            d = z2 - z1
            self.lin = np.ascontiguousarray(np.stack([d, z2 * z2 - z1 * z1, d * ys], axis=1))  # (n, 3)
            self.base1 = np.array([z1.sum(), (z1 * z1).sum(), (z1 * ys).sum()])
            self.base2 = np.array([z2.sum(), (z2 * z2).sum(), (z2 * ys).sum()])
            return
        vals = np.concatenate([z1, z2])
        rows = np.concatenate([np.arange(n), np.arange(n)])
        _, yc = np.unique(y, return_inverse=True)
        yc = yc.astype(np.int64).ravel()
        order = np.lexsort((yc[rows], vals))  # U order: by value, then gold rank
        self.rows_u = rows[order]
        self.from_z2_u = order >= n
        pos = np.empty(2 * n, dtype=np.int64)
        pos[order] = np.arange(2 * n)
        self.e1 = pos[:n]  # U position of row i's z1 entry
        self.e2 = pos[n:]  # U position of row i's z2 entry
        v = vals[order]
        yu = yc[self.rows_u]
        vchange = v[1:] != v[:-1]
        if statistic == "spearman":
            ry = scipy.stats.rankdata(y)
            ryc = ry - (n + 1) / 2.0
            self.syy = float((ryc * ryc).sum())
            starts = _block_starts(vchange)
            self.nb = int(starts.size)
            lab = _labels_from_starts(starts, 2 * n)
            self.block_sizes = np.bincount(lab, minlength=self.nb).astype(np.float64)
            self.blk1 = lab[self.e1]  # value block of row i's z1 entry
            self.blk2 = lab[self.e2]
            self.blk_diff = self.blk2 - self.blk1
            self._buffers = None
            self.ryc_row = ryc
            self.ry_total = np.bincount(lab, weights=ryc[self.rows_u], minlength=self.nb)
            self.cum_sizes = np.cumsum(self.block_sizes)
            self.s_rt = float(self.block_sizes @ self.ry_total)
            self.cs_rt = float(self.cum_sizes @ self.ry_total)
            self.multi_blocks = np.flatnonzero(self.block_sizes >= 2)
            return
        # Kendall family -------------------------------------------------------------------------
        k = int(yc.max()) + 1
        ycounts = np.bincount(yc).astype(np.int64)
        self.ties_y_all = int((ycounts * (ycounts - 1) // 2).sum())
        self.k_y = k
        self.total = n * (n - 1) // 2
        # runs of equal value / equal (value, gold) in U order; only runs of length >= 2 matter
        self.vb = self._multi_runs(_block_starts(vchange))
        self.vyb = self._multi_runs(_block_starts(vchange | (yu[1:] != yu[:-1])))
        self.levels = []
        lin_w = np.zeros(2 * n)  # sum over levels of the weights W_l (U order)
        self.k0 = 0
        for b in reversed(range(int(k - 1).bit_length())):  # top bit first: U order
            prefix = yu >> (b + 1)
            bit = ((yu >> b) & 1).astype(bool)
            perm = np.argsort(prefix, kind="stable")
            if (perm == np.arange(2 * n)).all():
                perm = None
            p_prefix = prefix if perm is None else prefix[perm]
            ones = bit if perm is None else bit[perm]
            zeros = ~ones
            c_ones = np.cumsum(ones, dtype=np.int64)  # C_p: one-entries at positions <= p
            z_after = int(zeros.sum()) - np.cumsum(zeros, dtype=np.int64)  # zeros at positions > p
            self.k0 += int(np.where(zeros, c_ones, 0).sum())
            w = np.where(ones, z_after, 0) + np.where(zeros, c_ones, 0)
            if perm is None:
                lin_w += w
            else:
                lin_w[perm] += w
            starts = _block_starts(p_prefix[1:] != p_prefix[:-1])
            grouped = None
            if starts.size > 1:
                ends = np.append(starts[1:], 2 * n) - 1  # last position of each prefix group
                # Each row has exactly one selected entry, so a prefix group (a set of gold
                # classes) always holds the same number of selected entries, whatever the draw.
                sel = np.bincount(yc >> (b + 1))[p_prefix[starts]].astype(np.float64)
                c_before = np.concatenate(([0], c_ones[starts[1:] - 1])).astype(np.float64)
                ones_all = np.diff(np.concatenate(([0], c_ones[ends]))).astype(np.float64)
                zeros_all = (ends - starts + 1) - ones_all
                grouped = (starts[1:] - 1, ends, sel, c_before, zeros_all)
            rows_l = self.rows_u if perm is None else self.rows_u[perm]
            not_fz = ~(self.from_z2_u if perm is None else self.from_z2_u[perm])
            self.levels.append((rows_l, not_fz, ones, grouped))
        if not self.levels:  # constant gold: no discordant pairs; keep the U-order pass for ties
            self.levels.append((self.rows_u, ~self.from_z2_u, np.zeros(2 * n, dtype=bool), None))
            self.k0 = 0
        self.lin_lut = _nibble_table(lin_w[self.e2] - lin_w[self.e1])
        self.lin_base = int(lin_w[self.e1].sum())
        self._buffers: tuple | None = None
        # Few gold classes (rating scales, vote fractions): D by block matrix products
        # (captioneval.stats.blockpairs); metric 2's D from metric 1's (see _kendall_counts_blocks).
        self.blocks = None
        if k <= _BLOCK_MAX_CLASSES and BlockDiscordance.fits(2 * n, k):
            self.blocks = BlockDiscordance(yu)
            # per entry p: entries q <= p with gold <= gold_p, and with gold == gold_p (one class at a
            # time: O(n) memory whatever the number of classes)
            at_or_below = np.zeros(2 * n, dtype=np.int64)
            same = np.zeros(2 * n, dtype=np.int64)
            for c in range(k):
                in_c = yu == c
                running = np.cumsum(in_c, dtype=np.int64)
                at_or_below += np.where(yu >= c, running, 0)
                same[in_c] = running[in_c]
            higher_before = np.arange(2 * n) - (at_or_below - 1)  # q < p with gold_q > gold_p
            below_all = np.concatenate(([0], np.cumsum(2 * ycounts)))[yu]  # entries with gold < gold_p
            lower_after = below_all - (at_or_below - same)  # q > p, gold_q < gold_p
            pair_w = higher_before + lower_after  # pairs of the full order that entry p belongs to
            self.block_total = int(lower_after.sum())
            self.block_lut = _nibble_table(pair_w[self.e2] - pair_w[self.e1])
            self.block_base = int(pair_w[self.e1].sum())
            self.not_fz_u = ~self.from_z2_u
            self.tie_runs = self._tie_run_matrix()

    def _multi_runs(self, starts: np.ndarray):
        """(first positions, last positions, lengths) of the runs of length >= 2, or None."""
        lengths = np.diff(np.append(starts, 2 * self.n))
        multi = lengths >= 2
        if not multi.any():
            return None
        first = starts[multi]
        return first, first + lengths[multi] - 1, lengths[multi].astype(np.int64)

    # -- per-chunk evaluation ------------------------------------------------------------------

    def values(self, swaps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self.statistic == "pearson":
            return self._pearson(swaps)
        if self.statistic == "spearman":
            return self._spearman(swaps)
        return self._kendall(swaps)

    def _pearson(self, swaps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        sf = swaps.view(np.uint8).astype(np.float64)
        lin = np.stack([np.einsum("ij,j->i", sf, self.lin[:, k]) for k in range(3)], axis=1)  # (b, 3)
        out = []
        for base, sign in ((self.base1, 1.0), (self.base2, -1.0)):
            sx, sxx, sxy = (base[None, :] + sign * lin).T
            vx = sxx - sx * sx / self.n
            with np.errstate(invalid="ignore", divide="ignore"):
                r = sxy / np.sqrt(vx * self.syy)
            r = np.where((vx > 1e-10 * self.n) & (self.syy > 0), r, np.nan)
            out.append(np.clip(r, -1.0, 1.0))
        return out[0], out[1]

    def _spearman(self, swaps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Spearman from per-value-block selected counts m_b and gold-rank sums R_b.

        With average ranks, block b's centred rank is ``cum_b - m_b / 2 + 1/2 - mid`` (cum_b =
        selected entries in blocks <= b) and ``sum_b R_b = 0`` (every row is selected once), so
        ``cov = sum_b cum_b R_b - sum_b m_b R_b / 2``; ``var = n (n^2 - 1) / 12 - sum_b (m_b^3 - m_b)
        / 12`` (the tie correction of average ranks). Metric 2 uses ``m' = size - m``,
        ``R' = R_total - R``, expanded into dot products with metric 1's arrays.
        """
        n, nb = self.n, self.nb
        b = swaps.shape[0]
        if self._buffers is None or self._buffers[0].shape[0] < b:
            self._buffers = (np.empty((b, n), dtype=np.int64), np.empty((b, nb)), np.empty((b, nb)))
        keys, m1, r1 = (buf[:b] for buf in self._buffers)
        np.multiply(swaps, self.blk_diff, out=keys)
        keys += self.blk1[None, :]
        keys += (np.arange(b, dtype=np.int64) * nb)[:, None]
        flat = keys.reshape(-1)
        np.copyto(m1, np.bincount(flat, minlength=b * nb).reshape(b, nb))
        np.copyto(r1, np.bincount(flat, weights=np.broadcast_to(self.ryc_row, (b, n)).reshape(-1), minlength=b * nb).reshape(b, nb))
        sizes, rtot, csizes = self.block_sizes, self.ry_total, self.cum_sizes
        m1_r1 = np.einsum("ij,ij->i", m1, r1)
        m1_rt = np.einsum("ij,j->i", m1, rtot)
        r1_s = np.einsum("ij,j->i", r1, sizes)
        r1_cs = np.einsum("ij,j->i", r1, csizes)
        np.cumsum(m1, axis=1, out=m1)  # m1 now holds cum1
        cum1_r1 = np.einsum("ij,ij->i", m1, r1)
        cum1_rt = np.einsum("ij,j->i", m1, rtot)
        cov1 = cum1_r1 - 0.5 * m1_r1
        cov2 = (self.cs_rt - r1_cs - cum1_rt + cum1_r1) - 0.5 * (self.s_rt - r1_s - m1_rt + m1_r1)
        var0 = n * (n * n - 1.0) / 12.0
        # tie corrections from the value blocks with >= 2 entries
        if self.multi_blocks.size:
            cum = m1[:, self.multi_blocks]
            prev = np.zeros_like(cum)
            has_prev = self.multi_blocks > 0
            prev[:, has_prev] = m1[:, self.multi_blocks[has_prev] - 1]
            mm1 = cum - prev
            mm2 = self.block_sizes[self.multi_blocks][None, :] - mm1
            t1 = ((mm1 ** 3 - mm1).sum(axis=1)) / 12.0
            t2 = ((mm2 ** 3 - mm2).sum(axis=1)) / 12.0
        else:
            t1 = t2 = np.zeros(b)
        res = []
        for cov, tie in ((cov1, t1), (cov2, t2)):
            var_x = var0 - tie
            with np.errstate(invalid="ignore", divide="ignore"):
                rho = cov / np.sqrt(var_x * self.syy)
            rho = np.where((var_x > 0.5) & (self.syy > 0), rho, np.nan)
            res.append(np.clip(rho, -1.0, 1.0))
        return res[0], res[1]

    @staticmethod
    def _run_ties(cum_a: np.ndarray, a: np.ndarray, runs) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
        """Per metric: (tied pairs inside the runs, sum over runs of max(m - 1, 0)).

        ``cum_a`` (b, 2n): selected entries of metric 1 at U positions <= p; ``a`` the selection.
        """
        b = a.shape[0]
        if runs is None:
            z = np.zeros(b, dtype=np.int64)
            return (z, z), (z, z)
        first, last, length = runs
        m1 = cum_a[:, last].astype(np.int64) - cum_a[:, first] + a[:, first]
        out = []
        for m in (m1, length[None, :] - m1):
            out.append(((m * (m - 1) // 2).sum(axis=1), np.maximum(m - 1, 0).sum(axis=1)))
        return out[0], out[1]

    def _tie_run_matrix(self):
        """Per-run selected counts as a linear function of the swap bits, for the runs of length >= 2
        of equal value (``vb``) then of equal (value, gold) (``vyb``): row i selects its z1 entry
        unless swapped, so the selected count of run r is ``base_r + sum_i S_i (in_r(e2(i)) -
        in_r(e1(i)))``. Returns (base float32 (R,), sparse float32 (R, n) of those +-1 terms) or None."""
        labels, base, offset = [], [], 0
        for runs in (self.vb, self.vyb):
            if runs is None:
                continue
            first, last, length = runs
            run_of = np.full(2 * self.n, -1, dtype=np.int64)  # run of each U position, -1 outside
            starts = np.cumsum(length) - length
            run_of[np.repeat(first - starts, length) + np.arange(int(length.sum()))] = \
                np.repeat(np.arange(len(first)), length)
            r1, r2 = run_of[self.e1], run_of[self.e2]
            labels.append((r1, r2, offset))
            base.append(np.bincount(r1[r1 >= 0], minlength=len(first)))
            offset += len(first)
        if not labels:
            return None
        rows, cols, vals = [], [], []
        for r1, r2, off in labels:
            moved = np.flatnonzero(r1 != r2)
            for run, sign in ((r2, 1.0), (r1, -1.0)):
                keep = moved[run[moved] >= 0]
                rows.append(run[keep] + off)
                cols.append(keep)
                vals.append(np.full(len(keep), sign, dtype=np.float32))
        matrix = scipy.sparse.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                                         shape=(offset, self.n), dtype=np.float32)
        return np.concatenate(base).astype(np.float32), matrix

    @staticmethod
    def _runs_from_counts(m1: np.ndarray, runs):
        """:meth:`_run_ties` from the selected counts ``m1`` (R, b) (float32 integers, one sample per
        column) of the runs: ``sum m (m - 1) / 2 = (sum m^2 - sum m) / 2`` and ``sum max(m - 1, 0) =
        sum m - #{m > 0}``, for metric 1 and for metric 2's counts ``length - m1`` (every term an
        integer below 2**53 in float64: exact)."""
        length = runs[2]
        lf = length.astype(np.float64)
        s1 = m1.sum(axis=0, dtype=np.float64)
        q1 = np.einsum("rb,rb->b", m1, m1, dtype=np.float64)
        lm = np.einsum("r,rb->b", lf, m1, dtype=np.float64)
        s2 = float(lf.sum()) - s1
        q2 = float(lf @ lf) - 2.0 * lm + q1
        nz1 = np.count_nonzero(m1, axis=0)
        nz2 = np.count_nonzero(m1 < lf.astype(np.float32)[:, None], axis=0)
        out = []
        for s_, q, nz in ((s1, q1, nz1), (s2, q2, nz2)):
            out.append((np.rint((q - s_) / 2.0).astype(np.int64), np.rint(s_).astype(np.int64) - nz))
        return out[0], out[1]

    def _kendall_counts_blocks(self, swaps: np.ndarray):
        """As :meth:`_kendall_counts`, D by :class:`BlockDiscordance`. With ``a`` metric 1's
        selection and P the full order's discordant pairs, metric 2 selects ``1 - a``, so
        ``D2 = sum_{q<p} (1 - a_q)(1 - a_p) P_qp = |P| - sum_u a_u w_u + D1`` (w_u: pairs of P that
        entry u belongs to; linear in the swap bits, :func:`_nibble_dot`). The selections are
        gathered as columns (2n, b) (:meth:`BlockDiscordance.counts_columns`); the runs' selected
        counts for the ties are linear in the swap bits too (:meth:`_tie_run_matrix`)."""
        b = swaps.shape[0]
        st = np.ascontiguousarray(swaps.T)  # (n, b)
        at = np.take(st, self.rows_u, axis=0)
        np.logical_xor(at, self.not_fz_u[:, None], out=at)  # entries selected by metric 1, (2n, b)
        d1 = self.blocks.counts_columns(at)
        zero = np.zeros(b, dtype=np.int64)
        ties = {"vb": ((zero, zero), (zero, zero)), "vyb": ((zero, zero), (zero, zero))}
        if self.tie_runs is not None:
            base, matrix = self.tie_runs
            m_all = matrix @ st.view(np.uint8).astype(np.float32)  # exact integers (|m| < 2**24)
            m_all += base[:, None]
            offset = 0
            for name in ("vb", "vyb"):
                runs = getattr(self, name)
                if runs is not None:
                    r = len(runs[0])
                    ties[name] = self._runs_from_counts(m_all[offset:offset + r], runs)
                    offset += r
        (v1, v2), (vy1, vy2) = ties["vb"], ties["vyb"]
        d2 = self.block_total - (_nibble_dot(self.block_lut, swaps) + self.block_base) + d1
        return (d1, v1[0], vy1[0], v1[1]), (d2, v2[0], vy2[0], v2[1])

    def _kendall_counts(self, swaps: np.ndarray):
        """D, Tx_all, Txy and the number of surplus tied entries, for metric 1 and metric 2."""
        if self.blocks is not None and vectorised():
            return self._kendall_counts_blocks(swaps)
        b = swaps.shape[0]
        size = 2 * self.n
        if self._buffers is None or self._buffers[0].shape[0] < b:
            self._buffers = (
                np.empty((b, size), dtype=bool),
                np.empty((b, size), dtype=bool),
                np.empty((b, size), dtype=np.int32),
                np.zeros((b, size), dtype=np.int32),
            )
        abuf, obuf, cs, cum_a = (buf[:b] for buf in self._buffers)
        x_sum = np.zeros(b, dtype=np.int64)
        corr1 = np.zeros(b, dtype=np.float64)
        corr2 = np.zeros(b, dtype=np.float64)
        ties = None
        for level, (rows_l, not_fz, ones, grouped) in enumerate(self.levels):
            np.take(swaps, rows_l, axis=1, out=abuf)
            np.logical_xor(abuf, not_fz, out=abuf)  # a: entries selected by metric 1
            if level == 0:  # U order: counts of selected entries in runs of equal values
                if self.vb is not None or self.vyb is not None:
                    np.cumsum(abuf, axis=1, dtype=np.int32, out=cum_a)
                ties = (self._run_ties(cum_a, abuf, self.vb), self._run_ties(cum_a, abuf, self.vyb))
            np.logical_and(abuf, ones, out=obuf)
            np.cumsum(obuf, axis=1, dtype=np.int32, out=cs)  # selected ones at positions <= p
            if grouped is not None:
                last_before, ends, sel, c_before, zeros_all = grouped
                before1 = np.zeros((b, sel.size))
                before1[:, 1:] = cs[:, last_before]
                ones1 = np.diff(np.concatenate((np.zeros((b, 1)), cs[:, ends].astype(np.float64)), axis=1), axis=1)
                z1 = sel[None, :] - ones1  # selected zeros in each prefix group
                corr1 += (before1 * z1).sum(axis=1)
                corr2 += ((c_before[None, :] - before1) * (zeros_all[None, :] - z1)).sum(axis=1)
            np.greater(abuf, ones, out=obuf)  # selected zeros
            np.multiply(cs, obuf, out=cs)
            x_sum += cs.sum(axis=1, dtype=np.int64)
        lin = _nibble_dot(self.lin_lut, swaps) + self.lin_base
        d1 = x_sum - np.rint(corr1).astype(np.int64)
        d2 = self.k0 + x_sum - lin - np.rint(corr2).astype(np.int64)
        (v1, v2), (vy1, vy2) = ties
        return (d1, v1[0], vy1[0], v1[1]), (d2, v2[0], vy2[0], v2[1])

    def _kendall(self, swaps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        n, total = self.n, self.total
        out = []
        for d, tx_all, txy, excess in self._kendall_counts(swaps):
            tx = tx_all - txy
            ty = self.ties_y_all - txy
            c = (total - d - tx - ty - txy).astype(np.float64)
            df = d.astype(np.float64)
            with np.errstate(invalid="ignore", divide="ignore"):
                if self.statistic == "kendall_tau_b":
                    den = np.sqrt((total - tx_all).astype(np.float64)) * math.sqrt(total - self.ties_y_all)
                    val = np.where((tx_all < total) & (self.ties_y_all < total), (c - df) / den, np.nan)
                elif self.statistic == "kendall_tau_c":
                    k_x = n - excess
                    k = np.minimum(k_x, self.k_y).astype(np.float64)
                    val = np.where((k_x >= 2) & (self.k_y >= 2), 2.0 * (c - df) / (float(n) * n * (k - 1.0) / k), np.nan)
                elif self.statistic == "kendall_tau_23":
                    val = (c + txy - df - tx - ty) / total
                else:  # pairwise_accuracy
                    val = (c + txy) / total
            out.append(val)
        return out[0], out[1]


def _mixed_distribution(z1: np.ndarray, z2: np.ndarray, y: np.ndarray, statistic: str, n_resamples: int, seed: int) -> tuple[float, np.ndarray]:
    """Observed delta stat(z1) - stat(z2) and the deltas of ``n_resamples`` random swap draws."""
    n = y.shape[0]
    engine = _MixedStatistic(z1, z2, y, statistic)
    o1, o2 = engine.values(np.zeros((1, n), dtype=bool))
    observed = float(o1[0] - o2[0])
    deltas = np.empty(n_resamples)
    draws = _SwapDraws(n, seed)
    per_chunk = _BLOCK_CHUNK_ELEMENTS if getattr(engine, "blocks", None) is not None and vectorised() else _CHUNK_ELEMENTS
    chunk = max(1, min(n_resamples, per_chunk // (2 * n)))
    for s in range(0, n_resamples, chunk):
        b = min(chunk, n_resamples - s)
        v1, v2 = engine.values(draws.next(b))
        deltas[s:s + b] = v1 - v2
    return observed, deltas


# --------------------------------------------------------------------------------------------
# Group level: mean over groups of the within-group statistic
# --------------------------------------------------------------------------------------------


def _nanmean_rows(values: np.ndarray) -> np.ndarray:
    ok = ~np.isnan(values)
    cnt = ok.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(cnt > 0, np.where(ok, values, 0.0).sum(axis=1) / cnt, np.nan)


def _group_distribution(g1: np.ndarray, g2: np.ndarray, n_resamples: int, seed: int) -> tuple[float, np.ndarray]:
    """Observed and drawn deltas of mean-over-groups statistics, swapping whole groups."""
    observed = float(_nanmean_rows(g1[None, :])[0] - _nanmean_rows(g2[None, :])[0])
    n_groups = g1.shape[0]
    deltas = np.empty(n_resamples)
    draws = _SwapDraws(n_groups, seed)
    chunk = max(1, _CHUNK_ELEMENTS // max(n_groups, 1))
    for s in range(0, n_resamples, chunk):
        b = min(chunk, n_resamples - s)
        sw = draws.next(b)
        a = np.where(sw, g2[None, :], g1[None, :])
        c = np.where(sw, g1[None, :], g2[None, :])
        deltas[s:s + b] = _nanmean_rows(a) - _nanmean_rows(c)
    return observed, deltas


# --------------------------------------------------------------------------------------------
# Public API: permutation test
# --------------------------------------------------------------------------------------------


@dataclass
class PermutationResult:
    """Result of :func:`permutation_test`.

    delta : statistic(x1, y) - statistic(x2, y) on the observed data.
    p_value : two-sided permutation p-value in (0, 1].
    n_resamples, seed : draws and seed used.
    statistic : name of the statistic.
    """

    delta: float
    p_value: float
    n_resamples: int
    seed: int
    statistic: str
    level: str = "item"
    p_greater: float = math.nan

    def to_dict(self) -> dict:
        return {
            "delta": finite_or_none(self.delta),
            "p_value": finite_or_none(self.p_value),
            "p_greater": finite_or_none(self.p_greater),
            "n_resamples": int(self.n_resamples),
            "seed": int(self.seed),
            "statistic": self.statistic,
            "level": self.level,
        }


def level_for(average_by: str | None, level: str = "item") -> str:
    """The test level for mt-metrics-eval's ``average_by``: "none" -> "item" (the statistic pooled
    over all rows, rows swapped), "item" / "system" -> "group" (mean over groups of the
    within-group statistic, groups swapped; ``groups`` then holds the items, resp. systems).
    ``average_by=None`` returns ``level`` unchanged. ValueError for any other value."""
    if average_by is None:
        return level
    mapping = {"none": "item", "item": "group", "system": "group"}
    if average_by not in mapping:
        raise ValueError(f"unknown average_by {average_by!r}; expected one of {tuple(mapping)}")
    return mapping[average_by]


def _check_common(statistic: str, level: str, n_resamples: Any) -> int:
    _check_meta_statistic(statistic)
    if level not in LEVELS:
        raise ValueError(f"unknown level {level!r}; expected one of {LEVELS}")
    if isinstance(n_resamples, bool) or int(n_resamples) != n_resamples or n_resamples < 1:
        raise ValueError(f"n_resamples must be a positive integer, got {n_resamples!r}")
    return int(n_resamples)


def _tolerance(observed: float) -> float:
    return 1e-12 * max(1.0, abs(observed)) if math.isfinite(observed) else 0.0


def _p_values(observed: float, deltas: np.ndarray) -> tuple[float, float, float]:
    """(two-sided, one-sided "x1 better", one-sided "x2 better") p-values, each (1 + k) / (1 + B).

    Draws with an undefined (nan) delta count as "at least as extreme" (conservative).
    """
    b = deltas.shape[0]
    if not math.isfinite(observed):
        return math.nan, math.nan, math.nan
    tol = _tolerance(observed)
    nan = np.isnan(deltas)
    two = int((nan | (np.abs(deltas) >= abs(observed) - tol)).sum())
    ge = int((nan | (deltas >= observed - tol)).sum())
    le = int((nan | (deltas <= observed + tol)).sum())
    return (1 + two) / (1 + b), (1 + ge) / (1 + b), (1 + le) / (1 + b)


def _validate_pair(x1: Any, x2: Any, y: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    a1, ya = _as_scores(x1, y)
    a2, _ = _as_scores(x2, ya)
    return a1, a2, ya


def _distribution(
    a1: np.ndarray, a2: np.ndarray, ya: np.ndarray, statistic: str, codes: np.ndarray | None,
    level: str, n_resamples: int, seed: int, g1: np.ndarray | None = None, g2: np.ndarray | None = None,
) -> tuple[float, np.ndarray]:
    if level == "item":
        return _mixed_distribution(_zscore(a1), _zscore(a2), ya, statistic, n_resamples, seed)
    if g1 is None:
        g1 = _group_values(a1, ya, codes, statistic)
    if g2 is None:
        g2 = _group_values(a2, ya, codes, statistic)
    return _group_distribution(g1, g2, n_resamples, seed)


def permutation_test(
    x1: Sequence[float] | np.ndarray,
    x2: Sequence[float] | np.ndarray,
    y: Sequence[float] | np.ndarray,
    statistic: str = "kendall_tau_b",
    groups: Sequence[Hashable] | np.ndarray | None = None,
    level: str = "item",
    n_resamples: int = 1000,
    seed: int = 0,
    *,
    average_by: str | None = None,
) -> PermutationResult:
    """Paired permutation test of ``statistic(x1, y) - statistic(x2, y)``.

    PERM-BOTH (Deutsch, Dror & Roth 2021, TACL, Sec. 4.3) as in google-research/mt-metrics-eval
    ``stats.PermutationSigDiff``: each metric's scores are z-scored separately (so the two are on
    one scale and can be exchanged); under the null hypothesis that both metrics agree equally
    with the humans, exchanging a row's two (z-scored) metric scores does not change the
    distribution of the difference. Each of ``n_resamples`` draws swaps ``x1[i]`` and ``x2[i]``
    with probability 1/2 independently per swap unit and recomputes the difference.

    Levels:

    * ``"item"`` (default): the statistic is pooled over all rows (mt-metrics-eval
      ``average_by='none'``); the swap unit is the row; ``groups`` is not used.
    * ``"group"``: the statistic is the mean over groups of the within-group statistic (e.g.
      per-image agreement, mt-metrics-eval ``average_by='item'``); groups with < 2 rows or constant
      x or y in the group are left out of that metric's mean (as :func:`per_group_correlation`).
      The swap unit is the whole group (all its rows are swapped together), so a draw flips the
      sign of each group's difference: a paired sign-flip test on per-group values. (mt-metrics-eval
      swaps single rows inside groups instead; swapping groups keeps the within-group rankings of
      one metric intact and respects the dependence between rows of one group.) Within-group
      statistics are invariant to z-scoring, so none is applied.

    p-value: two-sided, ``p = (1 + #{draws with |delta_draw| >= |delta_obs|}) / (1 + n_resamples)``
    (Phipson & Smyth 2010, "Permutation P-values Should Never Be Zero", SAGMB 9(1); the +1 counts
    the observed arrangement, so p is never 0). mt-metrics-eval reports the one-sided share
    ``#{delta_draw >= delta_obs} / k``; the one-sided "x1 better" p-value with the +1 is
    ``PermutationResult.p_greater``. A tolerance of 1e-12 (relative) treats float ties as ties.

    Parameters
    ----------
    x1, x2, y : array-like of float, shape (n,), n >= 2, finite
        Two metrics' scores and the gold (human) scores of the same rows.
    statistic : one of :data:`captioneval.stats.pairwise.META_STATISTICS`
        "pearson", "spearman", "kendall_tau_b", "kendall_tau_c", "kendall_tau_23",
        "pairwise_accuracy" (the last two with exact metric ties, epsilon = 0).
    groups : labels of shape (n,); required for level "group".
    level : "item" or "group".
    n_resamples : int >= 1
    average_by : keyword-only, the same choice in mt-metrics-eval's terms; overrides ``level``:
        "none" = level "item"; "item" or "system" = level "group" with ``groups`` holding the
        item (resp. system) of each row (:func:`level_for`).
    seed : int; the swap bits come from ``numpy.random.default_rng(seed)`` (module docstring).

    Returns
    -------
    PermutationResult(delta, p_value in (0, 1], n_resamples, seed, statistic) (+ level, p_greater).
    delta / p_value are nan if a statistic is undefined on the observed data.

    Cost: level "item" is exact and O(n log n + n_resamples * n log K) (module docstring): about
    1 s for n = 47,830 rows, 11 distinct gold values and 1,000 draws with a Kendall statistic
    (0.2 s for pearson) on a 2-core machine, vs ~17 s for scipy on materialised draws
    (benchmarks/significance_speed.py). Level "group" computes each group's statistic once, then
    the draws cost O(n_resamples * G).

    Raises
    ------
    ValueError
        Invalid arrays (not 1-D, unequal length, n < 2, not finite), unknown statistic or level,
        level "group" without groups, n_resamples < 1.
    """
    level = level_for(average_by, level)
    n_resamples = _check_common(statistic, level, n_resamples)
    a1, a2, ya = _validate_pair(x1, x2, y)
    codes = None
    if level == "group":
        if groups is None:
            raise ValueError('level "group" needs groups')
        codes, _ = _encode_groups(groups, ya.shape[0])
    observed, deltas = _distribution(a1, a2, ya, statistic, codes, level, n_resamples, int(seed))
    two, greater, _ = _p_values(observed, deltas)
    return PermutationResult(
        delta=observed,
        p_value=two,
        n_resamples=n_resamples,
        seed=int(seed),
        statistic=statistic,
        level=level,
        p_greater=greater,
    )


# --------------------------------------------------------------------------------------------
# Williams' test
# --------------------------------------------------------------------------------------------


def williams_test(r12: float, r13: float, r23: float, n: int) -> tuple[float, float]:
    """Williams' (1959) t-test for the difference between two dependent Pearson correlations
    that share variable 1 (the human scores): r12 = corr(human, metric A), r13 = corr(human,
    metric B), r23 = corr(metric A, metric B), on the same n items.

    ``t = (r12 - r13) sqrt((n - 1)(1 + r23)) /
    sqrt(2 K (n - 1) / (n - 3) + ((r12 + r13)^2 / 4)(1 - r23)^3)``,
    ``K = 1 - r12^2 - r13^2 - r23^2 + 2 r12 r13 r23``, with n - 3 degrees of freedom
    (Williams 1959, "Regression Analysis", Wiley; Steiger 1980, Psychol. Bull. 87(2):245-251, Eq. 7;
    used for WMT metrics by Graham & Baldwin 2014, EMNLP, Sec. 3; mt-metrics-eval
    ``stats.WilliamsTest``).

    Returns
    -------
    (t, p): t statistic and the one-sided p-value of "r12 > r13", ``p = P(T_{n-3} >= t)``
    (scipy.stats.t.sf). p > 0.5 when r12 < r13. (mt-metrics-eval returns ``sf(|t|)``, the
    one-sided p in the observed direction; the two-sided p is ``2 * sf(|t|)``.)

    Raises
    ------
    ValueError
        n <= 3 (no degrees of freedom), a correlation outside [-1, 1] or nan, or a correlation
        matrix that is not positive semi-definite (K < 0).
    """
    try:
        rs = [float(r12), float(r13), float(r23)]
    except (TypeError, ValueError) as exc:
        raise ValueError(f"correlations must be numbers: {exc}") from exc
    if isinstance(n, bool) or int(n) != n or n <= 3:
        raise ValueError(f"williams_test needs an integer n > 3, got {n!r}")
    for r in rs:
        if not (-1.0 <= r <= 1.0):
            raise ValueError(f"correlations must be in [-1, 1], got {rs}")
    a, b, c = rs
    n = int(n)
    k = 1.0 - a * a - b * b - c * c + 2.0 * a * b * c
    if k < -1e-12:
        raise ValueError(f"r12, r13, r23 = {rs} is not a valid correlation matrix (K = {k:.3g} < 0)")
    k = max(k, 0.0)
    num = (a - b) * math.sqrt((n - 1) * (1.0 + c))
    den = math.sqrt(2.0 * k * (n - 1) / (n - 3) + ((a + b) ** 2 / 4.0) * (1.0 - c) ** 3)
    if den == 0.0:
        t = 0.0 if num == 0.0 else math.copysign(math.inf, num)
    else:
        t = num / den
    p = float(scipy.stats.t.sf(t, n - 3))
    return float(t), p


# --------------------------------------------------------------------------------------------
# Comparing several metrics
# --------------------------------------------------------------------------------------------


def significance_clusters(names_sorted: Sequence[str], p_matrix: Any, alpha: float = 0.05, *, inclusive: bool = False) -> dict[str, int]:
    """Significance clusters (ranks) of metrics sorted best first, as mt-metrics-eval
    ``AssignRanks`` (google-research/mt-metrics-eval, ``tasks.py`` / ``data.py``).

    Walking down the sorted list with ``start`` = first metric of the current rank (rank 1 at the
    top): metric j starts a new rank (``rank + 1``, ``start = j``) if some metric i with
    ``start <= i < j`` is significantly better than j, i.e. ``p_matrix[i][j] < alpha``;
    otherwise j shares the current rank. Ranks are 1-based and consecutive; a metric in rank r is
    not significantly worse than any other metric of rank r that precedes it.

    Parameters
    ----------
    names_sorted : metric names, best first (length m).
    p_matrix : (m, m) array-like; ``p_matrix[i][j]`` = p-value that metric i beats metric j (only
        entries with i < j are read). nan entries count as not significant.
    alpha : significance level in (0, 1).
    inclusive : keyword-only; if True use ``p <= alpha`` like mt-metrics-eval's code (which
        compares ``<= pval``); the default ``p < alpha`` is the usual convention.

    Returns dict name -> rank. Raises ValueError for a non-square matrix, a size different from
    the number of names, duplicate names or alpha outside (0, 1).
    """
    names = list(names_sorted)
    p = np.asarray(p_matrix, dtype=np.float64)
    m = len(names)
    if p.ndim != 2 or p.shape != (m, m):
        raise ValueError(f"p_matrix must have shape ({m}, {m}), got {p.shape}")
    if len(set(names)) != m:
        raise ValueError("metric names must be distinct")
    if not (0.0 < float(alpha) < 1.0):
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    ranks: dict[str, int] = {}
    rank, start = 1, 0
    for j in range(m):
        col = p[start:j, j]
        sig = (col <= alpha) if inclusive else (col < alpha)
        if j > 0 and bool(np.any(sig & ~np.isnan(col))):
            rank += 1
            start = j
        ranks[names[j]] = rank
    return ranks


@dataclass
class MetricComparison:
    """Result of :func:`compare_metrics`.

    names : metric names sorted by their statistic, best first (nan values last).
    values : name -> statistic (pooled, or mean over groups for level "group").
    p_values : (m, m) nested list in ``names`` order; ``[i][j]`` = one-sided p-value that metric i
        beats metric j (small = i significantly better); nan on the diagonal.
    ranks : name -> significance cluster (1 = best), see :func:`significance_clusters`.
    alpha, test, n_resamples, seed, statistic : settings (n_resamples = 0 for Williams).
    """

    names: list
    values: dict
    p_values: list
    ranks: dict
    alpha: float
    test: str
    n_resamples: int
    seed: int
    statistic: str
    level: str = "item"
    deltas: list = field(default_factory=list)

    def to_dict(self) -> dict:
        """JSON-safe dict (nan -> None)."""
        return {
            "names": list(self.names),
            "values": {k: finite_or_none(v) for k, v in self.values.items()},
            "p_values": [[finite_or_none(v) for v in row] for row in self.p_values],
            "ranks": {k: int(v) for k, v in self.ranks.items()},
            "alpha": float(self.alpha),
            "test": self.test,
            "n_resamples": int(self.n_resamples),
            "seed": int(self.seed),
            "statistic": self.statistic,
            "level": self.level,
            "deltas": [[finite_or_none(v) for v in row] for row in self.deltas],
        }


def pair_seed(seed: int, name_a: str, name_b: str) -> int:
    """Seed of the permutation test between two metrics in :func:`compare_metrics`.

    Derived with ``numpy.random.SeedSequence([seed, crc32(a), crc32(b)])`` with (a, b) the two
    names in sorted order, so it depends neither on the order of the metrics nor on which other
    metrics are compared. ``permutation_test(x_a, x_b, y, seed=pair_seed(seed, a, b))`` reproduces
    the pair's draws.
    """
    a, b = sorted([str(name_a), str(name_b)])
    ss = np.random.SeedSequence([int(seed) & 0xFFFFFFFF, zlib.crc32(a.encode()), zlib.crc32(b.encode())])
    return int(ss.generate_state(1, dtype=np.uint64)[0] >> np.uint64(1))


def compare_metrics(
    scores: Mapping[str, Sequence[float] | np.ndarray],
    y: Sequence[float] | np.ndarray,
    statistic: str = "kendall_tau_b",
    groups: Sequence[Hashable] | np.ndarray | None = None,
    level: str = "item",
    test: str = "permutation",
    n_resamples: int = 1000,
    seed: int = 0,
    alpha: float = 0.05,
    *,
    n_jobs: int = 1,
    average_by: str | None = None,
) -> MetricComparison:
    """Rank metrics by their agreement with human scores and test every pair of them.

    1. Each metric's value: the pooled statistic (level "item") or the mean over groups of the
       within-group statistic (level "group"), see :func:`permutation_test`. Metrics are sorted by
       value, best (largest) first; ties keep the input order; nan values go last.
    2. p-values for every pair (i, j) of the sorted list:

       * ``test="permutation"``: one paired permutation test per pair (as :func:`permutation_test`,
         same level, ``n_resamples`` draws, seed :func:`pair_seed` (seed, name_i, name_j)).
         ``p_values[i][j]`` is the ONE-sided p-value that metric i is better than j,
         ``(1 + #{delta_draw >= delta_obs}) / (1 + B)`` with ``delta = stat_i - stat_j``, and
         ``p_values[j][i] = (1 + #{delta_draw <= delta_obs}) / (1 + B)`` from the same draws
         (mt-metrics-eval ``PermutationSigDiff`` is one-sided in the same way). For the better
         metric this is about half the two-sided p-value of :func:`permutation_test`.
       * ``test="williams"`` (statistic "pearson", level "item" only): ``p_values[i][j]`` is the
         one-sided p of :func:`williams_test` (r_i, r_j, corr(x_i, x_j), n), Graham & Baldwin 2014.

    3. ``ranks`` = :func:`significance_clusters` (names, p_values, alpha) (mt-metrics-eval
       AssignRanks): a metric starts a new cluster if it is significantly worse (p < alpha) than any
       metric from the start of the current cluster down to it.

    Parameters
    ----------
    scores : mapping name -> float array of shape (n,) (at least 2 metrics, finite).
    y : gold scores, shape (n,).
    statistic, groups, level, n_resamples, seed : as in :func:`permutation_test`.
    test : "permutation" or "williams".
    alpha : significance level in (0, 1).
    average_by : keyword-only; mt-metrics-eval's name for the level, overrides ``level``
        (see :func:`level_for`).
    n_jobs : keyword-only; threads used for the pairs (numpy releases the GIL in the heavy
        operations). Results do not depend on it.

    Returns
    -------
    MetricComparison (deterministic given the inputs and seed).

    Raises
    ------
    ValueError
        Fewer than 2 metrics; invalid arrays; unknown statistic, level or test; Williams with a
        statistic other than pearson or with level "group"; alpha outside (0, 1); n_resamples < 1
        for the permutation test; level "group" without groups.
    """
    level = level_for(average_by, level)
    if test not in TESTS:
        raise ValueError(f"unknown test {test!r}; expected one of {TESTS}")
    _check_meta_statistic(statistic)
    if level not in LEVELS:
        raise ValueError(f"unknown level {level!r}; expected one of {LEVELS}")
    if test == "williams" and (statistic != "pearson" or level != "item"):
        raise ValueError('the Williams test applies to statistic="pearson" at level="item" only')
    if test == "permutation":
        n_resamples = _check_common(statistic, level, n_resamples)
    if not (0.0 < float(alpha) < 1.0):
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    names_in = [str(k) for k in scores.keys()]
    if len(names_in) < 2:
        raise ValueError("compare_metrics needs at least 2 metrics")
    if len(set(names_in)) != len(names_in):
        raise ValueError("metric names must be distinct as strings")
    arrays: dict[str, np.ndarray] = {}
    ya = None
    for key, name in zip(scores.keys(), names_in):
        xa, ya_ = _as_scores(scores[key], y)
        if ya is None:
            ya = ya_
        elif xa.shape[0] != ya.shape[0]:  # pragma: no cover - _as_scores checks lengths
            raise ValueError("metrics differ in length")
        arrays[name] = xa
    codes = None
    if level == "group":
        if groups is None:
            raise ValueError('level "group" needs groups')
        codes, _ = _encode_groups(groups, ya.shape[0])

    group_vals: dict[str, np.ndarray] = {}
    values: dict[str, float] = {}
    for name in names_in:
        if level == "item":
            values[name] = _statistic_value(arrays[name], ya, statistic)
        else:
            group_vals[name] = _group_values(arrays[name], ya, codes, statistic)
            gv = group_vals[name]
            values[name] = float(np.nanmean(gv)) if np.isfinite(gv).any() else math.nan

    def sort_key(item):
        idx, name = item
        v = values[name]
        return (1, 0.0, idx) if math.isnan(v) else (0, -v, idx)

    names = [name for _, name in sorted(enumerate(names_in), key=sort_key)]
    m = len(names)
    p = np.full((m, m), np.nan)
    deltas = np.full((m, m), np.nan)

    if test == "williams":
        n = ya.shape[0]
        for i in range(m):
            for j in range(i + 1, m):
                a, b = arrays[names[i]], arrays[names[j]]
                r12, r13 = values[names[i]], values[names[j]]
                r23 = _statistic_value(a, b, "pearson")
                if any(math.isnan(v) for v in (r12, r13, r23)):
                    continue
                t, pij = williams_test(min(1.0, max(-1.0, r12)), min(1.0, max(-1.0, r13)), min(1.0, max(-1.0, r23)), n)
                p[i, j] = pij
                p[j, i] = 1.0 - pij
                deltas[i, j], deltas[j, i] = r12 - r13, r13 - r12
        n_resamples_out = 0
    else:
        tasks = [(i, j) for i in range(m) for j in range(i + 1, m)]

        def run(task):
            i, j = task
            a, b = names[i], names[j]
            s = pair_seed(seed, a, b)
            obs, dist = _distribution(
                arrays[a], arrays[b], ya, statistic, codes, level, n_resamples, s,
                group_vals.get(a), group_vals.get(b),
            )
            _, ge, le = _p_values(obs, dist)
            return i, j, obs, ge, le

        if n_jobs is None or int(n_jobs) <= 1:
            results = [run(t) for t in tasks]
        else:
            with ThreadPoolExecutor(max_workers=int(n_jobs)) as pool:  # each task in a copy of the caller's context
                results = list(pool.map(lambda t: contextvars.copy_context().run(run, t), tasks))
        for i, j, obs, ge, le in results:
            p[i, j], p[j, i] = ge, le
            deltas[i, j], deltas[j, i] = obs, -obs
        n_resamples_out = n_resamples

    ranks = significance_clusters(names, p, float(alpha))
    return MetricComparison(
        names=names,
        values={name: values[name] for name in names},
        p_values=p.tolist(),
        ranks=ranks,
        alpha=float(alpha),
        test=test,
        n_resamples=n_resamples_out,
        seed=int(seed),
        statistic=statistic,
        level=level,
        deltas=deltas.tolist(),
    )


def compare_forced_choice(
    correct: Mapping[str, Sequence[float] | np.ndarray],
    n_resamples: int = 1000,
    seed: int = 0,
    alpha: float = 0.05,
) -> MetricComparison:
    """Significance between metrics' forced-choice accuracies on the same pairs (PASCAL-50S).

    ``correct[name]`` holds, per pair (shape (n,), the same pairs in the same order for every
    metric), 1 if the metric preferred the human majority's caption, 0 if not, 1/2 on a metric tie
    (:func:`captioneval.stats.forced_choice_accuracy`'s convention). The accuracy is its mean.

    Test: the paired permutation test of :func:`permutation_test` specialised to accuracy: swapping
    the two metrics' outcomes of a pair with probability 1/2 flips the sign of the pair's difference
    d_k = c1_k - c2_k, so a draw's accuracy difference is mean(s_k d_k) with independent fair signs
    s_k (a sign-flip test; Fisher 1935, as in mt-metrics-eval's PermutationSigDiff). One-sided
    p-value that metric i beats j: (1 + #{draws with mean(s d) >= mean(d)}) / (1 + n_resamples),
    with seeds from :func:`pair_seed`. Metrics are sorted by accuracy (best first) and grouped by
    :func:`significance_clusters`.

    Raises ValueError for fewer than 2 metrics, arrays of unequal length or shape, values outside
    [0, 1] or non-finite, n_resamples < 1 or alpha outside (0, 1).
    """
    names_in = list(correct)
    if len(names_in) < 2:
        raise ValueError("compare_forced_choice needs at least 2 metrics")
    arrays = {k: np.asarray(v, dtype=float) for k, v in correct.items()}
    n = {a.shape for a in arrays.values()}
    if len(n) != 1 or len(next(iter(n))) != 1 or next(iter(n))[0] < 1:
        raise ValueError("every metric needs a 1-D array of per-pair outcomes of the same length")
    for k, a in arrays.items():
        if not np.all(np.isfinite(a)) or a.min() < 0 or a.max() > 1:
            raise ValueError(f"outcomes of {k!r} must be in [0, 1]")
    if int(n_resamples) != n_resamples or n_resamples < 1:
        raise ValueError(f"n_resamples must be a positive integer, got {n_resamples!r}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    values = {k: float(a.mean()) for k, a in arrays.items()}
    names = [k for _, k in sorted(enumerate(names_in), key=lambda t: (-values[t[1]], t[0]))]
    m = len(names)
    p = [[math.nan] * m for _ in range(m)]
    deltas = [[math.nan] * m for _ in range(m)]
    for i in range(m):
        for j in range(i + 1, m):
            a, b = names[i], names[j]
            d = arrays[a] - arrays[b]
            observed = float(d.mean())
            rng = np.random.default_rng(pair_seed(seed, a, b))
            draws = np.empty(int(n_resamples))
            for start in range(0, int(n_resamples), 256):
                k = min(256, int(n_resamples) - start)
                signs = rng.integers(0, 2, size=(k, d.size), dtype=np.int8) * 2 - 1
                draws[start:start + k] = signs @ d / d.size
            tol = 1e-12 * max(1.0, abs(observed))
            p[i][j] = (1 + int(np.sum(draws >= observed - tol))) / (1 + int(n_resamples))
            p[j][i] = (1 + int(np.sum(-draws >= -observed - tol))) / (1 + int(n_resamples))
            deltas[i][j], deltas[j][i] = observed, -observed
    ranks = significance_clusters(names, p, alpha)
    return MetricComparison(
        names=names, values=values, p_values=p, ranks=ranks, alpha=float(alpha), test="permutation (sign flip)",
        n_resamples=int(n_resamples), seed=int(seed), statistic="accuracy", level="item", deltas=deltas,
    )
