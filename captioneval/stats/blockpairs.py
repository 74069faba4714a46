"""Discordant pair counts of many weighted selections of one ordered list at once, as matrix
products (the inner loop of the permutation test and of the item bootstrap of Kendall's tau).

Django-free: only numpy is imported.

Setting: L entries in a fixed order (sorted by metric value, ties by gold value), each with an
integer gold class ``g`` (dense rank 0..K-1 of the human score). A sample is a vector of
non-negative integer weights ``a`` over the entries (0/1 for a permutation draw's selected entries,
multinomial counts for a bootstrap resample). Its discordant count is

    D(a) = sum over entry pairs q < p of  a_q * a_p * [g_q > g_p]

the number of pairs of the sample (entries repeated by their weights) with a strictly smaller
metric value and a strictly larger gold value: within equal metric values the order puts lower
gold first, so pairs tied in x are never counted, exactly as Kendall's D (Kendall 1938; Knight
1966 counts the same pairs by merge sort).

How: the entries are cut into blocks of ``block`` consecutive entries (the last padded with weight
0). For block t with weight rows A_t (b, B), one matrix product with the constant
``M_t = [ U_t | Y_t ]`` gives both parts:

* ``U_t[q, p] = [q < p][g_q > g_p]`` (B x B): ``sum_p (A_t U_t)[:, p] * A_t[:, p]`` is the
  within-block part;
* ``Y_t[q, k] = [g_q == k]`` (B x K): ``c_t = A_t Y_t`` are the block's weights per gold class.
  The cross-block part is ``sum_t sum_k c_t[k] * (weight in earlier blocks with gold > k)``,
  exclusive cumulative sums over classes and blocks.

Exactness: every product and partial sum is an integer. The matrix products and the sums over
earlier blocks run in float32, whose integers are exact below 2**24: every entry of ``A_t M_t`` and
every running class sum is at most the sample's total weight, which is checked (float64 products
otherwise); the within-block and cross products are summed per block in float32 when a block's
parts stay below 2**24 (its within part is at most W^2 / 2 and its cross part W times the total
weight, W the block's weight), else multiplied and summed in float64, and the blocks' sums are
added in float64 (exact below 2**53: D is at most the total weight squared over 2) and returned as
int64. So D is the same integer that a
pair-by-pair count, scipy.stats.kendalltau's merge-sort count, or the bit-level cumulative sums of
:mod:`captioneval.stats.significance` give.

Cost per sample: L (B + 2K) multiply-adds in BLAS (OpenBLAS sgemm) plus O(L K / B) for the
cross part, against O(L log K) passes of cumulative sums; about 10x faster at L = 95,660,
K = 12, B = 64 (``benchmarks/report_speed.py``). Samples are the columns of the products
(:meth:`BlockDiscordance.counts_columns`).
"""
from __future__ import annotations

import numpy as np

__all__ = ["BlockDiscordance", "integer_cumsum"]

#: float32 holds every integer below this exactly
_F32_EXACT = 2 ** 24
#: largest constant block matrix a caller should build (:meth:`BlockDiscordance.fits`)
MAX_MATRIX_BYTES = 256 * 2 ** 20


class BlockDiscordance:
    """Discordant counts :math:`D(a)` (see the module docstring) of weight rows over one ordered list.

    gold: int array (L,), dense gold classes 0..K-1 of the entries in their fixed order (the order
    must be by metric value, ties by gold ascending, for D to be Kendall's discordant count).
    block: block size B (default 64; 32-128 are all near the optimum of OpenBLAS on AVX2).
    Raises ValueError for a gold array that is not 1-D non-negative integers.
    """

    def __init__(self, gold: np.ndarray, block: int = 64):
        g = np.asarray(gold)
        if g.ndim != 1 or (g.size and (g.min() < 0 or not np.issubdtype(g.dtype, np.integer))):
            raise ValueError("gold must be a 1-D array of non-negative integer classes")
        self.length = int(g.size)
        self.block = int(block)
        self.k = int(g.max()) + 1 if g.size else 1
        self.n_blocks = max(1, -(-self.length // self.block))
        padded = np.zeros(self.n_blocks * self.block, dtype=np.int64)
        padded[: self.length] = g
        gb = padded.reshape(self.n_blocks, self.block)
        # [U | Y | Y G] with G[k', k] = [k' > k]: one product gives the within-block rows, the
        # weight per gold class and the weight with gold above each class. Stored transposed,
        # (T, B + 2K, B) (the samples are the columns of each block's product): row p of U^T is
        # [q < p][g_q > g_p] over q, row k of Y^T is [g_q == k], row k of (Y G)^T is [g_q > k]
        bs, k = self.block, self.k
        g_q = gb[:, None, :]
        classes = np.arange(k)[None, :, None]
        m = np.empty((self.n_blocks, bs + 2 * k, bs), dtype=np.float32)
        m[:, :bs] = (g_q > gb[:, :, None]) & np.tril(np.ones((bs, bs), dtype=bool), k=-1)[None]
        m[:, bs:bs + k] = g_q == classes
        m[:, bs + k:] = g_q > classes
        self._m32 = m
        self._m64 = None

    @staticmethod
    def fits(length: int, k: int, block: int = 64) -> bool:
        """Whether the constant matrices for ``length`` entries and ``k`` gold classes (float32,
        (T, B + 2K, B)) stay within :data:`MAX_MATRIX_BYTES`; callers keep their loop otherwise."""
        blocks = max(1, -(-int(length) // block))
        return blocks * block * (block + 2 * int(k)) * 4 <= MAX_MATRIX_BYTES

    def counts(self, a: np.ndarray) -> np.ndarray:
        """D of every row of ``a``: int64 array (b,).

        a: non-negative integer weights, shape (b, L) (bool, integer or integer-valued float).
        Raises ValueError for another shape. Same as ``counts_columns(a.T)``.
        """
        a = np.asarray(a)
        if a.ndim != 2 or a.shape[1] != self.length:
            raise ValueError(f"weights must have shape (b, {self.length}), got {a.shape}")
        return self.counts_columns(a.T)

    def counts_columns(self, at: np.ndarray) -> np.ndarray:
        """D of every column of ``at``: int64 array (b,).

        at: non-negative integer weights, shape (L, b), one sample per column (bool, integer or
        integer-valued float): the layout of a count matrix (entries x resamples) and of gathered
        permutation draws, so no transposition is needed.
        Raises ValueError for another shape.

        Per block one GEMM ``r_t = M_t^T A_t`` (A_t (B, b)); the weights with gold above each class
        in the earlier blocks are an exclusive :func:`integer_cumsum` over the blocks (numpy's
        ``cumsum`` along an outer axis is several times slower).
        """
        at = np.asarray(at)
        if at.ndim != 2 or at.shape[0] != self.length:
            raise ValueError(f"weights must have shape ({self.length}, b), got {at.shape}")
        b = at.shape[1]
        if b == 0:
            return np.zeros(0, dtype=np.int64)
        # the largest sum a float32 product or running sum can hold: the sample's total weight
        total = self.length if at.dtype == bool else float(at.sum(axis=0, dtype=np.float64).max())
        exact32 = total < _F32_EXACT
        dtype = np.float32 if exact32 else np.float64
        if exact32:
            m = self._m32
        else:
            if self._m64 is None:
                self._m64 = self._m32.astype(np.float64)
            m = self._m64
        nb, bs, k = self.n_blocks, self.block, self.k
        a3 = np.zeros((nb * bs, b), dtype=dtype)
        a3[: self.length] = at
        a3 = a3.reshape(nb, bs, b)
        r = np.matmul(m, a3)  # (T, B + 2K, b)
        above = r[:, bs + k:]  # weight with gold above each class, per block
        before = integer_cumsum(above.reshape(nb, k * b)).reshape(nb, k, b) - above  # ... in the earlier blocks
        # a block's within part is at most W_t^2 / 2 and its cross part W_t * total (W_t: the block's
        # weight): summed per block in float32 when both stay exact, then over the blocks in float64
        if at.dtype == bool:
            block_max = float(bs)
        elif exact32:
            block_max = float(r[:, bs:bs + k].sum(axis=1).max())  # the class weights add up to W_t
        else:
            block_max = np.inf
        if block_max * block_max / 2 < _F32_EXACT and block_max * total < _F32_EXACT:
            within = np.einsum("tpb,tpb->tb", r[:, :bs], a3).sum(axis=0, dtype=np.float64)
            cross = np.einsum("tkb,tkb->tb", r[:, bs:bs + k], before).sum(axis=0, dtype=np.float64)
        else:
            within = np.einsum("tpb,tpb->b", r[:, :bs], a3, dtype=np.float64)
            cross = np.einsum("tkb,tkb->b", r[:, bs:bs + k], before, dtype=np.float64)
        return np.rint(within + cross).astype(np.int64)


def integer_cumsum(x: np.ndarray, block: int = 64) -> np.ndarray:
    """``np.cumsum(x, axis=0)`` of a 2-D array (n, b) of integer-valued floats or integers, several
    times faster for tall arrays: numpy accumulates along an outer axis one element column at a time
    (about 16 ns per element at (47,000, 21)), here the rows are cut into blocks of ``block``, summed
    within the blocks by ``block - 1`` row additions over all blocks at once, and the block totals
    added after. Every partial sum is an integer, so the result is the same as numpy's whatever the
    order (for floats as long as the sums stay below 2**53; callers pass counts). Returns a new array
    of ``x``'s dtype; raises ValueError for an array that is not 2-D."""
    x = np.asarray(x)
    if x.ndim != 2:
        raise ValueError(f"expected a 2-D array, got shape {x.shape}")
    n, b = x.shape
    blocks = max(1, -(-n // block))
    out = np.zeros((blocks * block, b), dtype=x.dtype)
    out[:n] = x
    p = out.reshape(blocks, block, b)
    for j in range(1, block):
        p[:, j] += p[:, j - 1]
    totals = p[:, -1].copy()  # (blocks, b): each block's sum
    for t in range(1, blocks):
        totals[t] += totals[t - 1]
    p[1:] += totals[:-1, None, :]
    return out[:n]
