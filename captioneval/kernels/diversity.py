"""Diversity of caption sets (Wang & Chan, CVPR 2019; numpy + scipy.sparse, no Django).

Q. Wang and A. B. Chan, "Describing like humans: on diversity in image captioning", CVPR 2019
(and the TPAMI follow-up "On diversity in image captioning: metrics and methods"). A *caption
set* ``C = {c_1 .. c_m}`` holds the ``m`` captions one system produced for one image. Captions
are tokenised strings (lower-cased, punctuation removed, tokens separated by whitespace: the
output of :func:`captioneval.text.tokenizer.ptb_tokenize`); tokens are ``str.split()``.

Functions (all vectorised over many sets at once)
-------------------------------------------------
* :func:`self_cider_kernel`, :func:`self_cider` -- Self-CIDEr diversity (paper Sec. 3.2): LSA in
  the feature space of the CIDEr-D kernel.
* :func:`lsa_diversity` -- LSA diversity on bag-of-words counts (paper Sec. 3.1).
* :func:`mbleu` -- mBLEU-1..4 and mBLEU-mix (paper appendix A.1, Eq. 4; Shetty et al. 2017).
* :func:`accuracy`, :func:`leave_one_out_accuracy`, :func:`f_score` -- accuracy of a set, human
  leave-one-out accuracy and their F-measure with diversity (paper Sec. 5 "Evaluation metrics").
* :func:`vocabulary`, :func:`word_frequency_curve` -- vocabulary size and ranked word
  frequencies of a system's captions (paper Figs. 2-3).
* :func:`latent_coordinates`, :func:`mds_coordinates` -- coordinates of captions on the strongest
  latent semantics (radar charts, supplementary Sec. A.2) and classical MDS maps (paper Fig. 9).

Reference implementation: github.com/qingzwang/DiversityMetrics, ``pycocoevalcap/diversity_eval.py``
(classes ``SelfCider``, ``LSA``, ``mBLEU``, ``Accurate``); its driver ``diversity_evalscripts.py``
scores the first ``m = 5`` captions of each set. The definitions below were checked against it
(see ``tests/test_diversity.py`` and ``tests/reference_self_cider.py``).
"""
from __future__ import annotations

import weakref
from collections import Counter
from itertools import chain, repeat
from typing import Iterable, Sequence

import numpy as np

from captioneval.kernels.cider import DocumentFrequency, _Corpus, _check_order, cider_d
from captioneval.kernels.stopwords import ENGLISH_STOP_WORDS

__all__ = [
    "self_cider_kernel",
    "self_cider_kernels",
    "self_cider",
    "lsa_diversity",
    "mbleu",
    "accuracy",
    "leave_one_out_accuracy",
    "f_score",
    "vocabulary",
    "word_frequency_curve",
    "latent_coordinates",
    "mds_coordinates",
]

_EPS = np.finfo(np.float64).eps
# pycocoevalcap BleuScorer constants ("so that if guess is 0 still return 0")
_BLEU_TINY = 1e-15
_BLEU_SMALL = 1e-9


# ---------------------------------------------------------------------------------------------
# input validation
# ---------------------------------------------------------------------------------------------
def _check_m(m) -> int | None:
    if m is None:
        return None
    if isinstance(m, bool) or not isinstance(m, (int, np.integer)) or m < 2:
        raise ValueError(f"m (captions per set) must be None or an integer >= 2, got {m!r}")
    return int(m)


def _check_captions(captions, what: str) -> list[str]:
    if isinstance(captions, (str, bytes)):
        raise ValueError(f"{what} must be a list of caption strings, got a single string")
    try:
        caps = list(captions)
    except TypeError:
        raise ValueError(f"{what} must be a list of caption strings, got {type(captions).__name__}") from None
    if set(map(type, caps)) - {str}:
        for j, c in enumerate(caps):
            if not isinstance(c, str):
                raise ValueError(f"{what}[{j}] must be a string (tokenised caption), got {type(c).__name__}: {c!r}")
    return caps


def _check_sets(sets, m: int | None = None, min_size: int = 2, what: str = "sets") -> list[list[str]]:
    """Validate a sequence of caption sets; return the sets as lists (first ``m`` captions when ``m``).

    Raises ValueError for a bare string, an empty sequence, a set that is a string or not
    iterable, a caption that is not a ``str``, and sets with fewer than ``m`` (or ``min_size``)
    captions (the message lists the offending indices).
    """
    m = _check_m(m)
    if isinstance(sets, (str, bytes)):
        raise ValueError(f"{what} must be a sequence of caption sets (lists of strings), got a string")
    try:
        raw = list(sets)
    except TypeError:
        raise ValueError(f"{what} must be a sequence of caption sets, got {type(sets).__name__}") from None
    if not raw:
        raise ValueError(f"{what} is empty: need at least one caption set")
    out = []
    for i, s in enumerate(raw):
        if isinstance(s, (str, bytes)):
            raise ValueError(f"{what}[{i}] must be a list of caption strings, got a single string")
        try:
            out.append(list(s))
        except TypeError:
            raise ValueError(f"{what}[{i}] must be a list of caption strings, got {type(s).__name__}") from None
    # one C-level pass over all captions; the slow per-set check only runs to report an error
    if set(map(type, chain.from_iterable(out))) - {str}:
        for i, s in enumerate(out):
            _check_captions(s, f"{what}[{i}]")
    need = m if m is not None else min_size
    short = [i for i, s in enumerate(out) if len(s) < need]
    if short:
        shown = ", ".join(map(str, short[:10])) + (" ..." if len(short) > 10 else "")
        why = f"m = {m} captions" if m is not None else f"{min_size} caption(s)"
        raise ValueError(f"{len(short)} caption set(s) of {what} have fewer than {why} (indices: {shown})")
    if m is not None:
        out = [s[:m] for s in out]
    return out


def _check_df(df, allow_none: bool = True) -> DocumentFrequency | None:
    if df is None:
        if not allow_none:
            raise ValueError("a DocumentFrequency table is required (e.g. DocumentFrequency.from_references(corpus))")
        return None
    if not isinstance(df, DocumentFrequency):
        raise ValueError(f"df must be a captioneval.kernels.cider.DocumentFrequency or None, got {type(df).__name__}")
    return df


def _size_groups(sizes: np.ndarray) -> dict[int, np.ndarray]:
    """Set indices grouped by set size (ascending sizes)."""
    return {int(k): np.flatnonzero(sizes == k) for k in np.unique(sizes)}


def _ratio_diversity(values: np.ndarray, m: int) -> np.ndarray:
    """``-log(max v / sum v) / log(m)`` along the last axis (nan where ``sum v = 0``)."""
    total = values.sum(axis=-1)
    top = values.max(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = top / total
        return -np.log(r) / np.log(m) + 0.0  # + 0.0 turns -0.0 (r = 1) into 0.0


# ---------------------------------------------------------------------------------------------
# Self-CIDEr
# ---------------------------------------------------------------------------------------------
class _Layout:
    """Positions of the captions of all sets in one flat list (set-major)."""

    __slots__ = ("sizes", "set_start", "set_of_pos", "pos_in_set", "kbase")

    def __init__(self, sets: list[list[str]]):
        self.sizes = np.fromiter(map(len, sets), dtype=np.int64, count=len(sets))
        self.set_start = np.concatenate(([0], np.cumsum(self.sizes)))
        self.set_of_pos = np.repeat(np.arange(len(sets), dtype=np.int64), self.sizes)
        self.pos_in_set = np.arange(int(self.set_start[-1]), dtype=np.int64) - self.set_start[self.set_of_pos]
        # start of each set's (m_s x m_s) block in a ragged flat array of all kernels
        self.kbase = np.concatenate(([0], np.cumsum(self.sizes * self.sizes)))


def _accumulate_pairs(num: np.ndarray, lay: _Layout, cap: np.ndarray, group_new: np.ndarray,
                      val: np.ndarray, order: np.ndarray, n: int) -> None:
    """Add ``min(v_i, v_j) * v_j`` of every pair ``i < j`` of tf-idf entries of a group into ``num``.

    The entries (caption flat index ``cap``, value ``val``, n-gram order ``order``) are sorted so
    that each group -- one n-gram within one set, ``group_new`` marks the first entry of a group
    -- is contiguous with strictly ascending caption positions; entry ``i`` (left) is the
    hypothesis and ``j`` (right) the reference: the upper triangle ``K[i, j]``, ``i < j``. (The
    diagonal, ``sum_g v_i[g]^2``, is the squared norm and is filled in by the caller.)
    """
    if len(cap) < 2:
        return
    last = np.append(group_new[1:], True)
    keep = ~(group_new & last)  # n-grams used by one caption of the set add nothing off the diagonal
    cap, val, order, new = cap[keep], val[keep], order[keep], group_new[keep]
    if len(cap) == 0:
        return
    gstart = np.flatnonzero(new)
    gend = np.append(gstart[1:], len(cap))
    count = gend[np.cumsum(new) - 1] - np.arange(1, len(cap) + 1, dtype=np.int64)  # later entries
    left = np.repeat(np.arange(len(cap), dtype=np.int64), count)
    right = left + 1 + (np.arange(len(left), dtype=np.int64) - np.repeat(np.cumsum(count) - count, count))
    s = lay.set_of_pos[cap]
    p = lay.pos_in_set[cap]
    row = (lay.kbase[s] + p * lay.sizes[s]) * n + order  # index of (i, column 0, order) per entry
    vj = val[right]
    num += np.bincount(row[left] + p[right] * n, weights=np.minimum(val[left], vj) * vj, minlength=len(num))


def _set_chunks(weight: np.ndarray, limit: float) -> list[tuple[int, int]]:
    """Consecutive ranges of sets whose summed ``weight`` stays <= ``limit`` (a set alone may exceed it)."""
    if len(weight) == 0:
        return []
    cum = np.cumsum(weight)
    bounds = [0]
    while bounds[-1] < len(weight):
        start = bounds[-1]
        base = cum[start - 1] if start else 0.0
        end = int(np.searchsorted(cum, base + limit, side="right"))
        bounds.append(max(end, start + 1))
    return list(zip(bounds[:-1], bounds[1:]))


# multiplication by an odd constant is a bijection of uint64: distinct keys get distinct hashes
_HASH_MULT = np.uint64(0x9E3779B97F4A7C15)
_TABLE_CACHE: dict[tuple[int, int], tuple[weakref.ref, "_EncodedTable | None"]] = {}
_SEPARATOR = "\x00"


def _hash(keys: np.ndarray) -> np.ndarray:
    """``key * odd constant mod 2^64`` of int64 keys >= 0 (as uint64)."""
    keys = np.ascontiguousarray(keys, dtype=np.int64)
    return keys.view(np.uint64) * _HASH_MULT


class _EncodedTable:
    """A DocumentFrequency table with every n-gram as one int64 key, for vectorised look-ups.

    Words get ids ``1..W``; a k-gram ``(w_1..w_k)`` has key ``sum_t id(w_t) * B^(k-t)`` with a
    fixed base ``B`` such that ``B^n < 2^63`` (keys of different orders never coincide since no
    digit is 0). Words of a scored corpus that are not in the table get ids ``W+1..B-1``.
    Look-ups use an open-addressing hash table (linear probing) on ``hash = key * odd constant
    mod 2^64`` (a bijection, so equal hashes mean equal keys; hash 0 = key 0 marks empty slots).
    """

    __slots__ = ("words", "lookup_words", "base", "table", "shift", "max_probe")

    def __init__(self, df: DocumentFrequency, n: int):
        base = int(2.0 ** (63.0 / n)) - 1
        while base > 2 and base ** n >= 2 ** 63:  # guard against float rounding
            base -= 1
        self.base = base
        keys = list(df.counts)
        counts = np.fromiter(df.counts.values(), dtype=np.float64, count=len(keys))
        lens = np.fromiter(map(len, keys), dtype=np.int64, count=len(keys))
        if len(keys) and (lens.min() < 1 or lens.max() > n):  # orders the scorer never asks for
            sel = np.flatnonzero((lens >= 1) & (lens <= n))
            keys = [keys[i] for i in sel.tolist()]
            counts, lens = counts[sel], lens[sel]
        toks = list(chain.from_iterable(keys))
        words = {w: i for i, w in enumerate(dict.fromkeys(toks), start=1)}
        if len(words) >= base:
            raise OverflowError("vocabulary too large for int64 n-gram keys")
        self.words = words
        # the same with the caption separator of _tokens_to_ids as id -1 (None: separator unusable)
        self.lookup_words = None if _SEPARATOR in words else {**words, _SEPARATOR: -1}
        ids = np.fromiter(map(words.__getitem__, toks), dtype=np.int64, count=len(toks))
        key = np.zeros(len(keys), dtype=np.int64)
        start = np.cumsum(lens) - lens
        for t in range(n):
            has = np.flatnonzero(lens > t)
            key[has] = key[has] * base + ids[start[has] + t]
        bits = max(4, int(2 * len(keys)).bit_length())  # load factor <= 1/2
        cap = 1 << bits
        self.shift = np.uint64(64 - bits)
        slots = np.zeros(cap, dtype=np.uint64)
        slot_counts = np.zeros(cap, dtype=np.float64)
        h = _hash(key)
        pending = np.arange(len(keys))
        slot = (h >> self.shift).astype(np.int64)
        probe = 0
        while len(pending):
            free = slots[slot] == 0
            cand, cslot = pending[free], slot[free]
            slots[cslot] = h[cand]  # several keys may write one free slot: one of them stays
            won = slots[cslot] == h[cand]
            slot_counts[cslot[won]] = counts[cand[won]]
            placed = np.zeros(len(pending), dtype=bool)
            placed[np.flatnonzero(free)[won]] = True
            pending, slot = pending[~placed], slot[~placed]
            slot = np.where(slots[slot] != 0, (slot + 1) & (cap - 1), slot)
            probe += 1
        # (hash, count bits) side by side: a look-up touches one cache line
        self.table = np.empty((cap, 2), dtype=np.uint64)
        self.table[:, 0] = slots
        self.table[:, 1] = slot_counts.view(np.uint64)
        self.max_probe = probe

    @classmethod
    def get(cls, df: DocumentFrequency, n: int) -> "_EncodedTable | None":
        """Cached per (table object, n); None when the keys would not fit in int64."""
        cache_key = (id(df), n)
        hit = _TABLE_CACHE.get(cache_key)
        if hit is not None and hit[0]() is df:
            return hit[1]
        try:
            enc: _EncodedTable | None = cls(df, n)
        except OverflowError:
            enc = None
        _TABLE_CACHE[cache_key] = (weakref.ref(df, lambda _, k=cache_key: _TABLE_CACHE.pop(k, None)), enc)
        return enc

    def lookup(self, keys: np.ndarray) -> np.ndarray:
        """Document counts of int64 keys >= 1 (0 for n-grams not in the table)."""
        h = _hash(keys)
        slot = (h >> self.shift).view(np.int64)
        rows = np.take(self.table, slot, axis=0)  # (much faster than fancy-indexing rows)
        hit = rows[:, 0] == h
        out = np.where(hit, rows[:, 1].view(np.float64), 0.0)
        todo = np.flatnonzero(~hit & (rows[:, 0] != 0))  # slot taken by another key: probe on
        slot = slot[todo]
        mask = len(self.table) - 1
        while len(todo):
            slot = (slot + 1) & mask
            rows = np.take(self.table, slot, axis=0)
            hit = rows[:, 0] == h[todo]
            out[todo[hit]] = rows[hit, 1].view(np.float64)
            more = ~hit & (rows[:, 0] != 0)
            todo, slot = todo[more], slot[more]
        return out


def _tokens_to_ids(flat: list[str], enc: _EncodedTable) -> tuple[np.ndarray, np.ndarray] | None:
    """Word ids of all tokens (table ids; words not in the table numbered after them) and the
    number of tokens per caption; None when the unknown words do not fit under the base.

    Fast path: one ``str.split`` of all captions joined by a separator token (``"\\x00"``) that
    the lookup dictionary maps to -1; captions containing that token are split one by one.
    """
    lookup = enc.lookup_words
    toks: list[str] | None = None
    if lookup is not None:
        toks = f" {_SEPARATOR} ".join(flat).split()
        ids = np.fromiter(map(lookup.get, toks, repeat(0)), dtype=np.int64, count=len(toks))
        sep = np.flatnonzero(ids < 0)
        if len(sep) == len(flat) - 1:
            n_tok = np.diff(np.concatenate(([-1], sep, [len(toks)]))) - 1
            keep = ids >= 0
        else:  # a caption contains the separator token itself
            toks = None
    if toks is None:
        split = [c.split() for c in flat]
        toks = list(chain.from_iterable(split))
        ids = np.fromiter(map(enc.words.get, toks, repeat(0)), dtype=np.int64, count=len(toks))
        n_tok = np.fromiter(map(len, split), dtype=np.int64, count=len(split))
        keep = None
    unk = np.flatnonzero(ids == 0)
    if len(unk):
        new: dict[str, int] = {}
        start = len(enc.words) + 1
        vals = [new.setdefault(w, start + len(new)) for w in map(toks.__getitem__, unk.tolist())]
        if start + len(new) > enc.base:
            return None
        ids[unk] = vals
    if keep is not None:
        ids = ids[keep]
    return ids, n_tok


def _self_cider_numerators_fast(flat: list[str], lay: _Layout, df: DocumentFrequency, n: int):
    """Clipped-product sums (ragged ``num``, upper triangle without the diagonal), per-caption
    tf-idf norms ``(P, n)`` and token counts ``(P,)``, with int64 n-gram keys, one packed
    in-place sort per chunk of sets and hash-table idf look-ups; None when the table or the corpus
    does not fit the integer encoding or a truncated-hash collision is met (the caller then uses
    the dictionary-based path)."""
    enc = _EncodedTable.get(df, n)
    if enc is None:
        return None
    res = _tokens_to_ids(flat, enc)
    if res is None:
        return None
    word, n_tok = res
    n_pos = len(word)
    cap_of_tok = np.repeat(np.arange(len(flat), dtype=np.int64), n_tok)
    remaining = np.repeat(np.cumsum(n_tok), n_tok) - np.arange(n_pos, dtype=np.int64)

    # key of the k-gram starting at each position (row) for k = 1..n (column), caption-major
    padded = np.concatenate([word, np.zeros(n, dtype=np.int64)])
    keys = np.empty((n_pos, n), dtype=np.int64)
    keys[:, 0] = word
    for k in range(1, n):
        keys[:, k] = keys[:, k - 1] * enc.base + padded[k:k + n_pos]
    valid = remaining[:, None] > np.arange(n)[None, :]
    occ_key = keys[valid]
    occ_cap = np.broadcast_to(cap_of_tok[:, None], (n_pos, n))[valid]
    n_occ = len(occ_key)
    sq = np.zeros(len(flat) * n, dtype=np.float64)
    num = np.zeros(int(lay.kbase[-1]) * n, dtype=np.float64)
    if n_occ == 0:
        return num, np.sqrt(sq).reshape(len(flat), n), n_tok

    # sort (truncated hash, occurrence index) in place within chunks of whole sets: each n-gram of
    # a chunk becomes one run, with its occurrences in caption order
    pbits = max(1, int(n_occ - 1).bit_length())
    if pbits > 40:
        return None
    pb = np.uint64(pbits)
    packed = ((_hash(occ_key) >> pb) << pb) | np.arange(n_occ, dtype=np.uint64)
    per_cap = np.maximum(n_tok[:, None] - np.arange(n)[None, :], 0).sum(axis=1)
    occ_cap_start = np.concatenate(([0], np.cumsum(per_cap)))
    per_set = np.bincount(lay.set_of_pos, weights=per_cap, minlength=len(lay.sizes))
    chunk_first = []
    for a, b in _set_chunks(per_set, float(1 << 13)):  # small sorts stay in cache
        o0, o1 = occ_cap_start[lay.set_start[a]], occ_cap_start[lay.set_start[b]]
        packed[o0:o1].sort()
        chunk_first.append(o0)
    occ = (packed & np.uint64((1 << pbits) - 1)).astype(np.int64)
    top = packed >> pb
    ks, cs = occ_key[occ], occ_cap[occ]
    boundary = np.zeros(n_occ, dtype=bool)
    boundary[np.asarray(chunk_first, dtype=np.int64)] = True
    key_new = boundary.copy()
    key_new[1:] |= ks[1:] != ks[:-1]
    if np.any(key_new & ~boundary & np.concatenate(([False], top[1:] == top[:-1]))):
        return None  # two n-grams of a chunk share the truncated hash: their runs may interleave
    entry_new = key_new.copy()
    entry_new[1:] |= cs[1:] != cs[:-1]
    starts = np.flatnonzero(entry_new)
    tf = np.diff(np.append(starts, n_occ)).astype(np.float64)
    e_cap, e_key = cs[starts], ks[starts]
    # order - 1 = number of base-B digits - 1 (the leading digit is >= 1)
    e_order = np.zeros(len(e_key), dtype=np.int64)
    for k in range(1, n):
        e_order += e_key >= enc.base ** k
    e_keynew = key_new[starts]
    run = np.cumsum(e_keynew) - 1
    idf = np.log(float(df.n_documents)) - np.log(np.maximum(1.0, enc.lookup(e_key[e_keynew])))
    val = tf * idf[run]
    sq += np.bincount(e_cap * n + e_order, weights=val * val, minlength=len(sq))
    group_new = e_keynew.copy()
    e_set = lay.set_of_pos[e_cap]
    group_new[1:] |= e_set[1:] != e_set[:-1]
    _accumulate_pairs(num, lay, e_cap, group_new, val, e_order, n)
    return num, np.sqrt(sq).reshape(len(flat), n), n_tok


def _self_cider_numerators_dict(flat: list[str], lay: _Layout, df: DocumentFrequency, n: int):
    """Same as :func:`_self_cider_numerators_fast` with :class:`captioneval.kernels.cider._Corpus`
    (n-gram columns) and dictionary look-ups of the n-gram tuples: always applicable."""
    unique = list(dict.fromkeys(flat))
    sid = {s: i for i, s in enumerate(unique)}
    sent = np.fromiter(map(sid.__getitem__, flat), dtype=np.int64, count=len(flat))
    corpus = _Corpus(unique, n)
    tf, order = corpus.tf, corpus.order
    lookup = df.counts.get
    doc_counts = np.fromiter((lookup(g, 0.0) for g in corpus.ngram_tuples()), dtype=np.float64, count=tf.shape[1])
    idf = np.log(float(df.n_documents)) - np.log(np.maximum(1.0, doc_counts))
    vec = tf.copy()
    vec.data *= idf[vec.indices]
    n_sent = tf.shape[0]
    rows_v = np.repeat(np.arange(n_sent, dtype=np.int64), np.diff(vec.indptr))
    sq = np.bincount(rows_v * n + order[vec.indices], weights=vec.data * vec.data, minlength=n_sent * n)
    norm = np.sqrt(sq).reshape(n_sent, n)[sent]

    num = np.zeros(int(lay.kbase[-1]) * n, dtype=np.float64)
    nnz_per_pos = np.diff(vec.indptr)[sent]
    per_set = np.bincount(lay.set_of_pos, weights=nnz_per_pos, minlength=len(lay.sizes)) * lay.sizes
    for a, b in _set_chunks(per_set, 4e6):
        p0 = lay.set_start[a]
        block = vec[sent[p0:lay.set_start[b]]].tocsc()  # grouped by n-gram, positions ascending
        if block.nnz == 0:
            continue
        block.sort_indices()
        col = np.repeat(np.arange(block.shape[1], dtype=np.int64), np.diff(block.indptr))
        cap = block.indices.astype(np.int64) + p0
        s = lay.set_of_pos[cap]
        group_new = np.ones(len(cap), dtype=bool)
        group_new[1:] = (col[1:] != col[:-1]) | (s[1:] != s[:-1])
        _accumulate_pairs(num, lay, cap, group_new, block.data, order[col], n)
    return num, norm, corpus.n_tokens[sent]


def _kernels_by_size(sets: list[list[str]], df: DocumentFrequency, n: int, sigma: float,
                     fast: bool = True) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Self-CIDEr kernels of all sets: ``{m: (set indices, K stacked (n_m, m, m))}``.

    The clipped products ``min(v_i[g], v_j[g]) * v_j[g]`` are non-zero only for n-grams ``g``
    shared by captions ``i`` and ``j`` of one set: they are enumerated by a self-join of the
    (set, n-gram) groups of the non-zero tf-idf entries, for the whole corpus at once (in chunks
    of sets), then divided by the norms, averaged over the orders and length-penalised on dense
    ``(n_m, m, m)`` stacks.
    """
    flat = list(chain.from_iterable(sets))
    lay = _Layout(sets)
    res = _self_cider_numerators_fast(flat, lay, df, n) if fast else None
    if res is None:
        res = _self_cider_numerators_dict(flat, lay, df, n)
    num, norm, n_tok = res
    bigrams = np.maximum(n_tok - 1, 0).astype(np.float64)
    num = num.reshape(-1, n)
    out: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for m, idx_sets in _size_groups(lay.sizes).items():
        gpos = lay.set_start[idx_sets][:, None] + np.arange(m)  # (g, m) flat positions
        rows = (lay.kbase[idx_sets][:, None] + np.arange(m * m)).ravel()
        nk = np.take(num, rows, axis=0).reshape(len(idx_sets), m, m, n)
        nr = np.take(norm, gpos.ravel(), axis=0).reshape(len(idx_sets), m, n)
        diag = np.arange(m)
        nk[:, diag, diag, :] = nr * nr  # sum_g min(v_i, v_i) v_i = ||v_i||^2 (as pycocoevalcap)
        denom = nr[:, :, None, :] * nr[:, None, :, :]
        sim = np.divide(nk, denom, out=nk.copy(), where=denom != 0)
        bl = bigrams[gpos]
        delta = bl[:, :, None] - bl[:, None, :]
        k = 10.0 * sim.mean(axis=-1) * np.exp(-(delta * delta) / (2.0 * sigma * sigma))
        k = np.triu(k) + np.swapaxes(np.triu(k, 1), 1, 2)  # K[j, i] := K[i, j] for i < j
        out[m] = (idx_sets, k)
    return out


def self_cider_kernels(sets: Sequence[Sequence[str]], df: DocumentFrequency | None = None, m: int | None = None,
                       n: int = 4, sigma: float = 6.0) -> list[np.ndarray]:
    """Self-CIDEr kernel matrices of many caption sets at once (see :func:`self_cider_kernel`).

    Parameters and errors as :func:`self_cider`. Returns a list of ``n_sets`` float64 arrays,
    ``(m_s, m_s)`` each.
    """
    sets = _check_sets(sets, m, min_size=1)
    n = _check_order(n)
    sigma = _check_sigma(sigma)
    df = _resolve_df(df, sets, n)
    out: list[np.ndarray] = [None] * len(sets)  # type: ignore[list-item]
    for _, (idx, k) in _kernels_by_size(sets, df, n, sigma).items():
        for i, kk in zip(idx, k):
            out[i] = kk
    return out


def _check_sigma(sigma) -> float:
    sigma = float(sigma)
    if not sigma > 0:
        raise ValueError(f"sigma must be > 0, got {sigma!r}")
    return sigma


def _resolve_df(df, sets: list[list[str]], n: int = 4) -> DocumentFrequency:
    df = _check_df(df)
    if df is None:
        if len(sets) < 2:
            raise ValueError(
                "df=None computes document frequencies over the given sets (one document per set), "
                "which needs at least 2 sets (N = 1 makes every idf 0); pass a DocumentFrequency table"
            )
        df = DocumentFrequency.from_references(sets, n=n)
    return df


def self_cider_kernel(captions: Sequence[str], df: DocumentFrequency, n: int = 4, sigma: float = 6.0) -> np.ndarray:
    """Self-CIDEr kernel ``K`` of one caption set (Wang & Chan 2019, Sec. 3.2, ``k_ij = CIDEr(c_i, c_j)``).

    ``K[i, j]`` for ``i <= j`` is CIDEr-D of caption ``i`` (candidate) against the single reference
    caption ``j`` (pycocoevalcap semantics, see :mod:`captioneval.kernels.cider`: clipped tf-idf
    n-gram similarities for n = 1..4, Gaussian length penalty, factor 10), with the idf weights
    ``log(N) - log(max(1, df(g)))`` of the supplied table (``N = df.n_documents``), not of the set
    itself. Clipped CIDEr-D is not symmetric; as the official code
    (``diversity_eval.SelfCider.evaluate``: loops ``j`` from ``i`` to ``m - 1``, sets ``cov[i, j]``
    and copies it to ``cov[j, i]``) the upper triangle incl. the diagonal is computed and copied to
    the lower triangle: ``K[j, i] = K[i, j] = CIDEr-D(c_i | c_j)`` for ``i < j``.

    Parameters
    ----------
    captions : sequence of str, length m >= 1
        tokenised captions of one set.
    df : DocumentFrequency
        document-frequency table (the paper: COCO train2014 captions, one document per image).
    n, sigma : int, float
        n-gram orders 1..n and length-penalty width, as :func:`captioneval.kernels.cider.cider_d`.

    Returns
    -------
    numpy.ndarray, float64, shape (m, m), symmetric
        entries in [0, 10] when every ``df(g) <= N``; ``K[i, i] = 10 * (#orders k <= n with a
        non-zero tf-idf norm) / n`` (10 for a caption of >= n tokens whose n-grams are not all in
        every document).

    Raises
    ------
    ValueError
        empty set, a caption that is not a string, ``df`` missing or not a DocumentFrequency,
        ``n < 1``, ``sigma <= 0``.
    """
    caps = _check_captions(captions, "captions")
    if not caps:
        raise ValueError("captions is empty: need at least one caption")
    _check_df(df, allow_none=False)
    return self_cider_kernels([caps], df, n=n, sigma=sigma)[0]


def self_cider(
    sets: Sequence[Sequence[str]],
    df: DocumentFrequency | None = None,
    m: int | None = None,
    negative: str = "abs",
    n: int = 4,
    sigma: float = 6.0,
) -> np.ndarray:
    """Self-CIDEr diversity of each caption set (Wang & Chan, CVPR 2019, Sec. 3.2).

    For each set, ``K`` = :func:`self_cider_kernel` (upper triangle computed, copied to the lower
    one); ``lambda_1..lambda_m`` its eigenvalues; ``r = max sqrt(lambda) / sum sqrt(lambda)``;
    ``diversity = -log(r) / log(m)`` (paper: ``div = -log_m(r)``).

    Eigenvalues: the official code takes the singular values of ``K`` (``np.linalg.svd``), i.e.
    ``|lambda|``; ``negative="abs"`` (default) does the same, ``negative="clip"`` uses
    ``max(lambda, 0)``. The two only differ when the symmetrised clipped CIDEr-D kernel is not
    positive semi-definite (none of the 5,000 sets of the official example file, m = 5 or 10,
    has a negative eigenvalue beyond round-off). In both modes values with ``|lambda| <=
    m * eps * max|lambda|`` (round-off of an exactly singular ``K``, e.g. repeated captions; the
    tolerance of ``numpy.linalg.matrix_rank``) are set to 0 before the square root, so that
    identical captions give exactly 0; without that cut-off (as in the official code) round-off
    eigenvalues of ~1e-15 add ~1e-8 to the diversity.

    Parameters
    ----------
    sets : sequence of n_sets sequences of str
        the caption sets; each needs at least 2 captions (``m`` when ``m`` is given). Sets may
        differ in size when ``m`` is None (each uses its own ``m``).
    df : DocumentFrequency or None
        idf table. The paper / official code use COCO train2014 reference captions (one document
        per image, ``N`` = number of images). ``None``: one document per given set (after
        truncation to ``m``), ``N = n_sets`` -- a fallback that makes scores depend on which sets
        are scored together; needs at least 2 sets.
    m : int >= 2 or None
        ``None``: all captions of each set; otherwise the first ``m`` captions (the official driver
        uses ``m = 5`` of the 10 captions per image).
    negative : "abs" or "clip"
        treatment of negative eigenvalues, see above.
    n, sigma : CIDEr-D parameters (n-gram orders 1..n, length-penalty width).

    Returns
    -------
    numpy.ndarray, float64, shape (n_sets,)
        diversity in [0, 1]: 0 when all captions are identical (rank-one ``K``); 1 when ``K`` is
        a multiple of the identity (captions sharing no n-gram with a non-zero idf and all with the
        same diagonal value, e.g. all of >= 4 tokens); NaN when ``K`` is all zero (e.g. only empty
        captions).

    Raises
    ------
    ValueError
        empty ``sets``; a set that is not a list of strings; a set with fewer than 2 (or ``m``)
        captions (the message lists the offending set indices); ``m < 2``; ``df`` not a
        DocumentFrequency; ``df=None`` with one set; bad ``negative``, ``n`` or ``sigma``.

    Implementation (whole corpus at once, no per-pair Python loop): every n-gram occurrence becomes
    an int64 key (word ids as digits of a fixed base); one in-place sort per chunk of sets groups
    the occurrences by (n-gram, set); idf values come from an open-addressing hash table built once
    per DocumentFrequency object (first call ~0.3-0.5 s and ~35 MB for a 577k-n-gram table, cached
    while the object lives); a self-join of the groups enumerates the clipped products of every
    pair of captions sharing an n-gram; kernels are assembled on ``(n_sets, m, m)`` stacks and one
    batched ``numpy.linalg.eigvalsh`` runs per set size. When the vocabulary does not fit the
    integer keys, a dictionary-based path over :class:`captioneval.kernels.cider._Corpus` gives the
    same numbers. 5,000 sets of 5 (10) captions take ~0.2 s (~0.4 s) against ~10-15 s (~40 s) for
    the pycocoevalcap-based loop (``benchmarks/self_cider_speed.py``); the results agree to
    < 1e-15, except for rank-deficient kernels (repeated captions), where the cut-off above
    changes them by < 1e-9 (``tests/test_diversity.py``).
    """
    if negative not in ("abs", "clip"):
        raise ValueError(f'negative must be "abs" or "clip", got {negative!r}')
    sets = _check_sets(sets, m, min_size=2)
    n = _check_order(n)
    sigma = _check_sigma(sigma)
    df = _resolve_df(df, sets, n)
    out = np.empty(len(sets), dtype=np.float64)
    for size, (idx, k) in _kernels_by_size(sets, df, n, sigma).items():
        lam = np.linalg.eigvalsh(k)
        lam = np.abs(lam) if negative == "abs" else np.maximum(lam, 0.0)
        tol = size * _EPS * np.abs(lam).max(axis=-1, keepdims=True)
        lam = np.where(lam <= tol, 0.0, lam)
        out[idx] = _ratio_diversity(np.sqrt(lam), size)
    return out


# ---------------------------------------------------------------------------------------------
# LSA
# ---------------------------------------------------------------------------------------------
def _count_blocks(sets: list[list[str]], stop_words: frozenset | None = None):
    """Per set, its (m, d) caption-by-word count matrix as one padded stack per set size.

    Yields ``(m, set indices, counts (g, m, d_max), d per set)``; words are ``str.split()`` tokens
    minus ``stop_words``; columns are the set's distinct words (zero-padded to ``d_max``).
    """
    sizes = np.fromiter(map(len, sets), dtype=np.int64, count=len(sets))
    flat = list(chain.from_iterable(sets))
    toks = [c.split() for c in flat]
    if stop_words:
        toks = [[t for t in ts if t not in stop_words] for ts in toks]
    n_tok = np.fromiter(map(len, toks), dtype=np.int64, count=len(toks))
    words = list(chain.from_iterable(toks))
    vocab = {w: i for i, w in enumerate(dict.fromkeys(words))}
    wid = np.fromiter(map(vocab.__getitem__, words), dtype=np.int64, count=len(words))
    set_start = np.concatenate(([0], np.cumsum(sizes)))
    set_of_pos = np.repeat(np.arange(len(sets), dtype=np.int64), sizes)
    pos_of_tok = np.repeat(np.arange(len(flat), dtype=np.int64), n_tok)
    set_of_tok = set_of_pos[pos_of_tok]
    v = max(len(vocab), 1)
    key = set_of_tok * v + wid
    ukey, inv = np.unique(key, return_inverse=True)
    inv = inv.reshape(-1)
    uset = ukey // v
    first = np.searchsorted(uset, np.arange(len(sets)))
    d_per_set = np.bincount(uset, minlength=len(sets))
    local = inv - first[set_of_tok]  # column of each token within its set's matrix
    row = pos_of_tok - set_start[set_of_tok]
    for m, idx in _size_groups(sizes).items():
        d_max = max(int(d_per_set[idx].max()), 1)
        slot = np.full(len(sets), -1, dtype=np.int64)
        slot[idx] = np.arange(len(idx))
        sel = slot[set_of_tok] >= 0
        flat_idx = (slot[set_of_tok[sel]] * m + row[sel]) * d_max + local[sel]
        counts = np.bincount(flat_idx, minlength=len(idx) * m * d_max).astype(np.float64)
        yield m, idx, counts.reshape(len(idx), m, d_max), d_per_set[idx]


def lsa_diversity(sets: Sequence[Sequence[str]], m: int | None = None) -> np.ndarray:
    """LSA diversity of each caption set (Wang & Chan, CVPR 2019, Sec. 3.1).

    ``M`` = term-document matrix of the set: ``M[w, i]`` = raw count of word ``w`` in caption
    ``i`` (no idf, no stop-word removal; the words are those of the set); ``s`` = singular values of
    ``M`` (not square-rooted); ``r = max s / sum s``; diversity ``-log(r) / log(m)``. As the
    official ``diversity_eval.LSA`` (which splits on single spaces; here ``str.split()``, the same
    for tokenised captions). Singular values ``<= max(m, d) * eps * max s`` are set to 0 (round-off
    of rank-deficient ``M``), so that identical captions give exactly 0.

    Parameters
    ----------
    sets : sequence of n_sets sequences of str, each with >= 2 captions (``m`` if given).
    m : int >= 2 or None -- first ``m`` captions of each set, or all (None).

    Returns
    -------
    numpy.ndarray, float64, shape (n_sets,)
        in [0, 1]: 0 for identical captions, 1 for captions with pairwise disjoint words and equal
        norms of their count vectors; NaN when every caption of the set is empty.

    Raises
    ------
    ValueError
        empty ``sets``, non-string captions, sets with fewer than 2 (or ``m``) captions (indices
        listed), ``m < 2``.

    Implementation: one zero-padded ``(n_sets, m, d_max)`` count stack per set size and batched
    ``numpy.linalg.svd(..., compute_uv=False)`` (zero columns do not change singular values).
    """
    sets = _check_sets(sets, m, min_size=2)
    out = np.empty(len(sets), dtype=np.float64)
    for size, idx, counts, d in _count_blocks(sets):
        for c0 in range(0, len(idx), 2048):
            c1 = c0 + 2048
            s = np.linalg.svd(counts[c0:c1], compute_uv=False)
            tol = np.maximum(size, d[c0:c1])[:, None] * _EPS * s.max(axis=-1, keepdims=True)
            s = np.where(s <= tol, 0.0, s)
            out[idx[c0:c1]] = _ratio_diversity(s, size)
    return out


# ---------------------------------------------------------------------------------------------
# mBLEU
# ---------------------------------------------------------------------------------------------
def mbleu(sets: Sequence[Sequence[str]], m: int | None = None, diversity: bool = True) -> np.ndarray:
    """mBLEU-1..4 and mBLEU-mix of each caption set (Wang & Chan 2019, appendix A.1, Eq. 4).

    ``mBLEU_n = (1/m) sum_i BLEU_n(c_i, C minus c_i)``: each caption is scored against the other
    ``m - 1`` captions of its set as references and the ``m`` scores are averaged. As the
    official ``diversity_eval.mBLEU``, ``BLEU_n`` is pycocoevalcap's ``Bleu(4).compute_score`` on
    the single item ``{c_i: C minus c_i}`` -- corpus BLEU of one sentence, which equals its
    sentence BLEU:

    * ``p_k = (correct_k + 1e-15) / (guess_k + 1e-9)``, ``correct_k`` = clipped k-gram matches
      (count in ``c_i`` clipped by the maximum count in any other caption), ``guess_k =
      max(0, len - k + 1)``;
    * ``BLEU_n = (p_1 ... p_n)^(1/n)`` times the brevity penalty ``exp(1 - 1/ratio)`` when
      ``ratio = (len + 1e-15) / (reflen + 1e-9) < 1``, ``reflen`` = the "closest" reference length
      (smallest ``|l - len|``, ties to the shorter reference).

    ``mBLEU-mix = (1/4) sum_{n=1..4} mBLEU_n`` (paper: weights ``omega_n = 1/4``).

    Parameters
    ----------
    sets : sequence of n_sets sequences of str, each with >= 2 captions (``m`` if given).
    m : int >= 2 or None -- first ``m`` captions of each set, or all.
    diversity : bool, default True
        True: return the diversities ``1 - mBLEU_n`` and ``1 - mBLEU-mix`` (the paper's
        orientation, higher = more diverse); False: the raw mBLEU scores (what the official code
        stores).

    Returns
    -------
    numpy.ndarray, float64, shape (n_sets, 5)
        columns ``[n=1, n=2, n=3, n=4, mix]``, each in [0, 1]. The paper's example
        ``{"zebras grazing grass", "grazing grass", "zebras grazing"}`` has mBLEU-1 = mBLEU-2 = 1
        (up to the 1e-9 smoothing constants), as ``3 x "zebras grazing"``: mBLEU cannot tell them
        apart while Self-CIDEr and LSA can.

    Raises
    ------
    ValueError
        empty ``sets``, non-string captions, sets with fewer than 2 (or ``m``) captions (indices
        listed), ``m < 2``.
    """
    sets = _check_sets(sets, m, min_size=2)
    n = 4
    sizes = np.fromiter(map(len, sets), dtype=np.int64, count=len(sets))
    flat = list(chain.from_iterable(sets))
    unique = list(dict.fromkeys(flat))
    sid = {s: i for i, s in enumerate(unique)}
    sent = np.fromiter(map(sid.__getitem__, flat), dtype=np.int64, count=len(flat))
    corpus = _Corpus(unique, n)
    set_start = np.concatenate(([0], np.cumsum(sizes)))
    set_of_pos = np.repeat(np.arange(len(sets), dtype=np.int64), sizes)
    length = corpus.n_tokens[sent]

    # clipped matches: count in c_i clipped by the largest count among the *other* captions
    block = corpus.tf[sent].tocsc()
    col = np.repeat(np.arange(block.shape[1], dtype=np.int64), np.diff(block.indptr))
    pos = block.indices.astype(np.int64)
    val = block.data
    sset = set_of_pos[pos]
    gkey = col * len(sets) + sset
    srt = np.lexsort((-val, gkey))  # groups of (n-gram, set), largest count first
    gk, v = gkey[srt], val[srt]
    new = np.ones(len(gk), dtype=bool)
    new[1:] = gk[1:] != gk[:-1]
    gstart = np.flatnonzero(new)
    gsize = np.diff(np.append(gstart, len(gk)))
    top1 = v[gstart]
    top2 = np.where(gsize > 1, v[np.minimum(gstart + 1, len(v) - 1)], 0.0)
    gid = np.cumsum(new) - 1
    other_max = np.where(v == top1[gid], top2[gid], top1[gid])
    clipped = np.minimum(v, other_max)
    correct = np.bincount(pos[srt] * n + corpus.order[col[srt]], weights=clipped,
                          minlength=len(flat) * n).reshape(len(flat), n)
    guess = np.maximum(0, length[:, None] - np.arange(n)[None, :]).astype(np.float64)

    # "closest" reference length among the other captions of the set (ties: shorter)
    reflen = np.empty(len(flat), dtype=np.float64)
    for size, idx in _size_groups(sizes).items():
        gpos = set_start[idx][:, None] + np.arange(size)
        lens = length[gpos]  # (g, size)
        diff = np.abs(lens[:, None, :] - lens[:, :, None])  # [g, i, j] = |l_j - l_i|
        key = diff * (lens.max() + 1) + lens[:, None, :]
        key[:, np.arange(size), np.arange(size)] = np.iinfo(np.int64).max
        best = np.argmin(key, axis=-1)
        reflen[gpos.ravel()] = np.take_along_axis(lens, best, axis=-1).ravel()

    bleu = np.cumprod((correct + _BLEU_TINY) / (guess + _BLEU_SMALL), axis=1)
    bleu = bleu ** (1.0 / np.arange(1, n + 1))
    ratio = (length + _BLEU_TINY) / (reflen + _BLEU_SMALL)
    with np.errstate(divide="ignore", over="ignore", under="ignore"):
        bp = np.where(ratio < 1, np.exp(1.0 - 1.0 / ratio), 1.0)
    bleu *= bp[:, None]
    per_set = np.add.reduceat(bleu, set_start[:-1], axis=0) / sizes[:, None]
    out = np.concatenate([per_set, per_set.mean(axis=1, keepdims=True)], axis=1)
    return 1.0 - out if diversity else out


# ---------------------------------------------------------------------------------------------
# accuracy and F-score
# ---------------------------------------------------------------------------------------------
def _check_references(references, what: str = "references", min_size: int = 1) -> list[list[str]]:
    return _check_sets(references, None, min_size=min_size, what=what)


def accuracy(sets: Sequence[Sequence[str]], references: Sequence[Sequence[str]],
             df: DocumentFrequency | None = None, m: int | None = None) -> np.ndarray:
    """Accuracy of each caption set: mean CIDEr-D of its captions against the image's references.

    ``acc(C) = (1/m) sum_i CIDEr-D(c_i, C_GT)`` (Wang & Chan 2019, Sec. 5 "Evaluation metrics";
    official ``diversity_eval.Accurate``), with :func:`captioneval.kernels.cider.cider_d`.

    Parameters
    ----------
    sets : sequence of n_sets sequences of str (>= 1 caption each; ``m`` if given)
        ``sets[k]`` = a system's tokenised captions for image ``k``.
    references : sequence of n_sets non-empty sequences of str
        tokenised reference captions of image ``k``.
    df : DocumentFrequency or None
        ``None``: document frequencies over the ``n_sets`` images' reference sets (the COCO
        default, ``N = n_sets``; the same as pycocoevalcap's ``Cider`` over all images). The
        official code uses a COCO train2014 table.
    m : int >= 2 or None -- first ``m`` captions of each set, or all.

    Returns
    -------
    numpy.ndarray, float64, shape (n_sets,), in [0, 10] (CIDEr-D units, typically ~0-3).

    Raises
    ------
    ValueError
        empty input, ``len(sets) != len(references)``, empty set or reference list, non-string
        captions, ``m < 2`` or a set shorter than ``m``, ``df`` of the wrong type.
    """
    sets = _check_sets(sets, m, min_size=1)
    refs = _check_references(references)
    if len(sets) != len(refs):
        raise ValueError(f"got {len(sets)} caption sets but {len(refs)} reference lists")
    df = _check_df(df)
    if df is None:
        df = DocumentFrequency.from_references(refs)
    sizes = np.fromiter(map(len, sets), dtype=np.int64, count=len(sets))
    cands = list(chain.from_iterable(sets))
    rep_refs = [refs[k] for k in np.repeat(np.arange(len(sets)), sizes)]
    scores = cider_d(cands, rep_refs, df=df)
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    return np.add.reduceat(scores, starts) / sizes


def leave_one_out_accuracy(references: Sequence[Sequence[str]], df: DocumentFrequency | None = None) -> np.ndarray:
    """Human leave-one-out accuracy of each image's reference set.

    ``acc_GT = (1/N) sum_i CIDEr-D(g_i, C_GT minus g_i)`` (Wang & Chan 2019, Sec. 5): each
    reference is scored against the others of its image (one copy removed when a reference is
    duplicated) and the scores are averaged.

    Parameters
    ----------
    references : sequence of n_images sequences of str, each with >= 2 references.
    df : DocumentFrequency or None
        ``None``: computed once from the *complete* reference sets of all ``n_images`` images
        (``N = n_images``) and used for every ``i`` -- the same idf weights as
        :func:`accuracy` with the same references, so human and system accuracies are comparable
        (pycocoevalcap called with the reduced references would instead recompute the document
        frequencies for each ``i``).

    Returns
    -------
    numpy.ndarray, float64, shape (n_images,), in [0, 10].

    Raises
    ------
    ValueError
        empty input, an image with fewer than 2 references (indices listed), non-string captions,
        ``df`` of the wrong type.
    """
    refs = _check_references(references, min_size=2)
    df = _check_df(df)
    if df is None:
        df = DocumentFrequency.from_references(refs)
    cands, others = [], []
    for r in refs:
        for i in range(len(r)):
            cands.append(r[i])
            others.append(r[:i] + r[i + 1:])
    sizes = np.fromiter(map(len, refs), dtype=np.int64, count=len(refs))
    scores = cider_d(cands, others, df=df)
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    return np.add.reduceat(scores, starts) / sizes


def f_score(diversity, accuracy, beta2: float = 5.0):
    """F-measure of diversity and accuracy (Wang & Chan 2019, Sec. 5; the paper uses beta^2 = 5).

    ``F = (1 + beta^2) * div * acc / (beta^2 * div + acc)``, a weighted harmonic mean of ``div``
    and ``acc`` (so between their minimum and maximum); 0 wherever the denominator is 0, i.e.
    ``div = acc = 0`` (the limit of F there) or ``acc = 0`` with ``beta2 = 0``. ``beta > 1``
    weights accuracy more (``beta -> inf`` gives ``acc``, ``beta = 0`` gives ``div``). ``acc`` is
    in CIDEr-D units and ``div`` in [0, 1]: the two are on different scales, as in the paper.

    Parameters
    ----------
    diversity, accuracy : float or array_like, broadcastable, all >= 0 (NaN propagates).
    beta2 : float >= 0 -- ``beta^2``.

    Returns
    -------
    float64 ndarray of the broadcast shape (a numpy float64 scalar for scalar inputs), >= 0.

    Raises
    ------
    ValueError
        negative values, ``beta2 < 0`` or not finite, shapes that do not broadcast.
    """
    beta2 = float(beta2)
    if not np.isfinite(beta2) or beta2 < 0:
        raise ValueError(f"beta2 must be a finite number >= 0, got {beta2!r}")
    d = np.asarray(diversity, dtype=np.float64)
    a = np.asarray(accuracy, dtype=np.float64)
    if (d < 0).any() or (a < 0).any():
        raise ValueError("diversity and accuracy must be >= 0")
    try:
        d, a = np.broadcast_arrays(d, a)
    except ValueError as exc:
        raise ValueError(f"diversity and accuracy do not broadcast: {exc}") from None
    num = (1.0 + beta2) * d * a
    den = beta2 * d + a
    with np.errstate(invalid="ignore", divide="ignore"):
        f = np.where(den > 0, num / np.where(den > 0, den, 1.0), np.where(np.isnan(den), np.nan, 0.0))
    return f[()] if f.ndim == 0 else f


# ---------------------------------------------------------------------------------------------
# vocabulary
# ---------------------------------------------------------------------------------------------
def vocabulary(captions: Iterable[str]) -> tuple[int, Counter]:
    """Vocabulary of a caption corpus (Wang & Chan 2019, Fig. 2: vocabulary size per model).

    Parameters
    ----------
    captions : iterable of str -- tokenised captions (e.g. all captions of one system).

    Returns
    -------
    (size, counts) : (int, collections.Counter)
        number of distinct ``str.split()`` tokens, and the count of each token.

    Raises
    ------
    ValueError -- a bare string instead of a list, or a caption that is not a string.
    """
    caps = _check_captions(captions, "captions")
    counts = Counter(chain.from_iterable(c.split() for c in caps))
    return len(counts), counts


def word_frequency_curve(captions: Iterable[str], top: int | None = None) -> np.ndarray:
    """Word frequencies sorted in decreasing order (Wang & Chan 2019, Fig. 3: "word frequency
    plots for the top 5,000 most-frequent words"; plot ``curve[r]`` against rank ``r + 1``,
    usually on log axes).

    Parameters
    ----------
    captions : iterable of str -- tokenised captions of one system.
    top : int >= 1 or None -- keep the ``top`` most frequent words (the paper: 5,000).

    Returns
    -------
    numpy.ndarray, int64, shape (min(V, top),) -- counts, most frequent first (ties in any order).

    Raises
    ------
    ValueError -- as :func:`vocabulary`, or ``top < 1``.
    """
    if top is not None and (isinstance(top, bool) or not isinstance(top, (int, np.integer)) or top < 1):
        raise ValueError(f"top must be None or a positive integer, got {top!r}")
    _, counts = vocabulary(captions)
    freq = np.sort(np.fromiter(counts.values(), dtype=np.int64, count=len(counts)))[::-1]
    return freq[:top] if top is not None else freq


# ---------------------------------------------------------------------------------------------
# latent semantics and MDS
# ---------------------------------------------------------------------------------------------
def _fix_signs(vectors: np.ndarray) -> np.ndarray:
    """Flip each column so that its sum is >= 0 (ties: its largest-magnitude entry > 0)."""
    sums = vectors.sum(axis=0)
    big = vectors[np.argmax(np.abs(vectors), axis=0), np.arange(vectors.shape[1])]
    sign = np.where(np.abs(sums) > 1e-12, np.sign(sums), np.sign(big))
    sign[sign == 0] = 1.0
    return vectors * sign


def latent_coordinates(
    captions: Sequence[str],
    method: str = "lsa",
    k: int = 5,
    df: DocumentFrequency | None = None,
    stop_words: Iterable[str] | None = None,
    scale: bool = False,
) -> np.ndarray:
    """Coordinates of each caption on the ``k`` strongest latent semantics of its set (radar charts).

    Wang & Chan 2019, supplementary Sec. A.2: "we select the 5 largest singular values and their
    corresponding row vectors v_1..v_5 in V^T"; caption ``j`` is the 5-D point
    ``[v_1^j .. v_5^j]``.

    * ``method="lsa"``: ``M = U S V^T`` with ``M[w, j]`` = count of word ``w`` in caption ``j``
      after removing stop words (the appendix removes NLTK's English stop words; that list needs a
      corpus download, so the default here is scikit-learn's ``ENGLISH_STOP_WORDS``, 318 words, shipped
      with captioneval (:mod:`captioneval.kernels.stopwords`);
      pass ``stop_words=nltk.corpus.stopwords.words("english")`` to follow the paper exactly, or
      ``()`` for none). Coordinates = the right singular vectors ``V[:, :k]``.
    * ``method="self_cider"``: ``K = V Lambda V^T`` (:func:`self_cider_kernel`, needs ``df``),
      eigenvectors ordered by decreasing ``|lambda|``; coordinates = ``V[:, :k]``.

    ``scale=True`` multiplies component ``i`` by its strength (LSA: ``s_i``; Self-CIDEr:
    ``sqrt(|lambda_i|)``), giving kernel-PCA / LSA document coordinates whose inner products
    reproduce ``M^T M`` / ``K`` (for ``k = m`` and, for Self-CIDEr, a positive semi-definite
    ``K``); the paper plots the unscaled vectors (default).
    Singular vectors have arbitrary signs: each component is oriented so that its coordinates sum
    to >= 0 (so the leading semantic of a non-negative matrix is positive). Components beyond the
    rank of the decomposition (fewer than ``k`` singular values, or singular values / eigenvalues
    that are zero up to round-off, e.g. repeated captions) are returned as zero columns.

    Parameters
    ----------
    captions : sequence of str, length m >= 1 -- one caption set.
    method : "lsa" or "self_cider".
    k : int >= 1 -- number of latent semantics (the paper: 5).
    df : DocumentFrequency -- required for ``self_cider``, ignored for ``lsa``.
    stop_words : iterable of str or None -- LSA only (None = scikit-learn's English list).
    scale : bool -- see above.

    Returns
    -------
    numpy.ndarray, float64, shape (m, k).

    Raises
    ------
    ValueError -- empty set, non-string captions, unknown method, ``k < 1``, ``self_cider`` without
    ``df``, ``stop_words`` given as a single string.
    """
    caps = _check_captions(captions, "captions")
    if not caps:
        raise ValueError("captions is empty: need at least one caption")
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    m = len(caps)
    if method not in ("lsa", "self_cider"):
        raise ValueError(f'method must be "lsa" or "self_cider", got {method!r}')
    if isinstance(stop_words, (str, bytes)):
        raise ValueError("stop_words must be an iterable of words, not a single string")
    if method == "lsa":
        stops = ENGLISH_STOP_WORDS if stop_words is None else frozenset(stop_words)
        _, _, counts, _ = next(_count_blocks([caps], stop_words=stops))
        mat = counts[0].T  # (d, m) word-caption matrix
        _, s, vt = np.linalg.svd(mat, full_matrices=False)
        vecs, strength = vt.T, s
        magnitude, size = s, max(mat.shape)
    else:
        kern = self_cider_kernel(caps, _check_df(df, allow_none=False))
        lam, vecs = np.linalg.eigh(kern)
        order = np.argsort(-np.abs(lam), kind="stable")
        lam, vecs = lam[order], vecs[:, order]
        strength = np.sqrt(np.abs(lam))
        magnitude, size = np.abs(lam), m
    # components of (numerically) zero strength are arbitrary directions: report them as zeros
    weak = magnitude <= size * _EPS * (magnitude.max() if len(magnitude) else 0.0)
    vecs = _fix_signs(vecs)
    vecs[:, weak] = 0.0
    if scale:
        vecs = vecs * strength[None, :]
    out = np.zeros((m, k), dtype=np.float64)
    kk = min(k, vecs.shape[1])
    out[:, :kk] = vecs[:, :kk]
    return out


def mds_coordinates(matrix, kind: str = "similarity", n_components: int = 2) -> np.ndarray:
    """Classical (Torgerson) multidimensional scaling of captions (Wang & Chan 2019, Fig. 9, which
    cites Buja et al., "Data visualization with multidimensional scaling", 2008).

    ``kind="similarity"``: ``matrix`` is a kernel/similarity ``S`` (e.g. :func:`self_cider_kernel`
    or CIDEr-D between captions of several images), turned into squared distances
    ``D2[i, j] = S[i, i] + S[j, j] - 2 S[i, j]`` (the feature-space distance of a kernel;
    ``S`` is symmetrised as ``(S + S^T) / 2`` first). ``kind="distance"``: ``matrix`` holds
    distances ``D`` and ``D2 = D ** 2``. Then ``B = -1/2 J D2 J`` (``J`` = centring matrix),
    eigen-decomposition ``B = V L V^T``, coordinates ``X = V[:, :c] sqrt(max(L[:c], 0))`` for the
    ``c`` largest eigenvalues. Deterministic (no random start, unlike SMACOF); each axis is
    oriented so that its largest-magnitude coordinate is positive. Negative squared distances
    (a similarity that is not a valid kernel) are clipped to 0.

    Parameters
    ----------
    matrix : array_like, shape (m, m), finite; for ``distance``: >= 0 and symmetric
        (``(D + D^T) / 2`` is used).
    kind : "similarity" or "distance".
    n_components : int >= 1 (default 2, for a scatter plot).

    Returns
    -------
    numpy.ndarray, float64, shape (m, n_components); all-zero columns when ``B`` has fewer
    positive eigenvalues than ``n_components`` (e.g. identical captions collapse to one point).

    Raises
    ------
    ValueError -- not a square 2-D finite matrix, ``m < 1``, negative distances, unknown ``kind``,
    ``n_components < 1``.
    """
    a = np.asarray(matrix, dtype=np.float64)
    if a.ndim != 2 or a.shape[0] != a.shape[1] or a.shape[0] < 1:
        raise ValueError(f"matrix must be a square (m, m) array with m >= 1, got shape {a.shape}")
    if not np.isfinite(a).all():
        raise ValueError("matrix must be finite")
    if isinstance(n_components, bool) or not isinstance(n_components, (int, np.integer)) or n_components < 1:
        raise ValueError(f"n_components must be a positive integer, got {n_components!r}")
    a = (a + a.T) / 2.0
    if kind == "similarity":
        diag = np.diag(a)
        d2 = diag[:, None] + diag[None, :] - 2.0 * a
    elif kind == "distance":
        if (a < 0).any():
            raise ValueError("distances must be >= 0")
        d2 = a * a
    else:
        raise ValueError(f'kind must be "similarity" or "distance", got {kind!r}')
    d2 = np.maximum(d2, 0.0)
    np.fill_diagonal(d2, 0.0)
    m = a.shape[0]
    j = np.eye(m) - 1.0 / m
    b = -0.5 * j @ d2 @ j
    b = (b + b.T) / 2.0
    lam, vecs = np.linalg.eigh(b)
    order = np.argsort(-lam, kind="stable")
    lam, vecs = lam[order], vecs[:, order]
    tol = m * _EPS * max(np.abs(lam).max(), 0.0)
    lam = np.where(lam > tol, lam, 0.0)
    big = vecs[np.argmax(np.abs(vecs), axis=0), np.arange(m)]
    vecs = vecs * np.where(big < 0, -1.0, 1.0)
    out = np.zeros((m, n_components), dtype=np.float64)
    c = min(n_components, m)
    out[:, :c] = vecs[:, :c] * np.sqrt(lam[:c])[None, :]
    return out
