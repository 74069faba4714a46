"""BLEU-1..4 per caption (Papineni et al. 2002, "BLEU: a Method for Automatic Evaluation of Machine
Translation", ACL), with the numbers of pycocoevalcap 1.2 (https://github.com/tylin/coco-caption,
``pycocoevalcap/bleu/bleu.py`` and ``bleu_scorer.py``).

pycocoevalcap computes sentence BLEU with the brevity penalty against the *closest* reference length
(``option='closest'``, ties to the shorter reference) and its per-sentence smoothing (1e-15 added to
the clipped matches, 1e-9 to the n-gram counts). BLEU-n is the geometric mean of the modified n-gram
precisions 1..n times the brevity penalty (Papineni et al. 2002, Sec. 2.3).

Two implementations give the same numbers (bit for bit on the bundled datasets):

* ``"captioneval"`` (default): :func:`captioneval.kernels.bleu.bleu_scores`, vectorised with numpy, about
  50x faster; version :data:`~captioneval.metrics.builtin._versions.BLEU_VERSION`;
* ``"pycocoevalcap"``: :func:`captioneval.kernels.coco.bleu`, pycocoevalcap's ``Bleu(4)`` itself; version
  :data:`~captioneval.kernels.coco.PYCOCOEVALCAP_VERSION`.

The module-level :data:`METRICS` use the implementation named by the environment variable
``CAPTIONEVAL_COCO_METRICS`` (read at import; see
:func:`captioneval.metrics.builtin._versions.coco_implementation`).
"""
from __future__ import annotations

import threading

import numpy as np

from captioneval.metrics import base
from captioneval.kernels import coco
from captioneval.kernels.bleu import bleu_scores
from captioneval.metrics.builtin._versions import BLEU_VERSION, coco_implementation

ORDER = 10

_VERSIONS = {"captioneval": BLEU_VERSION, "pycocoevalcap": coco.PYCOCOEVALCAP_VERSION}

# BLEU-1..4 are four metric objects that usually score the same batch one after another; all four
# orders come out of one computation, so the last one is kept, keyed on the batch's *content*.
_last_lock = threading.Lock()
_last: tuple | None = None  # (implementation, candidates, references, per_caption (4, m), corpus (4,) | None)


def _bleu_1_to_4(implementation: str, candidates, references):
    """BLEU-1..4 of every candidate, float64 (4, m), reusing the previous call's result when the
    implementation, candidates and references are equal to it."""
    global _last
    cands, refs = tuple(candidates), tuple(map(tuple, references))
    with _last_lock:
        last = _last
    if last is not None and last[0] == implementation and last[1] == cands and last[2] == refs:
        return last[3]
    corpus = None
    if implementation == "captioneval":
        result = bleu_scores(candidates, references, n=4)
        per_caption, corpus = result.per_caption, result.corpus
        corpus.setflags(write=False)
    else:
        per_caption = coco.bleu(candidates, references, n=4)
    per_caption.setflags(write=False)
    with _last_lock:
        _last = (implementation, cands, refs, per_caption, corpus)
    return per_caption


def last_corpus(candidates, references) -> np.ndarray | None:
    """pycocoevalcap's corpus BLEU-1..4, float64 (4,) read-only, of the last batch BLEU scored with
    the vectorised kernel (:func:`captioneval.kernels.bleu.bleu_scores`: the same summed statistics
    and float operations as ``Bleu.compute_score``), when ``candidates`` and ``references`` are that
    batch; None otherwise. Lets :func:`captioneval.evaluate.evaluate` take the corpus values from
    the computation that gave the per-caption ones instead of counting the n-grams again."""
    cands, refs = tuple(candidates), tuple(map(tuple, references))
    with _last_lock:
        last = _last
    if last is not None and last[0] == "captioneval" and last[1] == cands and last[2] == refs:
        return last[4]
    return None


class Bleu(base.Metric):
    """Sentence BLEU-``n`` (n = 1..4) of each candidate against its references; range [0, 1].

    ``implementation``: ``"captioneval"`` (:mod:`captioneval.kernels.bleu`) or ``"pycocoevalcap"``
    (:mod:`captioneval.kernels.coco`); same numbers, different :attr:`version`. ValueError otherwise.
    """

    level = "caption"
    range = (0.0, 1.0)
    needs = frozenset({base.REFERENCES})
    family = "bleu"
    version = BLEU_VERSION
    groups = ("coco",)

    def __init__(self, n: int, implementation: str = "captioneval"):
        if n not in (1, 2, 3, 4):
            raise ValueError(f"BLEU order must be 1..4, got {n!r}")
        self.n = n
        self.implementation = coco_implementation(implementation)
        source = "our vectorised pycocoevalcap-equal code" if self.implementation == "captioneval" else "pycocoevalcap"
        super().__init__(
            key=f"bleu_{n}", name=f"BLEU-{n}", version=_VERSIONS[self.implementation],
            description=f"Sentence BLEU-{n} (Papineni et al. 2002) as pycocoevalcap computes it (closest ref "
                        f"length, its smoothing), from {source}.",
        )

    def parameters(self) -> dict:
        return {"n": self.n, "brevity_penalty": "closest", "smoothing": "pycocoevalcap"}

    def score(self, batch: base.Batch) -> base.Scores:
        """BLEU-n of ``batch.candidates`` against ``batch.references``: float64 (n_captions,).
        Raises ValueError on a length mismatch or a candidate without references."""
        per_caption = _bleu_1_to_4(self.implementation, batch.candidates, batch.references)
        return base.Scores(per_caption[self.n - 1].copy())


METRICS = [Bleu(n, coco_implementation()) for n in range(1, 5)]
