"""Metric-human correlation reports over stored metric runs and human judgments.

Protocol (Hessel et al. 2021, CLIPScore, Sec. 4 / Table 1, on Flickr8k-Expert): every human rating
is one row, paired with its candidate caption's metric score; the statistics are Pearson,
Spearman, Kendall tau-b and tau-c with 95% bootstrap intervals that resample images. Per-image rank
agreement (Wang & Chan 2019, Table 2) correlates, within each image, the metric's and the humans'
(mean rating) ordering of its candidates, averaged over images.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

import numpy as np
from django.db import connections

from captioneval.stats import STATISTICS, AgreementReport, finite_or_none, metric_agreement, per_group_rank_agreement
from crowd.models import Caption, Dataset, HumanJudgment
from metrics import learned, pipeline, uploads
from metrics.models import MetricRun, MetricScore, SystemScore
from captioneval.metrics.registry import LEXICAL_MEASURES, METRICS

from .models import CorrelationReport

DEFAULT_RESAMPLES = 1000


class ReportError(ValueError):
    """The report cannot be made (nothing computed, no judgments...)."""


def current_run(dataset: Dataset, metric: str, document_frequency=None, m: int | None = None) -> MetricRun | None:
    """The run of ``metric`` on ``dataset`` at the current version and parameters, if any
    (``document_frequency``: a :class:`metrics.pipeline.SuppliedDocumentFrequency` for CIDEr-D;
    ``m``: captions per set of set-level runs, None = all; VIFIDEL: the configured vectors). A learned
    metric (CLIP-S...: its parameters name a model, :mod:`metrics.learned`) has no single current
    configuration: its newest done run, whatever its model (shown with its parameters), else its newest run."""
    if learned.is_learned(metric):
        runs = MetricRun.objects.filter(dataset=dataset, metric=metric, version=METRICS[metric].version)
        return runs.filter(status=MetricRun.DONE).order_by("-created_at").first() or runs.order_by("-created_at").first()
    params = pipeline.run_params(dataset, metric, document_frequency, m=m)
    return MetricRun.objects.filter(
        dataset=dataset, metric=metric, version=METRICS[metric].version, params_key=pipeline.run_identity(params)
    ).first()


def completed_runs(
    dataset: Dataset, metrics=None, cider_df: str | None = None, levels=("caption",), m: int | None = None,
) -> dict[str, MetricRun]:
    """{metric: done run}. With ``metrics`` given, each must have a complete run (ReportError
    otherwise); without, every metric of the given ``levels`` ("caption", "set") that has one,
    including plugin metrics (:mod:`captioneval.metrics.plugins`) and, at the caption level, the
    researcher's uploaded scores (:func:`metrics.uploads.uploaded_runs`, keys ``user_*``).
    ``cider_df`` selects the runs computed with that document-frequency file."""
    uploaded_keys = [k for k in (metrics or []) if uploads.is_upload_key(k)]
    if metrics:
        keys = pipeline.validate_metrics([k for k in metrics if k not in uploaded_keys]) if len(uploaded_keys) < len(metrics) else []
        wrong = [k for k in keys if METRICS[k].level not in levels]
        if wrong:
            raise ReportError(
                f"{', '.join(METRICS[k].name for k in wrong)}: {METRICS[wrong[0]].level}-level, not comparable with "
                f"{'/'.join(levels)}-level judgments here (set-level metrics go with caption-set judgments, e.g. a "
                "diversity campaign)"
            )
    else:
        keys = [k for k in METRICS if METRICS[k].level in levels]
    supplied = pipeline.read_document_frequency(cider_df) if cider_df else None
    runs = {}
    for key in keys:
        run = current_run(dataset, key, supplied, m=m)
        if run is not None and run.status == MetricRun.DONE:
            runs[key] = run
        elif metrics:
            state = "has not been computed" if run is None else f"is {run.status} ({run.completed}/{run.total})"
            raise ReportError(
                f"metric {key!r} {state} on dataset {dataset.name!r}; run: "
                f"python manage.py compute_metrics --dataset {dataset.name} --metric {key} --wait"
            )
    if "caption" in levels:
        if metrics:
            for key in uploaded_keys:
                run = uploads.uploaded_run(dataset, key)
                if run is None:
                    raise ReportError(
                        f"no scores uploaded as {key!r} on dataset {dataset.name!r}; upload them with: python manage.py "
                        f"upload_scores --dataset {dataset.name} --name NAME --file scores.csv"
                    )
                runs[key] = run
        else:
            runs.update(uploads.uploaded_runs(dataset))
    if not runs:
        raise ReportError(
            f"no metric has been computed on dataset {dataset.name!r}; run: "
            f"python manage.py compute_metrics --dataset {dataset.name} --wait"
        )
    return runs


def metric_name(key: str, run: MetricRun | None = None) -> str:
    """Display name of a metric key: the registry's (CIDEr-D, a plugin's) or an upload's own name."""
    return uploads.metric_display_name(key, run)


def dataset_judgments(dataset: Dataset, criterion: str | None = None):
    """The dataset's own (imported) caption-level judgments on ``criterion`` (default: the dataset's
    main criterion); campaign judgments have their own reports (:mod:`analysis.campaigns`)."""
    criterion = criterion or dataset.criterion
    qs = HumanJudgment.objects.filter(image__dataset=dataset, campaign__isnull=True, caption__isnull=False)
    return qs.filter(criterion=criterion) if criterion else qs


def protocol(dataset: Dataset) -> dict:
    """The dataset's published evaluation protocol (set by its importer, :attr:`Dataset.protocol`):
    ``rows`` ("rating": every rating is a correlation row, Flickr8k-Expert; "mean": one row per
    caption with its mean human score, Flickr8k-CrowdFlower's fraction of yes votes), ``headline``
    statistic, ``criteria``, ``task`` ("rating" or "forced_choice")."""
    proto = dict(getattr(dataset, "protocol", None) or {})
    proto.setdefault("rows", Dataset.ROWS_RATING)
    proto.setdefault("task", Dataset.TASK_RATING)
    proto.setdefault("headline", "kendall_tau_c")
    proto.setdefault("criteria", [dataset.criterion] if dataset.criterion else [])
    return proto


def check_criterion(dataset: Dataset, criterion: str | None) -> str | None:
    """``criterion`` if the dataset has judgments on it (None = the main one); ReportError otherwise."""
    if criterion is None or criterion == dataset.criterion:
        return dataset.criterion or None
    imported = HumanJudgment.objects.filter(image__dataset=dataset, campaign__isnull=True)
    if imported.filter(criterion=criterion).exists():  # one indexed probe, not every judgment row
        return criterion
    known = sorted(set(imported.order_by().values_list("criterion", flat=True).distinct()))
    if criterion not in known:
        raise ReportError(
            f"dataset {dataset.name!r} has no judgments on criterion {criterion!r}; its criteria: {', '.join(known) or 'none'}"
        )
    return criterion


@dataclass
class Rows:
    """One row per human rating (or per caption, when collapsed to means): its caption, image,
    system, human score and each metric's score."""

    caption: np.ndarray  # (n_rows,) caption ids
    image: np.ndarray  # (n_rows,) image ids
    human: np.ndarray  # (n_rows,) ratings
    metric: dict[str, np.ndarray]  # metric -> (n_rows,) scores
    system: np.ndarray | None = None  # (n_rows,) system ids


def fetch_rows(qs) -> list[tuple]:
    """The rows of a ``values_list`` queryset of plain columns (integers, floats, text) through a
    database cursor: the tuples Django would give, without its per-row iteration (a third to a half
    of the time on 100,000+ rows). Not for fields whose values Django converts (dates, JSON, decimals)."""
    sql, params = qs.query.sql_with_params()
    with connections[qs.db].cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def judgment_rows(dataset: Dataset, runs: dict[str, MetricRun], criterion: str | None = None, collapse: bool | None = None) -> Rows:
    """Gather the rating rows of ``dataset`` (judged candidates only) with their metric scores.

    ``collapse`` (default: the protocol's ``rows == "mean"``) replaces each caption's ratings by one
    row holding their mean (e.g. the fraction of "yes" votes of Flickr8k-CrowdFlower)."""
    data = np.array(
        fetch_rows(
            dataset_judgments(dataset, criterion)
            .order_by("caption_id", "rater")
            .values_list("caption_id", "image_id", "score", "system_id")
        ),
        dtype=float,
    ).reshape(-1, 4)
    if len(data) == 0:
        raise ReportError(f"dataset {dataset.name!r} has no human judgments" + (f" on {criterion!r}" if criterion else ""))
    if collapse is None:
        collapse = protocol(dataset)["rows"] == Dataset.ROWS_MEAN
    if collapse:
        captions, first, inverse = np.unique(data[:, 0], return_index=True, return_inverse=True)
        means = np.bincount(inverse, weights=data[:, 2]) / np.bincount(inverse)
        data = np.column_stack([captions, data[first, 1], means, data[first, 3]])
    caption = data[:, 0].astype(np.int64)
    metric = {}
    for key, run in runs.items():
        scored = fetch_rows(MetricScore.objects.filter(run=run).order_by("caption_id").values_list("caption_id", "value"))
        ids = np.array([c for c, _ in scored], dtype=np.int64)  # ascending, one score per caption
        values = np.array([v for _, v in scored], dtype=float)
        at = np.minimum(np.searchsorted(ids, caption), max(len(ids) - 1, 0))
        found = ids[at] == caption if len(ids) else np.zeros(len(caption), dtype=bool)
        if not found.all():
            missing = np.unique(caption[~found])
            raise ReportError(f"run {run.pk} of {key!r} lacks scores for {len(missing)} judged captions")
        # A metric where lower is better (an uploaded distance, a plugin declaring higher="worse")
        # is negated, so every report reads "higher = better" and ranks metrics the same way.
        metric[key] = uploads.metric_sign(key, run) * values[at]
    return Rows(caption, data[:, 1].astype(np.int64), data[:, 2], metric, data[:, 3].astype(np.int64))


def per_pair(rows: Rows, values: np.ndarray):
    """Collapse rows to one per caption: (caption ids, image ids, metric value, mean human score)."""
    captions, first, inverse = np.unique(rows.caption, return_index=True, return_inverse=True)
    counts = np.bincount(inverse)
    mean_human = np.bincount(inverse, weights=rows.human) / counts
    return captions, rows.image[first], values[first], mean_human


WEIGHTINGS = ("gap", "ldr")


def parse_weighting(weighting: str | None) -> tuple[str, str] | None:
    """``"gap:mtld"`` -> ("gap", "mtld"). Gap-weighted metrics (Kershaw & Bober 2019, Sec. 4):
    ``gap`` multiplies each caption's score by its system's Lexical Gap L_g, ``ldr`` by its lexical
    diversity ratio l_d, both for the named lexical measure. ReportError for anything else."""
    if not weighting:
        return None
    factor, _, measure = weighting.partition(":")
    if factor not in WEIGHTINGS or measure not in LEXICAL_MEASURES:
        raise ReportError(
            f"weighting must be gap:<measure> or ldr:<measure> with a measure among {', '.join(LEXICAL_MEASURES)}; "
            f"got {weighting!r}"
        )
    return factor, measure


def system_weights(dataset: Dataset, factor: str, measure: str) -> tuple[dict[int, float], MetricRun]:
    """{system id: L_g or l_d} from the done run of the lexical ``measure``; ReportError if missing."""
    run = current_run(dataset, measure)
    if run is None or run.status != MetricRun.DONE:
        raise ReportError(
            f"{METRICS[measure].name} has not been computed on {dataset.name!r}; run: python manage.py "
            f"compute_metrics --dataset {dataset.name} --metric {measure} --wait"
        )
    field = "lexical_gap" if factor == "gap" else "ldr"
    weights = {
        sid: (np.nan if details.get(field) is None else float(details[field]))
        for sid, details in SystemScore.objects.filter(run=run).values_list("system_id", "details")
    }
    return weights, run


def report_key(dataset: Dataset, runs: dict[str, MetricRun], n_resamples: int, seed: int, weighting=None, **extra) -> str:
    """SHA-256 of everything a cached report depends on (dataset, runs, judgments, settings)."""
    ident = {
        "dataset": [dataset.pk, dataset.fingerprint, protocol(dataset)],
        "runs": {k: [r.pk, r.version, r.params_key, r.completed, str(r.finished_at)] for k, r in sorted(runs.items())},
        "judgments": dataset_judgments(dataset, extra.get("criterion")).count(),
        "n_resamples": n_resamples,
        "seed": seed,
        "weighting": weighting,
        **extra,
    }
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()


def correlation_report(
    dataset_name: str, metrics=None, n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0, use_cache: bool = True,
    cider_df: str | None = None, weighting: str | None = None, criterion: str | None = None,
) -> dict:
    """The correlation report of ``dataset_name`` as a JSON-serialisable dict: the
    :meth:`captioneval.stats.AgreementReport.to_json` of the dataset's item-level agreement.

    Shape::

        {"dataset": str, "criterion": str, "n_pairs": int, "n_ratings": int, "n_images": int,
         "bootstrap": {"n_resamples": int, "confidence": 0.95, "seed": int, "unit": "image"},
         "metrics": {key: {"name": "CIDEr-D", "run": int, "version": str,
                           "pearson": x, "spearman": x, "kendall_tau_b": x, "kendall_tau_c": x,
                           "ci95": {statistic: [lo, hi]},
                           "per_image": {"spearman": x, "kendall_tau_b": x, "n_images": int,
                                         "n_images_skipped": int}}}}

    With ``weighting`` ("gap:mtld", "ldr:ttr"...; :func:`parse_weighting`) each metric also gets a
    gap-weighted entry keyed ``"<metric>+gap_mtld"`` (name "CIDEr-D x L_g (MTLD)"), computed from
    the same rows with each score multiplied by its system's weight; the report's ``"weighting"``
    field then names the measure and the lexical run used.

    ``criterion`` selects another judged criterion of the dataset (THumB: "precision", "recall");
    the dataset's protocol decides whether each rating is a row or each caption's mean is
    (:func:`protocol`), and "n_ratings" counts the rows correlated.

    Raises PipelineError (unknown dataset or metric) or ReportError (nothing computed, no judgments,
    a bad weighting or its lexical run missing, an unknown criterion).
    """
    dataset = pipeline.get_dataset(dataset_name)
    criterion = check_criterion(dataset, criterion)
    runs = completed_runs(dataset, metrics, cider_df)
    weight_spec = parse_weighting(weighting)
    weights = weight_run = None
    if weight_spec:
        weights, weight_run = system_weights(dataset, *weight_spec)
    key = report_key(dataset, runs, n_resamples, seed, [weighting, weight_run.pk if weight_run else None], criterion=criterion)
    if use_cache:
        cached = CorrelationReport.objects.filter(dataset=dataset, key=key).first()
        if cached is not None:
            return _ordered(cached.payload)
    rows = judgment_rows(dataset, runs, criterion)
    report = AgreementReport(
        header={
            "dataset": dataset.name,
            "criterion": criterion or dataset.criterion,
            "n_pairs": int(len(np.unique(rows.caption))),
            "n_ratings": int(len(rows.human)),
            "n_images": int(len(np.unique(rows.image))),
        },
        bootstrap={"n_resamples": n_resamples, "confidence": 0.95, "seed": seed, "unit": "image"},
    )
    entries = [(metric, run, rows.metric[metric], metric_name(metric, run)) for metric, run in runs.items()]
    if weight_spec:
        factor_name, measure = weight_spec
        report.extra["weighting"] = {
            "kind": factor_name, "measure": measure, "run": weight_run.pk,
            "formula": ("M x L_g, L_g = 1 / (1 + exp(-5 (l_d - 0.81)))" if factor_name == "gap" else "M x l_d"),
        }
        system_of = dict(Caption.objects.filter(id__in=np.unique(rows.caption).tolist()).values_list("id", "system_id"))
        factor = np.array([weights.get(system_of[c], np.nan) for c in rows.caption], dtype=float)
        if np.isnan(factor).any():
            raise ReportError(f"{METRICS[measure].name} is undefined for a judged system (corpus too short)")
        symbol = "L_g" if factor_name == "gap" else "l_d"
        entries += [
            (f"{metric}+{factor_name}_{measure}", run, rows.metric[metric] * factor, f"{metric_name(metric, run)} x {symbol} ({METRICS[measure].name})")
            for metric, run in runs.items()
        ]
    for metric, run, scores, name in entries:
        _, images, values, human = per_pair(rows, scores)
        agreement = per_group_rank_agreement(values, human, images)
        report.metrics[metric] = metric_agreement(
            name, scores, rows.human, rows.image, STATISTICS, n_resamples=n_resamples, seed=seed,
            info={"run": run.pk, "version": run.version, "params": run.params},
            extra={"per_image": {
                "spearman": finite_or_none(agreement.spearman),
                "kendall_tau_b": finite_or_none(agreement.kendall_tau_b),
                "n_images": agreement.n_groups_used,
                "n_images_skipped": agreement.n_groups_skipped,
            }},
        )
    payload = report.to_json()
    CorrelationReport.objects.update_or_create(dataset=dataset, key=key, defaults={"payload": payload})
    return payload


_TOP_ORDER = ("dataset", "criterion", "n_pairs", "n_ratings", "n_images", "bootstrap", "weighting", "metrics")
_METRIC_ORDER = ("name", "run", "version", "params", *STATISTICS, "ci95", "per_image")


def _ordered(report: dict) -> dict:
    """Restore the documented key order (PostgreSQL's jsonb does not keep it): metrics in registry order."""
    metrics = report["metrics"]
    keys = [k for k in METRICS if k in metrics]
    order = {k: i for i, k in enumerate(METRICS)}
    keys += sorted((k for k in metrics if k not in METRICS), key=lambda k: (order.get(k.split("+")[0], len(order)), k))
    ordered_metrics = {k: {f: metrics[k][f] for f in _METRIC_ORDER if f in metrics[k]} for k in keys}
    out = {k: report[k] for k in _TOP_ORDER if k in report}
    out["metrics"] = ordered_metrics
    return out


CSV_COLUMNS = ["metric", "name", *STATISTICS] + [f"{s}_ci95_{b}" for s in STATISTICS for b in ("lo", "hi")] + [
    "per_image_spearman", "per_image_kendall_tau_b", "per_image_n_images", "n_pairs", "n_ratings",
]


def report_csv_rows(report: dict):
    """Rows (lists) of the CSV download, header first; same numbers as the JSON report."""
    yield CSV_COLUMNS
    for metric, m in report["metrics"].items():
        yield [
            metric, m["name"], *(m[s] for s in STATISTICS),
            *(m["ci95"].get(s, [None, None])[i] for s in STATISTICS for i in (0, 1)),
            m["per_image"]["spearman"], m["per_image"]["kendall_tau_b"], m["per_image"]["n_images"],
            report["n_pairs"], report["n_ratings"],
        ]
