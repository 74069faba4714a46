"""A Redis cache that never takes a page down with it.

The shared cache (``CACHE_URL``) holds two kinds of things: rendered chart PNGs (a cache in the
strict sense: losing them costs a re-render) and the rater rate-limit counters. When Redis is
unreachable, :class:`FailOpenRedisCache` answers reads with the default (a miss) and drops writes,
logging a warning, so the dashboard keeps drawing its charts and raters keep working. ``add`` and
``incr`` still raise: :mod:`crowd.ratelimit` needs to know the counter is unavailable, and fails
open itself.
"""
from __future__ import annotations

import logging

from django.core.cache.backends.redis import RedisCache

log = logging.getLogger("evalsite.cache")


class FailOpenRedisCache(RedisCache):
    """Django's RedisCache whose get/set/delete (and their _many forms) survive a Redis outage."""

    def _fail(self, op: str, exc: Exception, default=None):
        log.warning("cache unavailable (%s skipped): %s", op, exc)
        return default

    def get(self, key, default=None, version=None):
        try:
            return super().get(key, default, version)
        except Exception as exc:  # noqa: BLE001 - redis-py raises ConnectionError, TimeoutError, ...
            return self._fail("get", exc, default)

    def get_many(self, keys, version=None):
        try:
            return super().get_many(keys, version)
        except Exception as exc:  # noqa: BLE001
            return self._fail("get_many", exc, {})

    def set(self, key, value, timeout=None, version=None):  # noqa: A003 - Django's API
        try:
            super().set(key, value, timeout, version)
        except Exception as exc:  # noqa: BLE001
            self._fail("set", exc)

    def set_many(self, data, timeout=None, version=None):
        try:
            return super().set_many(data, timeout, version)
        except Exception as exc:  # noqa: BLE001
            return self._fail("set_many", exc, list(data))

    def delete(self, key, version=None):
        try:
            return super().delete(key, version)
        except Exception as exc:  # noqa: BLE001
            return self._fail("delete", exc, False)
