"""Numbers on their way to JSON.

:func:`finite_or_none` is the single NaN/inf-to-null conversion of the platform: metric details
(:mod:`captioneval.kernels`), statistics reports (:mod:`captioneval.stats`) and every JSON download use
it, so an undefined value (NaN) and an overflow (+-inf) both become JSON ``null`` and never the
non-standard ``NaN``/``Infinity`` tokens that strict JSON parsers refuse (RFC 8259, section 6).
Standard library only.
"""
from __future__ import annotations

import math
from typing import Any


def finite_or_none(x: Any) -> float | None:
    """``float(x)`` if it is finite, else ``None`` (also for ``None`` itself).

    ``x`` : None, or anything ``float()`` accepts (Python or numpy scalars).
    Raises TypeError / ValueError if x is neither None nor convertible to float.
    """
    if x is None:
        return None
    v = float(x)
    return v if math.isfinite(v) else None
