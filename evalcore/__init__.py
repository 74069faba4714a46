"""Deprecated: the number and CSV helpers moved to :mod:`captioneval.utils` in 0.20.

``evalcore.csvsafe`` and ``evalcore.numbers`` still import for one release, with a
:class:`DeprecationWarning`, as the same modules under their new names. See docs/library.md.
"""
from captioneval.utils.deprecation import alias_modules

alias_modules({f"{__name__}.{m}": f"captioneval.utils.{m}" for m in ("csvsafe", "numbers")})
