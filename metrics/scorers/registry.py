"""The metrics the platform knows, their versions, and one entry point to score with any of them.

A metric *key* (``bleu_4``, ``cider_d``...) names one number per candidate caption. The *version*
string is stored with every run: it changes whenever the numbers a metric produces could change, so
results of different versions are never mixed.

Django-free: ``score()`` works on plain lists of PTB-tokenised strings.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .coco import PYCOCOEVALCAP_VERSION


@dataclass(frozen=True)
class Metric:
    """Description of one metric.

    key : identifier used on the command line, in the database and in JSON output.
    name : the field's standard name, for tables and plots.
    family : scorers computed together (BLEU-1..4 come out of one pass).
    version : implementation version stored with each run.
    range : (low, high) of the per-caption score.
    needs_corpus : True when a caption's score depends on the whole evaluated set (CIDEr-D's
        document frequencies), so a chunk of work needs dataset-wide statistics.
    """

    key: str
    name: str
    family: str
    version: str
    range: tuple[float, float]
    needs_corpus: bool = False
    description: str = ""


class UnknownMetricError(ValueError):
    """The metric key is not one the platform knows."""


class MetricUnavailableError(ValueError):
    """The metric exists in the field but cannot run in this installation (the message says why)."""


METRICS: dict[str, Metric] = {
    **{
        f"bleu_{n}": Metric(
            f"bleu_{n}", f"BLEU-{n}", "bleu", PYCOCOEVALCAP_VERSION, (0.0, 1.0),
            description=f"Sentence BLEU-{n} (Papineni et al. 2002) from pycocoevalcap, closest ref length.",
        )
        for n in range(1, 5)
    },
    "meteor": Metric(
        "meteor", "METEOR", "meteor", f"{PYCOCOEVALCAP_VERSION}/meteor-1.5", (0.0, 1.0),
        description="METEOR 1.5 (Denkowski & Lavie 2014), -l en -norm, from pycocoevalcap.",
    ),
    "rouge_l": Metric(
        "rouge_l", "ROUGE-L", "rouge", PYCOCOEVALCAP_VERSION, (0.0, 1.0),
        description="ROUGE-L F-measure, beta = 1.2 (Lin 2004), from pycocoevalcap.",
    ),
    "cider_d": Metric(
        "cider_d", "CIDEr-D", "cider", "captioneval-cider-d/1", (0.0, 10.0),
        needs_corpus=True,
        description="CIDEr-D (Vedantam et al. 2015), our vectorised implementation, equal to "
        "pycocoevalcap's Cider per caption.",
    ),
}

UNAVAILABLE: dict[str, str] = {
    "spice": (
        "SPICE is unavailable: its jar downloads Stanford CoreNLP 3.6.0 at start-up, which no package "
        "registry provides and this platform never fetches at run time"
    ),
}

DEFAULT_METRICS: tuple[str, ...] = tuple(METRICS)


def get_metric(key: str) -> Metric:
    """Return the :class:`Metric` for ``key``.

    Raises
    ------
    MetricUnavailableError
        for a known metric that cannot run here (SPICE), with the reason.
    UnknownMetricError
        for any other unknown key; the message lists the known keys.
    """
    if key in METRICS:
        return METRICS[key]
    if key in UNAVAILABLE:
        raise MetricUnavailableError(UNAVAILABLE[key])
    raise UnknownMetricError(f"unknown metric {key!r}; known metrics: {', '.join(METRICS)}")


def score(
    key: str,
    candidates: Sequence[str],
    references: Sequence[Sequence[str]],
    document_frequency=None,
) -> np.ndarray:
    """Score each candidate against its references with metric ``key``.

    Parameters
    ----------
    candidates : length-n sequence of PTB-tokenised captions.
    references : length-n sequence of non-empty lists of PTB-tokenised reference captions.
    document_frequency : :class:`metrics.scorers.cider.DocumentFrequency` or None
        CIDEr-D only: the document-frequency table. None = computed from ``references`` (the COCO
        default); pass the dataset-wide table when scoring one chunk of a dataset.

    Returns
    -------
    ndarray of shape (n,), float64, within ``get_metric(key).range``.

    Raises
    ------
    UnknownMetricError, MetricUnavailableError, ValueError (bad input), JavaMissingError (METEOR).
    """
    metric = get_metric(key)
    if metric.family == "bleu":
        from .coco import bleu

        return bleu(candidates, references, n=4)[int(key[-1]) - 1]
    if metric.family == "meteor":
        from .coco import meteor

        return meteor(candidates, references)
    if metric.family == "rouge":
        from .coco import rouge_l

        return rouge_l(candidates, references)
    if metric.family == "cider":
        from .cider import cider_d

        return cider_d(candidates, references, df=document_frequency)
    raise AssertionError(f"no scorer wired for family {metric.family!r}")  # pragma: no cover
