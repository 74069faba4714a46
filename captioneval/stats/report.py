"""One structure for metric-human agreement reports (Django-free: numpy and scipy only).

The dataset correlation report (``correlate --json``), the benchmark report and the campaign
report all state, per metric, the same item-level agreement: the four correlations of
:data:`captioneval.stats.STATISTICS` pooled over the judgment rows, each with a cluster
(group) bootstrap percentile interval resampling images (Efron & Tibshirani 1993, ch. 13; the
protocol of Hessel et al. 2021, CLIPScore, Sec. 4, on Flickr8k-Expert). They build it with
:func:`metric_agreement` and serialise it with :meth:`MetricAgreement.to_json`; a whole report is an
:class:`AgreementReport`.

JSON shape of one metric (the documented ``correlate --json`` entry)::

    {"name": str, <info fields in order>, "pearson": x, "spearman": x, "kendall_tau_b": x,
     "kendall_tau_c": x, "ci95": {statistic: [lo, hi]}, <extra blocks in order>}

with non-finite numbers as ``null`` (:func:`captioneval.stats.finite_or_none`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Hashable, Iterable, Sequence

import numpy as np

from captioneval.stats.correlation import STATISTICS, CorrelationResult, correlate
from captioneval.stats.results import Estimate, finite_or_none

__all__ = ["MetricAgreement", "AgreementReport", "metric_agreement"]


@dataclass
class MetricAgreement:
    """Item-level agreement of one metric with the human judgments.

    Attributes
    ----------
    name : display name of the metric ("CIDEr-D").
    correlation : the :class:`captioneval.stats.CorrelationResult` (point values from scipy,
        group-bootstrap intervals); :attr:`estimates` gives them as :class:`Estimate` objects.
    info : JSON-safe fields written between "name" and the statistics, in insertion order
        (e.g. "run", "version", "params" of the metric run; "n_ratings", "n_units" of a campaign).
    extra : JSON-safe blocks written after "ci95", in insertion order (e.g. "per_image").
    """

    name: str
    correlation: CorrelationResult
    info: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)

    @property
    def estimates(self) -> dict[str, Estimate]:
        """statistic -> :class:`Estimate` (value, 95% interval, n = rows, resamples, seed)."""
        return self.correlation.estimates

    def to_json(self) -> dict:
        """The entry as a JSON-safe dict (shape in the module docstring)."""
        estimates = self.estimates
        out: dict[str, Any] = {"name": self.name, **self.info}
        out.update({s: finite_or_none(e.value) for s, e in estimates.items()})
        out["ci95"] = {s: list(e.interval_json()) for s, e in estimates.items() if s in self.correlation.ci95}
        out.update(self.extra)
        return out

    def level_block(self) -> dict:
        """The same numbers as ``{"values": {statistic: x}, "ci95": {statistic: [lo, hi]}}``, the
        per-level block of the benchmark report (:func:`analysis.benchmarks.benchmark_report`);
        a statistic without an interval gets ``[None, None]``."""
        js = self.to_json()
        return {
            "values": {s: js[s] for s in self.correlation.values},
            "ci95": {s: js["ci95"].get(s, [None, None]) for s in self.correlation.values},
        }


@dataclass
class AgreementReport:
    """A metric-human agreement report: header fields, bootstrap settings, per-metric entries.

    header : JSON-safe fields written first, in order (e.g. "dataset", "criterion", "n_pairs",
        "n_ratings", "n_images").
    bootstrap : {"n_resamples", "confidence", "seed", "unit"}.
    metrics : metric key -> :class:`MetricAgreement`, in report order.
    extra : JSON-safe blocks written between "bootstrap" and "metrics" (e.g. "weighting").
    """

    header: dict
    bootstrap: dict
    metrics: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)

    def metrics_json(self) -> dict:
        """metric key -> :meth:`MetricAgreement.to_json`."""
        return {key: m.to_json() for key, m in self.metrics.items()}

    def to_json(self) -> dict:
        """``{**header, "bootstrap": {...}, **extra, "metrics": {key: entry}}``, JSON-safe."""
        return {**self.header, "bootstrap": dict(self.bootstrap), **self.extra, "metrics": self.metrics_json()}


def metric_agreement(
    name: str,
    x: Sequence[float] | np.ndarray,
    y: Sequence[float] | np.ndarray,
    groups: Sequence[Hashable] | np.ndarray,
    statistics: Iterable[str] = STATISTICS,
    n_resamples: int = 1000,
    seed: int = 0,
    *,
    info: dict | None = None,
    extra: dict | None = None,
) -> MetricAgreement:
    """Compute one metric's item-level agreement: :func:`captioneval.stats.correlate` of metric
    scores ``x`` (shape (n,)) with human scores ``y`` (n,), the bootstrap resampling ``groups``
    (n,) (images) ``n_resamples`` times with ``numpy.random.default_rng(seed)``, 95% percentile
    intervals. ``info`` / ``extra`` as in :class:`MetricAgreement`.
    Raises ValueError as :func:`captioneval.stats.correlate` does.
    """
    result = correlate(x, y, groups, statistics, n_resamples=n_resamples, seed=seed)
    return MetricAgreement(name=name, correlation=result, info=dict(info or {}), extra=dict(extra or {}))
