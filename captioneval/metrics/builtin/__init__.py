"""The platform's own metrics, one module per family, discovered automatically.

Each module of this package is written exactly the way a plugin or a registered module is (see
:mod:`captioneval.metrics.base`): it defines :class:`captioneval.metrics.base.Metric` subclasses and exports

* ``METRICS`` -- the list of its metric instances, in table order;
* ``ORDER`` -- a number placing the module's metrics among the others' (lower first); the registry
  lists metrics by (ORDER, module name, position in METRICS), which is the order of the dashboard's
  tables and of ``compute_metrics --help``;
* optionally ``UNAVAILABLE`` -- key -> reason for metrics of the field this installation cannot run
  (SPICE).

Adding a built-in metric is one new file here (plus its tests); nothing else is edited.
Django-free.
"""
from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

from captioneval.metrics.base import Discovered, read_module


def discover(package: ModuleType | None = None) -> Discovered:
    """Import every module of ``package`` (default: this package) and collect what they export.

    Returns a :class:`captioneval.metrics.base.Discovered` with the metrics sorted by (module ORDER,
    module name, position in the module's METRICS). Raises ValueError when two modules export the
    same key, or a module exports an invalid metric (a built-in must never be silently dropped).
    """
    package = package or importlib.import_module(__name__)
    found = []
    for info in pkgutil.iter_modules(package.__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        order, metrics, unavailable = read_module(module)
        found.append((order, module.__name__, metrics, unavailable))
    found.sort(key=lambda f: (f[0], f[1]))
    out = Discovered()
    for _, name, metrics, unavailable in found:
        out.modules.append(name)
        for metric in metrics:
            if any(m.key == metric.key for m in out.metrics) or metric.key in out.unavailable:
                raise ValueError(f"metric key {metric.key!r} of {name} is exported twice")
            out.metrics.append(metric)
        out.unavailable.update(unavailable)
    return out
