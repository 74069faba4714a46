"""BLEU-1..4, METEOR 1.5 and ROUGE-L per caption, from pycocoevalcap (the COCO caption evaluation).

These are the reference implementations the field reports numbers with; they stay here as the
reference that :mod:`captioneval.kernels.bleu` and :mod:`captioneval.kernels.rouge` (vectorised, equal to them
bit for bit on the bundled datasets, about 50x faster) are tested against, and as the
``CAPTIONEVAL_COCO_METRICS=pycocoevalcap`` implementation of the built-in BLEU and ROUGE-L metrics.
Our METEOR (:mod:`captioneval.kernels.meteor`) runs the same jar through a pool of persistent JVMs and
is tested against :func:`meteor` here. Inputs are PTB-tokenised strings (see :mod:`captioneval.text.tokenizer`).
All functions take ``candidates`` (length n) and ``references`` (length n, each a non-empty list
of strings) and return float arrays of shape (n,).

Sources
-------
- BLEU: Papineni et al. 2002 (ACL); pycocoevalcap ``BleuScorer`` with ``option='closest'``
  (closest reference length for the brevity penalty) and its per-sentence smoothing (1e-9 / 1e-15).
- METEOR 1.5: Denkowski & Lavie 2014 (WMT); pycocoevalcap runs ``meteor-1.5.jar -l en -norm``.
- ROUGE-L: Lin 2004; pycocoevalcap ``Rouge`` (LCS F-measure with beta = 1.2, max over references).
"""
from __future__ import annotations

import contextlib
import io
import threading
from typing import Sequence

import numpy as np

from captioneval.text.tokenizer import require_java

PYCOCOEVALCAP_VERSION = "pycocoevalcap-1.2"


def _as_dicts(candidates: Sequence[str], references: Sequence[Sequence[str]]):
    if len(candidates) != len(references):
        raise ValueError(f"{len(candidates)} candidates but {len(references)} reference lists")
    for i, refs in enumerate(references):
        if len(refs) == 0:
            raise ValueError(f"candidate {i} has no reference captions")
    gts = {i: list(refs) for i, refs in enumerate(references)}
    res = {i: [c] for i, c in enumerate(candidates)}
    return gts, res


def bleu(candidates: Sequence[str], references: Sequence[Sequence[str]], n: int = 4) -> np.ndarray:
    """Sentence-level BLEU-1..BLEU-n of each candidate.

    Returns
    -------
    ndarray of shape (n, len(candidates)), values in [0, 1]; row k is BLEU-(k+1).

    Raises
    ------
    ValueError
        on length mismatch or a candidate without references.
    """
    from pycocoevalcap.bleu.bleu import Bleu

    if not candidates:
        return np.zeros((n, 0))
    gts, res = _as_dicts(candidates, references)
    with contextlib.redirect_stdout(io.StringIO()):  # BleuScorer prints ratios unless verbose=0
        _, per_caption = Bleu(n).compute_score(gts, res, verbose=0)
    return np.asarray(per_caption, dtype=float)


def rouge_l(candidates: Sequence[str], references: Sequence[Sequence[str]]) -> np.ndarray:
    """ROUGE-L F-measure (beta = 1.2) of each candidate against its references, shape (n,), in [0, 1].

    Raises ValueError on length mismatch or a candidate without references.
    """
    from pycocoevalcap.rouge.rouge import Rouge

    if not candidates:
        return np.zeros(0)
    gts, res = _as_dicts(candidates, references)
    _, per_caption = Rouge().compute_score(gts, res)
    return np.asarray(per_caption, dtype=float)


_meteor = None
_meteor_lock = threading.Lock()


def _meteor_scorer():
    """One METEOR JVM per process: starting it costs 8-10 s and ~1 GB, so it is reused."""
    global _meteor
    with _meteor_lock:
        if _meteor is None or _meteor.meteor_p.poll() is not None:
            require_java()
            from pycocoevalcap.meteor.meteor import Meteor

            _meteor = Meteor()
        return _meteor


def meteor(candidates: Sequence[str], references: Sequence[Sequence[str]]) -> np.ndarray:
    """METEOR 1.5 score of each candidate against its references, shape (n,), in [0, 1].

    Raises
    ------
    ValueError
        on length mismatch or a candidate without references.
    JavaMissingError
        if ``java`` is not on PATH.
    """
    if not candidates:
        return np.zeros(0)
    gts, res = _as_dicts(candidates, references)
    # The METEOR wire protocol uses '|||' as a separator and one line per request.
    clean = lambda s: " ".join(s.replace("|||", " ").split())  # noqa: E731
    gts = {k: [clean(r) for r in v] for k, v in gts.items()}
    res = {k: [clean(v[0])] for k, v in res.items()}
    _, per_caption = _meteor_scorer().compute_score(gts, res)
    return np.asarray(per_caption, dtype=float)
