"""Chart endpoints: Vega-Lite specifications (JSON) for the interactive charts, and the
matplotlib figures (PNG, SVG, PDF) for papers, all drawn from STORED reports.

* ``/datasets/<name>/scatter/<metric>.json``: the metric-vs-human scatter spec
  (:func:`analysis.charts.scatter_spec`) from the stored scatter report
  (:func:`analysis.cached_reports.scatter_key`, computed by the Celery task; the request only
  reads it), with each sampled caption's image URL (:func:`crowd.images.image_url`);
  ``.png``/``.svg``/``.pdf``: the same scatter with every caption, drawn by matplotlib.
* ``/datasets/<name>/benchmark/chart/<level>/<statistic>.json``: one bar chart of the stored
  benchmark report (:func:`analysis.charts.bar_entries`, :func:`analysis.charts.bar_spec`); the
  figures of the same chart are ``.png``/``.svg``/``.pdf`` (:func:`analysis.benchmark_views.benchmark_chart`).

While a report is being computed a spec answers 202 and a figure 503, both with ``Retry-After``
(500 if the computation failed); a report that cannot be made (metric not computed, no judgments)
answers 404 with its message; bad settings 400.
"""
from __future__ import annotations

from django.core.cache import cache
from django.http import Http404, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404
from django.views.decorators.http import require_GET

from crowd.models import Dataset, Image
from captioneval.metrics.registry import METRICS
from metrics.uploads import is_upload_key

from . import cached_reports, charts, plots
from .models import Report
from .tasks import REFRESH_SECONDS, read_report
from .views import not_ready

LEVELS = ("item", "image", "system")


def image_urls(image_ids) -> dict[int, str]:
    """{image id: picture URL} of the given images (one query), from the dataset's image source
    (:func:`crowd.images.image_url`); images without a URL are left out."""
    try:
        from crowd.images import image_url
    except ImportError:  # no image sources in this installation: no pictures in tooltips
        return {}
    out = {}
    for image in Image.objects.filter(pk__in=list(image_ids)).select_related("dataset"):
        url = image_url(image)
        if url:
            out[image.pk] = url
    return out


def _figure_response(content: bytes, fmt: str, filename: str) -> HttpResponse:
    response = HttpResponse(content, content_type=plots.FORMATS[fmt])
    if fmt != "png":  # PNGs show inline on the pages; SVG/PDF are downloads for papers
        response["Content-Disposition"] = f'attachment; filename="{filename}.{fmt}"'
    return response


def _figure_not_ready(row: Report) -> HttpResponse:
    response = HttpResponse(f"the report is {row.status}", status=503, content_type="text/plain")
    response["Retry-After"] = str(REFRESH_SECONDS)
    return response


class _Problem(Exception):
    """The scatter cannot be made (metric unknown or not computed, no judgments): the message."""


def _scatter_report(name: str, metric: str):
    """(dataset, stored scatter or None while it is computed, row); Http404 for an unknown
    dataset, :class:`_Problem` for an unknown metric or a scatter that cannot be made."""
    dataset = get_object_or_404(Dataset, name=name)
    if metric not in METRICS and not is_upload_key(metric):
        raise _Problem(f"unknown metric {metric!r}")
    key, params = cached_reports.scatter_key(dataset, metric)
    data, problem, _, row = read_report(charts.SCATTER_KIND, key, params, dataset=dataset)
    if problem is not None:
        raise _Problem(problem)
    return dataset, data, row


@require_GET
def scatter_spec(request, name, metric):
    """Vega-Lite spec of the scatter of ``metric`` on dataset ``name``; 202 while computed, 404
    ``{"problem": message}`` when it cannot be made."""
    try:
        _, data, row = _scatter_report(name, metric)
    except _Problem as exc:
        return JsonResponse({"problem": str(exc)}, status=404)
    if data is None:
        return not_ready(row, "scatter")
    urls = image_urls({p["image"] for p in data["points"]})
    return JsonResponse(charts.scatter_spec(data, urls))


@require_GET
def scatter_figure(request, name, metric, fmt="png"):
    """The scatter with every caption as PNG, SVG or PDF (matplotlib, :func:`analysis.plots.scatter_figure`),
    drawn once per stored report and format and kept in the cache; 503 while computed."""
    try:
        dataset, data, row = _scatter_report(name, metric)
    except _Problem as exc:
        return HttpResponse(str(exc), status=404, content_type="text/plain; charset=utf-8")
    if data is None:
        return _figure_not_ready(row)
    cache_key = f"scatter-figure:{row.key}:{fmt}"
    content = cache.get(cache_key)
    if content is None:
        label = f"mean human {data['criterion']}"
        content = plots.scatter_figure(
            data["all"]["x"], data["all"]["y"], data["name"], label, f"{data['name']} vs humans ({data['n']:,} captions)",
            fmt=fmt, fit=data["fit"], y_domain=data["y_domain"])
        cache.set(cache_key, content, 3600)
    return _figure_response(content, fmt, f"{dataset.name}-{metric}-scatter")


@require_GET
def benchmark_chart_spec(request, name, level, statistic):
    """Vega-Lite spec of one level/statistic of the stored benchmark report (same settings in the
    query string as the page); 400 bad settings, 404 unknown level or statistic, 202 while computed."""
    from .benchmark_views import BadSettings, _bad, benchmark_settings, read_benchmark

    dataset = get_object_or_404(Dataset, name=name)
    try:
        settings = benchmark_settings(request)
    except BadSettings as exc:
        return _bad(exc)
    if level not in LEVELS:
        raise Http404("unknown level")
    report, problem, computing, row = read_benchmark(dataset, settings, request.GET.get("criterion"))
    if problem is not None:
        return _bad(problem)
    if report is None:
        return not_ready(row, "benchmark report")
    known = set(report.get("settings", {}).get("statistics") or []) | {"accuracy", "all"} \
        | set((report.get("protocol") or {}).get("categories") or [])
    if statistic not in known:
        raise Http404(f"unknown statistic {statistic!r}")
    bars = charts.bar_entries(report, level, statistic)
    return JsonResponse(charts.bar_spec(bars, charts.bar_title(report, level, statistic)))
