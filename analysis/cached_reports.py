"""Reports computed once and read by pages: the campaign report, the per-image diversity view, a
dataset's correlation report and benchmark meta-evaluation, and the cross-benchmark comparison.

A page never computes these itself. It asks :func:`analysis.tasks.request_report` for the report
under the key of its current inputs; the first request stores a ``pending``
:class:`analysis.models.Report` row and queues the Celery task that computes it (in-process when no
broker is configured, the quick-start mode); later requests read the stored payload. The key is the
SHA-256 of the report's kind, its parameters and a fingerprint of everything it reads, so a new
judgment or a finished metric run gives a new key and thus a new computation, and an unchanged
campaign is never recomputed. This is the scheme of the dataset correlation reports
(:func:`analysis.reports.report_key` and :class:`analysis.models.CorrelationReport`), moved off the
request path.

Fingerprints (cheap aggregate queries, no judgment is read):

* judgments (:func:`judgment_version`): the campaign's human and pairwise judgment rows are only
  ever inserted or deleted, never updated, and their ids come from a sequence that never reuses
  a value; for such a set, (count, max id) identifies it among all its past and future states (an
  insertion raises the max above every id issued before; deletions alone lower the count). Counted
  assignments change by submission (``counted`` set at ``submitted_at = now``, later than every
  earlier submission) and by release (``counted`` cleared, the count drops), so (count, max
  ``submitted_at``) identifies them the same way;
* metric runs: id, version, parameters, completed units and finish time of every done run of the
  dataset (as :func:`analysis.reports.report_key`, for all of the dataset's runs in one query);
* per-image view: the image's captions and object labels (count, max id), the Self-CIDEr and LSA
  runs, the dataset's import fingerprint and references, the tokenizer;
* dataset correlation and benchmark reports (:func:`dataset_version`): the dataset's import
  fingerprint, criterion, protocol and references, its done metric runs (as above), the registered
  metrics with their versions, its imported human and pairwise judgments ((count, max id)), the
  tokenizer and the configured word vectors; plus the query settings (weighting; criterion,
  resamples, seed, permutations, alpha), so each setting is a report of its own.

A report that cannot be made from its inputs (no metric computed, no judgments, an unknown
criterion: :class:`analysis.reports.ReportError`, or an unknown dataset:
:class:`metrics.pipeline.PipelineError`) is stored as ``{"problem": message}`` (:func:`problem`):
it is as much a function of the key as a report, and the page shows the message as it did when it
computed the report itself.
"""
from __future__ import annotations

import hashlib
import json
import logging

from django.conf import settings
from django.db.models import Count, Max
from django.utils import timezone

from crowd import engine, privacy
from crowd.models import Assignment, Caption, Dataset, HumanJudgment, Image, ObjectLabel, PairwiseJudgment, WorkerStatus
from metrics import pipeline
from metrics.models import MetricRun
from captioneval.metrics.registry import METRICS

from . import benchmarks, campaigns, diversity, explorer
from .models import Report
from .reports import ReportError, correlation_report

log = logging.getLogger("analysis.cached_reports")

#: version of the stored shapes: bump it when the code of a report changes its numbers or fields
FORMAT = 1
#: bootstrap settings of the campaign report shown on the owner pages
CAMPAIGN_RESAMPLES = campaigns.DEFAULT_RESAMPLES
CAMPAIGN_SEED = 0
#: latent semantics on the per-image radar charts (the default k of :func:`analysis.diversity.image_detail`)
RADAR_K = 5


def _digest(kind: str, ident) -> str:
    """SHA-256 (hex) of a kind, :data:`FORMAT` and a JSON-serialisable identity."""
    return hashlib.sha256(json.dumps([kind, FORMAT, ident], sort_keys=True, default=str).encode()).hexdigest()


def _runs_ident(runs) -> dict:
    return {k: [r.pk, r.version, r.params_key, r.completed, str(r.finished_at)] for k, r in sorted(runs.items())}


def _id_set(qs) -> list:
    """(count, max id) of an insert-or-delete-only set of rows (see the module docstring)."""
    agg = qs.aggregate(n=Count("pk"), top=Max("pk"))
    return [agg["n"], agg["top"]]


def judgment_version(campaign) -> dict:
    """Fingerprint of the campaign's counted work: {"counted": [n, last submitted_at],
    "human": [n, max id], "pairwise": [n, max id]}; it changes whenever a judgment is recorded or
    released (see the module docstring for why it cannot repeat)."""
    counted = Assignment.objects.filter(campaign=campaign, counted=True).aggregate(n=Count("pk"), last=Max("submitted_at"))
    return {
        "counted": [counted["n"], str(counted["last"])],
        "human": _id_set(HumanJudgment.objects.filter(campaign=campaign)),
        "pairwise": _id_set(PairwiseJudgment.objects.filter(campaign=campaign)),
    }


def runs_version(dataset) -> list:
    """Fingerprint of the dataset's metric runs, in one query: (id, metric, version, parameters key,
    completed units, finish time) of every done run, and the registered metric keys (a plugin
    metric added or removed changes which runs a report reads)."""
    done = MetricRun.objects.filter(dataset=dataset, status=MetricRun.DONE).order_by("pk")
    return [list(done.values_list("pk", "metric", "version", "params_key", "completed", "finished_at")),
            sorted(METRICS)]


def campaign_key(campaign, n_resamples: int = CAMPAIGN_RESAMPLES, seed: int = CAMPAIGN_SEED) -> tuple[str, dict]:
    """(SHA-256 key, params) of the campaign's report at its current judgments and metric runs."""
    params = {"n_resamples": n_resamples, "seed": seed}
    ident = {
        "campaign": [campaign.pk, str(campaign.created_at)],
        "dataset": [campaign.dataset_id, campaign.dataset.fingerprint],
        "judgments": judgment_version(campaign),
        "runs": runs_version(campaign.dataset),
        "format": campaigns.REPORT_VERSION,
        **params,
    }
    return _digest(Report.CAMPAIGN, ident), params


def image_key(dataset, image, m: int | None) -> tuple[str, dict]:
    """(SHA-256 key, params) of the per-image diversity view of ``image`` with ``m`` captions per set."""
    params = {"m": m, "k": RADAR_K}
    runs = {k: r for k in ("self_cider", "lsa") if (r := diversity.find_run(dataset, k, m)) is not None}
    ident = {
        "dataset": [dataset.pk, dataset.fingerprint, dataset.reference_system_id],
        "references": _id_set(dataset.references()) if dataset.reference_system_id else None,
        "image": [image.pk, image.key],
        "captions": _id_set(Caption.objects.filter(image=image)),
        "private_systems": privacy.private_system_ids(dataset),  # publishing results makes a new view
        "objects": _id_set(ObjectLabel.objects.filter(image=image)),
        "runs": _runs_ident(runs),
        "tokenizer": pipeline.TOKENIZER,
        **params,
    }
    return _digest(Report.IMAGE, ident), params


def assignments_version(campaign, progress: dict) -> str:
    """SHA-256 fingerprint of everything :func:`crowd.quality.worker_stats` reads, from the live
    ``progress`` (:func:`crowd.engine.campaign_counts`) and two aggregate queries. Every change an
    assignment goes through moves a count: accepting creates a row (the max id rises), returning,
    expiring, submitting and reviewing move one assignment to a state whose count only grows
    (returned, expired, approved, rejected; submitted + approved + rejected), releasing lowers the
    counted judgments; a standing change touches ``WorkerStatus.updated_at``."""
    statuses = WorkerStatus.objects.filter(campaign=campaign).aggregate(n=Count("pk"), last=Max("updated_at"))
    ident = {
        "campaign": campaign.pk, "progress": progress,
        "assignments": Assignment.objects.filter(campaign=campaign).aggregate(top=Max("pk"))["top"],
        "statuses": [statuses["n"], str(statuses["last"])],
        "judgments": judgment_version(campaign),
    }
    return _digest("workers", ident)


def comparison_version(request_settings) -> str:
    """SHA-256 fingerprint of everything the cross-benchmark comparison
    (:func:`analysis.benchmarks.comparison`) reads, in four queries instead of its per-benchmark
    run look-ups and judgment counts: the datasets (name, import fingerprint, criterion, protocol,
    references), every done metric run (as :func:`runs_version`), the imported human and
    pairwise judgments ((count, max id): insert-or-delete-only rows, see the module docstring),
    the registered metrics, and ``request_settings`` (datasets asked for, resamples, seed...)."""
    done = MetricRun.objects.filter(status=MetricRun.DONE).order_by("pk")
    ident = {
        "datasets": list(Dataset.objects.order_by("pk").values_list(
            "pk", "name", "fingerprint", "criterion", "protocol", "reference_system_id")),
        "runs": list(done.values_list("pk", "dataset_id", "metric", "version", "params_key", "completed", "finished_at")),
        "human": _id_set(HumanJudgment.objects.filter(campaign__isnull=True)),
        "pairwise": _id_set(PairwiseJudgment.objects.filter(campaign__isnull=True)),
        "metrics": sorted(METRICS),
        "config": _metric_config(),
        "settings": request_settings,
    }
    return _digest("comparison", ident)


def _metric_config() -> dict:
    """The registered metrics with their versions, the tokenizer and the configured word vectors:
    what decides which run of a metric is current (:func:`analysis.reports.current_run`)."""
    return {"versions": {k: spec.version for k, spec in sorted(METRICS.items())}, "tokenizer": pipeline.TOKENIZER,
            "vectors": str(getattr(settings, "VIFIDEL_VECTORS", None))}


def dataset_version(dataset) -> dict:
    """Fingerprint of everything a dataset's correlation report (:func:`analysis.reports.correlation_report`)
    or benchmark report (:func:`analysis.benchmarks.benchmark_report`) reads, in four aggregate
    queries: the dataset's own fields, its done runs (:func:`runs_version`), its imported human and
    pairwise judgments ((count, max id), see the module docstring) and :func:`_metric_config`."""
    return {
        "dataset": [dataset.pk, dataset.name, dataset.fingerprint, dataset.criterion, dataset.protocol,
                    dataset.reference_system_id],
        "runs": runs_version(dataset),
        "human": _id_set(HumanJudgment.objects.filter(image__dataset=dataset, campaign__isnull=True)),
        "pairwise": _id_set(PairwiseJudgment.objects.filter(caption_b__image__dataset=dataset, campaign__isnull=True)),
        **_metric_config(),
    }


def correlation_key(dataset, weighting: str | None) -> tuple[str, dict]:
    """(SHA-256 key, params) of the dataset page's correlation report with ``weighting``
    ("gap:mtld"..., or None) at the dataset's current runs and judgments."""
    params = {"weighting": weighting or None}
    return _digest(Report.CORRELATIONS, {"inputs": dataset_version(dataset), **params}), params


def benchmark_key(dataset, settings_: dict, criterion: str | None) -> tuple[str, dict]:
    """(SHA-256 key, params) of the benchmark page's report: ``settings_`` = {"resamples", "seed",
    "permutations", "alpha"} (validated by the page), ``criterion`` (None = the dataset's main one)."""
    criterion = criterion or dataset.criterion or None  # the main criterion named or not: one report
    params = {"criterion": criterion, **{k: settings_[k] for k in ("resamples", "seed", "permutations", "alpha")}}
    return _digest(Report.BENCHMARK, {"inputs": dataset_version(dataset), "format": benchmarks.REPORT_VERSION,
                                      **params}), params


def comparison_key(names: list[str] | None, settings_: dict) -> tuple[str, dict]:
    """(SHA-256 key, params) of the cross-benchmark comparison of ``names`` (None = every dataset)
    with the validated ``settings_`` (:func:`comparison_version`)."""
    params = {"datasets": names or None, **{k: settings_[k] for k in ("resamples", "seed", "permutations", "alpha")}}
    return _digest(Report.COMPARISON, comparison_version([names, settings_, benchmarks.REPORT_VERSION])), params


def scatter_key(dataset, metric: str) -> tuple[str, dict]:
    """(SHA-256 key, params) of the dataset page's interactive scatter of ``metric``
    (:func:`analysis.charts.scatter_data`, stored as a report of kind
    :data:`analysis.charts.SCATTER_KIND`) at the dataset's current runs and judgments."""
    from . import charts

    params = {"metric": metric, "max_points": charts.MAX_POINTS}
    return _digest(charts.SCATTER_KIND, {"inputs": dataset_version(dataset), "format": charts.SCATTER_FORMAT,
                                         **params}), params


def explorer_key(dataset) -> tuple[str, dict]:
    """(SHA-256 key, params) of the example explorer's table of ``dataset``
    (:func:`analysis.explorer.build_table`): :func:`dataset_version` (runs, imported judgments and
    votes, metric configuration), the dataset's captions ((count, max id)), the systems of
    unpublished campaigns (publishing results makes a new table) and the table's format."""
    ident = {"inputs": dataset_version(dataset), "captions": explorer.caption_count(dataset),
             "private_systems": privacy.private_system_ids(dataset), "format": explorer.VERSION}
    return _digest(Report.EXPLORER, ident), {}


def leaderboard_key(dataset, settings_: dict | None = None) -> tuple[str, dict]:
    """(SHA-256 key, params) of the system leaderboard of ``dataset``
    (:func:`analysis.leaderboard.leaderboard`) with ``settings_`` = {"metrics", "criteria",
    "baseline", "resamples", "seed", "test", "alpha"} (missing keys: the defaults of
    :func:`analysis.leaderboard.default_settings`; metrics/criteria None = all). The key changes
    with :func:`dataset_version` (runs, imported judgments, metric configuration, tokenizer), the
    dataset's captions ((count, max id): ``import_coco --results`` adds a system to a dataset), the
    systems of unpublished campaigns and the leaderboard's version. The params are what
    :func:`_leaderboard_payload` passes on."""
    from . import leaderboard

    params = {**leaderboard.default_settings(), **(settings_ or {})}
    params = {k: params[k] for k in leaderboard.default_settings()}
    for k in ("metrics", "criteria"):
        params[k] = list(params[k]) if params[k] else None
    ident = {"inputs": dataset_version(dataset), "captions": _id_set(Caption.objects.filter(image__dataset=dataset)),
             "private_systems": privacy.private_system_ids(dataset), "format": leaderboard.VERSION, **params}
    return _digest(Report.LEADERBOARD, ident), params


def problem(data: dict | None) -> str | None:
    """The message of a stored report that could not be made (``{"problem": message}``), else None."""
    return data.get("problem") if isinstance(data, dict) and set(data) == {"problem"} else None


def with_live_progress(report: dict, campaign) -> dict:
    """The stored campaign report with its ``progress`` read now (:func:`crowd.engine.campaign_counts`:
    a few counts), so accepted, returned and expired assignments show without a recomputation."""
    return {**report, "progress": engine.campaign_counts(campaign)}


# --- computing (called by the Celery task analysis.tasks.compute_report) ----------------------------------
_DOCUMENT_FREQUENCIES: dict[tuple, object] = {}


def _set_document_frequency(dataset):
    """The dataset's set-level CIDEr-D document frequencies (:func:`metrics.pipeline._document_frequency_for_sets`),
    built once per worker process and dataset state: every per-image view of a dataset shares it."""
    refs = _id_set(dataset.references()) if dataset.reference_system_id else _id_set(Caption.objects.filter(image__dataset=dataset))
    ident = (dataset.pk, dataset.fingerprint, dataset.reference_system_id, tuple(refs))
    if ident not in _DOCUMENT_FREQUENCIES:
        if len(_DOCUMENT_FREQUENCIES) > 8:
            _DOCUMENT_FREQUENCIES.clear()
        _DOCUMENT_FREQUENCIES[ident] = pipeline._document_frequency_for_sets(dataset)
    return _DOCUMENT_FREQUENCIES[ident]


def _campaign_payload(report: Report) -> dict:
    return campaigns.campaign_report(report.campaign, n_resamples=report.params["n_resamples"], seed=report.params["seed"])


def _image_payload(report: Report) -> dict:
    dataset = report.dataset
    image = Image.objects.get(pk=report.image_id)
    return diversity.image_detail(dataset, image, m=report.params["m"], k=report.params["k"],
                                  document_frequency=lambda: _set_document_frequency(dataset))


def _correlations_payload(report: Report) -> dict:
    return correlation_report(report.dataset.name, weighting=report.params["weighting"])


def _benchmark_payload(report: Report) -> dict:
    p = report.params
    return benchmarks.benchmark_report(report.dataset.name, criterion=p["criterion"], n_resamples=p["resamples"],
                                       seed=p["seed"], n_permutations=p["permutations"], alpha=p["alpha"])


def _explorer_payload(report: Report) -> dict:
    return explorer.build_table(report.dataset)


def _comparison_payload(report: Report) -> dict:
    p = report.params
    return benchmarks.comparison(p["datasets"], n_resamples=p["resamples"], seed=p["seed"],
                                 n_permutations=p["permutations"], alpha=p["alpha"])


def _scatter_payload(report: Report) -> dict:
    from . import charts

    return charts.scatter_data(report.dataset, report.params["metric"], max_points=report.params["max_points"])


def _leaderboard_payload(report: Report) -> dict:
    from . import leaderboard

    p = report.params
    return leaderboard.leaderboard(report.dataset, metrics=p["metrics"], criteria=p["criteria"], baseline=p["baseline"],
                                   n_resamples=p["resamples"], seed=p["seed"], test=p["test"], alpha=p["alpha"])


#: how each type of stored report is built; the dataset-level ones turn a ReportError/PipelineError
#: (a property of the inputs, e.g. nothing computed yet) into a stored {"problem": message}
_BUILDERS = {
    Report.CAMPAIGN: (_campaign_payload, False),
    Report.IMAGE: (_image_payload, False),
    Report.CORRELATIONS: (_correlations_payload, True),
    Report.BENCHMARK: (_benchmark_payload, True),
    Report.COMPARISON: (_comparison_payload, True),
    "scatter": (_scatter_payload, True),  # analysis.charts.SCATTER_KIND (not among Report.kind's choices yet)
    Report.EXPLORER: (_explorer_payload, False),
    Report.LEADERBOARD: (_leaderboard_payload, True),  # LeaderboardError is a ReportError: stored as the problem
}


def _compute_payload(report: Report) -> dict:
    if report.kind not in _BUILDERS:
        raise ValueError(f"unknown report type {report.kind!r}")
    build, problems_are_data = _BUILDERS[report.kind]
    if not problems_are_data:
        return build(report)
    try:
        return build(report)
    except (ReportError, pipeline.PipelineError) as exc:  # a property of the inputs: stored, shown by the page
        return {"problem": str(exc)}


def compute(report_id: int) -> str:
    """Compute the pending report ``report_id`` and store it; returns its final status ("done",
    "failed", or the status it already had when another worker claimed it first). The row is
    claimed atomically (pending -> running), so two deliveries of the task compute it once. An
    error is stored on the row (status "failed") and logged, never raised."""
    now = timezone.now()
    if not Report.objects.filter(pk=report_id, status=Report.PENDING).update(status=Report.RUNNING, started_at=now, error=""):
        return Report.objects.filter(pk=report_id).values_list("status", flat=True).first() or "missing"
    report = Report.objects.select_related("campaign", "campaign__dataset", "dataset").get(pk=report_id)
    try:
        payload = json.dumps(_compute_payload(report))
    except Exception as exc:  # noqa: BLE001 - recorded on the row, shown by the page
        log.exception("report %s (%s) failed", report_id, report.kind)
        Report.objects.filter(pk=report_id).update(status=Report.FAILED, error=f"{type(exc).__name__}: {exc}",
                                                   finished_at=timezone.now())
        return Report.FAILED
    Report.objects.filter(pk=report_id).update(status=Report.DONE, payload=payload, finished_at=timezone.now())
    # the older reports of the same subject and parameters are never read again
    (Report.objects.filter(kind=report.kind, campaign=report.campaign_id, dataset=report.dataset_id,
                           image=report.image_id, params=report.params)
     .exclude(pk=report_id).exclude(status__in=(Report.PENDING, Report.RUNNING)).delete())
    return Report.DONE
