"""captioneval as a library: the COCO caption metrics, diversity measures and metric-human
correlations of the platform, without Django, Celery or a database.

* :func:`evaluate` -- per-caption and corpus scores of captions against references, with each
  metric's signature (:mod:`captioneval.evaluate`);
* :func:`diversity` -- Self-CIDEr, LSA, mBLEU, vocabulary... of caption sets
  (:mod:`captioneval.diversity`);
* :func:`correlate` -- correlations of metric scores with human scores, with bootstrap intervals
  (:mod:`captioneval.correlate`);
* :class:`COCOEvalCap` -- a drop-in replacement for pycocoevalcap's ``COCOEvalCap``, and
  :class:`COCO`, a reader of COCO caption files that needs no pycocotools (:mod:`captioneval.coco`).

The science is organised in subpackages: :mod:`captioneval.metrics` (metric classes, one file per
metric), :mod:`captioneval.kernels` (their arithmetic), :mod:`captioneval.text` (PTB tokenisation),
:mod:`captioneval.stats` (the statistics of meta-evaluation) and :mod:`captioneval.utils` (numbers
and CSV helpers); the modules above adapt inputs and outputs. Importing it imports
neither Django nor Celery (``tests/test_layering.py`` checks it). Guide: ``docs/library.md``.
"""
from __future__ import annotations

from .coco import COCO, COCOEvalCap
from .correlate import Correlation, correlate
from .diversity import DiversityResult, diversity
from .errors import InputError, MetricError
from .evaluate import COCO_METRICS, Evaluation, evaluate

__version__ = "0.20.0"

__all__ = [
    "COCO", "COCOEvalCap", "COCO_METRICS", "Correlation", "DiversityResult", "Evaluation", "InputError",
    "MetricError", "correlate", "diversity", "evaluate", "__version__",
]
