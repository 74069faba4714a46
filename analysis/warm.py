"""The stored reports the dashboard pages read, and requesting them ahead of any visit.

:func:`reports_for` lists them for some datasets (each dataset's correlation report and the
interactive scatter of each computed metric, unless the dataset is a forced-choice benchmark whose
page is the benchmark page; its benchmark report for each protocol criterion; its example explorer
table; the cross-benchmark comparison; the campaigns' reports), each with the key a page computes
for it (:mod:`analysis.cached_reports`). :func:`request_all` requests them exactly as the pages do
(:func:`analysis.tasks.request_report`): computed in-process without a broker, queued with one.

Two callers: ``python manage.py warm_reports`` (``./run demo`` runs it before serving) and
:func:`refresh_after_run`, connected to :data:`metrics.signals.run_progress` by
:class:`analysis.apps.AnalysisConfig`: with a broker, once the last unfinished metric run of a
dataset is done, its reports and the comparison are queued for the Celery workers, so the pages
find them computed instead of asking for them on the next visit.
"""
from __future__ import annotations

import time
from collections.abc import Iterator

from django.conf import settings as django_settings
from django.db import transaction

from crowd.models import Campaign, Dataset
from metrics.models import MetricRun

from . import cached_reports, charts, leaderboard
from .benchmarks import DEFAULT_ALPHA, DEFAULT_PERMUTATIONS, DEFAULT_RESAMPLES
from .models import Report
from .reports import ReportError, completed_runs, protocol
from .tasks import request_report

#: the settings the pages use when their URL gives none
PAGE_DEFAULTS = {"resamples": DEFAULT_RESAMPLES, "seed": 0, "permutations": DEFAULT_PERMUTATIONS,
                 "alpha": DEFAULT_ALPHA}


def reports_for(datasets: list[Dataset], settings: dict | None = None, *, compare: bool = True,
                compare_names: list[str] | None = None, campaigns: bool = True) -> list[tuple]:
    """The reports the pages of ``datasets`` read, as ``(label, kind, (key, params), subject)``
    tuples for :func:`request_all`. ``settings``: the benchmark and comparison settings
    (``resamples``, ``seed``, ``permutations``, ``alpha``; default :data:`PAGE_DEFAULTS`);
    ``compare_names``: the datasets of the comparison (None: every dataset, as ``/compare/``)."""
    settings = settings or PAGE_DEFAULTS
    todo = []
    for dataset in datasets:
        if protocol(dataset)["task"] != Dataset.TASK_FORCED_CHOICE:
            todo.append((f"{dataset.name}: correlations", Report.CORRELATIONS,
                         cached_reports.correlation_key(dataset, None), {"dataset": dataset}))
            try:  # the dataset page's interactive scatter of each computed metric (analysis.charts)
                scattered = list(completed_runs(dataset))
            except ReportError:
                scattered = []
            for metric in scattered:
                todo.append((f"{dataset.name}: scatter {metric}", charts.SCATTER_KIND,
                             cached_reports.scatter_key(dataset, metric), {"dataset": dataset}))
        for criterion in protocol(dataset)["criteria"] or [None]:  # the compare page charts each one
            label = f"{dataset.name}: benchmark" + (f" ({criterion})" if criterion else "")
            todo.append((label, Report.BENCHMARK, cached_reports.benchmark_key(dataset, settings, criterion),
                         {"dataset": dataset}))
        todo.append((f"{dataset.name}: example explorer", Report.EXPLORER, cached_reports.explorer_key(dataset),
                     {"dataset": dataset}))
        if len(leaderboard.candidate_systems(dataset)) >= 2:  # the default leaderboard page (analysis.leaderboard)
            board = {"resamples": settings["resamples"], "seed": settings["seed"], "alpha": settings["alpha"]}
            todo.append((f"{dataset.name}: leaderboard", Report.LEADERBOARD,
                         cached_reports.leaderboard_key(dataset, board), {"dataset": dataset}))
    if compare:
        todo.append(("comparison", Report.COMPARISON, cached_reports.comparison_key(compare_names, settings), {}))
    if campaigns:
        for campaign in Campaign.objects.filter(dataset__in=datasets).order_by("name"):
            todo.append((f"campaign {campaign.name}", Report.CAMPAIGN, cached_reports.campaign_key(campaign),
                         {"campaign": campaign}))
    return todo


def request_all(todo: list[tuple]) -> Iterator[tuple[str, Report, float]]:
    """Request each report of ``todo`` (:func:`reports_for`); yields ``(label, row, seconds)``."""
    for label, kind, (key, params), subject in todo:
        t0 = time.perf_counter()
        row = request_report(kind, key, params, capped=False, **subject)
        yield label, row, time.perf_counter() - t0


def refresh_after_run(sender, run: MetricRun, **kwargs) -> bool:
    """Receiver of :data:`metrics.signals.run_progress`: when ``run`` is done, a broker is
    configured and no other run of its dataset is still pending or running, queue (after the
    transaction commits) every report of its dataset and the comparison (:data:`PAGE_DEFAULTS`).
    Without a broker nothing happens here: the pages (or ``warm_reports``) compute them in-process;
    nor with ``REPORTS_AFTER_METRIC_RUNS`` off. Returns whether the reports were queued."""
    if (run.status != MetricRun.DONE or django_settings.CELERY_TASK_ALWAYS_EAGER
            or not django_settings.REPORTS_AFTER_METRIC_RUNS):
        return False
    if MetricRun.objects.filter(dataset_id=run.dataset_id).exclude(
            status__in=(MetricRun.DONE, MetricRun.FAILED)).exists():
        return False
    dataset_id = run.dataset_id

    def queue():
        dataset = Dataset.objects.filter(pk=dataset_id).first()
        if dataset is not None:
            for _ in request_all(reports_for([dataset])):
                pass

    transaction.on_commit(queue)
    return True
