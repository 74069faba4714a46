"""What the web may ask of the stored reports (:mod:`analysis.tasks`), so that no visitor can make the
server compute without bound (issue 31).

Offered settings
    The benchmark, comparison and leaderboard pages, their downloads and charts, and the API's report
    resources take ``seed``, ``resamples``, ``permutations`` and ``alpha`` from the query string; each
    new value is a new report (seconds of CPU and a stored row). Anyone who is not staff
    (:func:`crowd.views.judgments_upload.is_staff`) may choose only the values of :data:`OFFERED`
    (the pages' defaults among them); another value is refused before anything is read or
    stored, with one line naming the offered values (:func:`not_offered`: HTTP 400, as every bad
    setting). Staff may choose any value in the pages' ranges.
One rate limit
    Every report request -- page, download, chart, chart spec, a campaign owner's report page, API
    report resource (and the API's campaign report) -- counts
    against ``settings.REPORT_RATE_LIMIT`` (default ``120/m``; ``0`` = off) per client: the logged-in
    user (an API token's user), else the client address (:func:`crowd.ratelimit.client_address`).
    Pages and API share one counter (:func:`hit`), kept by :func:`crowd.ratelimit.hit` (the shared
    cache, failing open). Over it: HTTP 429 with ``Retry-After`` (:func:`crowd.ratelimit.too_many` for
    pages, a problem document for the API). :func:`report_request` wraps every dashboard page that
    reads a report (:mod:`analysis.urls`) and the campaign report pages (:mod:`analysis.campaign_urls`);
    ``api.reports.ReportThrottle`` the API's.
One cap on concurrent computations
    At most ``settings.REPORT_MAX_COMPUTING`` reports (default 4; ``0`` = no cap) may be queued or
    computed at once: the :class:`analysis.models.Report` rows pending or running whose task is not
    lost (:func:`analysis.tasks.computing_now`), whoever queued them. A request that would start
    one more is refused with :class:`ComputationsBusy` before any row is written (HTTP 503 with
    ``Retry-After: BUSY_RETRY_SECONDS``); the count and the insertion happen under one lock
    (:func:`lock_new_computations`), so concurrent requests cannot overshoot it. The database is
    the semaphore: every web and worker process sees the same rows, and a lost task stops counting
    when :mod:`analysis.tasks` would queue it again, so nothing has to be released. Every report
    request is capped, the campaign owners' report pages and the API's campaign report included
    (the owners' console still shows, with its previous report, when refused:
    :mod:`analysis.campaign_views`); ``warm_reports`` (and the reports queued after a metric run) are
    not capped, but what they queue counts.
Expiry of unused reports
    Reading a stored report records when (``Report.used_at``, to the hour: :func:`touch`). Each time
    a new computation is stored (on write, in :func:`analysis.tasks.request_report`; no periodic
    task needed), the benchmark, comparison and leaderboard reports of settings other than the
    pages' defaults (:func:`page_default`) that nobody read for ``settings.REPORT_UNUSED_DAYS``
    (default 7; ``0`` = never) are deleted (:func:`expire_unused`); asking for one again computes it
    again, with the same numbers (the seed is part of the settings).
"""
from __future__ import annotations

import functools
from datetime import timedelta

from django.conf import settings
from django.db import connection

from crowd import ratelimit
from crowd.views.judgments_upload import is_staff

from .benchmarks import DEFAULT_ALPHA, DEFAULT_PERMUTATIONS, DEFAULT_RESAMPLES
from .models import Report

#: the values of each query setting anyone may choose (staff: any value in the page's range)
OFFERED = {
    "seed": (0, 1, 2, 3, 4),
    "resamples": (100, 1000, 10000),
    "permutations": (100, 1000, 10000),
    "alpha": (0.01, 0.05, 0.1),
}
#: seconds a client refused at the cap is told to wait (``Retry-After``)
BUSY_RETRY_SECONDS = 5
#: ``Report.used_at`` is rewritten at most this often (a read is not a write on every request)
TOUCH_EVERY = timedelta(hours=1)
#: the kinds of report whose settings come from a query string: the ones that expire
EXPIRING = (Report.BENCHMARK, Report.COMPARISON, Report.LEADERBOARD)
#: key of the PostgreSQL advisory lock around counting and storing a new computation
CAP_LOCK = 31_0431


class ComputationsBusy(Exception):
    """The cap on concurrent computations is reached: the report was not requested (no row written).
    ``retry_after``: seconds to wait; ``str()`` is one line for the client."""

    def __init__(self, computing: int, cap: int, retry_after: int = BUSY_RETRY_SECONDS):
        self.retry_after = retry_after
        super().__init__(f"The server is computing as many reports as it may at once ({computing} of {cap}): this one "
                         f"is not started; try again in {retry_after} s.")


def offered(request) -> dict | None:
    """:data:`OFFERED` for a client who is not staff (what the settings forms offer), None for staff."""
    return None if is_staff(getattr(request, "user", None)) else OFFERED


def not_offered(request, values: dict) -> str | None:
    """One line refusing the first of ``values`` ({setting: number}, already checked against the
    page's ranges) that ``request``'s user may not choose (:data:`OFFERED`), naming the values
    offered, e.g. ``"seed 7 is not offered: choose one of 0, 1, 2, 3, 4 (other values: staff only)"``;
    None when every value is offered or the user is staff. Settings absent from :data:`OFFERED`
    are not checked here."""
    choices = offered(request)
    for name, value in values.items():
        if choices is not None and name in choices and value not in choices[name]:
            return (f"{name} {value} is not offered: choose one of {', '.join(map(str, choices[name]))} "
                    "(other values: staff only)")
    return None


def client(request) -> str:
    """Who asks, as a rate-limit key: ``user:<pk>`` when logged in (a session or an API token),
    else ``ip:<address>`` (:func:`crowd.ratelimit.client_address`)."""
    user = getattr(request, "user", None)
    if user is not None and user.is_authenticated:
        return f"user:{user.pk}"
    return f"ip:{ratelimit.client_address(request)}"


def hit(request) -> int:
    """Count one report request of ``request``'s client against ``settings.REPORT_RATE_LIMIT``:
    0 when allowed, else the seconds until the window ends (:func:`crowd.ratelimit.hit`)."""
    return ratelimit.hit(f"report:{client(request)}", settings.REPORT_RATE_LIMIT)


def report_request(view):
    """Wrap a dashboard page that reads a stored report: the request counts against the report rate
    limit (over it: 429 with ``Retry-After``, ``view`` not called), and a :class:`ComputationsBusy`
    raised by ``view`` is answered 503 with ``Retry-After`` (JSON for a client that accepts it)."""

    @functools.wraps(view)
    def limited(request, *args, **kwargs):
        wait = hit(request)
        if wait:
            return ratelimit.too_many(request, wait)
        try:
            return view(request, *args, **kwargs)
        except ComputationsBusy as exc:
            return ratelimit.retry_later(request, 503, str(exc), exc.retry_after, title="Busy")

    limited.report_request = True
    return limited


def cap() -> int:
    """``settings.REPORT_MAX_COMPUTING``: reports queued or computed at once (0 or less: no cap)."""
    return int(getattr(settings, "REPORT_MAX_COMPUTING", 0) or 0)


def lock_new_computations() -> None:
    """Inside ``transaction.atomic()``: serialise the requests that count the computations and store
    a new one, until the transaction ends (PostgreSQL: a transaction-level advisory lock; SQLite: its
    ``BEGIN IMMEDIATE`` transactions already hold the write lock)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [CAP_LOCK])


def touch(report: Report, now) -> None:
    """Record that ``report`` was read at ``now`` (one UPDATE at most every :data:`TOUCH_EVERY`)."""
    if report.used_at is None or report.used_at < now - TOUCH_EVERY:
        Report.objects.filter(pk=report.pk).update(used_at=now)
        report.used_at = now


def page_default(kind: str, params: dict) -> bool:
    """Whether the stored report ``params`` are those of a page opened without settings (what
    ``warm_reports`` computes): the default numbers, no dataset list (comparison), every metric and
    criterion against all pairs with the default test (leaderboard). A benchmark report of any
    criterion with the default numbers is a default."""
    if kind == Report.LEADERBOARD:
        from .leaderboard import default_settings

        defaults = default_settings()
    else:
        defaults = {"resamples": DEFAULT_RESAMPLES, "seed": 0, "permutations": DEFAULT_PERMUTATIONS,
                    "alpha": DEFAULT_ALPHA, "datasets": None}
    return all(params.get(k, v) == v for k, v in defaults.items())


def expire_unused(now) -> int:
    """Delete the done or failed reports of :data:`EXPIRING` kinds whose settings are not the pages'
    defaults (:func:`page_default`) and that nobody read for ``settings.REPORT_UNUSED_DAYS`` days
    before ``now``; returns how many. Called when a new computation is stored."""
    days = float(getattr(settings, "REPORT_UNUSED_DAYS", 0) or 0)
    if days <= 0:
        return 0
    old = (Report.objects.filter(kind__in=EXPIRING, used_at__lt=now - timedelta(days=days))
           .exclude(status__in=(Report.PENDING, Report.RUNNING)))
    doomed = [pk for pk, kind, params in old.values_list("pk", "kind", "params") if not page_default(kind, params)]
    if doomed:
        Report.objects.filter(pk__in=doomed).delete()
    return len(doomed)
