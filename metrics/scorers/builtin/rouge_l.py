"""ROUGE-L per caption (Lin 2004, "ROUGE: A Package for Automatic Evaluation of Summaries"), from
pycocoevalcap's ``Rouge`` (https://github.com/tylin/coco-caption): the F-measure of the longest
common subsequence with beta = 1.2, precision and recall each maximised over the references."""
from __future__ import annotations

from .. import base
from ..coco import PYCOCOEVALCAP_VERSION, rouge_l

ORDER = 30


class RougeL(base.Metric):
    """ROUGE-L F-measure of each candidate against its references; range [0, 1]."""

    key = "rouge_l"
    name = "ROUGE-L"
    version = PYCOCOEVALCAP_VERSION
    level = "caption"
    range = (0.0, 1.0)
    needs = frozenset({base.REFERENCES})
    family = "rouge"
    groups = ("coco",)
    description = "ROUGE-L F-measure, beta = 1.2 (Lin 2004), from pycocoevalcap."

    def parameters(self) -> dict:
        return {"beta": 1.2}

    def score(self, batch: base.Batch) -> base.Scores:
        """ROUGE-L of ``batch.candidates`` against ``batch.references``: float64 (n_captions,)."""
        return base.Scores(rouge_l(batch.candidates, batch.references))


METRICS = [RougeL()]
