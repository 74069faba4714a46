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

from dataclasses import dataclass, field
from itertools import chain
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import scipy.sparse as sp

__all__ = ["DocumentFrequency", "cider_d"]


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
            mat = words[self._wid[rep[:, None] + np.arange(k)]]
            out.extend(map(tuple, mat.tolist()))
        return out

    def document_counts(self, item: np.ndarray, sent: np.ndarray, n_items: int) -> np.ndarray:
        """df per column: number of items whose reference set contains the n-gram.

        ``item[j]``, ``sent[j]`` = item index and sentence id of the j-th (item, reference) pair.
        """
        incidence = sp.csr_matrix(
            (np.ones(len(item), dtype=np.float64), (item, sent)), shape=(n_items, self.tf.shape[0])
        )
        present = incidence @ self.tf  # positive entries only: no cancellation, no explicit zeros
        return np.bincount(present.indices, minlength=self.tf.shape[1]).astype(np.float64)


def _flatten_references(references: Sequence[Sequence[str]], n_refs: np.ndarray) -> tuple[list[str], np.ndarray]:
    flat = list(chain.from_iterable(references))
    item = np.repeat(np.arange(len(n_refs), dtype=np.int64), n_refs)
    return flat, item


def _row_of_entries(m: sp.csr_matrix) -> np.ndarray:
    return np.repeat(np.arange(m.shape[0], dtype=np.int64), np.diff(m.indptr))


def _sum_by(key: np.ndarray, weights: np.ndarray, size: int) -> np.ndarray:
    """float64 sums of ``weights`` grouped by integer ``key`` in [0, size) (also when empty)."""
    return np.bincount(key, weights=weights, minlength=size).astype(np.float64, copy=False)


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
    """

    counts: Mapping[tuple[str, ...], float] = field(hash=False)
    n_documents: int

    def __post_init__(self) -> None:
        n_docs = self.n_documents
        if isinstance(n_docs, bool) or not isinstance(n_docs, (int, np.integer)) or n_docs < 1:
            raise ValueError(f"n_documents must be a positive integer, got {n_docs!r}")

    @classmethod
    def from_references(cls, references: Sequence[Sequence[str]], n: int = 4) -> "DocumentFrequency":
        """Count, for every n-gram of order 1..n, the documents whose reference set contains it.

        Parameters
        ----------
        references : sequence of length N of non-empty sequences of str
            ``references[i]`` = tokenised (space-separated) reference captions of document
            (item/image) ``i``. An n-gram occurring several times in one document's references
            counts once (pycocoevalcap's ``compute_doc_freq``).
        n : int, default 4
            largest n-gram order.

        Returns
        -------
        DocumentFrequency
            with ``n_documents = N``; passing it to :func:`cider_d` together with the same
            ``references`` gives the same scores as ``df=None``.

        Raises
        ------
        ValueError
            if ``references`` is empty, one item has no reference, or ``n < 1``.
        TypeError
            if an item is a bare string instead of a list of strings, or a caption is not a string.
        """
        n = _check_order(n)
        n_refs = _check_references(references)
        flat, item = _flatten_references(references, n_refs)
        sentences, sid = _sentence_ids(flat)
        corpus = _Corpus(sentences, n)
        sent = np.fromiter(map(sid.__getitem__, flat), dtype=np.int64, count=len(flat))
        df = corpus.document_counts(item, sent, len(n_refs))
        return cls(counts=dict(zip(corpus.ngram_tuples(), df.tolist())), n_documents=len(n_refs))

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
        lookup = df.counts.get
        doc_counts = np.fromiter(
            (lookup(g, 0.0) for g in corpus.ngram_tuples()), dtype=np.float64, count=tf.shape[1]
        )
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
