"""The dashboard: datasets, live metric-run progress, correlation tables, scatter plots, downloads.

The correlation report (bootstrap intervals of every metric) is computed once by a Celery task
and read here (:mod:`analysis.cached_reports`, :func:`analysis.tasks.read_report`): a page whose
report is not stored yet says it is being computed and reloads itself; a download answers 202
(500 if the computation failed) with ``Retry-After`` until the report is stored, then the
documented JSON or CSV. Without a broker (the quick start) the task runs in a thread of the web
process (``settings.REPORTS_IN_THREAD``; inside the first request when that is off). The home page's
counts are cached (:func:`index_counts`).
"""
import hashlib
import json

from django.http import Http404, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, render
from django.views.decorators.http import require_GET

from crowd.models import Dataset
from captioneval.utils import csvsafe
from metrics.jobs import display_name
from metrics.models import MetricRun, SystemScore
from captioneval.metrics.registry import LEXICAL_MEASURES, UNAVAILABLE

from . import cached_reports
from .benchmarks import LABELS, headline_first
from .models import Report
from .reports import (
    ReportError,
    current_run,
    metric_name,
    parse_weighting,
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
        "judge": "judge" in run.params,  # an LLM judge's run: its page shows the raw replies
    }


def human_data(dataset) -> list[str]:
    """What human judgments ``dataset`` has, counted and named as they are: its imported
    caption-level ratings (every criterion; "on k criteria" when more than one), ratings of caption
    sets, and forced-choice votes (PASCAL-50S) -- e.g. ["43,994 forced-choice votes"] or
    ["7,500 ratings on 3 criteria"]. Campaign judgments are counted on the campaign pages."""
    from crowd.models import HumanJudgment, PairwiseJudgment
    from django.db.models import Count

    imported = HumanJudgment.objects.filter(image__dataset=dataset, campaign__isnull=True)
    per_criterion = dict(imported.filter(caption__isnull=False).order_by().values_list("criterion")
                         .annotate(n=Count("pk")).values_list("criterion", "n"))
    n_sets = imported.filter(caption__isnull=True).count()
    n_votes = PairwiseJudgment.objects.filter(caption_b__image__dataset=dataset, campaign__isnull=True).count()
    out = []
    if per_criterion:
        n = sum(per_criterion.values())
        out.append(f"{n:,} rating{'s' if n != 1 else ''}"
                   + (f" on {len(per_criterion)} criteria" if len(per_criterion) > 1 else ""))
    if n_sets:
        out.append(f"{n_sets:,} caption-set rating{'s' if n_sets != 1 else ''}")
    if n_votes:
        out.append(f"{n_votes:,} forced-choice vote{'s' if n_votes != 1 else ''}")
    return out


#: seconds the home page's counts are kept at most (a deletion, which no max id sees, shows within this time)
INDEX_COUNTS_SECONDS = 300


def index_counts(datasets: list) -> dict[int, dict]:
    """Each dataset's images, candidate captions and human data (:func:`human_data`) as the home page
    shows them, by dataset pk: counted once, then read from the cache (``django.core.cache``) while the
    datasets and the largest ids of images, captions and judgments stay the same (one index lookup
    per table, however large the tables), for at most :data:`INDEX_COUNTS_SECONDS`."""
    from django.core.cache import cache
    from django.db import connection
    from django.db.models import Max

    from crowd.models import Caption, HumanJudgment, Image, PairwiseJudgment

    version = [connection.settings_dict["NAME"], [(d.pk, d.fingerprint, d.reference_system_id) for d in datasets]]
    version += [m.objects.aggregate(top=Max("pk"))["top"] for m in (Image, Caption, HumanJudgment, PairwiseJudgment)]
    key = "index-counts:" + hashlib.sha256(json.dumps(version, default=str).encode()).hexdigest()
    counts = cache.get(key)
    if counts is None:
        counts = {d.pk: {"n_images": d.images.count(), "n_candidates": d.candidates().count(), "human": human_data(d)}
                  for d in datasets}
        cache.set(key, counts, INDEX_COUNTS_SECONDS)
    return counts


@require_GET
def index(request):
    all_datasets = list(Dataset.objects.all())
    counts = index_counts(all_datasets)
    datasets = [{"dataset": d, **counts[d.pk], "runs": _runs(d)} for d in all_datasets]
    return render(request, "analysis/index.html", {"datasets": datasets})


#: the dataset page's correlation columns; the protocol's headline statistic is shown first
STAT_COLUMNS = ("kendall_tau_c", "kendall_tau_b", "pearson", "spearman")


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


#: labels of the gap-weighting factors (Kershaw & Bober 2019, Sec. 4)
WEIGHTING_LABELS = {"gap": "M x Lexical Gap", "ldr": "M x lexical diversity ratio"}


def weighting_choices(dataset) -> tuple[list[tuple[str, str]], str | None]:
    """The gap-weighted options whose inputs exist for ``dataset``: ([(value, label)], reason).

    ``value`` is a weighting of :func:`analysis.reports.parse_weighting` (``"gap:mtld"``). A choice
    is offered when the lexical measure's current run is done and its factor (Lexical Gap L_g or
    lexical diversity ratio l_d, which compare each system's corpus with the reference corpora) is
    defined for every candidate system; each offered choice therefore yields a report. ``reason``
    (one line) says why nothing is offered, None when something is."""
    from captioneval.metrics.registry import METRICS

    if dataset.reference_system_id is None or not dataset.references().exists():
        return [], (f"they compare each system's vocabulary with the reference captions, and {dataset.name} has none.")
    systems = set(dataset.candidates().order_by().values_list("system_id", flat=True).distinct())
    if not systems:
        return [], f"{dataset.name} has no candidate captions."
    choices, missing = [], []
    for measure in LEXICAL_MEASURES:
        run = current_run(dataset, measure)
        if run is None or run.status != MetricRun.DONE:
            missing.append(METRICS[measure].name)
            continue
        details = dict(SystemScore.objects.filter(run=run, system_id__in=systems).values_list("system_id", "details"))
        for factor, label in WEIGHTING_LABELS.items():
            field = "lexical_gap" if factor == "gap" else "ldr"
            if all((details.get(s) or {}).get(field) is not None for s in systems):
                choices.append((f"{factor}:{measure}", f"{label} ({METRICS[measure].name})"))
    if choices:
        return choices, None
    if missing:
        return [], (f"they need the lexical measures ({', '.join(missing)}), not computed yet: compute them under "
                    f"\"Compute metrics\" or run compute_metrics --dataset {dataset.name} --metric lexical.")
    return [], f"the lexical measures are undefined for {dataset.name}'s systems (caption corpora too short)."


def read_correlations(dataset, weighting=None):
    """(report, problem, computing, row) of the correlation report of ``dataset``
    (:func:`analysis.reports.correlation_report`; with gap-weighted entries for a ``weighting`` such
    as ``"gap:mtld"``, None or "" for none), read from the stored report (requested if it is new;
    see :func:`analysis.tasks.read_report`): ``report`` the stored dict (or a stale one while
    computing, or None), ``problem`` the one-line message when it cannot be made (else None),
    ``computing`` the progress context while not done (else None), ``row`` the
    :class:`analysis.models.Report`. A forced-choice dataset, a malformed weighting or one not
    offered for ``dataset`` (:func:`weighting_choices`) is a problem found before any report is
    requested (computing and row None). Used by the dataset page, its downloads and the API.
    Raises nothing of its own."""
    if protocol(dataset)["task"] == Dataset.TASK_FORCED_CHOICE:
        return None, (f"{dataset.name} is a forced-choice benchmark (which of two captions is better): its accuracies "
                      "per category, significance clusters and human ceiling are on the meta-evaluation page."), None, None
    try:
        parse_weighting(weighting or None)
    except ReportError as exc:
        return None, str(exc), None, None
    if weighting:
        offered, reason = weighting_choices(dataset)
        if weighting not in dict(offered):
            return None, (f"the weighting {weighting} is not available for {dataset.name}: "
                          f"{reason or 'its factor is undefined for a system of the dataset.'}"), None, None
    key, params = cached_reports.correlation_key(dataset, weighting or None)
    return read_report(Report.CORRELATIONS, key, params, dataset=dataset)


def unavailable_lines() -> list[dict]:
    """The metrics this installation cannot run, for the dataset page: ``{"key", "text"}`` with the
    field's name (CLIP-S, BERTScore, SPICE: :func:`metrics.jobs.display_name`, not the key upper-cased)
    and the reason, said once when the reason already starts with the name; metrics with the same
    reason share one line (``"CLAIR, FLEUR, RefFLEUR: ..."``, ``key`` their keys separated by spaces)."""
    out: list[dict] = []
    by_reason: dict[str, dict] = {}
    for key, reason in UNAVAILABLE.items():
        name = display_name(key)
        if reason.startswith(name + ": "):  # "CLAIR: an LLM judge, ...": grouped by what follows the name
            reason = reason[len(name) + 2:]
        elif reason.startswith(name):
            out.append({"key": key, "text": reason})
            continue
        if reason in by_reason:
            line = by_reason[reason]
            line["key"], line["names"] = f"{line['key']} {key}", [*line["names"], name]
        else:
            by_reason[reason] = line = {"key": key, "names": [name], "reason": reason}
            out.append(line)
    for line in by_reason.values():
        line["text"] = f"{', '.join(line.pop('names'))}: {line.pop('reason')}"
    return out


@require_GET
def dataset_detail(request, name):
    dataset = get_object_or_404(Dataset, name=name)
    weighting = request.GET.get("weighting", "")
    weightings, weighting_reason = weighting_choices(dataset)
    weighting_problem = None
    if weighting and weighting not in dict(weightings):  # show the plain report and say why
        weighting_problem = read_correlations(dataset, weighting)[1]
        weighting = ""
    report, problem, computing, _ = read_correlations(dataset, weighting)
    runs = _runs(dataset)
    return render(
        request,
        "analysis/dataset.html",
        {
            "dataset": dataset, "runs": [_run_dict(r) for r in runs], "report": report, "computing": computing,
            "problem": problem, "unavailable": unavailable_lines(), "weighting": weighting,
            "weightings": weightings, "weighting_reason": weighting_reason, "weighting_problem": weighting_problem,
            "busy": any(r.status in (MetricRun.PENDING, MetricRun.RUNNING) for r in runs),
            "statistics": headline_first(STAT_COLUMNS, protocol(dataset)["headline"]),
            "labels": LABELS,
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
    report, problem, computing, row = read_correlations(dataset, weighting)
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


# The scatter figures and specs are in analysis.chart_views (drawn from the stored scatter report).
