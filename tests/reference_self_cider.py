"""Independent, slow reference implementations of the Wang & Chan (CVPR 2019) diversity metrics.

Built only on pycocoevalcap 1.2 (``CiderScorer``, ``BleuScorer`` via ``Bleu``) and plain numpy,
following the procedure of the official code (github.com/qingzwang/DiversityMetrics,
``pycocoevalcap/diversity_eval.py``: classes ``SelfCider`` and ``mBLEU``). It deliberately does
not import :mod:`captioneval.kernels.diversity` (nor :mod:`captioneval.kernels.cider`), so that the tests
and ``benchmarks/self_cider_speed.py`` compare the fast implementation with something independent.

* Self-CIDEr: for every pair ``i <= j`` of the first ``m`` captions of a set, CIDEr-D of caption
  ``i`` (candidate) against the single reference caption ``j``, with a *fixed* document-frequency
  table and ``ref_len = log(N_docs)`` (the official code's "coco-train2014-df" mode; pycocoevalcap
  1.2 itself always recomputes both from the references it is given, which
  :class:`FixedDfCiderScorer` prevents); ``K[i, j] = K[j, i] = score``; singular values ``s`` of
  ``K`` (``numpy.linalg.svd``); ``r = max sqrt(s) / sum sqrt(s)``; diversity
  ``-log10(r) / log10(m)``. The official code makes one ``compute_score`` call per pair; here all
  pairs of one set go into one scorer, which gives the same numbers (with a fixed table, an item's
  score does not depend on the other items) with less overhead.
* mBLEU: for every ``i``, ``Bleu(4).compute_score`` of caption ``i`` against the other ``m - 1``
  captions (one item, so corpus BLEU = sentence BLEU, "closest" reference length); mBLEU_n = mean
  over ``i``.
"""
from __future__ import annotations

import math
from collections import defaultdict
from typing import Mapping, Sequence

import numpy as np
from pycocoevalcap.bleu.bleu import Bleu
from pycocoevalcap.cider.cider_scorer import CiderScorer, cook_refs


def document_frequency_table(documents: Sequence[Sequence[str]]) -> tuple[dict, int]:
    """pycocoevalcap's document frequencies: ``(df dict {ngram tuple: count}, N documents)``.

    ``documents[d]`` is a list of tokenised captions; an n-gram counts once per document
    (``CiderScorer.compute_doc_freq``).
    """
    scorer = CiderScorer(n=4, sigma=6.0)
    for doc in documents:
        scorer.crefs.append(cook_refs(list(doc)))
        scorer.ctest.append(None)
    scorer.compute_doc_freq()
    return dict(scorer.document_frequency), len(documents)


def as_df_dict(df_counts: Mapping[tuple, float]) -> defaultdict:
    """The table as the ``defaultdict(float)`` pycocoevalcap expects (no copy if it is one)."""
    return df_counts if isinstance(df_counts, defaultdict) else defaultdict(float, df_counts)


class FixedDfCiderScorer(CiderScorer):
    """pycocoevalcap's CIDEr-D with a supplied df table and ``ref_len = log(n_documents)``.

    ``compute_cider`` of pycocoevalcap 1.2 assigns ``self.ref_len = log(#items)``; the property
    below ignores that assignment, as the official Self-CIDEr code (which loads ``ref_len`` from
    the df pickle) effectively does.
    """

    def __init__(self, df_counts: Mapping[tuple, float], n_documents: int, n: int = 4, sigma: float = 6.0):
        self._fixed_ref_len = float(np.log(float(n_documents)))
        super().__init__(n=n, sigma=sigma)
        # pycocoevalcap reads ``document_frequency[ngram]`` (a defaultdict: unseen n-grams -> 0).
        # A defaultdict passed in is shared, not copied (lookups only add harmless 0.0 entries).
        self.document_frequency = as_df_dict(df_counts)

    @property
    def ref_len(self):
        return self._fixed_ref_len

    @ref_len.setter
    def ref_len(self, value):  # compute_cider's log(len(crefs)) is ignored on purpose
        pass

    def compute_score(self, option=None, verbose=0):
        scores = self.compute_cider()
        return float(np.mean(scores)), np.array(scores)


def cider_reference(candidates: Sequence[str], references: Sequence[Sequence[str]],
                    df_counts: Mapping[tuple, float], n_documents: int) -> np.ndarray:
    """Per-item pycocoevalcap CIDEr-D with the fixed table ``(df_counts, n_documents)``."""
    scorer = FixedDfCiderScorer(df_counts, n_documents)
    for c, refs in zip(candidates, references):
        scorer += (c, list(refs))
    return scorer.compute_score()[1]


def self_cider_kernel_reference(captions: Sequence[str], df_counts: Mapping[tuple, float],
                                n_documents: int) -> np.ndarray:
    """Official Self-CIDEr kernel: upper triangle (candidate = row caption, reference = column
    caption) computed, then copied to the lower triangle."""
    m = len(captions)
    pairs = [(i, j) for i in range(m) for j in range(i, m)]
    scores = cider_reference([captions[i] for i, _ in pairs], [[captions[j]] for _, j in pairs],
                             df_counts, n_documents)
    k = np.zeros((m, m))
    for (i, j), s in zip(pairs, scores):
        k[i, j] = s
        k[j, i] = s
    return k


def self_cider_reference(sets: Sequence[Sequence[str]], df_counts: Mapping[tuple, float],
                         n_documents: int, m: int | None = None) -> np.ndarray:
    """Self-CIDEr diversity of each set, computed as the official ``SelfCider.evaluate``."""
    df_counts = as_df_dict(df_counts)
    out = []
    for captions in sets:
        caps = list(captions[:m]) if m is not None else list(captions)
        k = self_cider_kernel_reference(caps, df_counts, n_documents)
        s = np.linalg.svd(k, compute_uv=False)
        s_sqrt = np.sqrt(s)
        r = max(s_sqrt) / s_sqrt.sum()
        out.append(-np.log10(r) / np.log10(len(caps)))
    return np.asarray(out)


def mbleu_reference(sets: Sequence[Sequence[str]], m: int | None = None) -> np.ndarray:
    """Official mBLEU: ``(n_sets, 4)`` mean over ``i`` of pycocoevalcap BLEU-1..4 of caption
    ``i`` against the other captions of its set."""
    out = []
    for captions in sets:
        caps = list(captions[:m]) if m is not None else list(captions)
        rows = []
        for i in range(len(caps)):
            gts = {0: [caps[j] for j in range(len(caps)) if j != i]}
            res = {0: [caps[i]]}
            score, _ = Bleu(4).compute_score(gts, res, verbose=0)
            rows.append(score)
        out.append(np.asarray(rows).sum(0) / len(caps))
    return np.asarray(out)


def lsa_reference(captions: Sequence[str]) -> float:
    """LSA diversity as the official ``LSA.evaluate`` (term-document matrix, ``np.linalg.svd``)."""
    vocab: list[str] = []
    for c in captions:
        for t in c.split(" "):
            if t not in vocab:
                vocab.append(t)
    td = np.zeros((len(vocab), len(captions)))
    for d, c in enumerate(captions):
        for t in c.split(" "):
            td[vocab.index(t), d] += 1
    s = np.linalg.svd(td, compute_uv=False)
    r = max(s) / s.sum()
    return float(-math.log10(r) / math.log10(len(captions)))
