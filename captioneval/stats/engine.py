"""Which implementation of the resampling statistics runs: the vectorised one (default) or the
reference one (the per-resample / per-group loops the vectorised code replaced).

Both give exactly the same numbers for the same inputs and seed (the same integer pair counts, the
same scipy calls or the same float operations in the same order); the reference path is kept so
that ``benchmarks/report_speed.py`` and ``tests/test_report_speed_paths.py`` can time and compare
the two in one run on the same data. Django-free.

Use::

    from captioneval.stats.engine import reference_path
    with reference_path():
        ...  # every statistic below runs its reference implementation

The switch is a :class:`contextvars.ContextVar`, so it is local to the thread (and asyncio task)
that set it.
"""
from __future__ import annotations

import contextlib
import contextvars

__all__ = ["vectorised", "reference_path"]

_REFERENCE = contextvars.ContextVar("captioneval_stats_reference_path", default=False)


def vectorised() -> bool:
    """True unless the caller is inside :func:`reference_path`."""
    return not _REFERENCE.get()


@contextlib.contextmanager
def reference_path():
    """Context manager: run the reference (loop) implementations inside the block."""
    token = _REFERENCE.set(True)
    try:
        yield
    finally:
        _REFERENCE.reset(token)
