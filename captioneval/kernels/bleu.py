"""Vectorised sentence and corpus BLEU-1..n with pycocoevalcap 1.2's exact semantics (numpy, no Django).

Definition
----------
BLEU is defined in K. Papineni, S. Roukos, T. Ward and W.-J. Zhu, "BLEU: a Method for Automatic
Evaluation of Machine Translation", ACL 2002 (modified n-gram precision Sec. 2.1, brevity penalty and
geometric mean Sec. 2.2.2 / 2.3). The COCO caption evaluation (pycocoevalcap 1.2,
https://github.com/tylin/coco-caption, files ``pycocoevalcap/bleu/bleu.py`` and ``bleu_scorer.py``,
David Chiang's scorer modified by H. Fang and T.-Y. Lin) computes it with details this module
reproduces exactly (equal per caption and corpus to the last bit on the bundled datasets):

* tokens are ``s.split()`` (any run of Unicode whitespace separates; an empty or blank candidate has
  0 tokens), n-grams of order ``k = 1..n`` (``precook``);
* the references of a candidate are cooked together: for every n-gram the *maximum* count over the
  references (``cook_refs``); the clipped matches of order ``k`` are
  ``correct_k = sum_g min(count_candidate(g), max_ref_count(g))`` and the number of candidate n-grams
  is ``guess_k = max(0, len - k + 1)`` (``cook_test``);
* effective reference length ``option='closest'``: the reference length ``l`` minimising
  ``(|l - len|, l)``, i.e. the closest one and, on a tie, the *shorter* one (``cook_test``);
* per caption (``BleuScorer.compute_score``), with ``tiny = 1e-15`` and ``small = 1e-9``::

      b = 1.0
      for k in 0..n-1:  b *= (correct_k + tiny) / (guess_k + small);  bleu_{k+1} = b ** (1 / (k + 1))
      ratio = (len + tiny) / (reflen + small);  if ratio < 1: every bleu_{k+1} *= exp(1 - 1 / ratio)

  (a candidate without matches of order k gets a tiny but non-zero BLEU-k, not 0: that is
  pycocoevalcap's smoothing);
* corpus score (the first value ``Bleu.compute_score`` returns): the same formula applied once to
  the integer totals over all candidates of ``correct_k``, ``guess_k``, ``len`` and the closest
  ``reflen`` (not the mean of the per-caption scores).

Implementation: every distinct sentence and reference list is numbered once (the shared-text
shortcut: a text repeated across candidates or images is split and counted once); when no text
repeats (distinct captions, the usual COCO case) the numbering is the texts' order and needs no
dictionary, only a sort of their hashes to check it (:func:`_distinct_index`). ASCII sentences are
split with numpy over their bytes joined by NUL bytes, each token becoming one int64 key (its bytes
when it has at most 8, read as two aligned words and a shift; a first-occurrence id of a longer
token, found by sorting its 8-byte words; :func:`_tokenize`), so no Python object is built per token. For distinct
captions (each reference list used by few candidates) the clipped matches are counted without
n-gram ids: a candidate's token-match masks against each of its references (bit j of ``M[r, i]``
set when reference token j equals candidate token i) come from one comparison of padded key arrays
(rows of a sliding window over the keys), packed into words by a multiplication
(:func:`_pack_bits`); n-gram matches of order k from ``M_k[i] = M_{k-1}[i] & (M_1[i+k-1] >> (k-1))``,
and counts are popcounts (:func:`_dense_correct`; sentences of up to 64 tokens, in 16/32/64-bit
words, :data:`MASK_PAIRS` pairs at a time so that the masks stay in the CPU caches). Longer
sentences, and chunks whose reference lists are shared by many candidates
(:data:`SHARED_REFERENCES`, e.g. the human-judgement datasets), number the n-grams with
``np.unique`` instead (an n-gram of order k is the pair (id of its (k-1)-gram prefix, last token))
and build the maximum reference counts once per reference list (:func:`_sorted_correct`). Both give
the same integers. The floating-point operations of the per-caption formula are the reference's, in
the same order; the two libm calls (``pow`` and ``exp``) are made with Python floats on the distinct
values, so results do not depend on numpy's SIMD builds of ``power`` / ``exp``. Batches of more than
:data:`CHUNK_PAIRS` distinct pairs (:data:`DENSE_CHUNK_PAIRS` without shared reference lists) are
scored a chunk at a time (:func:`chunks`: each chunk numbers only its own sentences and n-grams), so
time and memory grow linearly with the batch; a pair's numbers do not depend on the chunking.

Speed (``benchmarks/coco_metrics_speed.py --distinct``, 2-core machine shared with other jobs): see
that script's docstring for the measured ratios against pycocoevalcap.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import chain
from itertools import count as _positions
from typing import Sequence

import numpy as np

from captioneval.utils.gcpause import paused_gc
from captioneval.utils.hashing import repeated_hashes, sorted_hashes

__all__ = ["BleuResult", "bleu", "bleu_scores", "bleu_statistics", "index_captions", "CaptionIndex", "chunks",
           "CHUNK_PAIRS", "DENSE_CHUNK_PAIRS"]

TINY = 1e-15  # pycocoevalcap bleu_scorer.py: added to the matches ("so that if guess is 0 still return 0")
SMALL = 1e-9  # pycocoevalcap bleu_scorer.py: added to the number of candidate n-grams


@dataclass(frozen=True)
class BleuResult:
    """BLEU-1..n of a batch.

    ``per_caption`` : float64 (n, m); row k is BLEU-(k+1) of each of the m candidates, in [0, 1].
    ``corpus`` : float64 (n,); pycocoevalcap's corpus BLEU-1..n (the first value its
        ``Bleu.compute_score`` returns), computed from the summed statistics.
    """

    per_caption: np.ndarray
    corpus: np.ndarray


@dataclass(frozen=True)
class CaptionIndex:
    """Distinct sentences and reference lists of a batch of m candidates.

    ``sentences`` : list of the S distinct strings (candidates and references), first-seen order.
    ``pair_sentence``, ``pair_group`` : int64 (P,): candidate sentence id and reference-list id of the
        P distinct (candidate, reference list) pairs, sorted by reference list, then sentence.
    ``pair_of`` : int64 (m,): the distinct pair of each candidate.
    ``group_ptr`` : int64 (G+1,), ``group_refs`` : int64 (group_ptr[-1],): the sentence ids of the
        references of list g are ``group_refs[group_ptr[g]:group_ptr[g+1]]`` (in the given order).
    """

    sentences: list
    pair_sentence: np.ndarray
    pair_group: np.ndarray
    pair_of: np.ndarray
    group_ptr: np.ndarray
    group_refs: np.ndarray


def index_captions(candidates: Sequence[str], references: Sequence[Sequence[str]]) -> CaptionIndex:
    """Number the distinct sentences, reference lists and (candidate, reference list) pairs.

    Reference lists are compared by content (the same strings in the same order).

    Raises
    ------
    ValueError
        ``len(candidates) != len(references)`` or a candidate without references.
    TypeError
        a caption that is not a ``str``, or a reference list given as a single string.
    """
    m = len(candidates)
    if m != len(references):
        raise ValueError(f"{m} candidates but {len(references)} reference lists")
    if any(issubclass(kind, (str, bytes)) for kind in set(map(type, references))):
        i = next(i for i, refs in enumerate(references) if isinstance(refs, (str, bytes)))
        raise TypeError(f"references[{i}] must be a list of reference strings, got a single string")
    with paused_gc():
        return _index_captions(candidates, references, m)


def _index_captions(candidates, references, m: int) -> CaptionIndex:
    distinct, n_unique, hashes = _distinct_index(candidates, references, m)
    if distinct is not None:
        return distinct
    try:
        keys = list(map(tuple, references))  # C loops throughout: this runs once per candidate
        if hashes is not None and _all_distinct(keys):  # mostly distinct texts: no two lists equal
            lists, group = keys, np.arange(m, dtype=np.int64)
        else:
            lists = {key: g for g, key in enumerate(dict.fromkeys(keys))}
            group = np.fromiter(map(lists.__getitem__, keys), dtype=np.int64, count=m)
    except TypeError:
        raise TypeError("references must be lists of strings (tokenised captions)") from None
    if () in lists:
        raise ValueError(f"candidate {keys.index(())} has no reference captions")
    texts = list(chain(candidates, chain.from_iterable(lists)))
    try:
        if n_unique is not None and 2 * n_unique >= m + sum(map(len, references)):
            # mostly distinct texts: no dictionary of millions of strings; with no two lists equal,
            # ``texts`` are the ones _distinct_index hashed, in the same order
            at = _first_occurrence(texts, hashes if len(lists) == m else None)
        else:
            first: dict = {}  # text -> position of its first occurrence in ``texts`` (one C-level pass)
            at = np.fromiter(map(first.setdefault, texts, _positions()), dtype=np.int64, count=len(texts))
    except TypeError:
        raise TypeError("candidates and references must be strings (tokenised captions)") from None
    is_first = np.flatnonzero(at == np.arange(len(texts)))
    sentences = [texts[i] for i in is_first.tolist()]  # first-seen order
    _check_strings(sentences)
    sid = np.zeros(len(texts), dtype=np.int64)  # sentence id of each first occurrence
    sid[is_first] = np.arange(len(sentences), dtype=np.int64)
    sid = sid[at]
    cand, refs_flat = sid[:m], sid[m:]
    sizes = np.fromiter(map(len, lists), dtype=np.int64, count=len(lists))
    n_sent = max(len(sentences), 1)
    key = group * n_sent + cand
    upk, pair_of = np.unique(key, return_inverse=True)
    ptr = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(sizes, out=ptr[1:])
    return CaptionIndex(sentences, upk % n_sent, upk // n_sent, pair_of.reshape(-1).astype(np.int64, copy=False),
                        ptr, refs_flat)


def _check_strings(sentences: list) -> None:
    """TypeError naming the first caption that is not a ``str``."""
    if set(map(type, sentences)) - {str}:
        for s in sentences:
            if not isinstance(s, str):
                raise TypeError(f"captions must be strings (tokenised, space-separated), got {type(s).__name__}: {s!r}")


def _distinct_index(candidates, references, m: int) -> tuple[CaptionIndex | None, int | None, tuple | None]:
    """``(index, None, None)``: the :class:`CaptionIndex` of a batch in which no text occurs twice (the
    usual COCO case: every image its own candidate and references), without dictionaries: sentence i
    is the i-th of the candidates followed by the references, list g and pair g are candidate g's.
    ``(None, number of distinct hashes, (hashes, sorted hashes))`` when two texts share a hash (a
    repeated text, or a rare collision of different ones: the general path sorts that out; the count
    is then at most the number of distinct texts), with the int64 ``hash`` of every text (candidates,
    then the references in order) and the same sorted, for :func:`_first_occurrence`;
    ``(None, None, None)`` when a reference list object is used twice, when the lists are not all
    lists or tuples, for an empty list or an unhashable caption: the general path decides (and
    raises).

    Distinctness comes from one ``np.sort`` of the texts' hashes (``hash`` of a ``str`` is cached in
    the object): a Python set of millions of strings costs several times that in cache misses."""
    if not m or len(set(map(id, references))) < m or set(map(type, references)) - {list, tuple}:
        return None, None, None
    sizes = np.fromiter(map(len, references), dtype=np.int64, count=m)
    if sizes.min() == 0:
        return None, None, None
    texts = list(chain(candidates, chain.from_iterable(references)))
    try:
        hashes, ordered = sorted_hashes(texts, len(texts))
    except TypeError:  # unhashable: the general path raises
        return None, None, None
    shared = repeated_hashes(ordered)
    if shared:
        return None, len(texts) - shared, (hashes, ordered)
    _check_strings(texts)
    ptr = np.zeros(m + 1, dtype=np.int64)
    np.cumsum(sizes, out=ptr[1:])
    pairs = np.arange(m, dtype=np.int64)
    return CaptionIndex(texts, pairs, pairs.copy(), pairs.copy(), ptr, np.arange(m, len(texts), dtype=np.int64)), None, None


def _all_distinct(items: list) -> bool:
    """Whether no two of ``items`` (hashable) are equal: True when their hashes are all different,
    else decided by a set (a repeat, or a rare collision). Raises TypeError for an unhashable item."""
    return not repeated_hashes(sorted_hashes(items, len(items))[1]) or len(set(items)) == len(items)


def _first_occurrence(texts: list, hashes: tuple | None = None) -> np.ndarray:
    """int64 (n,): the position of the first occurrence of each text in ``texts`` (hashable items),
    without a dictionary over all of them: the hashes (``hashes``: (int64 (n,), the same sorted), when
    the caller has them) are sorted to find the values that occur more than once; only the texts with
    such a hash (the repeated texts and the rare hash collisions) are grouped by hash, in ascending
    positions, and compared with ``==``. For batches of mostly distinct texts, where a dictionary of millions of
    strings costs seconds (cache misses); the result is the dictionary's.
    Raises TypeError for an unhashable item."""
    n = len(texts)
    h, hs = sorted_hashes(texts, n) if hashes is None else hashes
    at = np.arange(n, dtype=np.int64)
    repeated = hs[1:][hs[1:] == hs[:-1]]
    if repeated.size:
        values = np.unique(repeated)
        slot = np.minimum(np.searchsorted(values, h), values.size - 1)
        members = np.flatnonzero(values[slot] == h)  # ascending positions of the texts with such a hash
        members = members[np.argsort(h[members], kind="stable")]  # by hash, positions ascending within
        seen: dict = {}
        current = None
        # within a run of equal hashes the positions ascend: the first seen is the first occurrence
        for pos, value in zip(members.tolist(), h[members].tolist()):
            if value != current:
                seen, current = {}, value
            at[pos] = seen.setdefault(texts[pos], pos)
    return at


def expand(ptr: np.ndarray, sel: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """CSR gather: for the rows ``sel`` of a CSR structure with row pointer ``ptr``, the indices of
    their entries, concatenated (int64), and the position in ``sel`` each entry belongs to."""
    lengths = ptr[sel + 1] - ptr[sel]
    total = int(lengths.sum())
    owner = np.repeat(np.arange(len(sel), dtype=np.int64), lengths)
    starts = np.cumsum(lengths) - lengths
    idx = np.arange(total, dtype=np.int64) - np.repeat(starts - ptr[sel], lengths)
    return idx, owner


#: distinct (candidate, reference list) pairs scored together: the sorts of one chunk stay in the
#: CPU caches and its arrays in a few hundred MB, so time and memory grow linearly with the number of
#: pairs (one batch of 1M distinct pairs sorts about 50M n-gram keys at once, N log N and 9 GB)
CHUNK_PAIRS = 20_000
#: the same for a batch whose reference lists are not shared by many candidates
#: (:data:`SHARED_REFERENCES`; distinct captions, the dense masks): its byte tokenizer's arrays
#: (about 330,000 tokens) stay in the CPU caches too (at 50,000 distinct COCO-like items BLEU-1..4
#: about 20% faster than with 20,000)
DENSE_CHUNK_PAIRS = 5_000


def chunks(index: CaptionIndex, size: int | None = None):
    """Split ``index`` into consecutive runs of at most ``size`` distinct pairs (``size`` >= 1;
    default, read at each call: :data:`CHUNK_PAIRS` when ``index`` shares its reference lists among
    many candidates (:data:`SHARED_REFERENCES`), :data:`DENSE_CHUNK_PAIRS` otherwise).

    Yields ``(start, stop, sub)``: ``sub`` is a :class:`CaptionIndex` of the pairs
    ``start:stop`` alone, holding only the sentences and reference lists they use (renumbered, in
    their order in ``index``); its ``pair_of`` is ``arange(stop - start)``. A single chunk is
    ``index`` itself. Scores computed pair by pair are the same whichever way the pairs are split.
    """
    if size is None:
        size = CHUNK_PAIRS if _shared_references(index) else DENSE_CHUNK_PAIRS
    size = int(size)
    if size < 1:
        raise ValueError(f"chunk size must be >= 1, got {size}")
    n_pairs = len(index.pair_sentence)
    if n_pairs <= size:
        yield 0, n_pairs, index
        return
    for start in range(0, n_pairs, size):
        stop = min(start + size, n_pairs)
        ps, pg = index.pair_sentence[start:stop], index.pair_group[start:stop]
        groups, local_group = np.unique(pg, return_inverse=True)  # pairs are sorted by group
        ref_idx, _ = expand(index.group_ptr, groups)
        refs = index.group_refs[ref_idx]
        used, local = np.unique(np.concatenate([ps, refs]), return_inverse=True)
        local = local.reshape(-1)
        sizes = np.diff(index.group_ptr)[groups]
        ptr = np.zeros(len(groups) + 1, dtype=np.int64)
        np.cumsum(sizes, out=ptr[1:])
        yield start, stop, CaptionIndex(_pick(index.sentences, used), local[:len(ps)],
                                        local_group.reshape(-1).astype(np.int64, copy=False),
                                        np.arange(stop - start, dtype=np.int64), ptr, local[len(ps):])


def _pick(items: list, ids: np.ndarray) -> list:
    """``[items[i] for i in ids]`` for sorted distinct int64 ``ids``: list slices over their contiguous
    runs when there are few (distinct captions: a chunk's candidates, then its references)."""
    breaks = np.flatnonzero(np.diff(ids) != 1) + 1
    if not len(ids) or len(breaks) > len(ids) // 16:
        return list(map(items.__getitem__, ids.tolist()))
    bounds = [0, *breaks.tolist(), len(ids)]
    firsts = ids[bounds[:-1]].tolist()
    return list(chain.from_iterable(items[f:f + b - a] for f, a, b in zip(firsts, bounds[:-1], bounds[1:])))


def _ngram_counts(sentences: list, n: int):
    """Distinct n-grams (orders 1..n) of each sentence with their counts.

    Returns (n_tokens int64 (S,), ptr int64 (S+1,), ngram int64 (E,), count int64 (E,), order int64 (X,),
    n_ngrams X): the entries of sentence s are ``ptr[s]:ptr[s+1]``, sorted by n-gram id; ``order[x]``
    is the order minus one of n-gram x.
    """
    split = [s.split() for s in sentences]  # pycocoevalcap precook: words = s.split()
    n_tokens = np.fromiter(map(len, split), dtype=np.int64, count=len(split))
    flat = list(chain.from_iterable(split))
    vocab = {w: i for i, w in enumerate(dict.fromkeys(flat))}
    wid = np.fromiter(map(vocab.__getitem__, flat), dtype=np.int64, count=len(flat))
    n_tok, n_voc, n_sent = len(flat), max(len(vocab), 1), len(sentences)
    sent_of_pos = np.repeat(np.arange(n_sent, dtype=np.int64), n_tokens)
    remaining = np.repeat(np.cumsum(n_tokens), n_tokens) - np.arange(n_tok, dtype=np.int64)
    sents, grams, sizes = [sent_of_pos], [wid], [len(vocab)]
    offset, prev = len(vocab), wid
    for k in range(2, n + 1):
        pos = np.flatnonzero(remaining >= k)
        code = prev[pos] * n_voc + wid[pos + (k - 1)]  # < n_tok * n_voc: no overflow
        uniq, inv = np.unique(code, return_inverse=True)
        inv = inv.reshape(-1).astype(np.int64, copy=False)
        cur = np.zeros(n_tok, dtype=np.int64)
        cur[pos] = inv
        prev = cur
        sents.append(sent_of_pos[pos])
        grams.append(inv + offset)
        sizes.append(len(uniq))
        offset += len(uniq)
    n_ngrams = max(offset, 1)
    key = np.concatenate(sents) * n_ngrams + np.concatenate(grams)
    ukey, count = np.unique(key, return_counts=True)
    sent, ngram = ukey // n_ngrams, ukey % n_ngrams
    ptr = np.zeros(n_sent + 1, dtype=np.int64)
    np.cumsum(np.bincount(sent, minlength=n_sent), out=ptr[1:])
    order = np.repeat(np.arange(n, dtype=np.int64), sizes)
    return n_tokens, ptr, ngram, count.astype(np.int64, copy=False), order, n_ngrams


def _pow_distinct(values: np.ndarray, exponent: float) -> np.ndarray:
    """``values ** exponent`` with Python's float ``**`` (libm ``pow``, as pycocoevalcap), once per
    distinct value."""
    if exponent == 1.0:
        return values.copy()  # pow(x, 1.0) == x exactly
    uniq, inv = np.unique(values, return_inverse=True)
    powered = np.array([v ** exponent for v in uniq.tolist()], dtype=np.float64)
    return powered[inv.reshape(-1)]


def _corpus_bleu(correct, guess, testlen: int, reflen: int, n: int) -> np.ndarray:
    """pycocoevalcap ``BleuScorer.compute_score``'s corpus score, operation by operation (Python floats)."""
    bleus = []
    bleu = 1.
    for k in range(n):
        bleu *= float(int(correct[k]) + TINY) / (int(guess[k]) + SMALL)
        bleus.append(bleu ** (1. / (k + 1)))
    ratio = (testlen + TINY) / (reflen + SMALL)
    if ratio < 1:
        for k in range(n):
            bleus[k] *= math.exp(1 - 1 / ratio)
    return np.asarray(bleus, dtype=np.float64)


def _pair_statistics(index: CaptionIndex, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """pycocoevalcap's ``cook_refs`` / ``cook_test`` for the P distinct pairs of ``index``, chunk by
    chunk (:func:`chunks`): int64 ``correct`` (P, n) clipped matches, ``guess`` (P, n) candidate
    n-grams, ``testlen`` (P,) candidate length, ``reflen`` (P,) closest reference length."""
    parts = [_chunk_statistics(sub, n) for _, _, sub in chunks(index)]
    if len(parts) == 1:
        return parts[0]
    return tuple(np.concatenate(column) for column in zip(*parts))


#: ASCII whitespace as ``str.split()`` sees it (``chr(c).isspace()`` for c < 128)
_ASCII_SPACE = np.zeros(256, dtype=bool)
_ASCII_SPACE[[9, 10, 11, 12, 13, 28, 29, 30, 31, 32]] = True
#: the bytes that end a segment in :func:`_tokenize`'s joined text: ASCII whitespace and the NUL joint
#: (``str.split()``), or the space and the joint (``split(" ")``)
_SPACE_CUT = _ASCII_SPACE.copy()
_SPACE_CUT[0] = True
_SINGLE_SPACE_CUT = np.zeros(256, dtype=bool)
_SINGLE_SPACE_CUT[[0, 32]] = True
#: ``_BYTE_MASKS[l]``: the low ``l`` bytes of an int64 set (l = 0..8)
_BYTE_MASKS = np.array([(1 << (8 * l)) - 1 for l in range(8)] + [-1], dtype=np.int64)
#: a long token's key: this bit (the sign of an int64) set, its dictionary id below
_LONG_TOKEN = np.int64(-2 ** 63)


#: the most 8-byte words (long tokens x words per token) :func:`_first_seen_ids` numbers at once; more
#: (a batch with very long tokens) take the dictionary
_LONG_WORDS = 1 << 24


def _bytes_at(words: np.ndarray, start: np.ndarray, length: np.ndarray) -> np.ndarray:
    """uint64 (len(start),): the ``min(length, 8)`` bytes at byte offsets ``start`` of the little-endian
    words ``words`` (the buffer's bytes, at least 8 zero bytes past the last one read), the rest zero:
    the two aligned words around each offset, shifted (a shift by 64 gives 0 in numpy) and masked."""
    at = start >> 3
    out = words.take(at)
    at += 1
    high = words.take(at)
    shift = (start & 7).view(np.uint64)
    shift <<= np.uint64(3)
    out >>= shift
    np.subtract(np.uint64(64), shift, out=shift)
    high <<= shift
    out |= high
    out &= _BYTE_MASKS.view(np.uint64).take(np.clip(length, 0, 8))
    return out


def _first_seen_ids(words: np.ndarray, start: np.ndarray, length: np.ndarray) -> np.ndarray:
    """int64 (len(start),): the tokens of ``length`` > 8 bytes at ``start`` (of ``words``, as
    :func:`_bytes_at`) numbered 0, 1, ... in the order of their first occurrence -- the ids of
    ``{w: i for i, w in enumerate(dict.fromkeys(tokens))}`` without a Python string per token. A token is
    its ``ceil(max length / 8)`` words, zero-padded (no byte of the text is 0, so tokens of different
    lengths differ); equal rows are found by a stable lexicographic sort."""
    n_words = int((length.max() + 7) // 8)
    # word q of a token (zero once past its end: read at its end, inside the buffer)
    rows = [_bytes_at(words, start + np.minimum(8 * q, length), length - 8 * q) for q in range(n_words)]
    order = np.lexsort(rows[::-1])  # stable: equal tokens in the order they occur
    same = np.ones(len(order) - 1, dtype=bool)  # equal to the previous token in the sorted order
    for row in rows:
        sorted_row = row[order]
        same &= sorted_row[1:] == sorted_row[:-1]
    new = np.concatenate([[True], ~same])
    group = np.cumsum(new) - 1  # the group of each sorted token
    first = order[new]  # each group's first occurrence
    rank = np.empty(len(first), dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(first), dtype=np.int64)
    ids = np.empty(len(order), dtype=np.int64)
    ids[order] = rank[group]
    return ids


def _tokenize(sentences: list, single_space: bool = False, long_vocab: dict | None = None,
              ascii_only: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The tokens of every sentence as int64 keys, equal exactly when the tokens are equal:
    (n_tokens int64 (S,), ptr int64 (S+1,), key int64 (T,)); the tokens of sentence s are
    ``ptr[s]:ptr[s+1]``. Tokens are pycocoevalcap's ``s.split()`` (BLEU, CIDEr-D) or, with
    ``single_space``, ``s.split(" ")`` (ROUGE-L: empty tokens included).

    ASCII text without NUL bytes (the PTB-tokenised case) is split without a Python object per token:
    the sentences are joined with NUL bytes into one byte string, token boundaries come from the bytes
    <= 32 (whitespace table, NUL joints), and a token of at most 8 bytes is its bytes read as a
    little-endian uint64 (zero-padded; non-negative as ASCII bytes are < 0x80, distinct lengths differ
    since no byte is 0); a longer token is ``-2**63 + id``, ``id`` numbering the call's long tokens
    in the order of their first occurrence (:func:`_first_seen_ids`, or the dictionary ``long_vocab``).
    Other text: the key is an id from a dictionary over the split tokens.

    ``long_vocab``: a dictionary to number the long tokens with (extended in place), so that keys of
    several calls sharing it are comparable; ``ascii_only``: return None instead of the dictionary
    path for text that is not ASCII or holds a NUL byte (keys comparable across calls are then
    guaranteed for every token)."""
    n_sent = len(sentences)
    if n_sent == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.int64)
    text = "\0".join(sentences)  # NUL bytes mark the joints
    joints = None
    if text.isascii():
        raw = np.frombuffer(text.encode("ascii") + bytes(16), dtype=np.uint8)
        size = len(text)
        # every separator byte (whitespace, for ``split(" ")`` the space alone) and every joint ends a
        # segment: the segments are the bytes between consecutive cuts. They are all among the bytes
        # <= 32: one comparison, then the table on those alone
        cut = np.flatnonzero(raw[:size] <= 32)
        at_cut = raw[cut]
        separator = (_SINGLE_SPACE_CUT if single_space else _SPACE_CUT)[at_cut]
        if not separator.all():
            cut, at_cut = cut[separator], at_cut[separator]
        joints = np.flatnonzero(at_cut == 0)
    if joints is None or len(joints) != n_sent - 1:  # not ASCII, or a sentence holds a NUL byte
        if ascii_only:
            return None
        split = [s.split(" ") if single_space else s.split() for s in sentences]
        n_tokens = np.fromiter(map(len, split), dtype=np.int64, count=n_sent)
        flat = list(chain.from_iterable(split))
        del split
        vocab = {w: i for i, w in enumerate(dict.fromkeys(flat))}
        key = np.fromiter(map(vocab.__getitem__, flat), dtype=np.int64, count=len(flat))
    else:
        starts = np.empty(len(cut) + 1, dtype=np.int64)
        starts[0] = 0
        np.add(cut, 1, out=starts[1:])
        ends = np.empty(len(cut) + 1, dtype=np.int64)
        ends[:-1] = cut
        ends[-1] = size
        # sentence s's segments are first[s]:first[s+1] (the joint before sentence s is cut first[s] - 1)
        first = np.empty(n_sent + 1, dtype=np.int64)
        first[0], first[-1] = 0, len(cut) + 1
        np.add(joints, 1, out=first[1:-1])
        tok_len = ends - starts
        if single_space:  # empty tokens are tokens
            n_tokens = np.diff(first)
        else:  # str.split(): runs of whitespace make empty segments, which are no tokens
            nonempty = tok_len > 0
            if nonempty.all():
                n_tokens = np.diff(first)
            else:
                counted = np.zeros(len(cut) + 2, dtype=np.int64)
                np.cumsum(nonempty, out=counted[1:])
                n_tokens = counted[first[1:]] - counted[first[:-1]]
                keep = np.flatnonzero(nonempty)
                starts, ends, tok_len = starts[keep], ends[keep], tok_len[keep]
        words = raw[:8 * (len(raw) // 8)].view("<u8")
        key = _bytes_at(words, starts, tok_len).view(np.int64)
        long = np.flatnonzero(tok_len > 8)
        if len(long):
            if long_vocab is None and len(long) * int((tok_len[long].max() + 7) // 8) <= _LONG_WORDS:
                ids = _first_seen_ids(words, starts[long], tok_len[long])
            else:
                tokens = list(map(text.__getitem__, map(slice, starts[long].tolist(), ends[long].tolist())))
                if long_vocab is None:
                    vocab = {w: i for i, w in enumerate(dict.fromkeys(tokens))}
                else:
                    vocab = long_vocab
                    for w in tokens:
                        if w not in vocab:
                            vocab[w] = len(vocab)
                ids = np.fromiter(map(vocab.__getitem__, tokens), dtype=np.int64, count=len(tokens))
            key[long] = _LONG_TOKEN + ids
    ptr = np.zeros(n_sent + 1, dtype=np.int64)
    np.cumsum(n_tokens, out=ptr[1:])
    return n_tokens, ptr, key


#: widths (tokens) of the bit masks of :func:`_dense_correct`; a pair whose candidate or a reference is
#: longer than the last one is counted by sorting n-gram keys instead (:func:`_sorted_correct`)
_MASK_WIDTHS = ((16, np.uint16), (32, np.uint32), (64, np.uint64))


def _key_window(tptr: np.ndarray, wid: np.ndarray, width: int) -> np.ndarray:
    """A read-only (S + 1, width) int64 view: row ``tptr[s]`` starts with the ``width`` token keys from
    sentence s's first (the following sentences' after its end; zeros past the last token)."""
    keys = np.zeros(len(wid) + width, dtype=np.int64)
    keys[:len(wid)] = wid
    return np.lib.stride_tricks.sliding_window_view(keys, width)  # (T + 1, width), no copy


def _padded(tptr: np.ndarray, window: np.ndarray, sent: np.ndarray, pad: int) -> np.ndarray:
    """int64 (*sent.shape, width): the token keys of each sentence, left-aligned, ``pad`` after its end
    (every position for an entry ``sent < 0``: no sentence); ``window`` from :func:`_key_window`. Each
    row is one gather of ``width`` consecutive keys, then masked past the sentence's end."""
    real = sent >= 0
    s = np.where(real, sent, 0)
    out = window[tptr[s]]
    length = np.where(real, tptr[s + 1] - tptr[s], 0)
    np.copyto(out, np.int64(pad), where=np.arange(window.shape[1]) >= length[..., None])
    return out


#: ``(x * _PACK) >> 56`` for a uint64 ``x`` whose 8 bytes are each 0 or 1 has bit b set when byte b is 1:
#: byte b (at bit 8b) times the term 2**(56 - 7b) lands on bit 56 + b, no two products share a bit and
#: no product of another byte lands in bits 56..63 (the "magic multiplication" of bit-board packing)
_PACK = np.uint64(0x0102040810204080)


def _pack_bits(equal: np.ndarray, dtype) -> np.ndarray:
    """Bit j of ``out[..., i]`` = ``equal[..., i, j]`` for a C-contiguous bool array whose last axis has
    as many entries as ``dtype`` (unsigned, 16/32/64 bits) has bits; overwrites ``equal``. The same
    integers as ``np.packbits(equal, axis=-1, bitorder="little")`` viewed as ``dtype``, without its
    per-bit loop."""
    words = equal.view(np.uint64)  # 8 booleans (bytes 0 / 1) per word
    words *= _PACK
    words >>= np.uint64(56)
    return words.astype(np.uint8).view(dtype).reshape(equal.shape[:-1])


#: pairs whose token match masks are built and used together (:func:`_dense_correct`, ROUGE-L's dense
#: path): a block's comparison (4096 pairs x 5 references x 16 x 16 tokens: 5 MB of booleans) and
#: masks stay in the CPU caches between the steps that read them
MASK_PAIRS = 4096


def _match_masks(index: CaptionIndex, tptr: np.ndarray, window: np.ndarray, sel: np.ndarray,
                 dtype, self_masks: bool = True) -> tuple[np.ndarray, np.ndarray | None]:
    """Token match masks of the pairs ``sel`` of ``index`` (candidate and references of at most ``width``
    tokens, ``window`` = :func:`_key_window` (tptr, keys, width); ``dtype`` the unsigned integer of
    ``width`` bits): ``m1`` (len(sel), R, width), bit j of ``m1[p, r, i]`` set when token j of
    reference r equals token i of the candidate (R = the most references of a pair; missing
    references and positions past a sentence's end match nothing), and ``c1`` (len(sel), width), the
    same of the candidate against itself (padding matches padding there: only positions inside the
    candidate are meaningful; None without ``self_masks``). The comparisons are packed into words
    with :func:`_pack_bits`."""
    ps, pg = index.pair_sentence[sel], index.pair_group[sel]
    gptr, grefs = index.group_ptr, index.group_refs
    cand = _padded(tptr, window, ps, -1)
    nref = gptr[pg + 1] - gptr[pg]
    slot = np.arange(int(nref.max()), dtype=np.int64)
    at = np.minimum(gptr[pg][:, None] + slot, len(grefs) - 1)
    sent = np.where(slot < nref[:, None], grefs[at], -1)  # (m, R): the references, -1 where none
    refs = _padded(tptr, window, sent, -2)  # -1 / -2: no token's key
    m1 = _pack_bits(cand[:, None, :, None] == refs[:, :, None, :], dtype)  # bit j of m1[p, r, i]: ref[r, j] == cand[i]
    c1 = _pack_bits(cand[:, :, None] == cand[:, None, :], dtype) if self_masks else None
    return m1, c1


def _dense_correct(index: CaptionIndex, tptr: np.ndarray, wid: np.ndarray, sel: np.ndarray, width: int,
                   dtype, n: int) -> np.ndarray:
    """Clipped matches ``correct`` (len(sel), n) of the pairs ``sel`` of ``index`` whose candidate and
    references have at most ``width`` tokens, without n-gram ids: bit-parallel n-gram matching,
    :data:`MASK_PAIRS` pairs at a time.

    ``M[p, r, i]`` has bit j set when the k-gram of reference r starting at token j equals the
    candidate's k-gram starting at token i (order 1: one comparison of padded key arrays, packed into
    words, :func:`_match_masks`; order k: ``M_k[i] = M_{k-1}[i] & (M_1[i+k-1] >> (k-1))``); ``C[p, i]``
    is the same over the candidate itself. Then ``count_candidate = popcount(C[i])``, ``max_ref_count =
    max_r popcount(M[r, i])``, and each distinct k-gram is counted once, at its first position i
    (``C[i]`` has no bit below i): ``correct_k = sum_i min(count_candidate, max_ref_count)``, the
    integers of pycocoevalcap's ``cook_test``."""
    window = _key_window(tptr, wid, width)
    pos = np.arange(width, dtype=np.int64)
    below = ((np.ones(width, dtype=np.uint64) << pos.astype(np.uint64)) - np.uint64(1)).astype(dtype)
    correct = np.zeros((len(sel), n), dtype=np.int64)
    for lo in range(0, len(sel), MASK_PAIRS):
        block = sel[lo:lo + MASK_PAIRS]
        ps = index.pair_sentence[block]
        m1, c1 = _match_masks(index, tptr, window, block, dtype)
        clen = tptr[ps + 1] - tptr[ps]
        mk, ck = m1, c1
        for k in range(min(n, width)):
            if k:
                mk = mk[..., :width - k] & (m1[..., k:] >> dtype(k))
                ck = ck[:, :width - k] & (c1[:, k:] >> dtype(k))
            span = width - k
            counted = pos[None, :span] < (clen - k)[:, None]  # a k-gram starts at i ...
            counted &= (ck & below[:span]) == 0  # ... and it is its first occurrence in the candidate
            own = np.bitwise_count(ck)
            refs = np.bitwise_count(mk)
            best = refs[:, 0].copy()  # the maximum over the references (a loop: faster than max(axis=1))
            for r in range(1, refs.shape[1]):
                np.maximum(best, refs[:, r], out=best)
            np.minimum(own, best, out=best)
            best *= counted
            correct[lo:lo + MASK_PAIRS, k] = best.sum(axis=1, dtype=np.int64)
    return correct


#: a chunk whose distinct pairs are at least this many times its reference lists (many candidates per
#: image: human-judgement datasets) is counted with the reference lists' n-grams sorted once per list
#: (:func:`_sorted_correct`, :func:`captioneval.kernels.rouge._lcs_sorted`), the pair-by-pair masks
#: repeating a list's work for each of its candidates
SHARED_REFERENCES = 4


def _shared_references(index: CaptionIndex) -> bool:
    """Whether the pairs of ``index`` share their reference lists enough for the sorted path
    (:data:`SHARED_REFERENCES`)."""
    return len(index.pair_sentence) >= SHARED_REFERENCES * (len(index.group_ptr) - 1)


def _chunk_statistics(index: CaptionIndex, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_pair_statistics` of one chunk, every step vectorised over its pairs: the clipped
    matches by :func:`_dense_correct` (pairs by mask width), :func:`_sorted_correct` for pairs with a
    sentence longer than 64 tokens or for the whole chunk when its reference lists are shared by many
    candidates (:data:`SHARED_REFERENCES`)."""
    with paused_gc():
        n_tokens, tptr, wid = _tokenize(index.sentences)
    gptr, grefs = index.group_ptr, index.group_refs
    ps, pg = index.pair_sentence, index.pair_group
    n_pairs = len(ps)
    group_len = np.maximum.reduceat(n_tokens[grefs], gptr[:-1]) if len(grefs) else np.zeros(0, dtype=np.int64)
    pair_len = np.maximum(n_tokens[ps], group_len[pg])
    if _shared_references(index):
        correct = _sorted_correct(index, n)
    else:
        correct = np.zeros((n_pairs, n), dtype=np.int64)
        lower = 0
        for width, dtype in _MASK_WIDTHS:
            sel = np.flatnonzero((pair_len > lower) & (pair_len <= width))
            lower = width
            if len(sel):
                correct[sel] = _dense_correct(index, tptr, wid, sel, width, dtype, n)
        long = np.flatnonzero(pair_len > lower)
        if len(long):
            correct[long] = _sorted_correct(index, n)[long]
    testlen = n_tokens[ps]
    guess = np.maximum(0, testlen[:, None] - np.arange(n, dtype=np.int64)[None, :])

    # closest reference length, ties to the shorter one: min over refs of (|l - testlen|, l)
    ridx, rowner = expand(gptr, pg)
    rlen = n_tokens[grefs[ridx]]
    width = int(rlen.max()) + 1
    closeness = np.abs(rlen - testlen[rowner]) * width + rlen
    starts = np.cumsum(gptr[pg + 1] - gptr[pg]) - (gptr[pg + 1] - gptr[pg])
    reflen = np.minimum.reduceat(closeness, starts) % width

    return correct, guess, testlen, reflen


def _sorted_correct(index: CaptionIndex, n: int) -> np.ndarray:
    """Clipped matches ``correct`` (P, n) of every pair of ``index`` with n-gram ids (:func:`_ngram_counts`)
    and sorted (reference list, n-gram) keys: any sentence length."""
    with paused_gc():
        n_tokens, ptr, ngram, count, order, n_ngrams = _ngram_counts(index.sentences, n)
    gptr, grefs = index.group_ptr, index.group_refs
    n_groups = len(gptr) - 1

    # maximum count of each n-gram over the references of each list (cook_refs), keyed group * X + ngram
    idx, owner = expand(ptr, grefs)
    ref_group = np.repeat(np.arange(n_groups, dtype=np.int64), np.diff(gptr))
    gkey = ref_group[owner] * n_ngrams + ngram[idx]
    ukeys, inv = np.unique(gkey, return_inverse=True)
    maxcount = np.zeros(len(ukeys) + 1, dtype=np.int64)
    np.maximum.at(maxcount, inv.reshape(-1), count[idx])
    ukeys = np.append(ukeys, np.iinfo(np.int64).max)  # sentinel above every key: searchsorted stays in range

    # clipped matches of each distinct (candidate, reference list) pair (cook_test)
    ps, pg = index.pair_sentence, index.pair_group
    n_pairs = len(ps)
    idx, owner = expand(ptr, ps)
    query = pg[owner] * n_ngrams + ngram[idx]
    hit = np.searchsorted(ukeys, query)
    found = ukeys[hit] == query
    clipped = np.where(found, np.minimum(count[idx], maxcount[hit]), 0)
    correct = np.bincount(owner * n + order[ngram[idx]], weights=clipped, minlength=n_pairs * n)
    return correct.reshape(n_pairs, n).astype(np.int64)


def bleu_scores(candidates: Sequence[str], references: Sequence[Sequence[str]], n: int = 4) -> BleuResult:
    """Sentence BLEU-1..n of every candidate and the corpus BLEU-1..n, as pycocoevalcap 1.2's
    ``Bleu(n).compute_score`` (``option='closest'``; see the module docstring).

    Parameters
    ----------
    candidates : m PTB-tokenised strings.
    references : m non-empty lists of PTB-tokenised strings (the references of each candidate).
    n : largest n-gram order, a positive int (the COCO metric: 4). ``bleu_scores(..., n)`` for n < 4
        equals the first n rows for n = 4, as pycocoevalcap's ``Bleu(n)``; pycocoevalcap raises
        IndexError for n > 4 (its ``cook_refs`` / ``cook_test`` always count up to 4-grams), here the
        same formula simply continues to order n.

    Returns
    -------
    BleuResult with ``per_caption`` (n, m) and ``corpus`` (n,), float64 in [0, 1]. For m = 0 the
    per-caption array is (n, 0) and the corpus scores are 0 (the formula on zero totals: brevity
    penalty exp(1 - 1e6) = 0), as pycocoevalcap's on an empty input.

    Raises
    ------
    ValueError
        length mismatch, a candidate without references, or ``n`` < 1.
    TypeError
        a caption that is not a string.
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n (largest n-gram order) must be a positive integer, got {n!r}")
    n = int(n)
    index = index_captions(candidates, references)
    m = len(candidates)
    if m == 0:
        return BleuResult(np.zeros((n, 0)), _corpus_bleu([0] * n, [0] * n, 0, 0, n))
    correct, guess, testlen, reflen = _pair_statistics(index, n)
    n_pairs = len(testlen)

    # per caption, the reference's operations in the reference's order
    per_pair = np.empty((n, n_pairs), dtype=np.float64)
    product = np.ones(n_pairs, dtype=np.float64)
    for k in range(n):
        product = product * ((correct[:, k].astype(np.float64) + TINY) / (guess[:, k].astype(np.float64) + SMALL))
        per_pair[k] = _pow_distinct(product, 1. / (k + 1))
    ratio = (testlen.astype(np.float64) + TINY) / (reflen.astype(np.float64) + SMALL)
    short = np.flatnonzero(ratio < 1)
    if len(short):
        uniq, inv = np.unique(ratio[short], return_inverse=True)
        penalty = np.array([math.exp(1 - 1 / r) for r in uniq.tolist()], dtype=np.float64)[inv.reshape(-1)]
        per_pair[:, short] *= penalty[None, :]

    # corpus: the same formula on the integer totals over all m candidates
    weight = np.bincount(index.pair_of, minlength=n_pairs)
    total_correct = (correct * weight[:, None]).sum(axis=0)
    total_guess = (guess * weight[:, None]).sum(axis=0)
    corpus = _corpus_bleu(total_correct.tolist(), total_guess.tolist(), int((testlen * weight).sum()),
                          int((reflen * weight).sum()), n)
    return BleuResult(per_pair[:, index.pair_of], corpus)


def bleu_statistics(candidates: Sequence[str], references: Sequence[Sequence[str]], n: int = 4) -> np.ndarray:
    """Per-caption BLEU sufficient statistics, pycocoevalcap 1.2's ``cook_refs`` / ``cook_test``
    (``bleu_scorer.py``), vectorised and chunked as :func:`bleu_scores`.

    Returns
    -------
    float64 (m, 2 + 2n), all non-negative integers: columns ``testlen`` (candidate tokens),
    ``reflen`` (the reference length closest to ``testlen``, the shorter on a tie), ``guess_1..n``
    (``max(0, testlen - k + 1)``), ``correct_1..n`` (clipped k-gram matches against the maximum
    count over the references): :data:`captioneval.kernels.corpus.BLEU_COLUMNS` for n = 4. Summed
    over any subset of captions they give that subset's corpus BLEU.

    Raises
    ------
    ValueError, TypeError
        as :func:`bleu_scores`.
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n (largest n-gram order) must be a positive integer, got {n!r}")
    n = int(n)
    index = index_captions(candidates, references)
    if len(candidates) == 0:
        return np.zeros((0, 2 + 2 * n))
    correct, guess, testlen, reflen = _pair_statistics(index, n)
    table = np.concatenate([testlen[:, None], reflen[:, None], guess, correct], axis=1).astype(np.float64)
    return table[index.pair_of]


def bleu(candidates: Sequence[str], references: Sequence[Sequence[str]], n: int = 4) -> np.ndarray:
    """Sentence BLEU-1..n of each candidate: ``bleu_scores(candidates, references, n).per_caption``,
    float64 (n, m), row k = BLEU-(k+1), in [0, 1]. Raises as :func:`bleu_scores`."""
    return bleu_scores(candidates, references, n).per_caption
