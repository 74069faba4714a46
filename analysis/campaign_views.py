"""Campaign owner pages that show the campaign report: the dashboard (progress, agreement, human
ceiling, metric correlations, position bias, workers), the report as JSON and the correlation chart.

The report (bootstrap intervals of every metric, the split-half ceiling) is computed once by a
Celery task and read here (:mod:`analysis.cached_reports`, :func:`analysis.tasks.request_report`):
a GET reads the stored report, plus live progress counts and worker statistics. While the report
of the current judgments is being computed the page says so, shows the previous report if there
is one, and refreshes itself. Every report request is capped like the dashboard's
(:mod:`analysis.limits`): while ``REPORT_MAX_COMPUTING`` reports are queued or computed, a request that
would start this one starts nothing; the JSON and the chart answer 503 with ``Retry-After``
(:func:`analysis.limits.report_request`), and the dashboard, the owners' console, answers 503 with
``Retry-After`` too but still shows the console with the previous report and asks again by itself, so
that a full cap never keeps an owner from pausing or finishing a campaign. The URLs and names are those of the ``crowd`` namespace
(``crowd:campaign``, ``crowd:campaign-report``, ``crowd:campaign-chart``, see
:mod:`analysis.campaign_urls`); owners only, anyone else gets 404.
"""
from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.cache import cache
from django.http import Http404, HttpResponse, JsonResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET

from crowd import engine, quality
from crowd.kinds import kind_of
from crowd.views.owner import console_context, owned_campaign

from . import cached_reports, limits, plots
from .models import Report
from .tasks import REFRESH_SECONDS, computing_context, latest_done, request_report


def worker_stats(campaign, progress: dict) -> list[dict]:
    """:func:`crowd.quality.worker_stats` (it reads every assignment with its item), kept in the
    cache under :func:`analysis.cached_reports.assignments_version`: recomputed only when an
    assignment, a judgment or a worker's standing changed."""
    key = f"campaign-workers:{cached_reports.assignments_version(campaign, progress)}"
    stats = cache.get(key)
    if stats is None:
        stats = quality.worker_stats(campaign)
        cache.set(key, stats, 3600)
    return stats


def busy_context(refused: limits.ComputationsBusy, retry_url: str) -> dict:
    """What ``templates/analysis/computing.html`` shows for a report refused at the cap on concurrent
    computations (nothing stored): the one line, and the URL its script asks again (``retry_url``,
    a request for the same report) every ``refused.retry_after`` seconds until the report is started."""
    return {"id": None, "status": "busy", "message": str(refused), "retry_url": retry_url,
            "refresh": refused.retry_after, "elapsed": 0, "last_seconds": None, "percent": None, "error": ""}


@login_required
@require_GET
def campaign_detail(request, name):
    """The owners' console and dashboard. The report is requested under the cap on concurrent
    computations; refused there, the console is still shown (with the previous report and a
    one-line notice), answered 503 with ``Retry-After``."""
    campaign = owned_campaign(request, name)
    key, params = cached_reports.campaign_key(campaign)
    busy = None
    try:
        row = request_report(Report.CAMPAIGN, key, params, campaign=campaign)
    except limits.ComputationsBusy as refused:
        busy, row = refused, None
    report, computing = (row.data if row is not None else None), None
    if row is None or row.status != Report.DONE:  # show the previous report, if any, while this one is computed
        previous = latest_done(Report.CAMPAIGN, params, campaign=campaign)
        report = previous.data if previous is not None else None
        computing = (busy_context(busy, reverse("crowd:campaign-report", args=[campaign.name])) if busy is not None
                     else computing_context(row, previous))
    progress = engine.campaign_counts(campaign)
    workers = worker_stats(campaign, progress)
    response = render(request, "crowd/owner/detail.html", {
        "campaign": campaign, "kind": kind_of(campaign), "report": report, "computing": computing,
        "progress": progress, "workers": workers,
        "transitions": sorted(engine.TRANSITIONS[campaign.state]),
        **console_context(request, campaign, workers),  # invitation links, audit trail, speed flags
    }, status=503 if busy is not None else 200)
    if busy is not None:
        response["Retry-After"] = str(busy.retry_after)
    return response


@login_required
@require_GET
def campaign_report_json(request, name):
    """The report as JSON (keys of :func:`analysis.campaigns.campaign_report`, plus live "progress"
    and "workers"); while it is being computed: status 202 with {"status", "error"} and Retry-After;
    refused at the cap on concurrent computations: 503 with Retry-After (:func:`analysis.limits.report_request`)."""
    campaign = owned_campaign(request, name)
    row = request_report(Report.CAMPAIGN, *cached_reports.campaign_key(campaign), campaign=campaign)
    if row.status != Report.DONE:
        response = JsonResponse({"campaign": campaign.name, "status": row.status, "error": row.error},
                                status=500 if row.status == Report.FAILED else 202)
        response["Retry-After"] = str(REFRESH_SECONDS)
        return response
    report = cached_reports.with_live_progress(row.data, campaign)
    report["workers"] = worker_stats(campaign, report["progress"])
    return JsonResponse(report, json_dumps_params={"indent": 2})


@login_required
@require_GET
def correlation_chart(request, name, criterion):
    """PNG bars of each metric's Kendall tau-b with the human ceiling, drawn from the stored report
    (and kept in the cache under the report's key); 503 with Retry-After while it is computed or
    refused at the cap on concurrent computations."""
    campaign = owned_campaign(request, name)
    row = request_report(Report.CAMPAIGN, *cached_reports.campaign_key(campaign), campaign=campaign)
    if row.status != Report.DONE:
        response = HttpResponse(f"the report is {row.status}", status=503, content_type="text/plain")
        response["Retry-After"] = str(REFRESH_SECONDS)
        return response
    cache_key = f"campaign-chart:{row.key}:{criterion}"
    png = cache.get(cache_key)
    if png is None:
        report = row.data
        if criterion not in report["correlations"]:
            raise Http404("no correlations for this criterion")
        png = plots.correlation_bars_png(report["correlations"][criterion], report["ceiling"].get(criterion, {}),
                                         f"{campaign.name}: metrics vs human {criterion}")
        cache.set(cache_key, png, 3600)
    return HttpResponse(png, content_type="image/png")
