"""Caption metrics contributed by other Python distributions (entry-point plugins).

A distribution registers a metric under the entry-point group ``captioneval.metrics``; the entry
point's *name* must be the metric key and it must resolve to a :class:`PluginMetric` (or a mapping
with the same fields), or to an instance of :class:`captioneval.metrics.base.Metric` written exactly like
a built-in metric file (:mod:`captioneval.metrics.builtin`). For example, in the plugin's
``pyproject.toml``::

    [project.entry-points."captioneval.metrics"]
    word_f1 = "my_package:WORD_F1"

and in ``my_package/__init__.py``::

    from captioneval.metrics.plugins import PluginMetric

    def word_f1(candidates, references):      # PTB-tokenised, lower-cased strings
        return [...]                          # one finite float per candidate

    WORD_F1 = PluginMetric("word_f1", "Word F1", "1", word_f1, range=(0.0, 1.0))

:func:`captioneval.metrics.registry.load_plugins` (run when the registry is imported) calls
:func:`discover`, which loads every entry point of the group and validates it, and wraps each
:class:`PluginMetric` into a :class:`PluginAdapter`, a :class:`captioneval.metrics.base.Metric` like the
built-in ones. A plugin that fails to import or to validate never breaks the platform: a warning
naming it is logged and its key is listed as unavailable with the reason (``registry.UNAVAILABLE``,
shown on the dashboard and by ``compute_metrics --metric <key>``). ``python -m captioneval.metrics.plugins``
lists what was found.

This module does not import :mod:`captioneval.metrics.registry` (the registry imports it). Django-free,
like the rest of :mod:`captioneval.kernels`.
"""
from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass, field
from importlib import metadata
from typing import Callable, Iterable, Mapping, Sequence

import numpy as np

from captioneval.metrics import base
from captioneval.metrics.builtin import discover as discover_builtin

#: the entry-point group plugins register under
ENTRY_POINT_GROUP = "captioneval.metrics"
#: metric keys with this prefix belong to uploaded scores (:mod:`metrics.uploads`), never to plugins
UPLOAD_PREFIX = "user_"
#: a plugin key: lower-case letter, then lower-case letters, digits or "_"; at most 50 characters
#: (the width of ``MetricRun.metric``)
KEY_PATTERN = re.compile(r"^[a-z][a-z0-9_]{0,49}$")
DIRECTIONS = ("better", "worse")

log = logging.getLogger("metrics.plugins")


class PluginError(ValueError):
    """A plugin metric is invalid, or its scorer failed or returned something other than one finite
    float per candidate within its declared range. The message names the plugin."""


@dataclass(frozen=True)
class PluginMetric:
    """A caption-level metric contributed by a plugin distribution.

    Parameters
    ----------
    key : the metric key (command line, database, JSON): ``[a-z][a-z0-9_]*``, at most 50 characters,
        not a built-in key or group name, not starting with ``user_`` (reserved for uploads); it must
        equal the entry point's name.
    name : display name for tables and plots, e.g. ``"Word F1"``.
    version : implementation version (at most 100 characters), stored with every run: change it
        whenever the numbers could change, so that results of different versions are never mixed.
    score : ``score(candidates: list[str], references: list[list[str]]) -> sequence of float``.
        ``candidates`` are n PTB-tokenised, lower-cased captions (tokens joined by single spaces,
        punctuation removed, possibly ``""``); ``references[i]`` the non-empty list of tokenised
        references of candidate i. Must return n finite floats within ``range``. The pipeline calls
        it on chunks of at most ``METRICS_CHUNK_SIZE`` candidates, unless ``needs_corpus``.
    range : (low, high) of a score; ``float("inf")`` allowed; low < high.
    higher : ``"better"`` (default) or ``"worse"`` (e.g. a distance): what a higher score means.
    needs_corpus : True when a caption's score depends on the other captions of the dataset
        (document frequencies...): ``score`` is then always called with every candidate of the
        dataset at once, in caption-id order, so chunks agree.
    description : one or two sentences for the dashboard and listings (cite the paper here).

    Raises PluginError (from :meth:`validate`) for a field of the wrong type or value.
    """

    key: str
    name: str
    version: str
    score: Callable[[list[str], list[list[str]]], Sequence[float]]
    range: tuple[float, float] = (float("-inf"), float("inf"))
    higher: str = "better"
    needs_corpus: bool = False
    description: str = ""

    def validate(self, reserved: Iterable[str] = ()) -> "PluginMetric":
        """Check every field; ``reserved`` are keys the plugin may not take (built-ins, groups).
        Returns self; raises PluginError saying what is wrong."""
        reserved = set(reserved)
        if not isinstance(self.key, str) or not KEY_PATTERN.match(self.key):
            raise PluginError(
                f"key {self.key!r} is not a valid metric key (lower-case letters, digits and _, starting with a "
                "letter, at most 50 characters)"
            )
        if self.key.startswith(UPLOAD_PREFIX):
            raise PluginError(f"key {self.key!r}: the prefix {UPLOAD_PREFIX!r} is reserved for uploaded scores")
        if self.key in reserved:
            raise PluginError(f"key {self.key!r} clashes with a built-in metric or group of the platform")
        if not isinstance(self.name, str) or not self.name.strip():
            raise PluginError(f"{self.key}: name must be a non-empty string")
        if not isinstance(self.version, str) or not self.version.strip() or len(self.version) > 100:
            raise PluginError(f"{self.key}: version must be a non-empty string of at most 100 characters")
        if not callable(self.score):
            raise PluginError(f"{self.key}: score must be callable, got {type(self.score).__name__}")
        try:
            lo, hi = (float(x) for x in self.range)
        except (TypeError, ValueError):
            raise PluginError(f"{self.key}: range must be a pair of numbers (low, high), got {self.range!r}") from None
        if math.isnan(lo) or math.isnan(hi) or not lo < hi:
            raise PluginError(f"{self.key}: range must satisfy low < high, got {self.range!r}")
        if self.higher not in DIRECTIONS:
            raise PluginError(f"{self.key}: higher must be 'better' or 'worse', got {self.higher!r}")
        if not isinstance(self.needs_corpus, bool):
            raise PluginError(f"{self.key}: needs_corpus must be True or False")
        if not isinstance(self.description, str):
            raise PluginError(f"{self.key}: description must be a string")
        return self


@dataclass(frozen=True)
class LoadedPlugin:
    """A validated plugin metric with where it came from (``distribution`` name and version)."""

    metric: PluginMetric | base.Metric
    entry_point: str  # "name = module:attr"
    distribution: str
    distribution_version: str

    @property
    def label(self) -> str:
        """``"word_f1 (captioneval-example-metric 0.1)"``, for messages."""
        return f"{self.metric.key!r} ({self.distribution} {self.distribution_version})"


@dataclass
class Discovery:
    """What :func:`discover` found: ``loaded`` key -> :class:`LoadedPlugin`; ``problems`` entry-point
    name -> reason it is unavailable (import error, invalid description, clash)."""

    loaded: dict[str, LoadedPlugin] = field(default_factory=dict)
    problems: dict[str, str] = field(default_factory=dict)


def _coerce(obj) -> PluginMetric | base.Metric:
    if isinstance(obj, (PluginMetric, base.Metric)):
        return obj
    if isinstance(obj, Mapping):
        try:
            return PluginMetric(**obj)
        except TypeError as exc:
            raise PluginError(f"the mapping does not describe a PluginMetric: {exc}") from None
    raise PluginError(
        f"the entry point must resolve to a captioneval.metrics.plugins.PluginMetric (or a mapping of its fields) or a "
        f"captioneval.metrics.base.Metric instance, got {type(obj).__name__}"
    )


def _validate(metric: PluginMetric | base.Metric, reserved: Iterable[str]) -> PluginMetric | base.Metric:
    """:meth:`PluginMetric.validate`, or :func:`captioneval.metrics.base.validate` plus the upload-prefix
    rule for a Metric instance; PluginError saying what is wrong."""
    if isinstance(metric, PluginMetric):
        return metric.validate(reserved)
    if isinstance(getattr(metric, "key", None), str) and metric.key.startswith(UPLOAD_PREFIX):
        raise PluginError(f"key {metric.key!r}: the prefix {UPLOAD_PREFIX!r} is reserved for uploaded scores")
    try:
        return base.validate(metric, tuple(reserved))
    except ValueError as exc:
        raise PluginError(str(exc)) from None


def discover(reserved: Iterable[str] = (), entry_points=None) -> Discovery:
    """Load and validate every entry point of :data:`ENTRY_POINT_GROUP`.

    ``reserved`` : keys plugins may not use (the built-in metric keys, group names, "spice").
    ``entry_points`` : the entry points to load (default: those installed, via importlib.metadata).

    Never raises for a bad plugin: each problem is logged as a warning naming the entry point and its
    distribution and returned in :attr:`Discovery.problems`. When two distributions register the
    same key, both are rejected (which one would win is not well defined).
    """
    reserved = set(reserved)
    if entry_points is None:
        entry_points = metadata.entry_points(group=ENTRY_POINT_GROUP)
    found = Discovery()
    candidates: dict[str, list[LoadedPlugin]] = {}
    for ep in sorted(entry_points, key=lambda e: (e.name, e.value)):
        dist = getattr(ep, "dist", None)
        dist_name = dist.name if dist is not None else "unknown distribution"
        dist_version = dist.version if dist is not None else "?"
        try:
            metric = _validate(_coerce(ep.load()), reserved)
            if metric.key != ep.name:
                raise PluginError(
                    f"the entry point is named {ep.name!r} but the metric's key is {metric.key!r}; they must be equal"
                )
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - a broken plugin must not break the platform
            reason = (
                f"plugin metric {ep.name!r} from {dist_name} {dist_version} is unavailable: {type(exc).__name__}: {exc}"
            )
            log.warning("%s", reason)
            found.problems[ep.name] = reason
            continue
        candidates.setdefault(metric.key, []).append(
            LoadedPlugin(metric, f"{ep.name} = {ep.value}", dist_name, dist_version)
        )
    for key, plugins in candidates.items():
        if key in found.problems:  # another entry point of that name failed to load: ambiguous
            found.problems[key] += "; another distribution registers the same key, so neither is used"
            log.warning("%s", found.problems[key])
        elif len(plugins) > 1:
            names = " and ".join(f"{p.distribution} {p.distribution_version}" for p in plugins)
            reason = f"plugin metric {key!r} is registered by {names}; neither is used"
            log.warning("%s", reason)
            found.problems[key] = reason
        else:
            found.loaded[key] = plugins[0]
    return found


def call_scorer(plugin: LoadedPlugin, candidates: Sequence[str], references: Sequence[Sequence[str]]) -> np.ndarray:
    """Run a plugin's scorer and check its output.

    Returns ndarray (n,), float64: one finite score per candidate within the declared range (a
    relative tolerance of 1e-9 absorbs rounding at the bounds).

    Raises PluginError naming the plugin when the scorer raises, returns something that is not a
    sequence of n numbers, or a value that is NaN, infinite or outside the range.
    """
    n = len(candidates)
    try:
        out = plugin.metric.score(list(candidates), [list(r) for r in references])
    except Exception as exc:  # noqa: BLE001
        raise PluginError(f"plugin metric {plugin.label} failed: {type(exc).__name__}: {exc}") from exc
    if isinstance(out, (str, bytes, Mapping)) or not hasattr(out, "__len__"):
        raise PluginError(f"plugin metric {plugin.label} returned {type(out).__name__}, not a list of {n} floats")
    if len(out) != n:
        raise PluginError(f"plugin metric {plugin.label} returned {len(out)} scores for {n} candidates")
    values = np.empty(n, dtype=np.float64)
    for i, v in enumerate(out):
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
            raise PluginError(f"plugin metric {plugin.label}: score {i} is {v!r} ({type(v).__name__}), not a float")
        values[i] = float(v)
    bad = np.flatnonzero(~np.isfinite(values))
    if bad.size:
        raise PluginError(
            f"plugin metric {plugin.label}: {bad.size} of {n} scores are not finite (first: candidate {bad[0]}, "
            f"{values[bad[0]]!r})"
        )
    lo, hi = (float(x) for x in plugin.metric.range)
    tol_lo = 1e-9 * max(1.0, abs(lo)) if math.isfinite(lo) else 0.0
    tol_hi = 1e-9 * max(1.0, abs(hi)) if math.isfinite(hi) else 0.0
    outside = np.flatnonzero((values < lo - tol_lo) | (values > hi + tol_hi))
    if outside.size:
        raise PluginError(
            f"plugin metric {plugin.label}: {outside.size} scores are outside its declared range [{lo:g}, {hi:g}] "
            f"(first: candidate {outside[0]}, {values[outside[0]]!r})"
        )
    return values


class PluginAdapter(base.Metric):
    """A :class:`PluginMetric` as a :class:`captioneval.metrics.base.Metric` (level ``caption``, family
    ``plugin:<distribution>``), so the pipeline treats it like a built-in metric.

    Needs: REFERENCES, plus WHOLE_CORPUS when the plugin declared ``needs_corpus`` (its scorer is then
    called once with every candidate of the dataset). :meth:`score` runs :func:`call_scorer`."""

    level = "caption"

    def __init__(self, plugin: LoadedPlugin):
        m = plugin.metric
        self.plugin = plugin
        super().__init__(
            key=m.key, name=m.name, version=m.version, range=(float(m.range[0]), float(m.range[1])), higher=m.higher,
            description=m.description, family=f"plugin:{plugin.distribution}",
            needs={base.REFERENCES} | ({base.WHOLE_CORPUS} if m.needs_corpus else set()),
        )

    def parameters(self) -> dict:
        return {"distribution": f"{self.plugin.distribution} {self.plugin.distribution_version}"}

    def score(self, batch: base.Batch) -> base.Scores:
        """The plugin's scores of ``batch.candidates`` against ``batch.references`` (checked by
        :func:`call_scorer`). ValueError when the two lengths differ; PluginError for bad output."""
        if len(batch.candidates) != len(batch.references):
            raise ValueError(f"{len(batch.candidates)} candidates but {len(batch.references)} reference lists")
        return base.Scores(call_scorer(self.plugin, batch.candidates, batch.references))


def as_metric(plugin: LoadedPlugin) -> base.Metric:
    """The plugin's metric as a :class:`captioneval.metrics.base.Metric`: a :class:`PluginAdapter` for a
    :class:`PluginMetric`, the object itself when the plugin exported a Metric instance."""
    return plugin.metric if isinstance(plugin.metric, base.Metric) else PluginAdapter(plugin)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m captioneval.metrics.plugins``: list the plugin metrics found in this environment, and the
    unavailable ones with the reason. Returns 0 (a broken plugin is reported, not an error).

    Plugins may not take the keys and group names of the built-in metrics (discovered here from
    :mod:`captioneval.metrics.builtin`, as the registry does)."""
    found = discover(discover_builtin().reserved)
    if not found.loaded and not found.problems:
        print(f"no plugin metrics installed (entry-point group {ENTRY_POINT_GROUP!r})")
        return 0
    for key, plugin in found.loaded.items():
        m = plugin.metric
        print(f"{key}\tavailable\t{m.name}, version {m.version}, higher is {m.higher}, from {plugin.distribution} "
              f"{plugin.distribution_version} ({plugin.entry_point})")
    for name, reason in found.problems.items():
        print(f"{name}\tunavailable\t{reason}")
    return 0


if __name__ == "__main__":  # pragma: no cover - exercised through a subprocess in the tests
    import importlib
    import sys

    # the importable module, not __main__'s copy: plugins build captioneval.metrics.plugins.PluginMetric
    sys.exit(importlib.import_module("captioneval.metrics.plugins").main())
