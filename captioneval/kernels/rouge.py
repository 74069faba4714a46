"""Vectorised ROUGE-L with pycocoevalcap 1.2's exact semantics (numpy, no Django).

Definition
----------
ROUGE-L is defined in C.-Y. Lin, "ROUGE: A Package for Automatic Evaluation of Summaries", ACL
Workshop Text Summarization Branches Out 2004, Sec. 3.1 (Eqs. 2-4: LCS-based recall, precision and
F-measure). The COCO caption evaluation (pycocoevalcap 1.2, https://github.com/tylin/coco-caption,
file ``pycocoevalcap/rouge/rouge.py``, ``Rouge.calc_score`` and ``my_lcs``) computes, for a candidate
``c`` and references ``r_1 .. r_R``:

* tokens are ``s.split(" ")`` -- split on single spaces, so an empty string is one empty token and
  two spaces in a row make an empty token (PTB-tokenised text has neither);
* ``LCS_j`` = length of the longest common subsequence of the token lists of ``c`` and ``r_j``;
  ``P = max_j LCS_j / |c|`` and ``R = max_j LCS_j / |r_j|`` (each maximised on its own over the
  references, possibly at different references);
* ``ROUGE-L = ((1 + beta^2) * P * R) / (R + beta^2 * P)`` with ``beta = 1.2``, and 0 when P or R is 0.

This module reproduces those numbers to the last bit (same floating-point operations in the same
order). The LCS lengths are computed with the bit-parallel algorithm of L. Allison and T. I. Dix,
"A bit-string longest-common-subsequence algorithm", Information Processing Letters 23 (1986), in
the form of H. Hyyrö, "Bit-parallel LCS-length computation revisited", AWOCS 2004 (for the match
masks ``M[t]`` of the tokens of the reference, ``V = ~0``; for each candidate token ``t``:
``U = V & M[t]; V = (V + U) | (V - U)``; then ``LCS = #zero bits of V`` among the reference's
``|r|`` low bits). It is exact. All (candidate, reference) pairs advance together as numpy unsigned
words, one candidate token per step. Tokens are int64 keys (:func:`captioneval.kernels.bleu._tokenize`:
numpy over the joined bytes for ASCII text). For distinct captions the match masks ``M[t]`` of a
pair's candidate tokens against each of its references come from one comparison of padded key
arrays packed into 16/32/64-bit words (:func:`captioneval.kernels.bleu._match_masks`), ``MASK_PAIRS``
pairs at a time (the masks of a block stay in the CPU caches during the recurrence); chunks whose
reference lists are shared by many candidates (``SHARED_REFERENCES``), and pairs with a sentence of
more than 64 tokens, build the masks once per distinct reference list from its sorted vocabulary
instead (``_lcs_sorted``; references longer than 64 tokens use the same recurrence on Python
integers).
"""
from __future__ import annotations

from itertools import chain
from typing import Sequence

import numpy as np

from captioneval.kernels.bleu import (_MASK_WIDTHS, MASK_PAIRS, CaptionIndex, _key_window, _match_masks,
                                      _shared_references, _tokenize, chunks, expand, index_captions)
from captioneval.utils.gcpause import paused_gc

__all__ = ["rouge_l", "lcs_length"]

WORD_BITS = 64


def lcs_length(a: Sequence, b: Sequence) -> int:
    """Length of the longest common subsequence of two token sequences (any hashable items), with the
    bit-parallel recurrence on a Python integer (Hyyrö 2004; see the module docstring). Equal to
    pycocoevalcap's ``my_lcs(a, b)`` for all inputs."""
    masks: dict = {}
    for i, t in enumerate(a):
        masks[t] = masks.get(t, 0) | (1 << i)
    full = (1 << len(a)) - 1
    v = full
    for t in b:
        u = v & masks.get(t, 0)
        v = ((v + u) | (v - u)) & full
    return len(a) - v.bit_count()


def rouge_l(candidates: Sequence[str], references: Sequence[Sequence[str]], beta: float = 1.2) -> np.ndarray:
    """ROUGE-L F-measure of each candidate against its references, as pycocoevalcap 1.2's
    ``Rouge().compute_score`` (see the module docstring).

    Parameters
    ----------
    candidates : m PTB-tokenised strings.
    references : m non-empty lists of PTB-tokenised strings.
    beta : weight of recall (pycocoevalcap: 1.2).

    Returns
    -------
    ndarray float64 (m,), in [0, 1].

    Raises
    ------
    ValueError
        length mismatch or a candidate without references.
    TypeError
        a caption that is not a string.
    """
    index = index_captions(candidates, references)
    if len(candidates) == 0:
        return np.zeros(0)
    per_pair = np.concatenate([_rouge_l_pairs(sub, beta) for _, _, sub in chunks(index)])
    return per_pair[index.pair_of]


def _rouge_l_pairs(index: CaptionIndex, beta: float) -> np.ndarray:
    """ROUGE-L of the distinct pairs of one chunk of ``index`` (:func:`captioneval.kernels.bleu.chunks`),
    float64 (P,), every step vectorised over the pairs."""
    with paused_gc():  # pycocoevalcap Rouge.calc_score: split(" "); n_tokens >= 1
        n_tokens, tptr, wid = _tokenize(index.sentences, single_space=True)

    gptr, grefs = index.group_ptr, index.group_refs
    ps, pg = index.pair_sentence, index.pair_group
    clen = n_tokens[ps]
    eslot, epair = expand(gptr, pg)  # (pair, reference slot) entries, pair by pair
    elen_r, elen_c = n_tokens[grefs[eslot]], clen[epair]
    lcs = np.zeros(len(eslot), dtype=np.int64)

    # pairs whose candidate and references have at most 64 tokens: the match masks of the candidate's
    # tokens against each reference from one comparison of padded word-id arrays, then the
    # bit-parallel recurrence on all (pair, reference) words at once, one candidate position per step
    # (past the candidate's end a mask is 0 and leaves V unchanged)
    if _shared_references(index):  # many candidates per reference list: its masks built once
        lcs = _lcs_sorted(index, n_tokens, tptr, wid, eslot, epair, np.arange(len(eslot)))
    else:
        group_len = np.maximum.reduceat(n_tokens[grefs], gptr[:-1])
        pair_len = np.maximum(clen, group_len[pg])
        epos = eslot - gptr[pg][epair]  # position of the reference in its list
        eptr = np.zeros(len(ps) + 1, dtype=np.int64)  # the entries of pair p: eptr[p]:eptr[p + 1]
        np.cumsum(gptr[pg + 1] - gptr[pg], out=eptr[1:])
        lower = 0
        for width, dtype in _MASK_WIDTHS:
            sel = np.flatnonzero((pair_len > lower) & (pair_len <= width))
            lower = width
            if not len(sel):
                continue
            window = _key_window(tptr, wid, width)
            for lo in range(0, len(sel), MASK_PAIRS):  # a block's masks stay in the CPU caches
                block = sel[lo:lo + MASK_PAIRS]
                m1, _ = _match_masks(index, tptr, window, block, dtype, self_masks=False)  # (b, R, width)
                v = np.full(m1.shape[:2], np.iinfo(dtype).max, dtype=dtype)
                u, t = np.empty_like(v), np.empty_like(v)
                for j in range(int(clen[block].max())):
                    np.bitwise_and(v, m1[:, :, j], out=u)
                    np.subtract(v, u, out=t)
                    v += u
                    v |= t
                e, owner = expand(eptr, block)
                ve = v[owner, epos[e]].astype(np.uint64)
                low = np.right_shift(np.uint64(np.iinfo(np.uint64).max), (WORD_BITS - elen_r[e]).astype(np.uint64))
                lcs[e] = elen_r[e] - np.bitwise_count(ve & low).astype(np.int64)
        if (pair_len > lower).any():
            rest = np.flatnonzero(pair_len[epair] > lower)
            lcs[rest] = _lcs_sorted(index, n_tokens, tptr, wid, eslot, epair, rest)

    # pycocoevalcap: prec/rec per reference, maxima over the references, then the F-measure
    prec = lcs / elen_c.astype(np.float64)
    rec = lcs / elen_r.astype(np.float64)
    first = np.cumsum(np.diff(gptr)[pg]) - np.diff(gptr)[pg]
    prec_max = np.maximum.reduceat(prec, first)
    rec_max = np.maximum.reduceat(rec, first)
    b2 = beta ** 2
    with np.errstate(divide="ignore", invalid="ignore"):
        score = ((1 + b2) * prec_max * rec_max) / (rec_max + b2 * prec_max)
    score = np.where((prec_max != 0) & (rec_max != 0), score, 0.0)
    return score


def _lcs_sorted(index: CaptionIndex, n_tokens, tptr, key, eslot, epair, entries) -> np.ndarray:
    """LCS lengths (int64, len(entries)) of the (pair, reference slot) ``entries`` of one chunk, for
    pairs with a sentence longer than 64 tokens: match masks from the sorted vocabularies of the
    reference lists, uint64 words for references of at most 64 tokens, Python integers above."""
    _, wid = np.unique(key, return_inverse=True)  # dense word ids
    wid = wid.reshape(-1).astype(np.int64, copy=False)
    n_voc = int(wid.max()) + 1 if len(wid) else 1
    gptr, grefs = index.group_ptr, index.group_refs
    n_groups = len(gptr) - 1
    ps, pg = index.pair_sentence, index.pair_group

    # each reference list's vocabulary, numbered 0..V_g-1 (key g * n_voc + token, sorted)
    rtok_idx, rtok_owner = expand(tptr, grefs)  # every token of every reference slot
    slot_group = np.repeat(np.arange(n_groups, dtype=np.int64), np.diff(gptr))
    rkey = slot_group[rtok_owner] * n_voc + wid[rtok_idx]
    gvocab, rlocal = np.unique(rkey, return_inverse=True)
    rlocal = rlocal.reshape(-1)
    vstart = np.searchsorted(gvocab // n_voc, np.arange(n_groups + 1, dtype=np.int64))
    vsize = np.diff(vstart)  # V_g
    rlocal = rlocal - vstart[slot_group[rtok_owner]]

    # match masks: per reference slot a row of V_g + 1 words (the last, 0, for tokens not in the list)
    slot_len = n_tokens[grefs]
    short = slot_len <= WORD_BITS
    row_size = np.where(short, vsize[slot_group] + 1, 0)
    row_start = np.cumsum(row_size) - row_size
    table = np.zeros(int(row_size.sum()) + 1, dtype=np.uint64)
    in_short = short[rtok_owner]
    pos = rtok_idx - tptr[grefs[rtok_owner]]
    np.bitwise_or.at(table, (row_start[rtok_owner] + rlocal)[in_short],
                     np.left_shift(np.uint64(1), pos[in_short].astype(np.uint64)))

    # candidate tokens as local ids of the pair's reference list (V_g when absent)
    clen = n_tokens[ps]
    ctok_idx, ctok_owner = expand(tptr, ps)
    ckey = pg[ctok_owner] * n_voc + wid[ctok_idx]
    hit = np.searchsorted(gvocab, ckey)
    hit_c = np.minimum(hit, len(gvocab) - 1)
    local = np.where(gvocab[hit_c] == ckey, hit_c - vstart[pg[ctok_owner]], vsize[pg[ctok_owner]])
    max_clen = int(clen.max())
    cstart = np.cumsum(clen) - clen  # pair p's candidate tokens are local[cstart[p]:cstart[p] + clen[p]]

    # (pair, reference slot) entries; pairs with a short reference run in lockstep
    eslot, epair = expand(gptr, pg)
    elen_r, elen_c = slot_len[eslot], clen[epair]
    lcs = np.zeros(len(eslot), dtype=np.int64)
    fast = np.flatnonzero(short[eslot])
    order = fast[np.argsort(-elen_c[fast], kind="stable")]  # longest candidates first: active = a prefix
    rows = row_start[eslot[order]]
    tokens = cstart[epair[order]]
    active = len(order) - np.searchsorted(elen_c[order][::-1], np.arange(max_clen, dtype=np.int64), side="right")
    v = np.full(len(order), np.iinfo(np.uint64).max, dtype=np.uint64)
    for j in range(max_clen):
        a = int(active[j])
        vj = v[:a]  # a view: updated in place
        u = table[rows[:a] + local[tokens[:a] + j]]
        u &= vj
        t = vj - u
        vj += u
        vj |= t
    low = np.right_shift(np.uint64(np.iinfo(np.uint64).max), (WORD_BITS - elen_r[order]).astype(np.uint64))
    lcs[order] = elen_r[order] - np.bitwise_count(v & low).astype(np.int64)
    for e in np.flatnonzero(~short[eslot]).tolist():  # references of more than 64 tokens
        r, c = grefs[eslot[e]], ps[epair[e]]
        lcs[e] = lcs_length(wid[tptr[r]:tptr[r + 1]].tolist(), wid[tptr[c]:tptr[c + 1]].tolist())

    return lcs[entries]
