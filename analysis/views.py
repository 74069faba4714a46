"""The dashboard: datasets, live metric-run progress, correlation tables, scatter plots, downloads."""
from django.core.cache import cache
from django.http import Http404, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, render
from django.views.decorators.http import require_GET

from crowd.models import Dataset
from evalsite import csvsafe
from metrics.models import MetricRun
from metrics.uploads import is_upload_key
from metrics.scorers.registry import LEXICAL_MEASURES, METRICS, UNAVAILABLE

from . import plots
from .reports import (
    ReportError,
    completed_runs,
    correlation_report,
    dataset_judgments,
    judgment_rows,
    metric_name,
    per_pair,
    protocol,
    report_csv_rows,
)


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


def _report_or_none(dataset, weighting=None):
    """The dataset's correlation report (with gap-weighted entries for ``?weighting=gap:mtld``)."""
    if protocol(dataset)["task"] == "forced_choice":
        return None, (f"{dataset.name} is a forced-choice benchmark (which of two captions is better): its accuracies "
                      "per category, significance clusters and human ceiling are on the meta-evaluation page.")
    try:
        return correlation_report(dataset.name, weighting=weighting or None), None
    except ReportError as exc:
        return None, str(exc)


@require_GET
def dataset_detail(request, name):
    dataset = get_object_or_404(Dataset, name=name)
    report, problem = _report_or_none(dataset, request.GET.get("weighting"))
    runs = _runs(dataset)
    return render(
        request,
        "analysis/dataset.html",
        {
            "dataset": dataset, "runs": [_run_dict(r) for r in runs], "report": report,
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
    dataset = get_object_or_404(Dataset, name=name)
    report, problem = _report_or_none(dataset, weighting)
    if report is None:
        raise Http404(problem)
    return dataset, report


@require_GET
def report_json(request, name):
    dataset, report = _report_or_404(name, request.GET.get("weighting"))
    response = JsonResponse(report, json_dumps_params={"indent": 2})
    response["Content-Disposition"] = f'attachment; filename="{dataset.name}-correlations.json"'
    return response


@require_GET
def report_csv(request, name):
    dataset, report = _report_or_404(name, request.GET.get("weighting"))
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
