"""A database that is down or restarting answers HTTP 503 with ``Retry-After``, not a bare 500.

Every write of the rater pages runs in one transaction (``crowd.engine``), so a request that fails
because PostgreSQL went away has written nothing: the client is told exactly that and when to try
again. Connections are health-checked before reuse (``CONN_HEALTH_CHECKS``), so the first request
after PostgreSQL is back gets a fresh connection.

Two entry points cover every place the error can surface: :class:`DatabaseUnavailableMiddleware`
(an exception raised by a view) and :func:`server_error` (``handler500``: anything else, e.g. the
session being saved after the view).
"""
from __future__ import annotations

import logging
import sys

from django.db import InterfaceError, OperationalError, connections
from django.http import HttpResponse, JsonResponse
from django.views import defaults

log = logging.getLogger("evalsite.database")

RETRY_AFTER_SECONDS = 5
MESSAGE = ("The database is unavailable for a moment (restarting or overloaded). Nothing from this "
           "request was saved. Please try again in a few seconds.")
RETRYABLE = (OperationalError, InterfaceError)


def wants_json(request) -> bool:
    """Whether the client asked for JSON only (``Accept`` names ``application/json`` and not
    ``text/html``), e.g. the rater pages' scripts and the simulated raters' API calls."""
    accept = request.headers.get("Accept", "")
    return "application/json" in accept and "text/html" not in accept


def database_unavailable(request, exc: BaseException | None = None) -> HttpResponse:
    """The 503 response: JSON ``{"error", "retryable": true, "retry_after"}`` for API clients, a
    short page for browsers; both carry ``Retry-After``. Broken connections are closed so the next
    request opens a new one."""
    log.warning("database unavailable on %s %s: %s", request.method, request.path, exc)
    for conn in connections.all(initialized_only=True):
        try:
            conn.close_if_unusable_or_obsolete()
        except Exception:  # noqa: BLE001 - closing a dead connection may fail too; it is dropped anyway
            conn.connection = None
    if wants_json(request):
        response = JsonResponse({"error": MESSAGE, "retryable": True, "retry_after": RETRY_AFTER_SECONDS},
                                status=503)
    else:
        response = HttpResponse(
            "<!doctype html><title>Please try again</title><h1>Please try again</h1>"
            f"<p>{MESSAGE}</p>", status=503, content_type="text/html; charset=utf-8")
    response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response


class DatabaseUnavailableMiddleware:
    """Turns a database connection failure raised by a view into :func:`database_unavailable`."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_exception(self, request, exception):
        if isinstance(exception, RETRYABLE):
            return database_unavailable(request, exception)
        return None


def server_error(request):
    """``handler500``: a database failure outside a view (e.g. saving the session) is a 503 too;
    anything else is Django's usual 500 page."""
    exc = sys.exc_info()[1]
    if isinstance(exc, RETRYABLE):
        return database_unavailable(request, exc)
    return defaults.server_error(request)
