"""The system leaderboard of a dataset: its page, interactive charts and downloads.

``/datasets/<name>/leaderboard/`` shows the stored leaderboard report
(:func:`analysis.leaderboard.leaderboard`, shape in its docstring): one row per candidate system
with the corpus score of every computed metric (CIDEr-D, BLEU-4... as each metric's reference
implementation scores that system's outputs alone) and the mean of every human criterion, each with
its 95% bootstrap interval (resampling images) and rank; interval charts per metric and criterion;
the pairwise p-value matrix of each metric as a heat map (paired bootstrap resampling, Koehn 2004,
or approximate randomization, Riezler and Maxwell 2005); the system-level agreement of each metric
with people (Kendall tau, Pearson r over systems, with a caveat under 5 systems); the
multiple-comparison note; CSV, JSON and LaTeX downloads.

Settings come from the query string and are validated before any report is requested (HTTP 400
with one line naming the setting): ``metric`` and ``criterion`` (repeatable; default every
computed metric, every criterion), ``baseline`` (a candidate system: compare against it only;
default all pairs), ``test`` (``bootstrap`` | ``randomization``), ``resamples`` (1..10000),
``seed`` (0..2^32-1), ``alpha`` (0..1, default 0.05); anyone who is not staff chooses resamples,
seed and alpha among the offered values (:data:`analysis.limits.OFFERED`).

As every page of :mod:`analysis.benchmark_views`, nothing is computed in the request: the report
is read from :class:`analysis.models.Report` (kind ``leaderboard``, key
:func:`analysis.cached_reports.leaderboard_key`); while it is computed the page shows a progress
bar that polls ``status.json``, a download answers 202 with ``Retry-After`` (500 when the
computation failed), a chart spec 202 (drawn when ready by ``analysis/static/analysis/charts.js``).
"""
from __future__ import annotations

from urllib.parse import urlencode

from django.http import Http404, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.views.decorators.http import require_GET

from crowd.models import Dataset
from captioneval.utils import csvsafe
from captioneval.metrics.registry import METRICS
from metrics.uploads import is_upload_key, uploaded_run

from . import cached_reports, charts, leaderboard, limits
from .benchmark_views import BadSettings, _bad, criterion_problem, stored_or_answer
from .explorer import metric_scale
from .models import Report
from .tasks import read_report
from .views import not_ready

#: the page's upper bound on bootstrap resamples / randomization trials (a request must not queue hours of work)
MAX_RESAMPLES = 10000
#: the paired tests of the page, by their ``test=`` value (:data:`analysis.leaderboard.TESTS`)
TESTS = {
    "bootstrap": "paired bootstrap resampling (Koehn 2004; the resamples of sacrebleu --paired-bs, p-value from the deltas centred at the observed one)",
    "randomization": "approximate randomization (Riezler and Maxwell 2005; sacrebleu --paired-ar)",
}
SHORT_TESTS = {"bootstrap": "paired bootstrap resampling", "randomization": "approximate randomization"}


def candidate_system_names(dataset) -> list[str]:
    """Names of the systems the leaderboard ranks (:func:`analysis.leaderboard.candidate_systems`:
    not the reference system, not the systems of an unpublished campaign)."""
    return [s.name for s in leaderboard.candidate_systems(dataset)]


def leaderboard_settings(request, dataset) -> dict:
    """The leaderboard settings of the query string, validated:

        {"metrics": [keys] | None, "criteria": [names] | None, "baseline": name | None,
         "test": "bootstrap" | "randomization", "resamples": int, "seed": int, "alpha": float}

    Raises :class:`analysis.benchmark_views.BadSettings` (HTTP 400) naming the setting: an unknown
    metric key or an uploaded metric's key without scores on the dataset, a criterion the dataset has
    no judgments on (by its protocol), a baseline that is not one of its candidate systems, an
    unknown test, a number that is not one or out of range or, for anyone who is not staff, not
    among the offered values (:func:`analysis.limits.not_offered`). Whether
    a metric has been computed is the report's business (its stored problem is shown)."""
    out = {}
    defaults = leaderboard.default_settings()
    for key, cast in (("resamples", int), ("seed", int), ("alpha", float)):
        default = defaults[key]
        raw = request.GET.get(key, "").strip()
        try:
            out[key] = cast(raw) if raw != "" else default
        except ValueError:
            raise BadSettings(f"{key} must be a number, got {raw!r}") from None
    if not 1 <= out["resamples"] <= MAX_RESAMPLES:
        raise BadSettings(f"resamples must be between 1 and {MAX_RESAMPLES}, got {out['resamples']}")
    if not 0 <= out["seed"] < 2**32:
        raise BadSettings(f"seed must be between 0 and 2^32 - 1, got {out['seed']}")
    if not 0 < out["alpha"] < 1:
        raise BadSettings(f"alpha must be between 0 and 1, got {out['alpha']}")
    refused = limits.not_offered(request, out)
    if refused:
        raise BadSettings(refused)
    test = request.GET.get("test", "").strip() or defaults["test"]
    if test not in TESTS:
        raise BadSettings(f"test must be one of {', '.join(TESTS)}, got {test!r}")
    out["test"] = test
    metrics = list(dict.fromkeys(m.strip() for m in request.GET.getlist("metric") if m.strip()))
    for m in metrics:
        if m not in METRICS and not is_upload_key(m):
            raise BadSettings(f"metric: unknown metric {m!r}; known: {', '.join(METRICS)}")
        if is_upload_key(m) and uploaded_run(dataset, m) is None:  # any user_... name would be a new report
            raise BadSettings(f"metric: no scores of {m!r} were uploaded to dataset {dataset.name!r}")
    out["metrics"] = metrics or None
    criteria = list(dict.fromkeys(c.strip() for c in request.GET.getlist("criterion") if c.strip()))
    for c in criteria:  # one judged though not named by the protocol is fine
        problem = criterion_problem(dataset, c)
        if problem is not None:
            raise BadSettings(f"criterion: {problem}")
    out["criteria"] = criteria or None
    baseline = request.GET.get("baseline", "").strip() or None
    if baseline is not None and baseline not in candidate_system_names(dataset):
        raise BadSettings(f"baseline: {baseline!r} is not a candidate system of dataset {dataset.name!r}")
    out["baseline"] = baseline
    return out


def settings_query(settings: dict) -> str:
    """The query string of ``settings`` (lists repeated, None left out), for links and downloads."""
    pairs = [("metric", m) for m in settings.get("metrics") or []] + [("criterion", c) for c in settings.get("criteria") or []]
    for key in ("baseline", "test", "resamples", "seed", "alpha"):
        if settings.get(key) is not None:
            pairs.append((key, settings[key]))
    return urlencode(pairs)


def read_leaderboard(dataset, settings: dict):
    """(report, problem, computing, row) of the leaderboard of ``dataset`` with the validated
    ``settings`` (:func:`leaderboard_settings`): :func:`analysis.leaderboard.leaderboard` as stored
    (key :func:`analysis.cached_reports.leaderboard_key`), requested when new. ``report`` the stored
    dict (or a stale one while computing, or None), ``problem`` the one-line message when the data
    cannot give a leaderboard (else None), ``computing`` the progress context while not done (else
    None), ``row`` the :class:`analysis.models.Report` (:func:`analysis.tasks.read_report`). Used by
    the leaderboard pages, downloads and chart specs and the API. Raises nothing of its own."""
    key, params = cached_reports.leaderboard_key(dataset, settings)
    return read_report(Report.LEADERBOARD, key, params, dataset=dataset)


def _dataset_and_settings(name, request):
    dataset = get_object_or_404(Dataset, name=name)
    return dataset, leaderboard_settings(request, dataset)


# --- numbers as shown ---------------------------------------------------------------------------

def _fmt(value, scale: float) -> str:
    """A score in the table's unit: x100 with one decimal for a [0, 1] metric, else 3 decimals."""
    if value is None:
        return "n/a"
    return f"{value * scale:.1f}" if scale == 100 else f"{value * scale:.3f}"


def _scaled(value, scale: float):
    return None if value is None else round(float(value) * scale, 6)


def column_units(report: dict) -> dict:
    """{metric key: scale} (100 for a metric whose range is [0, 1], as in every table, else 1)."""
    return {m["key"]: metric_scale(m["key"]) for m in report.get("metrics", [])}


def metric_title(m: dict, scale: float) -> str:
    return m["name"] + (" (x100)" if scale == 100 else "") + ("" if m.get("higher", True) else " (lower is better)")


def system_order(report: dict) -> list[str]:
    """Systems best first by the first metric (then by the first criterion, then by name)."""
    systems = list(report["systems"])
    if report.get("metrics"):
        first = report["metrics"][0]["key"]
        return sorted(systems, key=lambda s: ((report["systems"][s]["metrics"].get(first) or {}).get("rank") or 1e9, s))
    if report.get("criteria"):
        c = report["criteria"][0]
        return sorted(systems, key=lambda s: ((report["systems"][s]["human"].get(c) or {}).get("rank") or 1e9, s))
    return sorted(systems)


def page_context(report: dict) -> dict:
    """What the template shows of a stored report: header columns, table rows (display strings with
    their sort keys), chart and heat-map ids, the agreement table."""
    scales = column_units(report)
    clusters = report.get("clusters") or {}
    name = report["dataset"]
    columns = [{"kind": "metric", "key": m["key"], "title": metric_title(m, scales[m["key"]]), "corpus": m.get("corpus", ""),
                "spec": reverse("analysis:leaderboard-intervals", args=[name, m["key"]])}
               for m in report.get("metrics", [])]
    columns += [{"kind": "human", "key": c, "title": f"{c} (human mean)", "corpus": "",
                 "spec": reverse("analysis:leaderboard-human-intervals", args=[name, c])} for c in report.get("criteria", [])]
    rows = []
    for s in system_order(report):
        entry = report["systems"][s]
        cells = []
        for col in columns:
            if col["kind"] == "metric":
                v = entry["metrics"].get(col["key"]) or {}
                value, scale, cluster = v.get("score"), scales[col["key"]], (clusters.get(col["key"]) or {}).get(s)
            else:
                v = entry["human"].get(col["key"]) or {}
                value, scale, cluster = v.get("mean"), 1.0, None
            ci = v.get("ci95") or [None, None]
            cells.append({"col": col, "value": _fmt(value, scale), "sort": "" if value is None else value,
                          "ci": None if ci[0] is None else f"[{_fmt(ci[0], scale)}, {_fmt(ci[1], scale)}]",
                          "rank": v.get("rank"), "cluster": cluster})
        rows.append({"system": s, "baseline": s == report.get("baseline"), "cells": cells,
                     "n_images": entry.get("n_images"), "n_captions": entry.get("n_captions")})
    agreement = []
    for m in report.get("metrics", []):
        by = (report.get("system_agreement") or {}).get(m["key"]) or {}
        agreement.append({"key": m["key"], "name": m["name"],
                          "cells": [(c, by.get(c) or {}) for c in report.get("criteria", [])]})
    caveats = sorted({cell.get("caveat") for a in agreement for _, cell in a["cells"] if cell.get("caveat")})
    n_significant = {}
    for c in report.get("comparisons", []):
        n_significant.setdefault(c["metric"], [0, 0])
        n_significant[c["metric"]][1] += 1
        n_significant[c["metric"]][0] += bool(c.get("significant"))
    tested = [m for m in report.get("metrics", []) if m["key"] in n_significant]
    return {"columns": columns, "rows": rows, "agreement": agreement, "caveats": caveats,
            "significant_counts": n_significant, "tested_metrics": tested}


def interval_entries(report: dict, kind: str, key: str) -> tuple[list[dict], str]:
    """(entries best first in the table's unit, axis title) of one metric (``kind`` "metric") or
    human criterion ("human") for :func:`analysis.charts.leaderboard_interval_spec`; KeyError for
    a column absent from the report."""
    if kind == "metric":
        meta = next((m for m in report.get("metrics", []) if m["key"] == key), None)
        if meta is None:
            raise KeyError(key)
        scale, title, field = metric_scale(key), None, "score"
        title = metric_title(meta, scale)
        cluster_of = (report.get("clusters") or {}).get(key) or {}
    else:
        if key not in report.get("criteria", []):
            raise KeyError(key)
        scale, title, field, cluster_of = 1.0, f"{key} (human mean)", "mean", {}
    entries = []
    for s, entry in report["systems"].items():
        v = (entry["metrics"] if kind == "metric" else entry["human"]).get(key) or {}
        ci = v.get("ci95") or [None, None]
        entries.append({"system": s, "value": _scaled(v.get(field), scale), "lo": _scaled(ci[0], scale),
                        "hi": _scaled(ci[1], scale), "rank": v.get("rank"), "cluster": cluster_of.get(s)})
    entries.sort(key=lambda e: (e["rank"] or 1e9, e["system"]))
    return entries, title


def pvalue_cells(report: dict, metric: str) -> tuple[list[str], list[dict]]:
    """(systems best first, cells) of the p-value matrix of ``metric`` for
    :func:`analysis.charts.leaderboard_pvalue_spec`: each comparison (a, b) as two cells, (a, b)
    with delta = score(a) - score(b) and (b, a) with the negated delta and interval; deltas in the
    table's unit. KeyError for a metric absent from the report."""
    if not any(m["key"] == metric for m in report.get("metrics", [])):
        raise KeyError(metric)
    scale = metric_scale(metric)
    systems = sorted(report["systems"], key=lambda s: ((report["systems"][s]["metrics"].get(metric) or {}).get("rank") or 1e9, s))
    cells = []
    for c in report.get("comparisons", []):
        if c["metric"] != metric:
            continue
        lo, hi = (c.get("ci95") or [None, None])
        base = {"p": c["p_value"], "p_holm": c.get("p_holm"), "significant": bool(c.get("significant")),
                "test": TESTS.get(c.get("test"), c.get("test")), "n_images": c.get("n_images")}
        cells.append(dict(base, a=c["a"], b=c["b"], delta=_scaled(c["delta"], scale), lo=_scaled(lo, scale), hi=_scaled(hi, scale)))
        cells.append(dict(base, a=c["b"], b=c["a"], delta=_scaled(-c["delta"], scale),
                          lo=None if hi is None else _scaled(-hi, scale), hi=None if lo is None else _scaled(-lo, scale)))
    return systems, cells


# --- views --------------------------------------------------------------------------------------

@require_GET
def leaderboard_page(request, name):
    try:
        dataset, settings = _dataset_and_settings(name, request)
    except BadSettings as exc:
        return _bad(exc)
    report, problem, computing, _ = read_leaderboard(dataset, settings)
    context = {"dataset": dataset, "report": report, "problem": problem, "computing": computing, "settings": settings,
               "offered": limits.offered(request),
               "query": settings_query(settings), "tests": TESTS, "systems": candidate_system_names(dataset)}
    if report:
        context.update(page_context(report))
        context["test_name"] = TESTS.get((report.get("settings") or {}).get("test") or settings["test"], settings["test"])
    return render(request, "analysis/leaderboard.html", context)


def _read(name, request) -> tuple:
    """``(report, problem, computing, row, dataset, settings)`` of the request's leaderboard
    (:func:`read_leaderboard`); BadSettings for bad settings, 404 for an unknown dataset."""
    dataset, settings = _dataset_and_settings(name, request)
    return (*read_leaderboard(dataset, settings), dataset, settings)


def _download(request, name, make, what: str = "leaderboard", as_json: bool = False):
    """A leaderboard download: ``make(dataset, report)`` builds the response from the stored report;
    400 for bad settings or a report that cannot be made, 202 while it is computed."""
    answer, got = stored_or_answer(lambda: _read(name, request), lambda row: not_ready(row, what, as_json=as_json))
    return answer if answer is not None else make(got[4], got[0])


def _attachment(response, filename: str):
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


@require_GET
def leaderboard_json(request, name):
    """The stored leaderboard report as JSON (every number, settings and seeds); 202 while computed."""
    return _download(request, name, lambda d, r: _attachment(JsonResponse(r, json_dumps_params={"indent": 2}),
                                                             f"{d.name}-leaderboard.json"), as_json=True)


@require_GET
def leaderboard_csv(request, name):
    """The leaderboard as CSV (:func:`analysis.leaderboard.leaderboard_csv_rows`, formula-safe cells); 202 while computed."""
    def make(dataset, report):
        response = HttpResponse(content_type="text/csv; charset=utf-8")
        writer = csvsafe.writer(response)
        for row in leaderboard.leaderboard_csv_rows(report):
            writer.writerow(["" if v is None else v for v in row])
        return _attachment(response, f"{dataset.name}-leaderboard.csv")

    return _download(request, name, make)


@require_GET
def leaderboard_latex(request, name):
    """The leaderboard as a LaTeX tabular (:func:`analysis.leaderboard.leaderboard_latex`); 202 while computed."""
    return _download(request, name, lambda d, r: _attachment(
        HttpResponse(leaderboard.leaderboard_latex(r), content_type="text/x-tex; charset=utf-8"), f"{d.name}-leaderboard.tex"))


def _spec(request, name, build):
    """A chart spec of the stored report: 400 bad settings or a report that cannot be made, 202
    while computed, 404 for a column the report does not have."""
    answer, got = stored_or_answer(lambda: _read(name, request), lambda row: not_ready(row, "leaderboard"),
                                   problem=lambda message: JsonResponse({"problem": message}, status=400), stale=True)
    if answer is not None:
        return answer
    try:
        return JsonResponse(build(got[0], got[5]))
    except KeyError as exc:
        raise Http404(f"no column {exc} in this leaderboard") from None


@require_GET
def interval_spec(request, name, metric=None, criterion=None):
    """Vega-Lite spec of the interval chart of one ``metric`` or human ``criterion`` of the stored
    leaderboard (:func:`analysis.charts.leaderboard_interval_spec`)."""
    kind, key = ("metric", metric) if metric is not None else ("human", criterion)

    def build(report, settings):
        entries, title = interval_entries(report, kind, key)
        s = report.get("settings") or {}
        subtitle = f"95% CI: bootstrap, {s.get('n_resamples', settings['resamples'])} image resamples, seed {s.get('seed', settings['seed'])}"
        return charts.leaderboard_interval_spec(entries, title, f"{report['dataset']}: {title}", subtitle,
                                                baseline=report.get("baseline"))

    return _spec(request, name, build)


@require_GET
def pvalue_spec(request, name, metric):
    """Vega-Lite spec of the pairwise p-value heat map of ``metric`` in the stored leaderboard
    (:func:`analysis.charts.leaderboard_pvalue_spec`)."""

    def build(report, settings):
        systems, cells = pvalue_cells(report, metric)
        meta = next(m for m in report["metrics"] if m["key"] == metric)
        s = report.get("settings") or {}
        alpha = s.get("alpha", settings["alpha"])
        test = s.get("test", settings["test"])
        title = f"{report['dataset']}: {meta['name']}, pairwise p-values"
        subtitle = f"{SHORT_TESTS.get(test, test)}; * p < {alpha:g}"
        return charts.leaderboard_pvalue_spec(systems, cells, alpha, title, subtitle,
                                              delta_title=f"{metric_title(meta, metric_scale(metric))}: a - b")

    return _spec(request, name, build)
