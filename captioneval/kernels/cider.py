"""Vectorised CIDEr-D (numpy + scipy.sparse, no Django).

Definition
----------
CIDEr is defined in R. Vedantam, C. L. Zitnick and D. Parikh, "CIDEr: Consensus-based Image
Description Evaluation", CVPR 2015 (tf-idf weights Eq. 1, CIDEr_n Eq. 2, CIDEr Eq. 3); CIDEr-D is
the "gaming"-resistant variant defined in the same paper and used by the COCO caption evaluation
server, implemented by ``pycocoevalcap.cider.cider_scorer``
(whose class is called ``Cider`` although it computes CIDEr-D). This module reproduces the
pycocoevalcap numbers (equal to ~1e-15 on Flickr8k-Expert) with whole-corpus sparse operations
instead of per-sentence Python dictionaries.

For an item with tokenised candidate ``h`` and tokenised references ``r_1 .. r_R`` (tokens are the
whitespace-separated words of the strings, ``str.split()``):

* ``g`` ranges over the n-grams of order ``k = 1..n`` (``n = 4``); ``tf_s(g)`` is the raw count of
  ``g`` in sentence ``s``.
* document frequency ``df(g)`` = number of documents whose reference *set* contains ``g``; by
  default the documents are the evaluated items themselves and ``N`` = number of items (a
  precomputed :class:`DocumentFrequency` table can be supplied instead).
* ``idf(g) = log(N) - log(max(1, df(g)))`` (an n-gram never seen in the references gets
  ``log(N)``); ``v_s[g] = tf_s(g) * idf(g)`` (Eq. 1); ``||v_s||_k`` is the Euclidean norm over the
  n-grams of order ``k`` only.
* clipped, length-penalised similarity of order ``k`` (the paper's CIDEr-D formula; clipping the tf-idf
  values is the same as clipping the candidate counts, since both share ``idf(g) >= 0``)::

      sim_k(h, r) = exp(-delta^2 / (2 sigma^2))
                    * sum_{g in h, |g| = k} min(v_h[g], v_r[g]) * v_r[g] / (||v_h||_k ||v_r||_k)

  with ``sigma = 6``; the fraction is left undivided when a norm is 0 (its numerator is then 0).
  ``delta = len(h) - len(r)`` where, exactly as in pycocoevalcap's ``counts2vec``, the *length* of
  a sentence is its number of **bigrams**, i.e. ``max(#tokens - 1, 0)``, not its number of tokens
  (the source adds up the term frequencies of the order-2 n-grams; the paper speaks of sentence
  length, the code measures it in bigrams). The bigram length is used whatever ``n`` is.
* ``CIDEr-D(h, refs) = 10 * (1/n) sum_k (1/R) sum_j sim_k(h, r_j)``: factor 10, mean over the
  n-gram orders of the mean over the references (duplicated references count twice, as in
  pycocoevalcap; for the document frequencies they are a set). Plain CIDEr (Eqs. 2-3) would drop the
  ``min`` clipping and the length penalty.

The corpus score reported by ``Cider.compute_score`` is the mean of the per-item scores.

A supplied table is looked up without forming n-gram tuples: the first use of a
:class:`DocumentFrequency` builds an index of sorted int64 keys per n-gram order (word ids encoded
level by level, so no key overflows whatever the vocabulary; ``_NgramIndex``) and every later call
finds all of a batch's n-grams with ``np.searchsorted``, giving bit for bit the counts of
``dict.get(ngram, 0.0)`` (about 10x faster on 1,000-caption chunks of a 445k-n-gram table).
:meth:`DocumentFrequency.to_packed` stores that index as bytes that load without rebuilding it.

Without a supplied table, a batch whose caption texts are mostly distinct (at least
:data:`DISTINCT_SHARE` of them: the usual COCO case, where the shared-text shortcut gains nothing) is
scored by ``_cider_numeric`` without a Python object per token or n-gram: ASCII captions become int64
token keys (``_ascii_tokens``: a token's bytes, one dictionary for the tokens over 8 bytes), numbered
on the batch's sorted vocabulary (word ids ``0..V-1`` through a hash table, ``_dense_ids``); a k-gram's
key is the base-V number of its word ids. A batch of up to :data:`ONE_PASS_ITEMS` items is processed
as one chunk, a larger one :data:`NUMERIC_CHUNK` items at a time, each item's candidate followed by
its references; per chunk and order k, one ``np.sort`` of
int64 values holding (dense id of the k-gram, position) orders the k-gram positions, and everything
else is runs of that order: term frequencies (a k-gram's run in one sentence), document frequencies
((k-gram, item) groups holding a reference) and clipped products (a reference's run and its item's
candidate's run of the same k-gram, adjacent in the group). A batch of one chunk is one such pass; a
larger one first counts the document frequencies over the references of every chunk into one table
per order (merged in slices of the key range by one ``np.argsort`` each, linear in time and memory;
only counts >= 2 kept, since ``df = 1`` and ``df = 0`` give the same idf) and then scores each chunk
against it. Every sum over n-grams adds in ascending order of their
keys, as on this path before; equal to pycocoevalcap within 1e-15 on the bundled COCO example (the
norms are summed in another order than pycocoevalcap's dictionaries). Non-ASCII text or a vocabulary
with ``V**n >= 2**63`` takes the general path.

Range: for a document-frequency table with ``df(g) <= N`` (always true when it is computed from
references) every idf is >= 0, so ``min(v_h, v_r) * v_r <= v_h * v_r`` and, by Cauchy-Schwarz,
``0 <= sim_k <= 1``: scores lie in [0, 10]. 10 needs every order k = 1..n present, candidate equal
in n-gram counts to every reference and no length difference. A supplied table with counts above
its ``n_documents`` gives negative idf weights and the bound no longer holds.

Differences from pycocoevalcap (none for ``n = 4``, the only value pycocoevalcap supports: its
``precook`` always counts 1..4-grams, so ``n < 4`` raises ``IndexError`` there and ``n > 4`` only
adds zero terms to the mean): here ``n`` selects the n-gram orders 1..n consistently, and a
supplied document-frequency table replaces the one pycocoevalcap would compute from the references.
"""
from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import chain
from typing import Any, Iterable, Sequence

import numpy as np
import scipy.sparse as sp

from captioneval.utils.gcpause import paused_gc
from captioneval.utils.hashing import repeated_hashes, sorted_hashes

__all__ = ["DocumentFrequency", "cider_d", "CHUNK_ITEMS"]

#: items scored together by :func:`cider_d`: a larger batch gets its document frequencies counted
#: chunk by chunk into one table first, then is scored a chunk at a time against that table, so time
#: and memory grow linearly with the batch (one batch of 1M distinct items needs over 11 GiB)
CHUNK_ITEMS = 20_000

#: header of :meth:`DocumentFrequency.to_packed`
_PACKED_MAGIC = b"CIDERDF\0"
_PACKED_FORMAT = 1


# ---------------------------------------------------------------------------------------------
# internal helpers
# ---------------------------------------------------------------------------------------------
def _check_order(n: int) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n (largest n-gram order) must be a positive integer, got {n!r}")
    return int(n)


def _check_references(references: Sequence[Sequence[str]], what: str = "references") -> np.ndarray:
    """Validate the nested reference lists; return the number of references per item (int64)."""
    if isinstance(references, (str, bytes)):
        raise TypeError(f"{what} must be a sequence of lists of strings, got a single string")
    counts = []
    for i, refs in enumerate(references):
        if isinstance(refs, (str, bytes)):
            raise TypeError(f"{what}[{i}] must be a list of reference strings, got a single string")
        try:
            k = len(refs)
        except TypeError:
            raise TypeError(f"{what}[{i}] must be a list of reference strings, got {type(refs).__name__}") from None
        if k == 0:
            raise ValueError(f"{what}[{i}] is empty: every item needs at least one reference")
        counts.append(k)
    if not counts:
        raise ValueError(f"{what} is empty: need at least one item")
    return np.asarray(counts, dtype=np.int64)


#: :func:`cider_d` without a document-frequency table scores a batch on the numeric path
#: (:func:`_cider_numeric`) when at least this share of its caption texts are distinct; below, the
#: shared-text shortcut (every distinct text split and counted once) is worth more
DISTINCT_SHARE = 0.5


def _sentence_ids(sentences: Iterable[str]) -> tuple[list[str], dict[str, int]]:
    """Unique sentences (first-seen order) and their ids."""
    try:
        unique = list(dict.fromkeys(sentences))
    except TypeError:
        raise TypeError("candidates and references must be strings (tokenised captions)") from None
    for s in unique:
        if not isinstance(s, str):
            raise TypeError(f"captions must be strings (tokenised, space-separated), got {type(s).__name__}: {s!r}")
    return unique, {s: i for i, s in enumerate(unique)}


class _Corpus:
    """Term-frequency matrix of a list of unique sentences over their n-grams of order 1..n.

    Attributes
    ----------
    tf : scipy.sparse.csr_matrix, shape (n_sentences, n_ngrams), float64
        raw n-gram counts; the columns are grouped by order (all unigrams, then bigrams, ...).
    order : ndarray of int64, shape (n_ngrams,)
        n-gram order minus one (0..n-1) of each column.
    n_tokens : ndarray of int64, shape (n_sentences,)
        number of whitespace-separated tokens of each sentence.
    """

    __slots__ = ("n", "tf", "order", "n_tokens", "_wid", "_vocab", "_rep", "_blocks")

    def __init__(self, sentences: list[str], n: int):
        self.n = n
        with paused_gc():  # millions of token lists that form no cycle (captioneval.utils.gcpause)
            split = [s.split() for s in sentences]
            n_tokens = np.fromiter(map(len, split), dtype=np.int64, count=len(split))
            flat = list(chain.from_iterable(split))
            vocab = {w: i for i, w in enumerate(dict.fromkeys(flat))}
            wid = np.fromiter(map(vocab.__getitem__, flat), dtype=np.int64, count=len(flat))
        n_sent, n_tok, n_voc = len(sentences), len(flat), len(vocab)

        sent_of_pos = np.repeat(np.arange(n_sent, dtype=np.int64), n_tokens)
        # tokens from each position to the end of its sentence (>= 1)
        remaining = np.repeat(np.cumsum(n_tokens), n_tokens) - np.arange(n_tok, dtype=np.int64)

        rows, cols, reps, sizes = [], [], [], []
        offset = 0
        # order 1: the vocabulary ids are already dense n-gram ids
        rep = np.empty(n_voc, dtype=np.int64)
        rep[wid] = np.arange(n_tok, dtype=np.int64)
        rows.append(sent_of_pos)
        cols.append(wid)
        reps.append(rep)
        sizes.append(n_voc)
        offset += n_voc
        prev = wid  # id of the (k-1)-gram starting at each position (garbage where it does not exist)
        for k in range(2, n + 1):
            pos = np.flatnonzero(remaining >= k)
            # a k-gram = ((k-1)-gram starting at pos, word at pos+k-1); ids stay < n_tok * n_voc
            key = prev[pos] * n_voc + wid[pos + (k - 1)]
            uniq, inv = np.unique(key, return_inverse=True)
            inv = inv.reshape(-1).astype(np.int64, copy=False)
            rep = np.empty(len(uniq), dtype=np.int64)
            rep[inv] = pos
            cur = np.zeros(n_tok, dtype=np.int64)
            cur[pos] = inv
            prev = cur
            rows.append(sent_of_pos[pos])
            cols.append(inv + offset)
            reps.append(rep)
            sizes.append(len(uniq))
            offset += len(uniq)

        r = np.concatenate(rows)
        c = np.concatenate(cols)
        tf = sp.csr_matrix((np.ones(len(r), dtype=np.float64), (r, c)), shape=(n_sent, offset))
        tf.sum_duplicates()
        tf.sort_indices()
        self.tf = tf
        self.order = np.repeat(np.arange(n, dtype=np.int64), sizes)
        self.n_tokens = n_tokens
        self._wid = wid
        self._vocab = vocab
        self._rep = reps
        self._blocks = sizes

    def ngram_tuples(self) -> list[tuple[str, ...]]:
        """The n-gram (tuple of tokens) of every column of :attr:`tf`, in column order."""
        words = np.empty(len(self._vocab), dtype=object)
        words[:] = list(self._vocab)
        out: list[tuple[str, ...]] = []
        for k, rep in enumerate(self._rep, start=1):
            if len(rep) == 0:
                continue
            # zip over the k columns builds the tuples in C (much faster than map(tuple, rows))
            out.extend(zip(*(words[self._wid[rep + j]].tolist() for j in range(k))))
        return out

    def ngram_word_ids(self, k: int) -> np.ndarray:
        """Word ids (indices into the corpus vocabulary, first-seen order) of the columns of order ``k``:
        int64 array of shape (number of distinct k-grams, k), rows in column order."""
        rep = self._rep[k - 1]
        return self._wid[rep[:, None] + np.arange(k, dtype=np.int64)]

    def document_counts(self, item: np.ndarray, sent: np.ndarray, n_items: int,
                        weights: np.ndarray | None = None) -> np.ndarray:
        """df per column: number of items whose reference set contains the n-gram (with ``weights``,
        float64 of shape (n_items,): the sum of the weights of those items).

        ``item[j]``, ``sent[j]`` = item index and sentence id of the j-th (item, reference) pair.
        """
        incidence = sp.csr_matrix(
            (np.ones(len(item), dtype=np.float64), (item, sent)), shape=(n_items, self.tf.shape[0])
        )
        present = incidence @ self.tf  # positive entries only: no cancellation, no explicit zeros
        if weights is not None:
            return _sum_by(present.indices, weights[_row_of_entries(present)], self.tf.shape[1])
        return np.bincount(present.indices, minlength=self.tf.shape[1]).astype(np.float64)


class _NgramIndex:
    """Exact vectorised look-up of a document-frequency table's counts (built once per table).

    Every word of the table gets an id ``0..V-1`` (:attr:`words`, sorted vocabulary). An n-gram of
    order ``k`` is one int64 key, the base-``V`` number of its word ids, when ``V**k < 2**63``
    (``levels[k]`` is then one sorted array). Otherwise (huge vocabularies) it is encoded level by
    level, so that no key overflows: the prefix of length 1 is the word id; the prefix of length
    ``j + 1`` is ``rank(prefix_j) * V + id(word_{j+1})``, where ``rank`` is the position of ``prefix_j``
    among the sorted distinct length-``j`` prefixes of the table's k-grams (``levels[k][j - 1]``;
    ``k - 1`` levels, keys below ``(number of k-grams) * V``). A look-up searches the same levels with
    ``np.searchsorted``; an n-gram containing a word absent from the table, or a prefix absent from a
    level, is not in the table (count 0, as ``dict.get(g, 0.0)``).

    The counts are the table's values converted to float64 exactly as ``np.fromiter(..., float64)``
    converts the values returned by ``dict.get``, so ``lookup`` is bit for bit the dictionary path.
    Keys of the table that are not tuples, and the empty tuple, are never looked up and are ignored.
    """

    __slots__ = ("words", "size", "levels", "values")

    def __init__(self, words: list, blocks: dict[int, tuple[np.ndarray, np.ndarray]]):
        """``words``: the vocabulary (word of id i at position i); ``blocks``: order k -> (int64 word ids of
        its distinct n-grams, shape (m, k); their float64 counts, shape (m,))."""
        self.words = {w: i for i, w in enumerate(words)}
        self.size = V = max(1, len(words))
        self.levels: dict[int, list[np.ndarray]] = {}
        self.values: dict[int, np.ndarray] = {}
        for k, (ids, counts) in sorted(blocks.items()):
            if len(ids) == 0:
                continue
            if len(ids) * V >= 2 ** 63:
                raise OverflowError("document-frequency table too large for int64 n-gram keys")
            cur = ids[:, 0]
            levels = []
            if V ** k < 2 ** 63:  # one level: the base-V number of the k word ids
                for j in range(1, k):
                    cur = cur * V + ids[:, j]
                key = cur
            else:
                for j in range(1, k - 1):
                    uniq, inv = np.unique(cur * V + ids[:, j], return_inverse=True)
                    levels.append(uniq)
                    cur = inv.reshape(-1).astype(np.int64, copy=False)
                key = cur * V + ids[:, k - 1]
            order = np.argsort(key, kind="stable")
            levels.append(key[order])
            self.levels[k] = levels
            self.values[k] = counts[order]

    @classmethod
    def of_mapping(cls, counts: Mapping) -> "_NgramIndex":
        """Index of a mapping ``n-gram tuple -> count``; the vocabulary is sorted when the words are str
        (so that equal tables give equal indexes and packed forms)."""
        keys = list(counts)
        values = np.fromiter(counts.values(), dtype=np.float64, count=len(keys))
        usable = [type(g) is tuple and len(g) > 0 for g in keys]
        if not all(usable):
            sel = [i for i, u in enumerate(usable) if u]
            keys = [keys[i] for i in sel]
            values = values[np.asarray(sel, dtype=np.int64)]
        lens = np.fromiter(map(len, keys), dtype=np.int64, count=len(keys))
        tokens = list(chain.from_iterable(keys))
        vocab = list(dict.fromkeys(tokens))
        if all(isinstance(w, str) for w in vocab):
            vocab.sort()
        ids = np.fromiter(map({w: i for i, w in enumerate(vocab)}.__getitem__, tokens), dtype=np.int64,
                          count=len(tokens))
        start = np.cumsum(lens) - lens
        blocks = {}
        for k in np.unique(lens).tolist():
            sel = np.flatnonzero(lens == k)
            blocks[k] = (ids[start[sel][:, None] + np.arange(k, dtype=np.int64)], values[sel])
        return cls(vocab, blocks)

    @classmethod
    def of_corpus(cls, corpus: "_Corpus", counts: np.ndarray) -> "_NgramIndex":
        """Index of the n-grams (columns) of ``corpus`` with ``counts[c] > 0`` (float64 per column)."""
        vocab = list(corpus._vocab)
        order = sorted(range(len(vocab)), key=vocab.__getitem__)
        new_id = np.empty(len(vocab), dtype=np.int64)
        new_id[np.asarray(order, dtype=np.int64)] = np.arange(len(vocab), dtype=np.int64)
        blocks, offset = {}, 0
        for k in range(1, corpus.n + 1):
            m = corpus._blocks[k - 1]
            part = counts[offset:offset + m]
            keep = np.flatnonzero(part > 0)
            blocks[k] = (new_id[corpus.ngram_word_ids(k)[keep]], part[keep])
            offset += m
        return cls([vocab[i] for i in order], blocks)

    def lookup(self, corpus: "_Corpus") -> np.ndarray:
        """float64 count of every column of ``corpus.tf`` (0.0 for n-grams not in the table)."""
        vocab = list(corpus._vocab)
        get = self.words.get
        table_id = np.fromiter((get(w, -1) for w in vocab), dtype=np.int64, count=len(vocab))
        V = self.size
        out = []
        for k in range(1, corpus.n + 1):
            n_cols = corpus._blocks[k - 1]
            levels = self.levels.get(k)
            if n_cols == 0 or levels is None:
                out.append(np.zeros(n_cols, dtype=np.float64))
                continue
            q = table_id[corpus.ngram_word_ids(k)]
            found = (q >= 0).all(axis=1)
            q[~found] = 0
            cur = q[:, 0]
            if len(levels) == 1:  # base-V key of the k word ids (k-1 levels otherwise, one per word after the first)
                for j in range(1, k):
                    cur = cur * V + q[:, j]
            for j, keys in enumerate(levels):
                key = cur if len(levels) == 1 else cur * V + q[:, j + 1]
                by_key = np.argsort(key)  # sorted needles: searchsorted narrows each search (faster)
                pos = np.empty_like(key)
                pos[by_key] = np.searchsorted(keys, key[by_key])
                np.minimum(pos, len(keys) - 1, out=pos)
                found &= keys[pos] == key
                cur = np.where(found, pos, 0)
            out.append(np.where(found, self.values[k][cur], 0.0))
        return np.concatenate(out) if out else np.zeros(0, dtype=np.float64)


    def pack(self, n_documents: int) -> bytes:
        """Binary form (see :meth:`DocumentFrequency.to_packed`). TypeError when a word is not a str."""
        words = list(self.words)
        if not all(isinstance(w, str) for w in words):
            raise TypeError("only tables whose n-grams are tuples of str can be packed")
        orders = sorted(self.levels)
        header = json.dumps({
            "format": _PACKED_FORMAT, "n_documents": int(n_documents), "words": words,
            "orders": [[k, [len(a) for a in self.levels[k]]] for k in orders],
        }, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        parts = [_PACKED_MAGIC, len(header).to_bytes(8, "little"), header]
        for k in orders:
            parts.extend(np.ascontiguousarray(a, dtype="<i8").tobytes() for a in self.levels[k])
            parts.append(np.ascontiguousarray(self.values[k], dtype="<f8").tobytes())
        return b"".join(parts)

    @classmethod
    def unpack(cls, data: bytes) -> tuple["_NgramIndex", int]:
        """Inverse of :meth:`pack`: (index, n_documents); the arrays are read-only views of ``data``."""
        data = bytes(data)
        if data[:len(_PACKED_MAGIC)] != _PACKED_MAGIC:
            raise ValueError("not a packed document-frequency table")
        at = len(_PACKED_MAGIC)
        size = int.from_bytes(data[at:at + 8], "little")
        at += 8
        header = json.loads(data[at:at + size].decode("utf-8"))
        at += size
        if header.get("format") != _PACKED_FORMAT:
            raise ValueError(f"packed document-frequency table of format {header.get('format')!r}, "
                             f"expected {_PACKED_FORMAT}")
        if at + 8 * sum(sum(lengths) + lengths[-1] for _, lengths in header["orders"]) != len(data):
            raise ValueError("packed document-frequency table: trailing or missing bytes")
        index = cls.__new__(cls)
        index.words = {w: i for i, w in enumerate(header["words"])}
        index.size = max(1, len(index.words))
        index.levels, index.values = {}, {}
        for k, lengths in header["orders"]:
            levels = []
            for length in lengths:
                levels.append(np.frombuffer(data, dtype="<i8", count=length, offset=at).astype(np.int64, copy=False))
                at += 8 * length
            index.levels[k] = levels
            index.values[k] = np.frombuffer(data, dtype="<f8", count=lengths[-1], offset=at).astype(np.float64, copy=False)
            at += 8 * lengths[-1]
        return index, int(header["n_documents"])

    def __len__(self) -> int:
        return sum(len(v) for v in self.values.values())

    def to_dict(self) -> dict[tuple[str, ...], float]:
        """The table as ``{n-gram tuple: count}`` (decodes the keys level by level)."""
        words = np.empty(len(self.words), dtype=object)
        words[:] = list(self.words)
        V = self.size
        out: dict[tuple[str, ...], float] = {}
        for k in sorted(self.levels):
            levels = self.levels[k]
            cols = []
            cur = levels[-1]
            for j in range(k - 1, 0, -1):  # word j (0-based) and the key (or rank) of the prefix before it
                rank, last = np.divmod(cur, V)
                cols.append(last)
                cur = levels[j - 2][rank] if j > 1 and len(levels) > 1 else rank
            cols.append(cur)
            ids = np.stack(cols[::-1], axis=1)
            out.update(zip(map(tuple, words[ids].tolist()), self.values[k].tolist()))
        return out


class _PackedCounts(Mapping):
    """Read-only ``{n-gram tuple: count}`` of a table loaded from its packed form, decoded on first use."""

    __slots__ = ("_index", "_dict")

    def __init__(self, index: _NgramIndex):
        self._index = index
        self._dict: dict | None = None

    def _decoded(self) -> dict:
        if self._dict is None:
            self._dict = self._index.to_dict()
        return self._dict

    def __getitem__(self, key):
        return self._decoded()[key]

    def __iter__(self):
        return iter(self._decoded())

    def __len__(self) -> int:
        return len(self._index)

    def __contains__(self, key) -> bool:
        return key in self._decoded()

    def get(self, key, default=None):
        return self._decoded().get(key, default)

    def keys(self):
        return self._decoded().keys()

    def values(self):
        return self._decoded().values()

    def items(self):
        return self._decoded().items()

    def __eq__(self, other):
        return self._decoded() == (other._decoded() if isinstance(other, _PackedCounts) else other)

    __hash__ = None


def _document_frequency_in_chunks(lists: list, weights: np.ndarray, n: int, chunk: int) -> "DocumentFrequency | None":
    """:meth:`DocumentFrequency.from_references` (``lists``, ``weights``) counted ``chunk`` lists at a
    time, in memory bounded by the table itself: each chunk's n-grams are numbered on one sorted
    vocabulary of all the lists (base-V int64 keys) and their weighted document counts merged, key by
    key, into the running table whenever the pending chunks outgrow it. The counts are sums of integer
    weights, exact in float64, so the table equals the one-batch table. None when ``V**n >= 2**63``
    (a vocabulary too large for one-level keys: the caller scores in one batch)."""
    with paused_gc():
        vocab = sorted({w for refs in lists for r in refs for w in r.split()})
    V = max(1, len(vocab))
    if V ** n >= 2 ** 63:
        return None
    word_id = {w: i for i, w in enumerate(vocab)}
    table = {k: (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)) for k in range(1, n + 1)}
    pending: dict[int, list] = {k: [] for k in range(1, n + 1)}

    def merge(k: int) -> None:
        keys = np.concatenate([table[k][0], *(p[0] for p in pending[k])])
        counts = np.concatenate([table[k][1], *(p[1] for p in pending[k])])
        uniq, inv = np.unique(keys, return_inverse=True)
        table[k] = (uniq, np.bincount(inv.reshape(-1), weights=counts, minlength=len(uniq)))
        pending[k] = []

    for a in range(0, len(lists), chunk):
        part = lists[a:a + chunk]
        n_refs = np.fromiter(map(len, part), dtype=np.int64, count=len(part))
        flat, item = _flatten_references(part, n_refs)
        sentences, sid = _sentence_ids(flat)
        corpus = _Corpus(sentences, n)
        sent = np.fromiter(map(sid.__getitem__, flat), dtype=np.int64, count=len(flat))
        counts = corpus.document_counts(item, sent, len(part), weights=weights[a:a + chunk].astype(np.float64))
        to_global = np.fromiter(map(word_id.__getitem__, corpus._vocab), dtype=np.int64, count=len(corpus._vocab))
        offset = 0
        for k in range(1, n + 1):
            m = corpus._blocks[k - 1]
            ids = to_global[corpus.ngram_word_ids(k)]
            key = ids[:, 0].copy()
            for j in range(1, k):
                key = key * V + ids[:, j]
            pending[k].append((key, counts[offset:offset + m]))
            offset += m
            if sum(len(p[0]) for p in pending[k]) >= max(len(table[k][0]), 1_000_000):
                merge(k)
    index = _NgramIndex.__new__(_NgramIndex)
    index.words, index.size, index.levels, index.values = word_id, V, {}, {}
    for k in range(1, n + 1):
        merge(k)
        if len(table[k][0]):
            index.levels[k], index.values[k] = [table[k][0]], table[k][1]
    df = DocumentFrequency(counts=_PackedCounts(index), n_documents=int(weights.sum()))
    object.__setattr__(df, "_ngram_index", index)
    return df


def _flatten_references(references: Sequence[Sequence[str]], n_refs: np.ndarray) -> tuple[list[str], np.ndarray]:
    flat = list(chain.from_iterable(references))
    item = np.repeat(np.arange(len(n_refs), dtype=np.int64), n_refs)
    return flat, item


def _row_of_entries(m: sp.csr_matrix) -> np.ndarray:
    return np.repeat(np.arange(m.shape[0], dtype=np.int64), np.diff(m.indptr))


def _sum_by(key: np.ndarray, weights: np.ndarray, size: int) -> np.ndarray:
    """float64 sums of ``weights`` grouped by integer ``key`` in [0, size) (also when empty)."""
    return np.bincount(key, weights=weights, minlength=size).astype(np.float64, copy=False)


#: a batch of at most this many items is scored by :func:`_cider_numeric` in one pass (its own document
#: frequencies; about 10 KiB of working memory per item, 0.5 GiB at 50,000 with 5 references each)
ONE_PASS_ITEMS = 50_000
#: items per chunk of a larger batch, scored in two passes (the document frequencies first): time and
#: memory grow linearly. Smaller than ONE_PASS_ITEMS: a chunk's sorts stay in the CPU caches (at
#: 200,000 distinct items chunks of 10,000 took 3.55 s, of 50,000 4.04 s; at 100,000 one pass took
#: 2.58 s, chunks of 10,000 1.79 s)
NUMERIC_CHUNK = 20_000
#: pending keys of one n-gram order (from finished chunks) that are merged into the document-frequency
#: table of :func:`_cider_numeric` once they reach the table's size or at least this many
MERGE_MIN = 8_000_000
#: keys per slice of :func:`_merge_counts`
MERGE_SLICE = 4_000_000

#: the ASCII bytes that ``str.split()`` separates tokens on: tab, line feed, vertical tab, form feed,
#: carriage return, the information separators 0x1c-0x1f and space
_SPLIT_BYTES = np.zeros(256, dtype=bool)
_SPLIT_BYTES[[9, 10, 11, 12, 13, 28, 29, 30, 31, 32]] = True
#: bits of the int64 that :func:`_sorted_grams` sorts (a k-gram's code, then its position); codes and
#: positions that do not fit are sorted by a stable argsort instead (same order)
_PACK_BITS = 63
#: key of a token of over 8 bytes: this bit (the sign of an int64) set, its dictionary id below
_LONG_TOKEN = np.int64(-2 ** 63)


def _sorted_distinct(x: np.ndarray) -> np.ndarray:
    """``np.unique(x)`` of an int64 array by one sort (numpy's hash-based ``unique`` is slower here)."""
    x = np.sort(x)
    if len(x) > 1:
        keep = np.empty(len(x), dtype=bool)
        keep[0] = True
        np.not_equal(x[1:], x[:-1], out=keep[1:])
        x = x[keep]
    return x


def _ascii_tokens(sentences: list[str], long_vocab: dict[str, int]) -> tuple[np.ndarray, np.ndarray] | None:
    """The ``str.split()`` tokens of ASCII sentences as int64 keys, equal exactly when the tokens are equal:
    (n_tokens int64 (S,), key int64 (T,)), the tokens of the sentences one after the other. The keys are
    those of :func:`captioneval.kernels.bleu._tokenize` with ``long_vocab`` and ``ascii_only``: a token
    of at most 8 bytes is its bytes read as a little-endian int64 (zero-padded; non-negative since ASCII
    bytes are < 0x80, and tokens of different lengths differ since no byte is 0); a longer one is
    ``-2**63 + id``, ``id`` its number in ``long_vocab`` (first seen first; the dictionary is extended
    in place, so the keys of calls sharing it are comparable). None when the text is not ASCII or
    holds a NUL byte.

    The sentences are joined by line feeds (a separator) into one byte array; the token starts and
    ends are the edges of its runs of non-separator bytes, and a token's first 8 bytes are two aligned
    uint64 words of the array shifted together."""
    text = "\n".join(sentences)
    if not text.isascii() or "\0" in text:
        return None
    data = text.encode("ascii")
    size = len(data)
    raw = np.frombuffer(data + bytes(16), dtype=np.uint8)
    body = raw[:size]
    word = np.zeros(size + 2, dtype=bool)
    if np.count_nonzero(body < 32) == data.count(b"\n"):  # no control byte but line feeds: separators <= 32
        np.greater(body, 32, out=word[1:-1])
    else:
        np.logical_not(_SPLIT_BYTES[body], out=word[1:-1])
    edge = np.flatnonzero(word[1:] != word[:-1]).reshape(-1, 2)
    del word
    starts = np.ascontiguousarray(edge[:, 0])
    tok_len = edge[:, 1] - starts
    del edge
    words = raw[:8 * (len(raw) // 8)].view("<u8")
    at = starts >> 3
    bits = ((starts & 7) << 3).astype(np.uint64)
    key = words[at] >> bits
    key |= words[at + 1] << (np.uint64(64) - bits)  # a shift by 64 gives 0
    del at, bits
    keep = (64 - 8 * np.minimum(tok_len, 8)).astype(np.uint64)  # zero the bytes after the token
    key <<= keep
    key >>= keep
    del keep
    key = key.view(np.int64)
    long = np.flatnonzero(tok_len > 8)
    if len(long):
        ends = starts[long] + tok_len[long]
        ids = [long_vocab.setdefault(w, len(long_vocab))
               for w in [text[a:b] for a, b in zip(starts[long].tolist(), ends.tolist())]]
        key[long] = _LONG_TOKEN + np.array(ids, dtype=np.int64)
    lengths = np.fromiter(map(len, sentences), dtype=np.int64, count=len(sentences))
    first = np.searchsorted(starts, np.cumsum(lengths + 1) - (lengths + 1))  # first token of each sentence
    return np.diff(first, append=len(starts)), key


def _dense_ids(vocab: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """``np.searchsorted(vocab, keys)`` as int32 for int64 ``keys`` that all occur in ``vocab`` (sorted,
    distinct, its last value below the int64 maximum), through an open-addressing hash table (Fibonacci
    hashing, linear probing, at most a quarter full) instead of a binary search per key."""
    V = len(vocab)
    bits = max((4 * V - 1).bit_length(), 4)
    mask = (1 << bits) - 1
    shift, mult = np.uint64(64 - bits), np.uint64(0x9E3779B97F4A7C15)

    def slot(x: np.ndarray) -> np.ndarray:
        return ((x.view(np.uint64) * mult) >> shift).astype(np.int64)

    table_key = np.full(mask + 1, vocab[-1] + 1 if V else 0, dtype=np.int64)  # a value no key has
    table_id = np.full(mask + 1, -1, dtype=np.int32)
    todo, s = np.arange(V, dtype=np.int64), slot(vocab)
    while len(todo):  # insert: the first of the keys wanting a free slot takes it, the others probe on
        free = np.flatnonzero(table_id[s] < 0)
        won = free[np.unique(s[free], return_index=True)[1]]
        table_id[s[won]] = todo[won]
        table_key[s[won]] = vocab[todo[won]]
        rest = np.ones(len(todo), dtype=bool)
        rest[won] = False
        todo, s = todo[rest], (s[rest] + 1) & mask
    s = slot(keys)
    ids = table_id[s]
    miss = np.flatnonzero(table_key[s] != keys)
    s, missed = s[miss], keys[miss]
    while len(miss):  # every key is in the table: probe until found
        s = (s + 1) & mask
        hit = table_key[s] == missed
        ids[miss[hit]] = table_id[s[hit]]
        miss, s, missed = miss[~hit], s[~hit], missed[~hit]
    return ids


def _item_major(n_tokens: np.ndarray, key: np.ndarray, refs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Reorder the sentences of a chunk from (its ``len(refs)`` candidates, then the references item by
    item) to item by item, each candidate followed by its ``refs[i]`` references: ``n_tokens`` (per
    sentence) and ``key`` (per token, e.g. the keys of :func:`_ascii_tokens` or word ids) in the new order."""
    n_items, n_pairs = len(refs), int(refs.sum())
    old = np.empty(n_items + n_pairs, dtype=np.int64)  # old sentence index of each new one
    old[np.cumsum(refs + 1) - (refs + 1)] = np.arange(n_items, dtype=np.int64)
    old[np.arange(n_pairs, dtype=np.int64) + np.repeat(np.arange(1, n_items + 1, dtype=np.int64), refs)] = \
        np.arange(n_items, n_items + n_pairs, dtype=np.int64)
    new_tokens = n_tokens[old]
    shift = (np.cumsum(n_tokens) - n_tokens)[old] - (np.cumsum(new_tokens) - new_tokens)
    return new_tokens, key[np.repeat(shift, new_tokens) + np.arange(len(key), dtype=np.int64)]


def _sorted_grams(n_tokens: np.ndarray, wid: np.ndarray, V: int, n: int, keys: bool):
    """The k-gram positions of a chunk's sentences sorted by (k-gram, position), k = 1..n: yields
    ``(k, pos, gram, new, n_grams, gkey)`` with, per sorted position (P of them), ``pos`` the position
    (index into ``wid``) and ``gram`` the id of its k-gram (int64) and ``new`` (bool) whether it is the
    first position of that k-gram. The ids ``0..n_grams-1`` ascend with the k-grams' base-V keys (the
    number whose base-V digits are the k word ids): for k = 1 they are the word ids (``n_grams = V``), for
    k >= 2 they number the distinct codes ``(id of the (k-1)-gram prefix) * V + (last word id)`` (below
    ``n_grams(k-1) * V``). ``gkey`` (int64, one per id; with ``keys`` only, else None; None for k = 1)
    is the base-V key.

    The sort is ``np.sort`` of the code shifted left with the position in the low bits (one int64 each)
    when both fit in 63 bits, a stable argsort of the codes otherwise."""
    T = len(wid)
    w = wid.astype(np.int64)
    remaining = np.repeat(np.cumsum(n_tokens), n_tokens) - np.arange(T, dtype=np.int64)  # tokens to the end
    shift = max(int(T - 1).bit_length(), 1)
    low = (1 << shift) - 1
    prev, n_prev, gkey = w, V, None
    for k in range(1, n + 1):
        if k == 1:
            pos, code, bound = np.arange(T, dtype=np.int64), w, V
        else:
            pos = np.flatnonzero(remaining >= k)
            code = prev[pos]
            code *= V
            code += w[pos + (k - 1)]
            bound = n_prev * V
        if (bound - 1).bit_length() + shift <= _PACK_BITS:
            code = code << shift
            code |= pos
            code.sort()
            pos = code & low
            code >>= shift
        else:
            order = np.argsort(code, kind="stable")
            code, pos = code[order], pos[order]
        new = np.empty(len(code), dtype=bool)
        new[:1] = True
        np.not_equal(code[1:], code[:-1], out=new[1:])
        if k == 1:
            gram, n_grams = code, V
        else:
            gram = np.cumsum(new)
            gram -= 1
            distinct = code[new]
            n_grams = len(distinct)
            if keys:
                gkey = distinct if k == 2 else gkey[distinct // V] * V + distinct % V
            del distinct
        del code
        yield k, pos, gram, new, n_grams, gkey
        if k < n:
            prev = np.empty(T, dtype=np.int64)
            prev[pos] = gram
            n_prev = n_grams


def _merge_counts(parts: list, slice_size: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The union of count tables: ``parts`` is a list of (keys int64 (P_i,) sorted and distinct,
    counts int32 (P_i,)); returns (keys, counts) sorted and distinct with the counts of equal keys
    added (empty arrays when every part is empty). The list is emptied.

    Time and memory linear in the total size: the key range is cut at the quantiles of the largest
    part into slices of about ``slice_size`` keys (:data:`MERGE_SLICE`), and each slice (its run of
    every part, found by ``np.searchsorted`` of the few cut points) is merged by one ``np.argsort``
    of its keys (numpy's SIMD sort; the order of equal keys does not matter to integer sums), the
    counts of a run of equal keys added as the difference of two int64 partial sums. Working memory
    is a slice's (about 30 bytes per key) beside the parts and the result."""
    slice_size = MERGE_SLICE if slice_size is None else slice_size
    if len(parts) == 1:
        return parts.pop()
    total = sum(len(p[0]) for p in parts)
    largest = max(parts, key=lambda p: len(p[0]))[0]
    n_slices = max(1, -(-total // slice_size))
    cuts = largest[(np.arange(1, n_slices) * len(largest)) // n_slices] if len(largest) else np.zeros(0, np.int64)
    cuts = np.unique(cuts)
    bounds = [np.concatenate(([0], np.searchsorted(p[0], cuts), [len(p[0])])) for p in parts]
    out_keys, out_counts = [], []
    for s in range(len(cuts) + 1):
        keys = np.concatenate([p[0][b[s]:b[s + 1]] for p, b in zip(parts, bounds)])
        counts = np.concatenate([p[1][b[s]:b[s + 1]] for p, b in zip(parts, bounds)])
        if not len(keys):
            continue
        order = np.argsort(keys)
        keys = keys[order]
        counts = counts[order]
        del order
        start = np.empty(len(keys), dtype=bool)
        start[0] = True
        np.not_equal(keys[1:], keys[:-1], out=start[1:])
        first = np.flatnonzero(start)
        del start
        out_keys.append(keys[first])
        del keys
        cs = np.cumsum(counts, dtype=np.int64)  # a run's sum: the difference of two partial sums
        del counts
        last = cs[np.append(first[1:] - 1, len(cs) - 1)]
        last[1:] -= cs[first[1:] - 1]
        out_counts.append(last.astype(np.int32))
        del cs, first, last
    parts.clear()
    if not out_keys:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int32)
    return np.concatenate(out_keys), np.concatenate(out_counts)


def _cider_numeric(candidates: Sequence[str], references: Sequence[Sequence[str]], n_refs: np.ndarray, n: int,
                   sigma: float, chunk: int | None = None) -> np.ndarray | None:
    """CIDEr-D with the batch's own document frequencies (``df=None``) without a Python object per token
    or n-gram, ``chunk`` items at a time (default: the whole batch up to :data:`ONE_PASS_ITEMS` items,
    else :data:`NUMERIC_CHUNK`).

    The captions are split into int64 token keys (:func:`_ascii_tokens`, one dictionary for the tokens
    over 8 bytes) and numbered on the sorted vocabulary of the whole batch (word ids ``0..V-1``,
    :func:`_dense_ids`). A chunk is scored with its sentences put item by item (a candidate, then its
    references: :func:`_item_major`): per n-gram order, one sort of the k-gram positions by (k-gram,
    position) (:func:`_sorted_grams`) gives everything as runs: the term frequencies (runs of a k-gram
    in one sentence), the document frequencies (the (k-gram, item) groups of runs that hold a
    reference, whose last run is then a reference's) and the clipped products (a reference's run and
    its item's candidate's run of the same k-gram are in one group, the candidate's first). With one
    chunk that is one pass; with several, a first pass over the references alone counts the document
    frequencies into one table per order (a dense array over the words for k = 1, sorted base-V keys
    with counts for k >= 2), then each chunk is scored against it (``np.searchsorted`` of the
    chunk's ascending keys).

    The formula and the order of its floating-point operations are :func:`cider_d`'s; every sum over
    n-grams adds in ascending order of their base-V keys, so the scores do not depend on the chunking.
    None when the text is not ASCII (or holds a NUL byte) or ``V**n >= 2**63``: the caller then takes the
    general path."""
    m = len(candidates)
    if chunk is None:
        chunk = m if m <= ONE_PASS_ITEMS else NUMERIC_CHUNK
    long_vocab: dict[str, int] = {}
    parts = []
    with paused_gc():
        for a in range(0, m, chunk):
            sents = list(candidates[a:a + chunk])
            sents.extend(chain.from_iterable(references[a:a + chunk]))
            out = _ascii_tokens(sents, long_vocab)
            del sents
            if out is None:
                return None
            parts.append(out)
    vocab = _sorted_distinct(np.concatenate([_sorted_distinct(key) for _, key in parts]))
    V = max(len(vocab), 1)
    if V ** n >= 2 ** 63:
        return None
    for c, (n_tokens, key) in enumerate(parts):
        parts[c] = (n_tokens, _dense_ids(vocab, key))
    del vocab

    log_n = np.log(float(m))
    scores = np.empty(m, dtype=np.float64)

    def score(c: int, a: int, table: list | None) -> None:
        """Scores of chunk ``c`` (items ``a..``) into ``scores``, against ``table`` (None: the chunk's own
        document frequencies)."""
        refs = n_refs[a:a + chunk]
        n_tokens, wid = _item_major(*parts[c], refs)
        n_c, n_sent = len(refs), len(n_tokens)
        cand_sent = np.cumsum(refs + 1) - (refs + 1)  # sentence of each item's candidate
        item_of = np.repeat(np.arange(n_c, dtype=np.int64), refs + 1)  # item of each sentence
        is_cand = np.zeros(n_sent, dtype=bool)
        is_cand[cand_sent] = True
        ref_sent = np.flatnonzero(~is_cand)  # sentence of each (item, reference) pair
        n_pairs = len(ref_sent)
        pair_of = np.arange(n_sent, dtype=np.int64) - item_of - 1  # pair of each reference sentence
        sent_of = np.repeat(np.arange(n_sent, dtype=np.int64), n_tokens)
        sq = np.zeros((n, n_sent), dtype=np.float64)
        num = np.zeros((n, n_pairs), dtype=np.float64)
        for k, pos, gram, new, n_grams, gkey in _sorted_grams(n_tokens, wid, V, n, table is not None):
            sent = sent_of[pos]
            del pos
            # runs of one k-gram in one sentence: es, eg = their sentence and k-gram, tf = their length
            start = new.copy()
            start[1:] |= sent[1:] != sent[:-1]
            first = np.flatnonzero(start)
            del start
            tf = np.diff(first, append=len(sent))
            es, eg, gram_start = sent[first], gram[first], new[first]
            del sent, gram, new, first
            # groups of runs of one k-gram in one item's sentences (the candidate's run first, if any)
            ei = item_of[es]
            group = gram_start
            group[1:] |= ei[1:] != ei[:-1]
            del ei
            ic = is_cand[es]
            if table is None:  # items whose references hold the k-gram: groups whose last run is a reference
                last = np.empty(len(es), dtype=bool)
                last[-1:] = True
                last[:-1] = group[1:]
                last &= ~ic
                doc = np.bincount(eg[last], minlength=n_grams).astype(np.float64)
                del last
            elif k == 1:
                doc = table[0].astype(np.float64)
            else:
                tk, tc = table[k - 1]
                hit = np.minimum(np.searchsorted(tk, gkey), len(tk) - 1)  # gkey ascends: an ordered search
                doc = np.where(tk[hit] == gkey, tc[hit], 0).astype(np.float64) if len(tk) else \
                    np.zeros(n_grams, dtype=np.float64)
            idf = (log_n - np.log(np.maximum(1.0, doc)))[eg]
            v = tf.astype(np.float64) * idf
            sq[k - 1] = np.bincount(es, weights=v * v, minlength=n_sent)
            # clipped products: a reference run whose group starts with a candidate run
            h = np.maximum.accumulate(np.where(group, np.arange(len(es), dtype=np.int64), 0))
            r = np.flatnonzero(ic[h] > ic)
            h = h[r]
            vr = v[r]
            term = np.minimum(v[h], vr) * vr
            num[k - 1] = np.bincount(pair_of[es[r]], weights=term, minlength=n_pairs)
        pair_item = item_of[ref_sent]
        pair_cand = cand_sent[pair_item]
        norm = np.sqrt(sq.T)
        num = np.ascontiguousarray(num.T)
        denom = norm[pair_cand] * norm[ref_sent]
        sim = np.divide(num, denom, out=num.copy(), where=denom != 0)
        bigrams = np.maximum(n_tokens - 1, 0).astype(np.float64)
        delta = bigrams[pair_cand] - bigrams[ref_sent]
        penalty = np.exp(-(delta * delta) / (2.0 * sigma * sigma))
        per_pair = sim.mean(axis=1) * penalty
        scores[a:a + n_c] = 10.0 * _sum_by(pair_item, per_pair, n_c) / refs

    if m <= chunk:  # one chunk: its own document frequencies, in the same pass
        score(0, 0, None)
        return scores

    # ---- several chunks: document frequencies of the whole batch first, one table per order
    table: list = [np.zeros(V, dtype=np.int64)] + [None] * (n - 1)
    pending: list = [[] for _ in range(n)]

    def merge(k: int) -> None:
        """Fold the pending (sorted distinct keys, int32 counts) of order k + 1 into its sorted table
        (:func:`_merge_counts`)."""
        todo, pending[k] = pending[k], []
        if table[k] is not None:
            todo.insert(0, table[k])
            table[k] = None
        table[k] = _merge_counts(todo) if todo else (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int32))

    for c, a in enumerate(range(0, m, chunk)):
        n_tokens, wid = parts[c]
        refs = n_refs[a:a + chunk]
        n_c = len(refs)
        ref_tokens = n_tokens[n_c:]  # the references, item by item, after the candidates
        item_of = np.repeat(np.repeat(np.arange(n_c, dtype=np.int64), refs), ref_tokens)  # of each position
        for k, pos, gram, new, n_grams, gkey in _sorted_grams(ref_tokens, wid[len(wid) - len(item_of):], V, n, True):
            # a k-gram is held by one more item where a run of one (k-gram, item) ends
            it = item_of[pos]
            del pos
            last = np.empty(len(it), dtype=bool)
            last[-1:] = True
            np.not_equal(it[1:], it[:-1], out=last[:-1])
            last[:-1] |= new[1:]
            held = np.bincount(gram[last], minlength=n_grams)
            del it, last, gram, new
            if k == 1:
                table[0] += held
                continue
            at = np.flatnonzero(held)
            pending[k - 1].append((gkey[at], held[at].astype(np.int32)))
            size = len(table[k - 1][0]) if table[k - 1] is not None else 0
            if sum(len(p[0]) for p in pending[k - 1]) >= max(size, MERGE_MIN):
                merge(k - 1)
    for k in range(1, n):
        merge(k)
        # a k-gram held by one item has the idf of one held by none (log N - log max(1, df))
        tk, tc = table[k]
        keep = np.flatnonzero(tc > 1)
        table[k] = (tk[keep], tc[keep])
        del tk, tc, keep
    for c, a in enumerate(range(0, m, chunk)):
        score(c, a, table)
        parts[c] = None
    return scores


# ---------------------------------------------------------------------------------------------
# public API
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DocumentFrequency:
    """Document-frequency table for CIDEr-D's idf weights.

    Attributes
    ----------
    counts : mapping from n-gram (tuple of tokens, order 1..4 by default) to float
        number of documents whose reference set contains the n-gram; n-grams not in the mapping
        count as 0 (their idf is then ``log(n_documents)``, exactly like a count of 1).
    n_documents : int, >= 1
        number of documents ``N`` (``idf = log(N) - log(max(1, df))``). With ``N = 1`` every idf
        is <= 0 and CIDEr-D is degenerate (all scores 0 when the table comes from the references).

    The usual sources are :meth:`from_references` over the whole evaluated dataset (while scoring
    a chunk of it) or over a training corpus (e.g. COCO train2014 for Self-CIDEr).

    The table is frozen: :func:`cider_d` builds its look-up index on first use and keeps it on the
    instance, so ``counts`` must not be mutated afterwards. Tables from :meth:`from_packed` or from
    :meth:`from_references` with ``weights`` hold their counts in that index; their ``counts`` is a
    read-only mapping, decoded into tuples on first access.
    """

    counts: Mapping[tuple[str, ...], float] = field(hash=False)
    n_documents: int

    def __post_init__(self) -> None:
        n_docs = self.n_documents
        if isinstance(n_docs, bool) or not isinstance(n_docs, (int, np.integer)) or n_docs < 1:
            raise ValueError(f"n_documents must be a positive integer, got {n_docs!r}")

    @classmethod
    def from_references(cls, references: Sequence[Sequence[str]], n: int = 4,
                        weights: Sequence[int] | None = None) -> "DocumentFrequency":
        """Count, for every n-gram of order 1..n, the documents whose reference set contains it.

        Parameters
        ----------
        references : sequence of length N of non-empty sequences of str
            ``references[i]`` = tokenised (space-separated) reference captions of document
            (item/image) ``i``. An n-gram occurring several times in one document's references
            counts once (pycocoevalcap's ``compute_doc_freq``).
        n : int, default 4
            largest n-gram order.
        weights : sequence of N positive int, or None
            ``weights[i]`` = number of documents whose reference set is ``references[i]`` (e.g. the
            number of candidates of image ``i``: pycocoevalcap makes one document per candidate, each
            with its image's references). ``df(g)`` is then the sum of the weights of the sets
            containing ``g`` and ``n_documents = sum(weights)`` (the same table as repeating each
            set ``weights[i]`` times, computed once per set). The table is then built straight into
            its look-up index (no n-gram tuples): ``counts`` is a read-only mapping decoded on first
            access, and :meth:`to_packed` costs nothing more.

        Returns
        -------
        DocumentFrequency
            with ``n_documents = N`` (or ``sum(weights)``); passing it to :func:`cider_d` together
            with the same ``references`` (and no weights) gives the same scores as ``df=None``.

        Raises
        ------
        ValueError
            if ``references`` is empty, one item has no reference, ``n < 1``, or ``weights`` does
            not have one positive integer per item.
        TypeError
            if an item is a bare string instead of a list of strings, or a caption is not a string.
        """
        n = _check_order(n)
        n_refs = _check_references(references)
        if weights is not None:
            w = np.asarray(weights)
            if w.shape != n_refs.shape or not np.issubdtype(w.dtype, np.integer) or (w < 1).any():
                raise ValueError(f"weights must be {len(n_refs)} positive integers (one per item), got {weights!r:.80}")
        flat, item = _flatten_references(references, n_refs)
        sentences, sid = _sentence_ids(flat)
        corpus = _Corpus(sentences, n)
        sent = np.fromiter(map(sid.__getitem__, flat), dtype=np.int64, count=len(flat))
        if weights is None:
            df = corpus.document_counts(item, sent, len(n_refs))
            return cls(counts=dict(zip(corpus.ngram_tuples(), df.tolist())), n_documents=len(n_refs))
        df = corpus.document_counts(item, sent, len(n_refs), weights=w.astype(np.float64))
        index = _NgramIndex.of_corpus(corpus, df)
        table = cls(counts=_PackedCounts(index), n_documents=int(w.sum()))
        object.__setattr__(table, "_ngram_index", index)
        return table

    def _index(self) -> _NgramIndex:
        """The vectorised look-up of :attr:`counts` (:class:`_NgramIndex`), built on first use and kept on
        the instance (the table is frozen: its ``counts`` must not be mutated after first use)."""
        index = self.__dict__.get("_ngram_index")
        if index is None:
            index = _NgramIndex.of_mapping(self.counts)
            object.__setattr__(self, "_ngram_index", index)
        return index

    def to_packed(self) -> bytes:
        """Compact binary form that :meth:`from_packed` loads without rebuilding anything.

        Layout: the 8 bytes ``CIDERDF\\0``, the length of a UTF-8 JSON header as 8 little-endian
        bytes, the header (``format``, ``n_documents``, the vocabulary ``words`` and, per n-gram order,
        the lengths of its key levels), then per order its levels' sorted keys (little-endian int64)
        and its counts (little-endian float64): the arrays of the look-up index (:class:`_NgramIndex`).
        About 16-24 bytes per n-gram. Raises TypeError when an n-gram is not a tuple of str.
        """
        return self._index().pack(self.n_documents)

    @classmethod
    def from_packed(cls, data: bytes) -> "DocumentFrequency":
        """Inverse of :meth:`to_packed`. The look-up index is the stored arrays (no rebuilding);
        ``counts`` is a read-only mapping equal to the original, decoded into tuples on first access.
        Raises ValueError when ``data`` is not a packed table of this format."""
        index, n_documents = _NgramIndex.unpack(data)
        table = cls(counts=_PackedCounts(index), n_documents=n_documents)
        object.__setattr__(table, "_ngram_index", index)
        return table

    def to_json(self) -> dict[str, Any]:
        """JSON-serialisable form: ``{"n_documents": N, "counts": {"w1 w2": df, ...}}``
        (n-gram tokens joined with single spaces)."""
        return {
            "n_documents": int(self.n_documents),
            "counts": {" ".join(g): float(c) for g, c in self.counts.items()},
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "DocumentFrequency":
        """Inverse of :meth:`to_json`. Raises ValueError when a key is missing or malformed."""
        try:
            n_docs = data["n_documents"]
            raw = data["counts"]
        except (KeyError, TypeError):
            raise ValueError('document-frequency JSON must be an object with "n_documents" and "counts"') from None
        if not isinstance(raw, Mapping):
            raise ValueError('"counts" must be an object mapping space-joined n-grams to document counts')
        counts: dict[tuple[str, ...], float] = {}
        for key, value in raw.items():
            if not isinstance(key, str) or not key:
                raise ValueError(f"invalid n-gram key {key!r} in document-frequency JSON")
            counts[tuple(key.split(" "))] = float(value)
        return cls(counts=counts, n_documents=int(n_docs))


def cider_d(
    candidates: Sequence[str],
    references: Sequence[Sequence[str]],
    df: DocumentFrequency | None = None,
    n: int = 4,
    sigma: float = 6.0,
) -> np.ndarray:
    """Per-candidate CIDEr-D scores (Vedantam et al., CVPR 2015; pycocoevalcap ``CiderScorer``).

    Parameters
    ----------
    candidates : sequence of str, length M >= 1
        ``candidates[i]`` is a tokenised caption (tokens separated by whitespace, e.g. the output
        of the PTB tokeniser), scored against ``references[i]``.
    references : sequence of length M of non-empty sequences of str
        tokenised reference captions of item ``i``.
    df : DocumentFrequency or None
        ``None`` (COCO default): document frequencies over the M items' reference sets with
        ``N = M``, identical to ``pycocoevalcap.cider.cider.Cider`` called with
        ``gts = {i: references[i]}``, ``res = {i: [candidates[i]]}``. Otherwise the supplied
        table (e.g. computed over a whole dataset while scoring one chunk of it, or over a
        training corpus), with ``N = df.n_documents``.
    n : int, default 4
        largest n-gram order (pycocoevalcap supports only 4).
    sigma : float, default 6.0
        width of the Gaussian length penalty ``exp(-delta^2 / (2 sigma^2))``, ``delta`` =
        difference of the numbers of bigrams (``#tokens - 1``) of candidate and reference.

    Batches of more than :data:`CHUNK_ITEMS` items are scored a chunk at a time against the whole
    batch's table of document frequencies (counted chunk by chunk when ``df`` is None), so time and
    memory grow linearly; the numbers equal one batch's to a few ulps (1e-12 checked).

    Returns
    -------
    numpy.ndarray of float64, shape (M,)
        CIDEr-D of each candidate: ``10 * mean_k mean_j sim_k(h_i, r_ij)`` (see the module
        docstring), in [0, 10] whenever all ``df(g) <= N`` (always for ``df=None``); 0 when
        nothing is shared, and 0 for every item when ``M = 1`` and ``df`` is None (``N = 1``
        makes every idf 0: degenerate but defined).

    Raises
    ------
    ValueError
        if ``candidates`` is empty, ``len(candidates) != len(references)``, an item has no
        reference, ``n < 1`` or ``sigma <= 0``.
    TypeError
        if a caption is not a string or an item's references are a bare string.
    """
    n = _check_order(n)
    sigma = float(sigma)
    if not sigma > 0:
        raise ValueError(f"sigma must be > 0, got {sigma!r}")
    if isinstance(candidates, (str, bytes)):
        raise TypeError("candidates must be a sequence of strings, got a single string")
    if len(candidates) == 0:
        raise ValueError("candidates is empty: need at least one caption to score")
    if len(candidates) != len(references):
        raise ValueError(
            f"got {len(candidates)} candidates but {len(references)} reference lists; "
            "references[i] must hold the references of candidates[i]"
        )
    if df is not None and not isinstance(df, DocumentFrequency):
        raise TypeError(f"df must be a DocumentFrequency or None, got {type(df).__name__}")
    n_refs = _check_references(references)
    n_items = len(n_refs)
    if df is None and n_items > 1:
        with paused_gc():
            total = n_items + int(n_refs.sum())
            # distinct hashes: at most the distinct texts, and a sort instead of a set of millions of strings
            _, ordered = sorted_hashes(chain(candidates, chain.from_iterable(references)), total)
            distinct = total - repeated_hashes(ordered)
            del ordered
        if distinct >= DISTINCT_SHARE * total:  # no shared-text shortcut to gain
            scores = _cider_numeric(candidates, references, n_refs, n, sigma)
            if scores is not None:
                return scores
    if n_items > CHUNK_ITEMS:
        table = df
        if table is None:  # the batch's own document frequencies, counted chunk by chunk
            weights = Counter(map(tuple, references))
            table = _document_frequency_in_chunks(list(weights), np.fromiter(weights.values(), dtype=np.int64),
                                                  n, CHUNK_ITEMS)
        if table is not None:  # an item's score depends only on its captions and the table
            return np.concatenate([cider_d(candidates[a:a + CHUNK_ITEMS], references[a:a + CHUNK_ITEMS], table, n, sigma)
                                   for a in range(0, n_items, CHUNK_ITEMS)])

    flat_refs, pair_item = _flatten_references(references, n_refs)
    sentences, sid = _sentence_ids(chain(candidates, flat_refs))
    get = sid.__getitem__
    cand = np.fromiter(map(get, candidates), dtype=np.int64, count=n_items)
    pair_ref = np.fromiter(map(get, flat_refs), dtype=np.int64, count=len(flat_refs))
    corpus = _Corpus(sentences, n)
    tf, order = corpus.tf, corpus.order

    # ---- idf per n-gram column
    if df is None:
        doc_counts = corpus.document_counts(pair_item, pair_ref, n_items)
        n_docs = n_items
    else:
        doc_counts = df._index().lookup(corpus)
        n_docs = df.n_documents
    idf = np.log(float(n_docs)) - np.log(np.maximum(1.0, doc_counts))

    # ---- tf-idf vectors and their norms per (sentence, order)
    vec = tf.copy()
    vec.data *= idf[vec.indices]
    n_sent = tf.shape[0]
    sq = _sum_by(_row_of_entries(vec) * n + order[vec.indices], vec.data * vec.data, n_sent * n)
    norm = np.sqrt(sq).reshape(n_sent, n)

    # ---- clipped products for every (candidate, reference) pair at once
    pair_hyp = cand[pair_item]
    hyp_vec = vec[pair_hyp]
    ref_vec = vec[pair_ref]
    # sum over n-grams g of the candidate of min(v_h[g], v_r[g]) * v_r[g]; terms with v_r[g] = 0
    # vanish, so only the intersection of the supports matters.
    prod = hyp_vec.minimum(ref_vec).multiply(ref_vec)
    if (idf < 0).any():
        # with a negative idf, min(0, v_r) * v_r != 0 for an n-gram of the reference that is absent
        # from the candidate; pycocoevalcap only sums over the candidate's n-grams: mask them.
        support = tf[pair_hyp]
        support.data[:] = 1.0
        prod = sp.csr_matrix(prod.multiply(support))
    prod = sp.csr_matrix(prod)
    n_pairs = len(pair_item)
    num = _sum_by(_row_of_entries(prod) * n + order[prod.indices], prod.data, n_pairs * n).reshape(n_pairs, n)
    denom = norm[pair_hyp] * norm[pair_ref]
    sim = np.divide(num, denom, out=num.copy(), where=denom != 0)

    bigrams = np.maximum(corpus.n_tokens - 1, 0).astype(np.float64)
    delta = bigrams[pair_hyp] - bigrams[pair_ref]
    penalty = np.exp(-(delta * delta) / (2.0 * sigma * sigma))
    per_pair = sim.mean(axis=1) * penalty
    return 10.0 * _sum_by(pair_item, per_pair, n_items) / n_refs
