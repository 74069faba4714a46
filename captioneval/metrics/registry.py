"""The metrics the platform knows: one :class:`captioneval.metrics.base.Metric` instance per key.

A metric *key* (``bleu_4``, ``cider_d``, ``self_cider``, ``mtld``...) names one number per unit of
its *level* (``caption``, ``set`` or ``system``; see :mod:`captioneval.metrics.base`). :data:`METRICS`
maps key -> metric object, in table order; every object carries its name, version, level, range,
direction, description, what it needs and its :meth:`~captioneval.metrics.base.Metric.signature`, and
scores a :class:`~captioneval.metrics.base.Batch` with its one ``score`` method.

Where the metrics come from, in this order:

1. the modules of :mod:`captioneval.metrics.builtin`, discovered automatically (one file per family,
   ordered by each module's ``ORDER``): BLEU-1..4 (Papineni et al. 2002), METEOR 1.5 (Denkowski &
   Lavie 2014), ROUGE-L (Lin 2004) from pycocoevalcap; CIDEr-D (Vedantam et al. 2015); Self-CIDEr,
   LSA, mBLEU, set accuracy and vocabulary (Wang & Chan 2019); TTR, Root TTR, Log TTR, HD-D and MTLD
   with the Lexical Gap (Kershaw & Bober 2019); VIFIDEL (Madhyastha et al. 2019);
2. modules or objects registered in this process with :func:`register_module` / :func:`register`
   (a project's own metric file, written exactly like a built-in one);
3. plugins of other distributions, entry-point group ``captioneval.metrics``
   (:mod:`captioneval.metrics.plugins`): :func:`load_plugins`, run when this module is imported, adds each
   valid one (wrapped in :class:`~captioneval.metrics.plugins.PluginAdapter` unless it already is a
   Metric) and lists a broken one in :data:`UNAVAILABLE` / :data:`PLUGIN_PROBLEMS` with the reason,
   never breaking the built-ins.

``GROUPS`` (``--metric diversity``) collects the group names metrics declare (:attr:`Metric.groups`).
The *version* string is stored with every run: it changes whenever the numbers a metric produces
could change, so results of different versions are never mixed.

:func:`score`, :func:`score_sets`, :func:`score_systems` and :func:`score_vifidel` are thin
conveniences for code that holds plain lists (tests, benchmarks); they build a Batch and call the
metric's ``score``. Django-free: everything works on plain lists of PTB-tokenised strings.
"""
from __future__ import annotations

import importlib
import shutil
from types import ModuleType
from typing import Sequence

import numpy as np

from captioneval.metrics import base
from captioneval.metrics import plugins as _plugins
from captioneval.metrics.base import Batch, Metric
from captioneval.metrics.builtin import discover as _discover_builtin
from captioneval.metrics.builtin._versions import CIDER_D_VERSION, DIVERSITY_VERSION, LEXICAL_VERSION, VIFIDEL_VERSION
from captioneval.metrics.builtin.lexical import LEXICAL_MEASURES

__all__ = [
    "Metric", "Batch", "METRICS", "BUILTIN_METRICS", "REGISTERED", "PLUGINS", "PLUGIN_PROBLEMS", "UNAVAILABLE",
    "GROUPS", "DEFAULT_METRICS", "LEXICAL_MEASURES", "CIDER_D_VERSION", "DIVERSITY_VERSION", "LEXICAL_VERSION",
    "VIFIDEL_VERSION", "UnknownMetricError", "MetricUnavailableError", "get_metric", "expand", "keys_at",
    "is_plugin", "is_reversed", "unavailable_now", "JAVA_MISSING_REASON", "register", "register_module", "unregister",
    "load_plugins", "score",
    "score_sets", "score_systems", "score_vifidel",
]


class UnknownMetricError(ValueError):
    """The metric key is not one the platform knows."""


class MetricUnavailableError(ValueError):
    """The metric exists in the field but cannot run in this installation (the message says why)."""


_BUILTIN = _discover_builtin()

#: key -> metric object, in table order (built-in, registered, plugins); updated in place
METRICS: dict[str, Metric] = {m.key: m for m in _BUILTIN.metrics}
#: keys of the field this installation cannot run -> why (SPICE, broken plugins)
UNAVAILABLE: dict[str, str] = dict(_BUILTIN.unavailable)
#: names usable in place of metric keys on the command line and in forms
GROUPS: dict[str, tuple[str, ...]] = _BUILTIN.groups
#: the COCO caption metrics, computed when no metric is named
DEFAULT_METRICS: tuple[str, ...] = GROUPS["coco"]

assert not set(GROUPS) & set(METRICS), "a group name must not shadow a metric key"
assert LEXICAL_MEASURES == GROUPS["lexical"]

#: the platform's own metrics and unavailable keys, before registered and plugin metrics
BUILTIN_METRICS: dict[str, Metric] = dict(METRICS)
BUILTIN_UNAVAILABLE: dict[str, str] = dict(UNAVAILABLE)
#: key -> metric registered in this process (:func:`register`, :func:`register_module`)
REGISTERED: dict[str, Metric] = {}
#: plugin key -> :class:`captioneval.metrics.plugins.LoadedPlugin` (metric, entry point, distribution)
PLUGINS: dict[str, _plugins.LoadedPlugin] = {}
#: entry-point name -> why that plugin is unavailable (also in :data:`UNAVAILABLE` unless the name
#: is a built-in key)
PLUGIN_PROBLEMS: dict[str, str] = {}
_PLUGIN_METRICS: dict[str, Metric] = {}


def _rebuild() -> None:
    """METRICS := built-ins, then registered, then plugins (in place: other modules hold the dict)."""
    METRICS.clear()
    METRICS.update(BUILTIN_METRICS)
    METRICS.update(REGISTERED)
    METRICS.update(_PLUGIN_METRICS)


def register(*metrics: Metric) -> list[Metric]:
    """Add metric objects to :data:`METRICS` in this process (after the built-ins, before plugins).

    Each must be a valid :class:`captioneval.metrics.base.Metric` whose key is not taken by a built-in
    metric, a group, an unavailable key, a plugin or another registered metric. Returns them.
    Raises ValueError saying what is wrong (nothing is registered then)."""
    taken = _BUILTIN.reserved | set(REGISTERED) | set(PLUGINS) | set(UNAVAILABLE)
    for metric in metrics:
        base.validate(metric, tuple(taken))
        if metric.key.startswith(_plugins.UPLOAD_PREFIX):
            raise ValueError(f"key {metric.key!r}: the prefix {_plugins.UPLOAD_PREFIX!r} is reserved for uploaded scores")
        taken.add(metric.key)
    for metric in metrics:
        REGISTERED[metric.key] = metric
    _rebuild()
    return list(metrics)


def register_module(module: str | ModuleType) -> list[Metric]:
    """Register the metrics a module exports, read exactly as a built-in metric file is
    (``METRICS`` list, see :mod:`captioneval.metrics.builtin`). ``module``: a module or its dotted name.
    Returns the metrics registered; ImportError or ValueError as :func:`register`."""
    if isinstance(module, str):
        module = importlib.import_module(module)
    _, metrics, _ = base.read_module(module)
    return register(*metrics)


def unregister(*keys: str) -> None:
    """Remove metrics added with :func:`register` (unknown keys are ignored)."""
    for key in keys:
        REGISTERED.pop(key, None)
    _rebuild()


def load_plugins(entry_points=None) -> _plugins.Discovery:
    """(Re)discover the plugin metrics of the ``captioneval.metrics`` entry-point group and update
    :data:`METRICS`, :data:`PLUGINS`, :data:`PLUGIN_PROBLEMS` and :data:`UNAVAILABLE` in place (so
    modules holding references to these dicts see the change); previously loaded plugins that are
    gone are removed. Runs once when this module is imported; call it again after installing a
    plugin in a running process, or in tests after changing ``sys.path``.

    ``entry_points`` : the entry points to consider (default: the installed ones).

    Returns the :class:`captioneval.metrics.plugins.Discovery`. Never raises for a broken plugin (it is
    logged as a warning and listed as unavailable); built-in and registered metrics are never replaced.
    """
    importlib.invalidate_caches()
    found = _plugins.discover(_BUILTIN.reserved | set(REGISTERED), entry_points)
    UNAVAILABLE.clear()
    UNAVAILABLE.update(BUILTIN_UNAVAILABLE)
    PLUGINS.clear()
    PLUGIN_PROBLEMS.clear()
    _PLUGIN_METRICS.clear()
    for key, plugin in found.loaded.items():
        _PLUGIN_METRICS[key] = _plugins.as_metric(plugin)
        PLUGINS[key] = plugin
    for name, reason in found.problems.items():
        PLUGIN_PROBLEMS[name] = reason
        if name not in BUILTIN_METRICS and name not in BUILTIN_UNAVAILABLE and name not in GROUPS:
            UNAVAILABLE[name] = reason
    _rebuild()
    return found


def is_plugin(key: str) -> bool:
    """True when ``key`` is a metric contributed by a plugin distribution."""
    return key in PLUGINS


def is_reversed(key: str) -> bool:
    """True when a *lower* value of metric ``key`` means a better caption (``higher == "worse"``);
    correlations of such a metric with human quality judgments are expected to be negative."""
    return key in METRICS and METRICS[key].higher == "worse"


def expand(keys) -> list[str]:
    """Replace group names (:data:`GROUPS`) by their keys, keeping order and dropping repeats."""
    out = []
    for key in keys:
        out.extend(GROUPS.get(key, (key,)))
    return list(dict.fromkeys(out))


#: why a metric that needs a Java runtime (:data:`captioneval.metrics.base.JVM`) is skipped; ``{name}`` is its name
JAVA_MISSING_REASON = (
    "{name} skipped: Java is not installed; install a JRE (apt-get install default-jre-headless / "
    "brew install openjdk) to compute it"
)


def unavailable_now(keys: Sequence[str]) -> dict[str, str]:
    """Metrics among ``keys`` that cannot run in this process right now, with the reason: ``{key: reason}``.

    ``keys`` : metric keys or group names (:data:`GROUPS`, expanded); unknown keys are ignored (the
    caller's own validation reports them). Today the only such condition is a metric whose
    :attr:`~captioneval.metrics.base.Metric.needs` include :data:`captioneval.metrics.base.JVM` (METEOR 1.5)
    while ``java`` is not on PATH (``shutil.which``): the reason is :data:`JAVA_MISSING_REASON`, e.g.
    "METEOR skipped: Java is not installed; install a JRE (...) to compute it". Callers (the
    ``compute_metrics`` command, the web compute form) skip these and run the others."""
    java = None
    out: dict[str, str] = {}
    for key in expand(keys):
        metric = METRICS.get(key)
        if metric is None or base.JVM not in metric.needs:
            continue
        if java is None:
            java = shutil.which("java") is not None
        if not java:
            out[key] = JAVA_MISSING_REASON.format(name=metric.name)
    return out


def keys_at(level: str) -> list[str]:
    """Keys of the metrics of one level, in registry order."""
    return [k for k, m in METRICS.items() if m.level == level]


def get_metric(key: str) -> Metric:
    """Return the metric object for ``key``.

    Raises
    ------
    MetricUnavailableError
        for a known metric that cannot run here (SPICE, a broken plugin), with the reason.
    UnknownMetricError
        for any other unknown key; the message lists the known keys.
    """
    if key in METRICS:
        return METRICS[key]
    if key in UNAVAILABLE:
        raise MetricUnavailableError(UNAVAILABLE[key])
    raise UnknownMetricError(f"unknown metric {key!r}; known metrics: {', '.join(METRICS)}")


# --- conveniences over Metric.score for plain lists ----------------------------------------------

def score(
    key: str,
    candidates: Sequence[str],
    references: Sequence[Sequence[str]],
    document_frequency=None,
) -> np.ndarray:
    """Score each candidate against its references with the caption-level metric ``key``.

    Parameters
    ----------
    candidates : length-n sequence of PTB-tokenised captions.
    references : length-n sequence of non-empty lists of PTB-tokenised reference captions.
    document_frequency : :class:`captioneval.kernels.cider.DocumentFrequency` or None, for metrics that
        need one (CIDEr-D). None = computed from ``references`` (the COCO default); pass the
        dataset-wide table when scoring one chunk of a dataset. Ignored by the others.

    Returns ndarray of shape (n,), float64, within ``get_metric(key).range``.

    Raises UnknownMetricError, MetricUnavailableError, ValueError (bad input, or a metric of another
    level or one that needs object labels: use :func:`score_sets` / :func:`score_systems` /
    :func:`score_vifidel`), JavaMissingError (METEOR), :class:`captioneval.metrics.plugins.PluginError`.
    """
    metric = get_metric(key)
    if metric.level != "caption" or metric.needs & {base.OBJECTS, base.TEXTS}:
        raise ValueError(f"{key!r} is a {metric.level}-level metric; use score_sets/score_systems/score_vifidel")
    batch = Batch(candidates=list(candidates), references=[list(r) for r in references],
                  document_frequency=document_frequency)
    return metric.score(batch).values


def score_vifidel(
    key: str,
    texts: Sequence[str],
    objects: Sequence[dict],
    references: Sequence[Sequence[str]] | None = None,
    vectors: str | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Score raw captions against their image's object labels with a metric that needs them (VIFIDEL,
    Madhyastha et al. 2019).

    Parameters
    ----------
    texts : n raw captions (VIFIDEL does its own word processing; see :mod:`captioneval.kernels.vifidel`).
    objects : n mappings label -> instance count.
    references : n lists of reference captions (required by metrics that need them: ``vifidel_ref``'s
        importance weights).
    vectors : word-vector file, or None for the bundled GloVe 6B 50-d.

    Returns ``(similarity, distance)``, two float64 arrays (n,): the similarity exp(-WMD) in (0, 1]
    that correlations use, and the raw word mover's distance; NaN where no score is possible (no
    known word in the caption, no objects). ValueError for a metric that does not use object labels.
    """
    metric = get_metric(key)
    if base.OBJECTS not in metric.needs:
        raise ValueError(f"{key!r} is not a VIFIDEL metric")
    if base.REFERENCES in metric.needs and references is None:
        raise ValueError(f"{key} needs the reference captions of each caption")
    batch = Batch(texts=list(texts), objects=list(objects), vectors=vectors,
                  references=None if base.REFERENCES not in metric.needs else [list(r) for r in references])
    result = metric.score(batch)
    return result.values, result.raw


def score_sets(
    key: str,
    sets: Sequence[Sequence[str]],
    references: Sequence[Sequence[str]] | None = None,
    document_frequency=None,
    m: int | None = None,
    is_reference: Sequence[bool] | None = None,
) -> np.ndarray:
    """Score caption sets with the set-level metric ``key``.

    Parameters
    ----------
    sets : n_sets lists of PTB-tokenised captions (a system's captions for one image, in key order).
    references : n_sets lists of tokenised references of each set's image (metrics that need them:
        ``set_accuracy``; an empty list gives NaN: nothing to compare with).
    document_frequency : :class:`captioneval.kernels.cider.DocumentFrequency` (``self_cider`` and
        ``set_accuracy``; required for ``self_cider``).
    m : use the first ``m`` captions of each set (None: all). Sets with fewer than 2 captions give NaN
        for the diversity metrics (diversity is undefined for one caption).
    is_reference : per set, True when the set *is* the image's references (``set_accuracy`` then gives
        the leave-one-out human accuracy, Wang & Chan 2019 Sec. 5).

    Returns ndarray (n_sets,), float64, NaN where undefined. ValueError for a metric of another level.
    """
    metric = get_metric(key)
    if metric.level != "set":
        raise ValueError(f"{key!r} is not a set-level metric")
    batch = Batch(sets=[list(s) for s in sets], references=references, document_frequency=document_frequency, m=m,
                  is_reference=is_reference)
    return metric.score(batch).values


def score_systems(key: str, corpora: Sequence[Sequence[str]], reference_corpora: Sequence[Sequence[str]] | None = None):
    """Score each system's caption corpus with the system-level metric ``key``.

    Parameters
    ----------
    corpora : per system, its PTB-tokenised captions. MTLD depends on the order: the pipeline passes
        the first caption of every image, then the second..., the order that mixes images (image
        by image, MTLD on THumB's references halves: 26.6 instead of 54.9).
    reference_corpora : the reference captions as R corpora of one reference per image (the k-th
        reference of every image); the reference value L(c_r) is the mean of L over them. None or
        empty: no ratio.

    Returns a list of ``(value, details)`` (see the metric's ``Scores.details``: for ``vocabulary``
    ``{"n_tokens", "frequencies", "top"}``; for the lexical measures ``{"reference", "ldr",
    "lexical_gap"}``, Kershaw & Bober 2019, Eqs. 1-2). ValueError for a metric of another level.
    """
    metric = get_metric(key)
    if metric.level != "system":
        raise ValueError(f"{key!r} is not a system-level metric")
    result = metric.score(Batch(corpora=[list(c) for c in corpora], reference_corpora=reference_corpora))
    details = result.details if result.details is not None else [None] * len(result.values)
    return [(float(v), d) for v, d in zip(result.values, details)]


load_plugins()  # last: a plugin may import this module while it loads
