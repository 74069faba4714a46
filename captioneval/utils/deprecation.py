"""Old import paths kept for one release: module aliases that warn.

Until captioneval 0.20 the Django-free science lived in the platform's app packages
(``metrics.scorers``, ``analysis.statistics``, ``evalcore``). Plug-ins and scripts written against
those paths keep working for one release: :func:`alias_modules` installs an import hook under
which the old dotted name *is* the new module (the same module object, so classes compare equal and
``isinstance`` holds) and importing it emits a :class:`DeprecationWarning` naming the new path.

Standard library only; nothing of Django.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings
from typing import Mapping

#: the release in which the old paths stop working
REMOVED_IN = "0.21"


def deprecated_path_message(old: str, new: str) -> str:
    """The one warning text for an old import path (``old`` and ``new`` are dotted module names)."""
    return f"{old} is deprecated and goes away in captioneval {REMOVED_IN}: import {new} instead"


class _AliasFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Meta path finder and loader: ``old.sub`` -> the already-importable ``new.sub`` module."""

    def __init__(self, mapping: Mapping[str, str]):
        self.mapping = dict(mapping)

    def target(self, fullname: str) -> str | None:
        for old in sorted(self.mapping, key=len, reverse=True):
            if fullname == old or fullname.startswith(old + "."):
                return self.mapping[old] + fullname[len(old):]
        return None

    def find_spec(self, fullname, path=None, target=None):
        new = self.target(fullname)
        if new is None or importlib.util.find_spec(new) is None:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        new = self.target(spec.name)
        warnings.warn(deprecated_path_message(spec.name, new), DeprecationWarning, stacklevel=2)
        return importlib.import_module(new)

    def exec_module(self, module):  # the new module is already executed
        return None


def alias_modules(mapping: Mapping[str, str]) -> None:
    """Make every old dotted module name in ``mapping`` (and its submodules) import the new one.

    ``mapping``: old prefix -> new prefix, e.g. ``{"metrics.scorers.bleu": "captioneval.kernels.bleu"}``;
    the longest matching prefix wins. Installing the same mapping twice adds one hook.
    """
    for finder in sys.meta_path:
        if isinstance(finder, _AliasFinder) and finder.mapping == dict(mapping):
            return
    sys.meta_path.insert(0, _AliasFinder(mapping))
