"""BLEU-1..4 per caption (Papineni et al. 2002, ACL), from pycocoevalcap's ``BleuScorer``.

pycocoevalcap (https://github.com/tylin/coco-caption, the COCO caption evaluation) computes sentence
BLEU with the brevity penalty against the *closest* reference length (``option='closest'``) and its
per-sentence smoothing (1e-9 added to matches, 1e-15 to counts); :func:`metrics.scorers.coco.bleu`
calls it unchanged. BLEU-n is the geometric mean of the modified n-gram precisions 1..n times the
brevity penalty (Papineni et al. 2002, Eq. in Sec. 2.3).
"""
from __future__ import annotations

from .. import base
from ..coco import PYCOCOEVALCAP_VERSION, bleu

ORDER = 10


class Bleu(base.Metric):
    """Sentence BLEU-``n`` (n = 1..4) of each candidate against its references; range [0, 1]."""

    level = "caption"
    range = (0.0, 1.0)
    needs = frozenset({base.REFERENCES})
    family = "bleu"
    version = PYCOCOEVALCAP_VERSION
    groups = ("coco",)

    def __init__(self, n: int):
        self.n = n
        super().__init__(
            key=f"bleu_{n}", name=f"BLEU-{n}",
            description=f"Sentence BLEU-{n} (Papineni et al. 2002) from pycocoevalcap, closest ref length.",
        )

    def parameters(self) -> dict:
        return {"n": self.n, "brevity_penalty": "closest", "smoothing": "pycocoevalcap"}

    def score(self, batch: base.Batch) -> base.Scores:
        """BLEU-n of ``batch.candidates`` against ``batch.references``: float64 (n_captions,)."""
        return base.Scores(bleu(batch.candidates, batch.references, n=4)[self.n - 1])


METRICS = [Bleu(n) for n in range(1, 5)]
