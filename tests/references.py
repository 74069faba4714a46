"""pycocoevalcap 1.2's own scores, computed once per test session and shared by every test file.

Several files compare our kernels with pycocoevalcap on the same real data (all 5,664 tokenised
Flickr8k-Expert pairs above all: tests/test_cider_d.py, test_corpus_statistics.py, test_meteor_pool.py,
test_celery_worker.py, test_bleu_rouge.py). pycocoevalcap is slow (pure-Python BLEU, ROUGE-L and CIDEr-D,
a METEOR JVM), so each function here keeps its answers for the rest of the session, keyed by the exact
inputs (the candidate and reference strings, in order): a second file asking for the same scores of
the same captions gets them without recomputing, and different captions are always computed afresh.
The scores are pycocoevalcap's classes called directly (``Bleu(n)``, ``Rouge()``, ``Cider()``,
``Meteor()``), never our code; the arrays returned are read-only, so no test can change another's
expected values.
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import threading
from typing import Callable, Sequence

import numpy as np

_CACHE: dict[tuple, object] = {}
_LOCK = threading.Lock()


def _key(name: str, candidates: Sequence[str], references: Sequence[Sequence[str]], *extra) -> tuple:
    """A digest of every candidate and reference string, in order (lists with the same texts share it)."""
    digest = hashlib.blake2b(digest_size=20)
    for c, refs in zip(candidates, references, strict=True):
        digest.update(c.encode("utf-8", "surrogatepass") + b"\x00")
        for r in refs:
            digest.update(r.encode("utf-8", "surrogatepass") + b"\x01")
        digest.update(b"\x02")
    return (name, len(candidates), digest.hexdigest(), *extra)


def _frozen(value):
    """``value`` with every numpy array in it made read-only."""
    if isinstance(value, np.ndarray):
        value.flags.writeable = False
        return value
    if isinstance(value, tuple):
        return tuple(_frozen(v) for v in value)
    return value


def _cached(key: tuple, compute: Callable[[], object]):
    """The value stored under ``key``, computing it (once) with ``compute()`` on first use."""
    with _LOCK:
        if key not in _CACHE:
            _CACHE[key] = _frozen(compute())
        return _CACHE[key]


def _as_dicts(candidates: Sequence[str], references: Sequence[Sequence[str]]):
    return {i: list(r) for i, r in enumerate(references)}, {i: [c] for i, c in enumerate(candidates)}


def bleu(candidates: Sequence[str], references: Sequence[Sequence[str]], n: int = 4) -> tuple[list, np.ndarray]:
    """pycocoevalcap ``Bleu(n).compute_score``: (corpus BLEU-1..n as a list, per-caption array (n, m))."""
    from pycocoevalcap.bleu.bleu import Bleu

    def compute():
        gts, res = _as_dicts(candidates, references)
        with contextlib.redirect_stdout(io.StringIO()):
            corpus, per_caption = Bleu(n).compute_score(gts, res, verbose=0)
        return list(corpus), np.asarray(per_caption, dtype=np.float64)

    corpus, per_caption = _cached(_key("bleu", candidates, references, n), compute)
    return list(corpus), per_caption


def rouge_l(candidates: Sequence[str], references: Sequence[Sequence[str]]) -> np.ndarray:
    """pycocoevalcap ``Rouge().compute_score``'s per-caption ROUGE-L, shape (m,)."""
    from pycocoevalcap.rouge.rouge import Rouge

    def compute():
        gts, res = _as_dicts(candidates, references)
        return np.asarray(Rouge().compute_score(gts, res)[1], dtype=np.float64)

    return _cached(_key("rouge_l", candidates, references), compute)


def cider_d(candidates: Sequence[str], references: Sequence[Sequence[str]]) -> tuple[float, np.ndarray]:
    """pycocoevalcap ``Cider().compute_score`` (CIDEr-D, df from these references): (corpus, per caption)."""
    from pycocoevalcap.cider.cider import Cider

    def compute():
        gts, res = _as_dicts(candidates, references)
        corpus, per_caption = Cider().compute_score(gts, res)
        return float(corpus), np.asarray(per_caption, dtype=np.float64)

    return _cached(_key("cider_d", candidates, references), compute)


def meteor(candidates: Sequence[str], references: Sequence[Sequence[str]]) -> tuple[float, np.ndarray]:
    """pycocoevalcap ``Meteor().compute_score`` on the one METEOR JVM of this process
    (``captioneval.kernels.coco._meteor_scorer``, pycocoevalcap's class): (corpus, per caption).
    Inputs go to the jar as given (no ``|||`` clean-up: ``captioneval.kernels.coco.meteor`` does that)."""
    from captioneval.kernels.coco import _meteor_scorer

    def compute():
        gts, res = _as_dicts(candidates, references)
        corpus, per_caption = _meteor_scorer().compute_score(gts, res)
        return float(corpus), np.asarray(per_caption, dtype=np.float64)

    return _cached(_key("meteor", candidates, references), compute)


def expert_inputs() -> tuple[list[str], list[list[str]]]:
    """The 5,664 Flickr8k-Expert pairs, PTB-tokenised by pycocoevalcap's Java tokeniser (once per
    session, tests.flickr8k_data): (candidates, references), fresh lists on each call."""
    from tests.flickr8k_data import load_flickr8k_expert_tokenized

    pairs = load_flickr8k_expert_tokenized()
    return [p.candidate for p in pairs], [list(p.references) for p in pairs]
