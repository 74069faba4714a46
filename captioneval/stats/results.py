"""Shared result type and helpers of :mod:`captioneval.stats` (Django-free: numpy only).

* :class:`Estimate` -- a point estimate with its interval, confidence level, sample size and the
  bootstrap settings that produced it, in the manner of scipy's result objects
  (``scipy.stats.bootstrap`` returns ``confidence_interval.low/high``; here the interval bounds
  sit on the object as ``low`` / ``high``). Every statistic of this package that has an interval
  exposes its estimate(s) as :class:`Estimate` (``.estimate`` or ``.estimates``).
* :func:`finite_or_none` -- the JSON form of a float: ``None`` unless finite (``math.isfinite``),
  so neither NaN nor +-inf ever reaches ``json.dumps(allow_nan=False)``.
* :func:`percentile_interval` -- percentile bootstrap interval (Efron & Tibshirani 1993,
  "An Introduction to the Bootstrap", ch. 13.3): the ``(1 - c) / 2`` and ``(1 + c) / 2``
  quantiles (numpy linear interpolation) of the finite resampled values.
* :func:`bootstrap_mean` -- the bootstrap distribution of a mean (resampling values with
  replacement) and its percentile interval.
* :func:`forced_choice_credit` -- per-pair credit of a metric in a forced choice between two
  captions (PASCAL-50S protocol, Vedantam, Zitnick & Parikh 2015, "CIDEr", CVPR, Sec. 5.2):
  1 when it prefers the caption the human majority preferred, 0 when it prefers the other one,
  1/2 when it scores both the same (the expected credit of breaking the tie at random).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from captioneval.utils.numbers import finite_or_none  # noqa: F401 - re-exported: the one NaN/inf-to-null rule

__all__ = [
    "Estimate",
    "EstimateResult",
    "finite_or_none",
    "percentile_interval",
    "bootstrap_mean",
    "forced_choice_credit",
]

#: Upper bound on the elements of one (resamples x values) index array in :func:`bootstrap_mean`.
_MEAN_CHUNK_ELEMENTS = 2_000_000


def percentile_interval(values: Sequence[float] | np.ndarray, confidence: float = 0.95) -> tuple[float, float]:
    """Percentile interval ``(lo, hi)`` of a bootstrap distribution at coverage ``confidence``.

    ``lo, hi`` are the ``(1 - c) / 2`` and ``(1 + c) / 2`` quantiles (``numpy.quantile``, linear
    interpolation) of the finite entries of ``values``; non-finite entries (resamples on which the
    statistic was undefined) are left out. ``(nan, nan)`` if no entry is finite.
    Source: Efron & Tibshirani (1993), "An Introduction to the Bootstrap", Sec. 13.3.
    ``confidence`` must be in (0, 1) (ValueError otherwise).
    """
    c = float(confidence)
    if not 0.0 < c < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    arr = np.asarray(values, dtype=np.float64).ravel()
    finite = arr[np.isfinite(arr)]
    if finite.size == 0:
        return (math.nan, math.nan)
    a = (1.0 - c) / 2.0
    lo, hi = np.quantile(finite, [a, 1.0 - a])
    return (float(lo), float(hi))


def bootstrap_mean(
    values: Sequence[float] | np.ndarray, n_resamples: int, rng: np.random.Generator, confidence: float = 0.95,
) -> tuple[np.ndarray, tuple[float, float]]:
    """Bootstrap of the mean of ``values`` (shape (m,)): ``n_resamples`` resamples of m values drawn
    with replacement by ``rng.integers(0, m, size=(b, m))`` in blocks of at most 2,000,000 indices
    (the draws do not depend on the block size, since a block is a run of whole resamples).

    Returns ``(means, (lo, hi))``: the resampled means, shape (n_resamples,), and their
    :func:`percentile_interval`. With m = 0 or n_resamples = 0 no draw is made and the interval is
    ``(nan, nan)``. The generator is advanced, so several calls on one ``rng`` give independent
    intervals reproducibly. Efron & Tibshirani (1993), ch. 6 and 13.
    """
    arr = np.asarray(values, dtype=np.float64).ravel()
    m = arr.shape[0]
    if m == 0 or n_resamples == 0:
        return np.empty(0), (math.nan, math.nan)
    means = np.empty(int(n_resamples))
    chunk = max(1, _MEAN_CHUNK_ELEMENTS // m)
    for s in range(0, int(n_resamples), chunk):
        b = min(chunk, int(n_resamples) - s)
        means[s:s + b] = arr[rng.integers(0, m, size=(b, m))].mean(axis=1)
    return means, percentile_interval(means, confidence)


def forced_choice_credit(
    score_b: Sequence[float] | np.ndarray, score_c: Sequence[float] | np.ndarray, human_b: Sequence[float] | np.ndarray,
) -> np.ndarray:
    """Credit of a metric on forced-choice pairs (B, C): float array of shape (n,) in {0, 0.5, 1}.

    ``1`` if the metric and the human majority prefer the same caption (``score_b > score_c`` and
    ``human_b > 0.5``, or ``score_b < score_c`` and ``human_b < 0.5``), ``0`` if they differ, and
    ``0.5`` on a metric tie (``score_b == score_c``): "a tie counts one half", the expected credit
    of breaking the tie at random (PASCAL-50S, Vedantam et al. 2015, Sec. 5.2). ``human_b`` is the
    share of votes for B (or a bool); pairs with ``human_b == 0.5`` get 0 or 0.5 here and are to be
    left out by the caller (no caption is preferred). Inputs are broadcast as numpy arrays.
    """
    sb = np.asarray(score_b, dtype=np.float64)
    sc = np.asarray(score_c, dtype=np.float64)
    hb = np.asarray(human_b, dtype=np.float64)
    return np.where(sb == sc, 0.5, ((sb > sc) == (hb > 0.5)).astype(np.float64))


@dataclass(frozen=True)
class Estimate:
    """A point estimate with its confidence interval (scipy-style result object).

    Attributes
    ----------
    value : float
        The point estimate (nan if undefined, e.g. a correlation with a constant input).
    low, high : float
        Interval bounds; nan when no interval was computed (``n_resamples == 0``) or the statistic
        was undefined on every resample. For percentile bootstrap intervals the interval need not
        contain ``value``.
    confidence_level : float in (0, 1)
        Nominal coverage of [low, high] (0.95 for the platform's "ci95").
    n : int
        Sample size behind ``value`` (rows, items, pairs, groups: documented by the producing
        function).
    n_resamples : int
        Bootstrap resamples behind the interval (0 = no interval).
    seed : int
        Seed of ``numpy.random.default_rng`` used for the resamples.
    """

    value: float
    low: float = math.nan
    high: float = math.nan
    confidence_level: float = 0.95
    n: int = 0
    n_resamples: int = 0
    seed: int = 0

    @property
    def interval(self) -> tuple[float, float]:
        """``(low, high)``."""
        return (self.low, self.high)

    def interval_json(self) -> list:
        """``[low, high]`` with non-finite bounds as None (the "ci95" pair of the JSON reports)."""
        return [finite_or_none(self.low), finite_or_none(self.high)]

    def to_json(self) -> dict:
        """``{"value", "low", "high", "confidence_level", "n", "n_resamples", "seed"}``, JSON-safe
        (non-finite floats become None)."""
        return {
            "value": finite_or_none(self.value),
            "low": finite_or_none(self.low),
            "high": finite_or_none(self.high),
            "confidence_level": float(self.confidence_level),
            "n": int(self.n),
            "n_resamples": int(self.n_resamples),
            "seed": int(self.seed),
        }


class EstimateResult:
    """Mixin of the results that carry one :class:`Estimate` in an ``estimate`` field: read-only
    views under the names the earlier result classes used (``value``, ``ci95`` = (low, high),
    ``confidence``, ``n_resamples``, ``seed``)."""

    estimate: Estimate

    @property
    def value(self) -> float:
        """``estimate.value``."""
        return self.estimate.value

    @property
    def ci95(self) -> tuple[float, float]:
        """``(estimate.low, estimate.high)``, at ``confidence`` (the name is historical)."""
        return self.estimate.interval

    @property
    def confidence(self) -> float:
        """``estimate.confidence_level``."""
        return self.estimate.confidence_level

    @property
    def n_resamples(self) -> int:
        """``estimate.n_resamples``."""
        return self.estimate.n_resamples

    @property
    def seed(self) -> int:
        """``estimate.seed``."""
        return self.estimate.seed
