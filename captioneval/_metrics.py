"""Which metrics this installation can run: the platform's registry, or its light part.

:func:`catalogue` is :mod:`captioneval.metrics.registry` (built-in metrics, registered ones, plugins)
when it imports. The registry imports every built-in metric module, and VIFIDEL's needs gensim and POT
(and the GloVe vectors' package), which the base install of ``captioneval`` leaves out; without them the catalogue
imports the built-in metric modules one by one (the way :func:`captioneval.metrics.builtin.discover`
does) and lists the modules it could not import, with the package they miss and the extra that
installs it. The metric objects are the registry's own classes either way: nothing is reimplemented.
"""
from __future__ import annotations

import functools
import importlib
import importlib.util
import pkgutil
import shutil
from dataclasses import dataclass, field

from .errors import MetricError

#: the extra of ``pyproject.toml`` that installs every metric's packages
FULL_EXTRA = "captioneval[metrics]"
#: why METEOR cannot run without pycocoevalcap (which ships the METEOR 1.5 jar)
METEOR_JAR_MISSING = ("METEOR needs the METEOR 1.5 jar of pycocoevalcap: pip install 'captioneval[meteor]' "
                      "(which also brings snowballstemmer for the Python implementation)")


@dataclass
class Catalogue:
    """``metrics`` key -> Metric object (registry order); ``unavailable`` key -> reason (SPICE,
    broken plugins); ``groups`` name -> keys; ``missing_modules`` built-in module -> missing package
    (only when the full registry could not be imported)."""

    metrics: dict
    unavailable: dict
    groups: dict
    missing_modules: dict = field(default_factory=dict)


@functools.lru_cache(maxsize=None)
def catalogue() -> Catalogue:
    """The metrics available here (see the module docstring); computed once per process."""
    try:
        from captioneval.metrics import registry
    except ImportError as exc:
        if not exc.name or exc.name.startswith("metrics"):
            raise
    else:
        return Catalogue(registry.METRICS, registry.UNAVAILABLE, registry.GROUPS)
    from captioneval.metrics import builtin
    from captioneval.metrics.base import read_module

    found, missing, unavailable = [], {}, {}
    for info in pkgutil.iter_modules(builtin.__path__):
        if info.name.startswith("_"):
            continue
        name = f"{builtin.__name__}.{info.name}"
        try:
            module = importlib.import_module(name)
        except ImportError as exc:
            missing[info.name] = exc.name or str(exc)
            continue
        order, metrics, unavail = read_module(module)
        found.append((order, name, metrics))
        unavailable.update(unavail)
    found.sort(key=lambda f: (f[0], f[1]))
    metrics = {m.key: m for _, _, ms in found for m in ms}
    groups: dict[str, list] = {}
    for metric in metrics.values():
        for group in metric.groups:
            groups.setdefault(group, []).append(metric.key)
    return Catalogue(metrics, unavailable, {g: tuple(k) for g, k in groups.items()}, missing)


def expand(keys) -> list[str]:
    """Group names replaced by their keys (order kept, repeats dropped). Keys of built-in metrics
    are kept without building the whole catalogue."""
    out = []
    for key in keys:
        out.extend((key,) if _builtin(key) is not None else catalogue().groups.get(key, (key,)))
    return list(dict.fromkeys(out))


def why_not_now(metric) -> str | None:
    """Why ``metric`` cannot run in this process right now (Java or pycocoevalcap's jar missing for
    a metric that needs a JVM), or None."""
    from captioneval.metrics import base

    if metric.key == "meteor" and importlib.util.find_spec("pycocoevalcap") is None:
        return METEOR_JAR_MISSING  # both implementations read the jar (the Python one its data)
    if base.JVM not in metric.needs:
        return None
    if importlib.util.find_spec("pycocoevalcap") is None:
        return METEOR_JAR_MISSING if metric.key == "meteor" else f"{metric.name} needs pycocoevalcap's jar"
    if shutil.which("java") is None:
        return (f"{metric.name} needs a Java runtime, and java is not on PATH: install a JRE (apt-get install "
                "default-jre-headless / brew install openjdk)")
    return None


def _builtin(key: str):
    """The built-in metric ``key``, importing the modules of :mod:`captioneval.metrics.builtin` one at a
    time in name order only until one exports it (so ``bleu_4`` does not import VIFIDEL's gensim and
    POT, about 2 s), or None. The object is the one the registry lists: built-in keys are never
    shadowed by registered or plugin metrics."""
    from captioneval.metrics import builtin
    from captioneval.metrics.base import read_module

    for info in sorted(pkgutil.iter_modules(builtin.__path__), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        try:
            module = importlib.import_module(f"{builtin.__name__}.{info.name}")
        except ImportError:
            continue
        for metric in read_module(module)[1]:
            if metric.key == key:
                return metric
    return None


def learned(key: str, options: dict | None = None):
    """A new object of the learned metric ``key`` (CLIP-S, RefCLIP-S, PAC-S, RefPAC-S, BERTScore;
    :mod:`captioneval.metrics.learned`) built with ``options`` (its constructor's parameters: ``model``,
    ``w``, ``prefix``, ``device``...), or None when ``key`` is not a learned metric. The object is new
    per call, since its parameters are part of its identity. Raises :class:`MetricError` with the
    registry's reason when the ``learned`` extra is missing, or for an option the metric does not take."""
    from captioneval.metrics.builtin import learned as known

    if key not in known.LEARNED:
        return None
    missing = known.missing_packages()
    if missing:
        raise MetricError(known.reasons(missing)[key])
    module, _, name = known.LEARNED[key][1].rpartition(".")
    cls = getattr(importlib.import_module(module), name)
    try:
        return cls(**dict(options or {}))
    except TypeError as exc:
        raise MetricError(f"{known.LEARNED[key][0]}: {exc}") from None


def judge(key: str, options: dict | None = None):
    """A new object of the LLM judge ``key`` (CLAIR, FLEUR, RefFLEUR; :mod:`captioneval.metrics.judges`)
    built with ``options`` (``endpoint``, ``model``, ``api_key_env``, ``cache_dir``, ``max_requests``,
    ``failure``...), or None when ``key`` is not a judge or no option is given (the registry's object,
    configured by the environment, or its reason, is used then). Raises :class:`MetricError` for an
    option the judge does not take or a missing endpoint."""
    from captioneval.metrics.builtin import judges as known

    if key not in known.JUDGES or not options:
        return None
    try:
        return known.judge_class(key)(**dict(options))
    except (TypeError, ValueError) as exc:
        raise MetricError(f"{known.JUDGES[key][0]}: {exc}") from None


def get(key: str, options: dict | None = None):
    """The metric object of ``key`` (a learned metric or a judge: a new object built with ``options``,
    :func:`learned`, :func:`judge`). Raises :class:`MetricError` for a metric of the field this
    installation cannot run (SPICE, a broken plugin, a module whose package is missing, with the extra
    that installs it) or an unknown key (listing the known ones)."""
    metric = learned(key, options)  # first: a learned metric's object is built with its options
    if metric is None:
        metric = judge(key, options)
    if metric is not None:
        return metric
    metric = _builtin(key)
    if metric is not None:
        return metric
    cat = catalogue()
    if key in cat.metrics:
        return cat.metrics[key]
    if key in cat.unavailable:
        raise MetricError(cat.unavailable[key])
    if cat.missing_modules:
        missing = ", ".join(f"{module} (needs {package})" for module, package in sorted(cat.missing_modules.items()))
        raise MetricError(f"unknown metric {key!r}; known metrics: {', '.join(cat.metrics)}. Not installed: the metrics "
                          f"of {missing}: pip install '{FULL_EXTRA}'")
    raise MetricError(f"unknown metric {key!r}; known metrics: {', '.join(cat.metrics)}")


def resolve(keys, levels: tuple[str, ...], use: str, skip_unavailable: bool, options: dict | None = None):
    """``(metrics, skipped)`` for the metric keys or group names ``keys``: the metric objects of the
    given ``levels`` in the order asked, and ``{key: reason}`` of those that cannot run now when
    ``skip_unavailable`` (else that raises). ``use`` names the right function for a metric of another
    level in the error; ``options`` key -> constructor parameters of a learned metric (:func:`learned`).
    Raises :class:`MetricError`."""
    chosen, skipped = [], {}
    options = dict(options or {})
    for key in expand(keys):
        metric = get(key, options.get(key))
        if metric.level not in levels:
            raise MetricError(f"{key!r} is a {metric.level}-level metric; use {use}")
        reason = why_not_now(metric)
        if reason:
            if not skip_unavailable:
                raise MetricError(reason)
            skipped[key] = reason
            continue
        chosen.append(metric)
    return chosen, skipped


def run(metric, batch):
    """``metric.score(batch)``, with a package the metric imports only when it scores (lexicalrichness
    for the lexical measures) reported as :class:`MetricError` naming the extra that installs it."""
    try:
        return metric.score(batch)
    except ModuleNotFoundError as exc:
        if not exc.name or exc.name.split(".")[0] in ("metrics", "analysis", "captioneval.utils", "captioneval"):
            raise
        raise MetricError(f"{metric.name} needs the package {exc.name}, which is not installed: "
                          f"pip install '{FULL_EXTRA}'") from None
