"""Pages of the meta-evaluation: one benchmark in depth, and every metric across every benchmark.

Settings come from the query string (``?seed=0&resamples=1000&permutations=1000&alpha=0.05``, and
``criterion=`` on a benchmark page); they are stored in every report and download, so a number on
the page can be reproduced from its JSON.

Reports are computed once by a Celery task and read here (:mod:`analysis.cached_reports`,
:func:`analysis.tasks.read_report`), under a key made of the settings and the fingerprint of the
data they read: a page whose report is not stored yet says it is being computed and reloads
itself, a JSON/CSV/LaTeX download answers 202 with ``Retry-After`` (500 if the computation failed),
a chart 503 with ``Retry-After``. Settings are validated before any report is requested (HTTP 400;
anyone who is not staff chooses among the offered values, :data:`analysis.limits.OFFERED`).
Without a broker (the quick start) the task runs inside the first request.
"""
import hashlib
import json

from django.core.cache import cache
from django.http import Http404, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, render
from django.views.decorators.http import require_GET

from crowd.models import Dataset
from captioneval.utils import csvsafe
from metrics import pipeline
from . import cached_reports, limits, plots, published
from .benchmarks import (
    DEFAULT_ALPHA,
    DEFAULT_PERMUTATIONS,
    DEFAULT_RESAMPLES,
    LABELS,
    column_title,
    comparison_csv_rows,
    comparison_latex,
    headline_first,
)
from .models import Report
from .query import bad_request
from .reports import ReportError, check_criterion, protocol
from .tasks import REFRESH_SECONDS, read_report
from .views import not_ready

MAX_RESAMPLES = 10000


class BadSettings(ValueError):
    pass


def benchmark_settings(request) -> dict:
    """The bootstrap/permutation settings of the query string of ``request``, validated:
    ``{"resamples": int 0..10000, "seed": int 0..2^32-1, "permutations": int 0..10000,
    "alpha": float in (0, 1)}``, a default for each one absent or empty (:mod:`analysis.benchmarks`).
    Used by the benchmark and comparison pages and the API's report resources.

    Raises :class:`BadSettings` (the pages answer HTTP 400, the API 400 naming the setting) with one
    line naming the setting: a value that is not a number, is out of its range, or, for anyone
    who is not staff, is not among the offered values (:func:`analysis.limits.not_offered`)."""
    out = {}
    for key, default, cast in (
        ("resamples", DEFAULT_RESAMPLES, int), ("seed", 0, int), ("permutations", DEFAULT_PERMUTATIONS, int),
        ("alpha", DEFAULT_ALPHA, float),
    ):
        raw = request.GET.get(key, "")
        try:
            out[key] = cast(raw) if raw != "" else default
        except ValueError:
            raise BadSettings(f"{key} must be a number, got {raw!r}") from None
    if not 0 <= out["resamples"] <= MAX_RESAMPLES or not 0 <= out["permutations"] <= MAX_RESAMPLES:
        raise BadSettings(f"resamples and permutations must be between 0 and {MAX_RESAMPLES}")
    if not 0 < out["alpha"] < 1:
        raise BadSettings("alpha must be between 0 and 1")
    if not 0 <= out["seed"] < 2**32:
        raise BadSettings("seed must be between 0 and 2^32 - 1")
    refused = limits.not_offered(request, out)
    if refused:
        raise BadSettings(refused)
    return out


def _query(settings: dict, **extra) -> str:
    from urllib.parse import urlencode

    return urlencode({**settings, **{k: v for k, v in extra.items() if v}})


def criterion_problem(dataset, criterion: str | None) -> str | None:
    """One line when ``criterion`` (None or "": the protocol's own) is neither a criterion of the
    dataset's protocol nor judged in it (:func:`analysis.reports.check_criterion`), else None.
    Checked before a report is requested, so that a criterion nobody judged computes and stores
    nothing (the benchmark and leaderboard pages, their downloads and charts, the API)."""
    if criterion and criterion not in (protocol(dataset).get("criteria") or []):
        try:
            check_criterion(dataset, criterion)
        except ReportError as exc:
            return str(exc)
    return None


def read_benchmark(dataset, settings: dict, criterion: str | None):
    """(report, problem, computing, row) of the benchmark report of ``dataset`` with the validated
    ``settings`` (:func:`benchmark_settings`) and ``criterion`` (a human criterion name, or None /
    "" for the protocol's own): :func:`analysis.benchmarks.benchmark_report` as stored, requested
    when new. As :func:`analysis.tasks.read_report`: ``report`` the stored dict (or a stale one
    while computing, or None), ``problem`` the one-line message when the data cannot give the
    report (else None), ``computing`` the progress context while not done (else None), ``row`` the
    :class:`analysis.models.Report`. Used by the benchmark pages, charts and the API. A criterion
    the dataset has no judgments on is the problem, found before any report is requested
    (:func:`criterion_problem`: computing and row None).

    Raises nothing of its own; ``criterion`` must hold no control character (PostgreSQL refuses
    NUL: the pages and the API refuse one before, :mod:`analysis.query`)."""
    problem = criterion_problem(dataset, criterion)
    if problem is not None:
        return None, problem, None, None
    key, params = cached_reports.benchmark_key(dataset, settings, criterion or None)
    return read_report(Report.BENCHMARK, key, params, dataset=dataset)


def _stored_benchmark(request, dataset, waiting) -> tuple[HttpResponse | None, dict | None]:
    """``(answer, report)`` of a benchmark download or chart: the stored report of ``dataset`` with
    the request's settings and ``criterion`` (:func:`read_benchmark`), or the answer instead
    (:func:`stored_or_answer`; ``waiting(row)`` while it is computed)."""
    answer, got = stored_or_answer(
        lambda: read_benchmark(dataset, benchmark_settings(request), request.GET.get("criterion")), waiting)
    return answer, got and got[0]


def _chart_not_ready(row: Report) -> HttpResponse:
    """503 with ``Retry-After`` for a chart whose report is not stored yet."""
    response = HttpResponse(f"the report is {row.status}", status=503, content_type="text/plain")
    response["Retry-After"] = str(REFRESH_SECONDS)
    return response


def _bad(exc) -> HttpResponse:
    """HTTP 400 naming the problem ``exc`` (a :class:`BadSettings` or a stored report's problem)."""
    return bad_request(str(exc))


def stored_or_answer(read, waiting, problem=_bad, stale: bool = False) -> tuple[HttpResponse | None, tuple | None]:
    """The preamble of every view of one stored report (downloads, charts, chart specs): read the
    settings and the report, or say why not. ``read()`` validates the request's settings and reads
    the report, returning ``(report, problem, computing, row, *more)`` as :func:`read_benchmark` or
    :func:`read_comparison` do.

    Returns ``(None, what read() returned)`` when the view can show the report, else ``(response,
    None)``: HTTP 400 for a :class:`BadSettings` (:func:`_bad`), ``problem(message)`` (default a 400
    too) for a report the data cannot give, ``waiting(row)`` (202, 500 or 503, by the caller) while
    the report is not stored yet, or, with ``stale``, only while there is no report at all (a stale
    one of the same settings is shown meanwhile)."""
    try:
        got = read()
    except BadSettings as exc:
        return _bad(exc), None
    report, message, computing, row = got[:4]
    if message is not None:
        return problem(message), None
    if report is None if stale else computing is not None:
        return waiting(row), None
    return None, got


@require_GET
def benchmark_page(request, name):
    dataset = get_object_or_404(Dataset, name=name)
    try:
        settings = benchmark_settings(request)
    except BadSettings as exc:
        return _bad(exc)
    criterion = request.GET.get("criterion") or None
    report, problem, computing, _ = read_benchmark(dataset, settings, criterion)
    if report:  # the published values from the bundled table, beside ours (analysis.published)
        report = published.attach(dataset, report)
    context = {"dataset": dataset, "report": report, "problem": problem, "settings": settings, "labels": LABELS,
               "offered": limits.offered(request),
               "query": _query(settings, criterion=criterion), "computing": computing}
    if report:
        context["rows"] = _page_rows(report)
        sig = report.get("significance", {}).get("permutation")
        context["significance"] = sig and {
            "order": list(zip(sig["display_names"], sig["names"], [sig["ranks"][k] for k in sig["names"]],
                              [sig["values"].get(k) for k in sig["names"]])),
            "matrix": [(sig["display_names"][i], row) for i, row in enumerate(sig["p_values"])],
            "names": sig["display_names"],
        }
        context["criteria"] = report["protocol"].get("criteria") or []
        context["statistics"] = headline_first(report.get("settings", {}).get("statistics") or [], report.get("headline"))
    return render(request, "analysis/benchmark.html", context)


def _page_rows(report: dict) -> list[dict]:
    """Per-metric table rows for the template (values already x1; the template multiplies)."""
    ranks = (report.get("significance", {}).get("permutation") or {}).get("ranks", {})
    rows = []
    for key, m in report["metrics"].items():
        rows.append({"key": key, "m": m, "rank": ranks.get(key)})
    return rows


@require_GET
def benchmark_json(request, name):
    """The benchmark report as JSON (:func:`analysis.benchmarks.benchmark_report`); 400 for bad
    settings or a report that cannot be made, 202 while it is computed."""
    dataset = get_object_or_404(Dataset, name=name)
    answer, report = _stored_benchmark(request, dataset, lambda row: not_ready(row, "benchmark report"))
    if answer is not None:
        return answer
    response = JsonResponse(published.attach(dataset, report), json_dumps_params={"indent": 2})
    response["Content-Disposition"] = f'attachment; filename="{name}-benchmark.json"'
    return response


@require_GET
def benchmark_chart(request, name, level, statistic, fmt="png"):
    """Bars of one level/statistic of the stored benchmark report as PNG, SVG or PDF (x100, the
    ceiling only on its own statistic, 50% chance on accuracies: :func:`analysis.charts.bar_entries`);
    503 while it is computed."""
    answer, report = _stored_benchmark(request, get_object_or_404(Dataset, name=name), _chart_not_ready)
    if answer is not None:
        return answer
    if level not in ("item", "image", "system"):
        raise Http404("unknown level")
    digest = hashlib.sha256(json.dumps([level, statistic, report], sort_keys=True).encode()).hexdigest()
    key = f"benchmark-chart:{digest}:{fmt}"
    png = cache.get(key)
    if png is None:
        from .charts import bar_entries, bar_title

        bars = bar_entries(report, level, statistic)
        entries = [{"name": e["name"], "value": e["value"], "ci95": [e["lo"], e["hi"]], "rank": e["rank"]} for e in bars["entries"]]
        ceiling = bars["ceiling"] and {"value": bars["ceiling"]["value"], "ci95": [bars["ceiling"]["lo"], bars["ceiling"]["hi"]],
                                       "label": bars["ceiling"]["label"]}
        png = plots.benchmark_bars_png(entries, bars["label"], ceiling, bar_title(report, level, statistic), bars["note"], chance=bars["chance"], fmt=fmt)
        cache.set(key, png, 3600)
    response = HttpResponse(png, content_type=plots.FORMATS[fmt])
    if fmt != "png":
        response["Content-Disposition"] = f'attachment; filename="{name}-{level}-{statistic}.{fmt}"'
    return response


@require_GET
def significance_png(request, name, fmt="png"):
    """p-value heat map of the stored benchmark report's permutation test; 503 while it is computed."""
    answer, report = _stored_benchmark(request, get_object_or_404(Dataset, name=name), _chart_not_ready)
    if answer is not None:
        return answer
    sig = report.get("significance", {}).get("permutation")
    if not sig:
        raise Http404("no significance test in this report (fewer than 2 metrics)")
    response = HttpResponse(plots.p_value_heatmap_png(sig["display_names"], sig["p_values"], sig["alpha"], fmt=fmt),
                            content_type=plots.FORMATS[fmt])
    if fmt != "png":
        response["Content-Disposition"] = f'attachment; filename="{name}-significance.{fmt}"'
    return response


# --------------------------------------------------------------------------------------------
# All benchmarks
# --------------------------------------------------------------------------------------------


def read_comparison(request):
    """(matrix, problem, computing, row, settings) of ``request``: the comparison of every metric
    across the benchmarks named by its repeatable ``dataset`` parameter (all when none),
    :func:`analysis.benchmarks.comparison`, stored under the fingerprint of everything it reads
    (:func:`analysis.cached_reports.comparison_key`) and requested when new, with the published
    values attached (:func:`analysis.published.attach_comparison`). ``matrix``, ``problem``,
    ``computing`` and ``row`` as in :func:`read_benchmark`; ``settings`` those of
    :func:`benchmark_settings`. Used by the comparison pages and downloads and the API.

    Raises :class:`BadSettings` for bad settings (before any report is requested); an unknown
    dataset name is the ``problem`` (:func:`metrics.pipeline.get_dataset`'s message, computing and
    row None: nothing is requested), not an exception. A name given twice counts once."""
    settings = benchmark_settings(request)
    names = list(dict.fromkeys(n for n in request.GET.getlist("dataset") if n)) or None
    known = set(Dataset.objects.filter(name__in=names or []).values_list("name", flat=True))
    for name in names or []:
        if name not in known:
            try:
                pipeline.get_dataset(name)
            except pipeline.PipelineError as exc:
                return None, str(exc), None, None, settings
    key, params = cached_reports.comparison_key(names, settings)
    matrix, *rest = read_report(Report.COMPARISON, key, params)
    if matrix:  # the published values remade from the bundled table (analysis.published)
        matrix = published.attach_comparison(matrix)
    return (matrix, *rest, settings)


@require_GET
def compare_page(request):
    try:
        matrix, problem, computing, _, settings = read_comparison(request)
    except BadSettings as exc:
        return _bad(exc)
    if problem is not None:
        return _bad(problem)
    if matrix is None:  # being computed, no earlier comparison with these settings to show
        return render(request, "analysis/compare.html", {
            "matrix": None, "columns": [], "rows": [], "settings": settings, "query": _query(settings),
            "offered": limits.offered(request),
            "computing": computing,
        })
    columns = [dict(c, title=column_title(c), label=LABELS.get(c["statistic"], c["statistic"])) for c in matrix["columns"]]
    rows = [{"metric": r["metric"], "name": r["name"], "cells": [(c, r["cells"].get(c["id"])) for c in columns]} for r in matrix["rows"]]
    return render(request, "analysis/compare.html", {
        "matrix": matrix, "columns": columns, "rows": rows, "settings": settings, "query": _query(settings),
        "offered": limits.offered(request),
        "computing": computing, "published": matrix.get("published") or [],
    })


def _download(request, make, as_json: bool = False):
    """A comparison download: ``make(matrix)`` builds the response from the stored comparison; bad
    settings or a comparison that cannot be made are an HTTP 400; 202 while it is computed."""
    answer, got = stored_or_answer(lambda: read_comparison(request),
                                   lambda row: not_ready(row, "comparison", as_json=as_json))
    return answer if answer is not None else make(got[0])


def _attachment(response, filename: str):
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


@require_GET
def compare_json(request):
    return _download(request, lambda m: _attachment(JsonResponse(m, json_dumps_params={"indent": 2}), "metric-comparison.json"),
                     as_json=True)


@require_GET
def compare_csv(request):
    def make(matrix):
        response = HttpResponse(content_type="text/csv")
        writer = csvsafe.writer(response)
        for row in comparison_csv_rows(matrix):
            writer.writerow(["" if v is None else v for v in row])
        return _attachment(response, "metric-comparison.csv")

    return _download(request, make)


@require_GET
def compare_latex(request):
    return _download(request, lambda m: _attachment(
        HttpResponse(comparison_latex(m), content_type="text/x-tex; charset=utf-8"), "metric-comparison.tex"))
