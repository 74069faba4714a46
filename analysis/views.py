"""The dashboard: datasets, live metric-run progress, correlation tables, scatter plots, downloads.

The correlation report (bootstrap intervals of every metric) is computed once by a Celery task
and read here (:mod:`analysis.cached_reports`, :func:`analysis.tasks.read_report`): a page whose
report is not stored yet says it is being computed and reloads itself; a download answers 202
(500 if the computation failed) with ``Retry-After`` until the report is stored, then the
documented JSON or CSV. Without a broker (the quick start) the task runs inside the first request.
"""
from django.core.cache import cache
from django.http import Http404, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, render
from django.views.decorators.http import require_GET

from crowd.models import Dataset
from evalcore import csvsafe
from metrics.models import MetricRun
from metrics.uploads import is_upload_key
from metrics.scorers.registry import LEXICAL_MEASURES, METRICS, UNAVAILABLE

from . import cached_reports, plots
from .models import Report
from .reports import (
    ReportError,
    completed_runs,
    dataset_judgments,
    judgment_rows,
    metric_name,
    parse_weighting,
    per_pair,
    protocol,
    report_csv_rows,
)
from .tasks import REFRESH_SECONDS, read_report


def _runs(dataset):
    return list(MetricRun.objects.filter(dataset=dataset).order_by("metric", "-created_at"))


def _run_dict(run):
    return {
        "id": run.pk, "metric": run.metric, "name": metric_name(run.metric, run),
        "version": run.version, "status": run.status, "completed": run.completed, "total": run.total,
        "percent": round(100 * run.progress, 1), "seconds": run.wall_seconds, "error": run.error,
    }


@require_GET
def index(request):
    datasets = [
        {
            "dataset": d,
            "n_images": d.images.count(),
            "n_candidates": d.candidates().count(),
            "n_ratings": dataset_judgments(d).count(),
            "runs": _runs(d),
        }
        for d in Dataset.objects.all()
    ]
    return render(request, "analysis/index.html", {"datasets": datasets})


def not_ready(row: Report, what: str, as_json: bool = True) -> HttpResponse:
    """The answer to a download whose report is not stored yet: HTTP 202 (queued or being computed)
    or 500 (the computation failed, retried on a later request), with ``Retry-After`` (seconds);
    body ``{"report": what, "status": "pending"|"running"|"failed", "error": str}`` as JSON, or that
    status as plain text."""
    status = 500 if row.status == Report.FAILED else 202
    if as_json:
        response = JsonResponse({"report": what, "status": row.status, "error": row.error}, status=status)
    else:
        response = HttpResponse(f"the {what} is {row.status}{': ' + row.error if row.error else ''}; retry later\n",
                                status=status, content_type="text/plain; charset=utf-8")
    response["Retry-After"] = str(REFRESH_SECONDS)
    return response


def _read(dataset, weighting=None):
    """(report, problem, computing, row) of the dataset's correlation report (with gap-weighted
    entries for ``?weighting=gap:mtld``), read from the stored report (requested if it is new;
    see :func:`analysis.tasks.read_report`). A forced-choice dataset or a malformed weighting is a
    problem found before any report is requested (row None)."""
    if protocol(dataset)["task"] == Dataset.TASK_FORCED_CHOICE:
        return None, (f"{dataset.name} is a forced-choice benchmark (which of two captions is better): its accuracies "
                      "per category, significance clusters and human ceiling are on the meta-evaluation page."), None, None
    try:
        parse_weighting(weighting or None)
    except ReportError as exc:
        return None, str(exc), None, None
    key, params = cached_reports.correlation_key(dataset, weighting or None)
    return read_report(Report.CORRELATIONS, key, params, dataset=dataset)


@require_GET
def dataset_detail(request, name):
    dataset = get_object_or_404(Dataset, name=name)
    report, problem, computing, _ = _read(dataset, request.GET.get("weighting"))
    runs = _runs(dataset)
    return render(
        request,
        "analysis/dataset.html",
        {
            "dataset": dataset, "runs": [_run_dict(r) for r in runs], "report": report, "computing": computing,
            "problem": problem, "unavailable": UNAVAILABLE, "weighting": request.GET.get("weighting", ""),
            "weightings": [("gap", "M x Lexical Gap"), ("ldr", "M x lexical diversity ratio")],
            "measures": LEXICAL_MEASURES,
            "busy": any(r.status in (MetricRun.PENDING, MetricRun.RUNNING) for r in runs),
        },
    )


@require_GET
def runs_json(request, name):
    dataset = get_object_or_404(Dataset, name=name)
    return JsonResponse({"dataset": dataset.name, "runs": [_run_dict(r) for r in _runs(dataset)]})


def _report_or_404(name, weighting=None):
    """(dataset, stored report, None), or (dataset, None, 202/500 answer) while it is not stored;
    Http404 with the problem when the report cannot be made."""
    dataset = get_object_or_404(Dataset, name=name)
    report, problem, computing, row = _read(dataset, weighting)
    if problem is not None:
        raise Http404(problem)
    if computing is not None:
        return dataset, None, row
    return dataset, report, None


@require_GET
def report_json(request, name):
    """The correlation report as JSON (:func:`analysis.reports.correlation_report`); 202 while computed."""
    dataset, report, row = _report_or_404(name, request.GET.get("weighting"))
    if report is None:
        return not_ready(row, "correlation report")
    response = JsonResponse(report, json_dumps_params={"indent": 2})
    response["Content-Disposition"] = f'attachment; filename="{dataset.name}-correlations.json"'
    return response


@require_GET
def report_csv(request, name):
    """The correlation report as CSV (:func:`analysis.reports.report_csv_rows`); 202 while computed."""
    dataset, report, row = _report_or_404(name, request.GET.get("weighting"))
    if report is None:
        return not_ready(row, "correlation report", as_json=False)
    response = HttpResponse(content_type="text/csv")
    response["Content-Disposition"] = f'attachment; filename="{dataset.name}-correlations.csv"'
    writer = csvsafe.writer(response)
    for row in report_csv_rows(report):
        writer.writerow(["" if v is None else v for v in row])
    return response


@require_GET
def scatter(request, name, metric):
    dataset = get_object_or_404(Dataset, name=name)
    if metric not in METRICS and not is_upload_key(metric):
        raise Http404(f"unknown metric {metric!r}")
    try:
        runs = completed_runs(dataset, [metric])
    except ReportError as exc:
        raise Http404(str(exc))
    run = runs[metric]
    key = f"scatter:{run.pk}:{run.completed}:{run.finished_at.timestamp() if run.finished_at else 0}"
    png = cache.get(key)
    if png is None:
        rows = judgment_rows(dataset, runs)
        _, _, values, human = per_pair(rows, rows.metric[metric])
        label = f"mean human {dataset.criterion or 'rating'}"
        name = metric_name(metric, run)
        png = plots.scatter_png(values, human, name, label, f"{name} vs humans ({len(values):,} captions)")
        cache.set(key, png, 3600)
    return HttpResponse(png, content_type="image/png")
