"""METEOR 1.5 per caption (Denkowski & Lavie 2014, WMT), pycocoevalcap's jar and numbers.

pycocoevalcap (https://github.com/tylin/coco-caption) runs the METEOR 1.5 jar with ``-l en -norm``
(English, normalised punctuation and case). :func:`captioneval.kernels.meteor.meteor` runs the same jar
with the same command through this process's pool of persistent JVMs (pipelined requests, a batch
split over the JVMs); its scores equal :func:`captioneval.kernels.coco.meteor` exactly, so the version
is unchanged. Needs a Java runtime (:func:`captioneval.metrics.registry.unavailable_now` lets callers
skip it with a clear reason when ``java`` is missing).
"""
from __future__ import annotations

from captioneval.metrics import base
from captioneval.kernels.coco import PYCOCOEVALCAP_VERSION
from captioneval.kernels.meteor import meteor

ORDER = 20


class Meteor(base.Metric):
    """METEOR 1.5 of each candidate against its references; range [0, 1]."""

    key = "meteor"
    name = "METEOR"
    version = f"{PYCOCOEVALCAP_VERSION}/meteor-1.5"
    level = "caption"
    range = (0.0, 1.0)
    needs = frozenset({base.REFERENCES, base.JVM})
    family = "meteor"
    groups = ("coco",)
    description = "METEOR 1.5 (Denkowski & Lavie 2014), -l en -norm, from pycocoevalcap."

    def parameters(self) -> dict:
        return {"language": "en", "norm": True}

    def score(self, batch: base.Batch) -> base.Scores:
        """METEOR of ``batch.candidates`` against ``batch.references``: float64 (n_captions,).
        Raises JavaMissingError without a Java runtime."""
        return base.Scores(meteor(batch.candidates, batch.references))


METRICS = [Meteor()]
