"""Deprecated: the statistics moved to :mod:`captioneval.stats` in 0.20.

``analysis.statistics`` and its submodules still import for one release, with a
:class:`DeprecationWarning`, as the same objects under their new names. See docs/library.md.
"""
import warnings

from captioneval.stats import *  # noqa: F401,F403 - the old package's public names
from captioneval.stats import __all__  # noqa: F401
from captioneval.utils.deprecation import alias_modules, deprecated_path_message

warnings.warn(deprecated_path_message(__name__, "captioneval.stats"), DeprecationWarning, stacklevel=2)
alias_modules({f"{__name__}.{m}": f"captioneval.stats.{m}" for m in (
    "agreement", "ceiling", "correlation", "pairwise", "report", "results", "significance", "systems")})
