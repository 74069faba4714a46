"""Timing helper shared by the speed checks in ``benchmarks/`` (run as scripts; each puts the
repository root on ``sys.path`` and imports this as ``benchmarks.timing``)."""
from __future__ import annotations

import time
from typing import Any, Callable


def best_time(fn: Callable[[], Any], repeats: int = 3) -> tuple[float, Any]:
    """Call ``fn()`` ``repeats`` times (>= 1); return (the fastest wall time in seconds, the last
    result). The minimum is the least disturbed measurement on a shared machine."""
    best, result = float("inf"), None
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t0)
    return best, result
