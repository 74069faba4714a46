"""ROUGE-L per caption (Lin 2004, "ROUGE: A Package for Automatic Evaluation of Summaries", Sec. 3.1),
with the numbers of pycocoevalcap 1.2 (https://github.com/tylin/coco-caption,
``pycocoevalcap/rouge/rouge.py``): the F-measure of the longest common subsequence with beta = 1.2,
precision and recall each maximised over the references.

Two implementations give the same numbers (bit for bit on the bundled datasets):

* ``"captioneval"`` (default): :func:`captioneval.kernels.rouge.rouge_l`, bit-parallel LCS vectorised with
  numpy, about 50x faster; version :data:`~captioneval.metrics.builtin._versions.ROUGE_L_VERSION`;
* ``"pycocoevalcap"``: :func:`captioneval.kernels.coco.rouge_l`, pycocoevalcap's ``Rouge`` itself; version
  :data:`~captioneval.kernels.coco.PYCOCOEVALCAP_VERSION`.

The module-level :data:`METRICS` use the implementation named by the environment variable
``CAPTIONEVAL_COCO_METRICS`` (read at import; see
:func:`captioneval.metrics.builtin._versions.coco_implementation`).
"""
from __future__ import annotations

from captioneval.metrics import base
from captioneval.kernels import coco, rouge
from captioneval.metrics.builtin._versions import ROUGE_L_VERSION, coco_implementation

ORDER = 30

_VERSIONS = {"captioneval": ROUGE_L_VERSION, "pycocoevalcap": coco.PYCOCOEVALCAP_VERSION}


class RougeL(base.Metric):
    """ROUGE-L F-measure of each candidate against its references; range [0, 1].

    ``implementation``: ``"captioneval"`` (:mod:`captioneval.kernels.rouge`) or ``"pycocoevalcap"``
    (:mod:`captioneval.kernels.coco`); same numbers, different :attr:`version`. ValueError otherwise.
    """

    key = "rouge_l"
    name = "ROUGE-L"
    version = ROUGE_L_VERSION
    level = "caption"
    range = (0.0, 1.0)
    needs = frozenset({base.REFERENCES})
    family = "rouge"
    groups = ("coco",)

    def __init__(self, implementation: str = "captioneval"):
        self.implementation = coco_implementation(implementation)
        ours = self.implementation == "captioneval"
        source = "our bit-parallel pycocoevalcap-equal code" if ours else "pycocoevalcap"
        super().__init__(
            version=_VERSIONS[self.implementation],
            description=f"ROUGE-L F-measure, beta = 1.2 (Lin 2004), as pycocoevalcap computes it, from {source}.",
        )

    def parameters(self) -> dict:
        return {"beta": 1.2}

    def score(self, batch: base.Batch) -> base.Scores:
        """ROUGE-L of ``batch.candidates`` against ``batch.references``: float64 (n_captions,).
        Raises ValueError on a length mismatch or a candidate without references."""
        if self.implementation == "captioneval":
            return base.Scores(rouge.rouge_l(batch.candidates, batch.references))
        return base.Scores(coco.rouge_l(batch.candidates, batch.references))


METRICS = [RougeL(coco_implementation())]
