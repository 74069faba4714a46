"""Rate limits on the rater pages (fixed one-window counters in Django's cache).

A rater (the worker in the session, else the client address) may make ``settings.RATER_RATE_LIMIT``
requests per window, e.g. ``"120/m"`` (two a second sustained, far above what a person rating
captions does, far below what a script hammering the engine would do). Over the limit the view
answers HTTP 429 with ``Retry-After``. The counter lives in the shared cache (``CACHE_URL``, Redis)
so all web processes count together; if the cache is unreachable the limit *fails open* and the
rater keeps working (a warning is logged), because losing raters' work is worse than an unlimited
minute.

Behind reverse proxies, ``settings.RATELIMIT_TRUSTED_PROXIES`` (``DJANGO_TRUSTED_PROXIES`` in
:mod:`evalsite.production`) says how many of them append to ``X-Forwarded-For``, so that anonymous
clients (e.g. someone guessing invitation tokens) are counted by their own address, not all together
by the proxy's.

Rates are parsed by :func:`evalsite.rates.parse_rate` (re-exported here), which the production
settings also use to refuse a bad ``RATER_RATE_LIMIT`` at start-up.
"""
from __future__ import annotations

import functools
import ipaddress
import logging
import time

from django.conf import settings
from django.core.cache import cache
from django.http import HttpResponse, JsonResponse
from django.utils.html import escape

from evalsite.rates import parse_rate

__all__ = ("parse_rate", "hit", "client_address", "client_key", "too_many", "retry_later", "rater_limited")

log = logging.getLogger("crowd.ratelimit")


def hit(key: str, rate: str, now: float | None = None) -> int:
    """Count one request against ``key``; returns 0 if allowed, else seconds until the window
    ends. Fails open (returns 0) when the cache cannot be reached."""
    limit = parse_rate(rate)
    if limit is None:
        return 0
    n, window = limit
    now = time.time() if now is None else now
    start = int(now // window) * window
    cache_key = f"rl:{key}:{start}"
    try:
        if cache.add(cache_key, 1, timeout=window + 1):
            count = 1
        else:
            try:
                count = cache.incr(cache_key)
            except ValueError:  # expired between add and incr
                cache.add(cache_key, 1, timeout=window + 1)
                count = 1
    except Exception as exc:  # noqa: BLE001 - a cache outage must never stop raters
        log.warning("rate limit cache unavailable, not limiting: %s", exc)
        return 0
    return 0 if count <= n else max(1, int(start + window - now + 0.999))


def client_address(request) -> str:
    """The client's IP address as a rate-limit key: ``REMOTE_ADDR``, or with
    ``settings.RATELIMIT_TRUSTED_PROXIES = n > 0`` the n-th ``X-Forwarded-For`` entry from the right
    (the address the outermost trusted proxy saw; entries further left are client-supplied and not
    trusted). An IPv6 address stands for its /64 network (one subscriber's). Unparsable -> as given."""
    address = request.META.get("REMOTE_ADDR", "")
    n = int(getattr(settings, "RATELIMIT_TRUSTED_PROXIES", 0) or 0)
    if n > 0:
        hops = [h.strip() for h in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",") if h.strip()]
        if len(hops) >= n:
            address = hops[-n]
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address
    return str(ipaddress.ip_network(f"{ip}/64", strict=False)) if ip.version == 6 else str(ip)


def client_key(request) -> str:
    """Who is asking: the rater's worker id from the session if any, else the participant session
    this browser holds (a Prolific participant, :data:`crowd.journey.JOURNEY_SESSION_KEY`: written
    only after Prolific confirmed the participant, so participants behind one address, e.g. a lab
    or a proxy, are counted each on their own), else the logged-in user, else the client address
    (:func:`client_address`)."""
    from .journey import JOURNEY_SESSION_KEY
    from .providers import SESSION_KEY

    session = getattr(request, "session", None)
    wid = session.get(SESSION_KEY) if session is not None else None
    if wid:
        return f"worker:{wid}"
    participant = session.get(JOURNEY_SESSION_KEY) if session is not None else None
    if participant:
        return f"participant:{participant}"
    if getattr(request, "user", None) is not None and request.user.is_authenticated:
        return f"user:{request.user.pk}"
    return f"ip:{client_address(request)}"


def too_many(request, retry_after: int) -> HttpResponse:
    """HTTP 429 with ``Retry-After: retry_after`` (seconds): JSON for API clients, else a short page."""
    return retry_later(request, 429, f"Too many requests: please slow down and try again in {retry_after} s.",
                       retry_after, title="Slow down")


def retry_later(request, status: int, message: str, retry_after: int, title: str = "Try again later") -> HttpResponse:
    """HTTP ``status`` (429, 503) with ``Retry-After: retry_after`` (seconds) and the one-line
    ``message`` (plain text, escaped here): ``{"error", "retryable": true, "retry_after"}`` for a
    client that accepts JSON, else a short page titled ``title``."""
    if "application/json" in request.headers.get("Accept", ""):
        response = JsonResponse({"error": message, "retryable": True, "retry_after": retry_after}, status=status)
    else:
        response = HttpResponse(f"<!doctype html><title>{escape(title)}</title><p>{escape(message)}</p>", status=status,
                                content_type="text/html; charset=utf-8")
    response["Retry-After"] = str(retry_after)
    return response


def rater_limited(view):
    """Decorator for rater views: apply ``settings.RATER_RATE_LIMIT`` per rater."""

    @functools.wraps(view)
    def wrapped(request, *args, **kwargs):
        wait = hit(client_key(request), settings.RATER_RATE_LIMIT)
        if wait:
            return too_many(request, wait)
        return view(request, *args, **kwargs)

    return wrapped
