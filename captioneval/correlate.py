"""``captioneval.correlate``: how well metric scores agree with human scores.

Pearson, Spearman, Kendall tau-b and tau-c (scipy.stats point estimates) with percentile bootstrap
intervals over groups, from the platform's Django-free statistics
(:func:`captioneval.stats.correlate`, :func:`captioneval.stats.per_group_rank_agreement`).
Items with several human ratings give one row per rating (the protocol of the Flickr8k-Expert
evaluations, Hessel et al. 2021), each carrying the item's metric score; the bootstrap resamples
groups (e.g. images), or items when no group is given.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any, Hashable, Mapping, Sequence

import numpy as np

from .errors import InputError


@dataclass
class Correlation:
    """What :func:`correlate` returns.

    Attributes
    ----------
    results : metric name -> :class:`captioneval.stats.CorrelationResult` (``estimates``: statistic
        -> :class:`captioneval.stats.Estimate` with ``value``, ``low``, ``high``; ``n_rows``,
        ``n_groups``; ``to_dict()``).
    rank_agreement : metric name -> :class:`captioneval.stats.RankAgreement` (mean within-group
        Spearman and Kendall tau-b, Wang & Chan 2019), only when groups were given.
    n_items : items used (ids with both a metric score and a human score; all rows for sequences).
    unmatched_metric, unmatched_human : ids left out because the other side has no score for them.
    statistics, n_resamples, confidence, seed : the settings.
    """

    results: dict[str, Any]
    rank_agreement: dict[str, Any]
    n_items: int
    unmatched_metric: list
    unmatched_human: list
    statistics: tuple[str, ...]
    n_resamples: int
    confidence: float
    seed: int

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable (NaN as None): ``{"metrics": {name: CorrelationResult.to_dict() +
        {"rank_agreement": {...}}}, "n_items", "unmatched_metric", "unmatched_human"}``."""
        out = {}
        for name, res in self.results.items():
            d = res.to_dict()
            ra = self.rank_agreement.get(name)
            if ra is not None:
                d["rank_agreement"] = {k: (v if not isinstance(v, float) or math.isfinite(v) else None)
                                       for k, v in vars(ra).items()}
            out[name] = d
        return {"metrics": out, "n_items": self.n_items, "unmatched_metric": [str(i) for i in self.unmatched_metric],
                "unmatched_human": [str(i) for i in self.unmatched_human]}

    def table(self) -> str:
        """Plain-text table: one row per metric, each statistic with its interval."""
        head = f"{'metric':<14}" + "".join(f"{s:>28}" for s in self.statistics)
        lines = [head]
        for name, res in self.results.items():
            cells = []
            for s in self.statistics:
                e = res.estimates[s]
                interval = f" [{e.low:.3f}, {e.high:.3f}]" if self.n_resamples and math.isfinite(e.low) else ""
                cells.append(f"{e.value:.3f}{interval}".rjust(28))
            lines.append(f"{name:<14}" + "".join(cells))
        any_res = next(iter(self.results.values()))
        lines.append(f"{any_res.n_rows} rows, {self.n_items} items, {any_res.n_groups} groups; "
                     f"{int(round(100 * self.confidence))}% percentile bootstrap over groups, "
                     f"{self.n_resamples} resamples, seed {self.seed}")
        return "\n".join(lines)


def _number(value, source: str, ident) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(float(value)):
        raise InputError(source, f"the score of {ident!r} is not a finite number: {value!r}"[:200])
    return float(value)


def _is_scores(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def correlate(
    metric_scores: Sequence[float] | Mapping[Hashable, float] | Mapping[str, Sequence[float] | Mapping[Hashable, float]],
    human_scores: Sequence[float] | Mapping[Hashable, float | Sequence[float]],
    groups: Sequence[Hashable] | Mapping[Hashable, Hashable] | None = None,
    *,
    statistics: Sequence[str] | None = None,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    progress: bool = False,
) -> Correlation:
    """Correlate metric scores with human scores, with bootstrap intervals.

    Parameters
    ----------
    metric_scores : one metric's scores -- a sequence of n floats, or a mapping item id -> float --
        or several metrics' as a mapping metric name -> such a sequence or mapping.
    human_scores : a sequence of n floats (aligned with sequence metric scores), or a mapping item id
        -> a float or a list of floats (several ratings of the item: one row each).
    groups : the bootstrap's resampling unit of each item (e.g. its image): a sequence aligned with
        the rows (sequence inputs) or a mapping item id -> group. None: every item is its own group.
    statistics : subset of ``("pearson", "spearman", "kendall_tau_b", "kendall_tau_c")`` (default all).
    n_resamples, confidence, seed : bootstrap settings (0 resamples: point estimates only).
    progress : tqdm progress bar over the metrics on stderr (when it is a terminal).

    Returns :class:`Correlation`. Raises :class:`InputError` for non-finite scores, lengths that
    differ, no item with both scores, groups missing for an item; ValueError from
    :func:`captioneval.stats.correlate` for bad settings (unknown statistic, fewer than 2 groups).
    """
    from captioneval.stats import STATISTICS
    from captioneval.stats import correlate as _correlate
    from captioneval.stats import per_group_rank_agreement

    stats = tuple(STATISTICS if statistics is None else ([statistics] if isinstance(statistics, str) else statistics))
    if isinstance(metric_scores, Mapping) and metric_scores and not all(_is_scores(v) for v in metric_scores.values()):
        per_metric = dict(metric_scores)
    else:
        per_metric = {"metric": metric_scores}
    results, agreement = {}, {}
    n_items, unmatched_metric, unmatched_human = 0, [], []
    from .evaluate import _progress

    for name, scores in _progress(list(per_metric.items()), progress, "correlating", len(per_metric)):
        x, y, g, items, um, uh = _rows(scores, human_scores, groups, str(name))
        results[name] = _correlate(x, y, g, statistics=stats, n_resamples=n_resamples, confidence=confidence, seed=seed)
        if groups is not None:
            agreement[name] = per_group_rank_agreement(x, y, g)
        n_items, unmatched_metric, unmatched_human = items, um, uh
    return Correlation(results, agreement, n_items, unmatched_metric, unmatched_human, stats, n_resamples,
                       confidence, seed)


def _rows(scores, human, groups, name: str):
    """(x, y, groups, n_items, unmatched metric ids, unmatched human ids) of one metric."""
    if not isinstance(scores, Mapping):
        scores = list(scores)
        if isinstance(human, Mapping):
            raise InputError("human_scores", "must be a sequence when the metric scores are a sequence")
        human = list(human)
        if len(human) != len(scores):
            raise InputError("human_scores", f"{len(human)} human scores for {len(scores)} {name} scores")
        x = np.array([_number(v, name, i) for i, v in enumerate(scores)])
        y = np.array([_number(v, "human_scores", i) for i, v in enumerate(human)])
        if groups is None:
            g = list(range(len(x)))
        elif isinstance(groups, Mapping):
            raise InputError("groups", "must be a sequence when the scores are sequences")
        else:
            g = list(groups)
            if len(g) != len(x):
                raise InputError("groups", f"{len(g)} groups for {len(x)} rows")
        return x, y, g, len(x), [], []
    if not isinstance(human, Mapping):
        raise InputError("human_scores", "must be a mapping id -> score(s) when the metric scores are a mapping")
    if groups is not None and not isinstance(groups, Mapping):
        raise InputError("groups", "must be a mapping id -> group when the scores are mappings")
    x, y, g = [], [], []
    items = [k for k in scores if k in human]
    if not items:
        raise InputError("human_scores", f"no item has both a {name} score and a human score (do the ids match?)")
    for k in items:
        value = _number(scores[k], name, k)
        ratings = human[k]
        ratings = list(ratings) if isinstance(ratings, (list, tuple)) else [ratings]
        if groups is not None and k not in groups:
            raise InputError("groups", f"item {k!r} has no group")
        for r in ratings:
            x.append(value)
            y.append(_number(r, "human_scores", k))
            g.append(groups[k] if groups is not None else k)
    unmatched_metric = [k for k in scores if k not in human]
    unmatched_human = [k for k in human if k not in scores]
    return np.array(x), np.array(y), g, len(items), unmatched_metric, unmatched_human
