"""METEOR 1.5 per caption (Denkowski & Lavie 2014, WMT), pycocoevalcap's jar's numbers.

pycocoevalcap (https://github.com/tylin/coco-caption) runs the METEOR 1.5 jar with ``-l en -norm``
(English, normalised punctuation and case). :func:`captioneval.kernels.meteor.meteor` computes the same
floats with one of two implementations (:data:`captioneval.kernels.meteor.DEFAULT_IMPLEMENTATION`, env
``CAPTIONEVAL_METEOR``): ``"python"`` (default; :mod:`captioneval.kernels.meteor_py`, no Java, equal to
the jar bit for bit on the goldens) or ``"java"`` (the jar through this process's pool of persistent
JVMs; needs a Java runtime, and :func:`captioneval.metrics.registry.unavailable_now` lets callers skip it
with a clear reason when ``java`` is missing). The version names the implementation.
"""
from __future__ import annotations

from captioneval.metrics import base
from captioneval.kernels.coco import PYCOCOEVALCAP_VERSION
from captioneval.kernels.meteor import DEFAULT_IMPLEMENTATION, meteor

ORDER = 20


class Meteor(base.Metric):
    """METEOR 1.5 of each candidate against its references; range [0, 1]."""

    key = "meteor"
    name = "METEOR"
    #: pycocoevalcap 1.2's jar (``java``) or the Python port equal to it (``python``)
    version = (f"{PYCOCOEVALCAP_VERSION}/meteor-1.5" if DEFAULT_IMPLEMENTATION == "java"
               else f"{PYCOCOEVALCAP_VERSION}/meteor-1.5/python")
    level = "caption"
    range = (0.0, 1.0)
    needs = frozenset({base.REFERENCES, base.JVM}) if DEFAULT_IMPLEMENTATION == "java" \
        else frozenset({base.REFERENCES})
    family = "meteor"
    groups = ("coco",)
    description = "METEOR 1.5 (Denkowski & Lavie 2014), -l en -norm, as pycocoevalcap's jar computes it."

    def parameters(self) -> dict:
        return {"language": "en", "norm": True}

    def score(self, batch: base.Batch) -> base.Scores:
        """METEOR of ``batch.candidates`` against ``batch.references``: float64 (n_captions,).
        Raises JavaMissingError without a Java runtime (Java implementation), MeteorDataError without
        pycocoevalcap's data (Python implementation)."""
        return base.Scores(meteor(batch.candidates, batch.references))


METRICS = [Meteor()]
