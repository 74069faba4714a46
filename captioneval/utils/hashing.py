"""Distinctness of many hashable items (caption texts, reference lists) by one sort of their hashes.

Django-free: only numpy is imported. ``hash`` of a ``str`` is cached in the object, so hashing texts
that were hashed before costs one call each; sorting millions of int64 hashes takes a fraction of
the time a Python ``set`` or ``dict`` of the same strings spends in cache misses. Equal items have
equal hashes; equal hashes of different items (collisions) are rare but possible, so a count of
distinct hashes is at most the number of distinct items and callers settle ties by ``==``.
"""
from __future__ import annotations

from typing import Iterable

import numpy as np

__all__ = ["sorted_hashes", "repeated_hashes"]


def sorted_hashes(items: Iterable, count: int) -> tuple[np.ndarray, np.ndarray]:
    """(hashes, the same sorted): int64 arrays (count,) of ``hash(item)`` in the items' order.
    ``count`` must be the number of items. Raises TypeError for an unhashable item."""
    hashes = np.fromiter(map(hash, items), dtype=np.int64, count=count)
    return hashes, np.sort(hashes)


def repeated_hashes(ordered: np.ndarray) -> int:
    """The number of sorted hashes equal to the one before: items minus distinct hashes."""
    return int(np.count_nonzero(ordered[1:] == ordered[:-1]))
