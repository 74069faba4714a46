"""Celery tasks that compute reports off the request path (:mod:`analysis.cached_reports`).

``request_report`` is what a page calls: it returns the :class:`analysis.models.Report` row of a
key, creating it and queueing ``compute_report`` the first time. With a broker the page shows the
report as queued or running and refreshes until it is done. Without a broker
(``CELERY_TASK_ALWAYS_EAGER``, the quick start) a web request's report is computed in a daemon
thread of the web process (``settings.REPORTS_IN_THREAD``, default on; :func:`metrics.jobs.in_background`),
so the page shows the same progress; ``warm_reports`` and ``REPORTS_IN_THREAD=0`` compute it inside the
call, which then returns the finished report. A row whose task was lost (queued while the broker was
down, or a worker killed mid-computation) is queued again by the next request after
``LOST_AFTER`` (pending) or ``RUNNING_LOST_AFTER`` (running); a failed one after ``RETRY_AFTER``.
What the web may ask for (offered settings, the rate limit, the cap on concurrent computations, the
expiry of unused reports) is :mod:`analysis.limits`; ``request_report`` applies the cap and the expiry.
"""
from __future__ import annotations

import logging
from datetime import timedelta

from celery import shared_task
from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from . import cached_reports, limits
from .models import Report

log = logging.getLogger("analysis.tasks")

LOST_AFTER = timedelta(minutes=5)
RUNNING_LOST_AFTER = timedelta(minutes=30)
RETRY_AFTER = timedelta(minutes=5)


@shared_task(name="analysis.compute_report", acks_late=True)
def compute_report(report_id: int) -> str:
    """Compute and store the report ``report_id`` (:func:`analysis.cached_reports.compute`); returns its status."""
    return cached_reports.compute(report_id)


def _queue(report: Report) -> None:
    from kombu.exceptions import OperationalError as BrokerUnavailable

    try:
        compute_report.delay(report.pk)
    except BrokerUnavailable as exc:  # left pending; the next request after LOST_AFTER queues it again
        log.warning("broker unreachable, report %s left pending: %s", report.pk, exc)


def _lost(report: Report, now) -> bool:
    if report.status == Report.PENDING:
        return report.created_at < now - LOST_AFTER
    if report.status == Report.RUNNING:
        return report.started_at is not None and report.started_at < now - RUNNING_LOST_AFTER
    if report.status == Report.FAILED:
        return report.finished_at is not None and report.finished_at < now - RETRY_AFTER
    return False


def computing_now(now) -> int:
    """How many reports are queued or being computed at ``now``: the rows pending (queued less than
    LOST_AFTER ago) or running (started less than RUNNING_LOST_AFTER ago), as :func:`_lost` sees
    them. One count query."""
    return Report.objects.filter(Q(status=Report.PENDING, created_at__gte=now - LOST_AFTER)
                                 | Q(status=Report.RUNNING, started_at__gte=now - RUNNING_LOST_AFTER)).count()


def _store(kind: str, key: str, params: dict, report: Report | None, now, subject: dict) -> tuple[Report, bool]:
    """(row, whether this call must queue it): a new pending row for ``key``, or ``report`` (lost)
    claimed as pending again; another request's row, not to be queued, when that one came first."""
    if report is None:
        try:
            return Report.objects.get_or_create(key=key, defaults={"kind": kind, "params": params, **subject})
        except IntegrityError:  # created by a concurrent request between get and create
            return Report.objects.get(key=key), False
    # claim the re-queue: of several requests seeing the same lost row, one queues it
    claimed = Report.objects.filter(pk=report.pk, status=report.status).update(
        status=Report.PENDING, created_at=now, started_at=None, used_at=now)
    return Report.objects.get(pk=report.pk), bool(claimed)


def request_report(kind: str, key: str, params: dict, *, capped: bool = True, **subject) -> Report:
    """The report row of ``key`` (``kind`` a :class:`Report` kind; ``subject``: campaign=, dataset=,
    image=), queueing its computation when it is new or its task was lost. Returns the row as it
    is after queueing: without a broker done already, unless the computation failed or went to a
    thread (``capped`` and ``settings.REPORTS_IN_THREAD``).

    Reading a stored row records its use (:func:`analysis.limits.touch`). Storing a new computation
    expires the unused reports of other settings (:func:`analysis.limits.expire_unused`). With
    ``capped`` (every web request; not ``warm_reports``) a new
    computation is refused while ``settings.REPORT_MAX_COMPUTING`` reports are queued or being
    computed (:func:`computing_now`): raises :class:`analysis.limits.ComputationsBusy` and writes
    nothing."""
    now = timezone.now()
    report = Report.objects.filter(key=key).first()
    if report is not None and not _lost(report, now):
        limits.touch(report, now)
        return report
    with transaction.atomic():
        if capped and limits.cap() > 0:
            limits.lock_new_computations()
            busy = computing_now(now)
            if busy >= limits.cap():
                raise limits.ComputationsBusy(busy, limits.cap())
        report, created = _store(kind, key, params, report, now, subject)
    if created:
        limits.expire_unused(now)
        if capped and settings.REPORTS_IN_THREAD:
            from metrics.jobs import in_background

            in_background(cached_reports.compute, report.pk)
        else:
            _queue(report)
        report.refresh_from_db()
    return report


def latest_done(kind: str, params: dict, **subject) -> Report | None:
    """The newest done report of this subject and parameters under any key (a stale one while its
    successor is being computed), or None."""
    return Report.objects.filter(kind=kind, params=params, status=Report.DONE, **subject).order_by("-finished_at").first()


#: seconds between refreshes of a page whose report is being computed
REFRESH_SECONDS = 2


def computing_context(row: Report, previous: Report | None = None) -> dict:
    """What a page shows about a report that is not done: its id (for the status endpoint
    ``analysis:report-status``), status, seconds since queued/started, an estimate from the last
    computation of the same subject, the error of a failed one."""
    now = timezone.now()
    since = row.started_at or row.created_at
    elapsed = (now - since).total_seconds() if since else 0.0
    last = previous.seconds if previous is not None else None
    percent = min(95.0, 100.0 * elapsed / last) if (last and row.status == Report.RUNNING) else None
    return {"id": row.pk, "status": row.status, "elapsed": elapsed, "last_seconds": last, "percent": percent,
            "error": row.error, "refresh": REFRESH_SECONDS if row.status in (Report.PENDING, Report.RUNNING) else None}


def read_report(kind: str, key: str, params: dict, **subject) -> tuple[dict | None, str | None, dict | None, Report]:
    """What a page shows for the report of ``key`` (requested with :func:`request_report`):
    (report, problem, computing, row). Done: the stored report, or None and the stored problem
    message (:func:`analysis.cached_reports.problem`), computing None. Not done: the newest done
    report of the same subject and parameters (stale) or None, no problem, and
    :func:`computing_context`."""
    row = request_report(kind, key, params, **subject)
    if row.status == Report.DONE:
        data = row.data
        problem = cached_reports.problem(data)
        return (None if problem else data), problem, None, row
    previous = latest_done(kind, params, **subject)
    stale = previous.data if previous is not None else None
    if cached_reports.problem(stale):
        stale = None
    return stale, None, computing_context(row, previous), row
