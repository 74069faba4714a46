"""Rate strings of the settings (``RATER_RATE_LIMIT = "120/m"``), parsed without Django.

This module belongs to the settings layer (the bottom of the import graph, see
``tests/test_layering.py``): :mod:`evalsite.production` validates ``RATER_RATE_LIMIT`` with
:func:`parse_rate` at start-up, and :mod:`crowd.ratelimit`, which enforces the limit on the rater
pages, parses it with the same function. It imports only the standard library.
"""
from __future__ import annotations

import re

_RATE = re.compile(r"^\s*(\d+)\s*/\s*(\d*)\s*([smh])\s*$")
_UNIT = {"s": 1, "m": 60, "h": 3600}


def parse_rate(rate: str | None) -> tuple[int, int] | None:
    """A rate limit as ``(requests, window_seconds)``.

    ``"120/m"`` -> ``(120, 60)``: 120 requests per window of 60 seconds; ``"10/5s"`` -> ``(10, 5)``,
    ``"7/2m"`` -> ``(7, 120)``, ``"3/h"`` -> ``(3, 3600)``; spaces around the parts are allowed.
    ``None``, ``""``, ``"0"`` or a count of 0 (``"0/m"``) -> ``None``: no limit.

    Raises:
        ValueError: anything else (an unknown unit, a missing count, a window of 0 seconds).
    """
    if rate is None or str(rate).strip() in ("", "0"):
        return None
    m = _RATE.match(str(rate))
    if not m:
        raise ValueError(f"bad rate {rate!r}: use N/s, N/m, N/h or N/<k>s (e.g. 120/m)")
    n, k, unit = int(m.group(1)), int(m.group(2) or 1), m.group(3)
    if k == 0:
        raise ValueError(f"bad rate {rate!r}: the window cannot be 0 seconds")
    return (n, k * _UNIT[unit]) if n else None
