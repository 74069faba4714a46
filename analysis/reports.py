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

from analysis.statistics import STATISTICS, correlate, per_group_rank_agreement
from crowd.models import Caption, Dataset, HumanJudgment
from metrics import pipeline
from metrics.models import MetricRun, MetricScore, SystemScore
from metrics.scorers.registry import LEXICAL_MEASURES, METRICS

from .models import CorrelationReport

DEFAULT_RESAMPLES = 1000


class ReportError(ValueError):
    """The report cannot be made (nothing computed, no judgments...)."""


def current_run(dataset: Dataset, metric: str, document_frequency=None, m: int | None = None) -> MetricRun | None:
    """The run of ``metric`` on ``dataset`` at the current version and parameters, if any
    (``document_frequency``: a :class:`metrics.pipeline.SuppliedDocumentFrequency` for CIDEr-D;
    ``m``: captions per set of set-level runs, None = all; VIFIDEL: the configured vectors)."""
    params = pipeline.run_params(dataset, metric, document_frequency, m=m)
    return MetricRun.objects.filter(
        dataset=dataset, metric=metric, version=METRICS[metric].version, params_key=pipeline.run_identity(params)
    ).first()


def completed_runs(
    dataset: Dataset, metrics=None, cider_df: str | None = None, levels=("caption",), m: int | None = None,
) -> dict[str, MetricRun]:
    """{metric: done run}. With ``metrics`` given, each must have a complete run (ReportError
    otherwise); without, every metric of the given ``levels`` ("caption", "set") that has one.
    ``cider_df`` selects the runs computed with that document-frequency file."""
    if metrics:
        keys = pipeline.validate_metrics(metrics)
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
    if not runs:
        raise ReportError(
            f"no metric has been computed on dataset {dataset.name!r}; run: "
            f"python manage.py compute_metrics --dataset {dataset.name} --wait"
        )
    return runs


def dataset_judgments(dataset: Dataset):
    """The dataset's own (imported) caption-level judgments on its criterion; campaign judgments
    have their own reports (:mod:`crowd.reports`)."""
    qs = HumanJudgment.objects.filter(image__dataset=dataset, campaign__isnull=True, caption__isnull=False)
    return qs.filter(criterion=dataset.criterion) if dataset.criterion else qs


@dataclass
class Rows:
    """One row per human rating: its caption, image, human score and each metric's score."""

    caption: np.ndarray  # (n_rows,) caption ids
    image: np.ndarray  # (n_rows,) image ids
    human: np.ndarray  # (n_rows,) ratings
    metric: dict[str, np.ndarray]  # metric -> (n_rows,) scores


def judgment_rows(dataset: Dataset, runs: dict[str, MetricRun]) -> Rows:
    """Gather the rating rows of ``dataset`` (judged candidates only) with their metric scores."""
    data = np.array(
        list(
            dataset_judgments(dataset)
            .order_by("caption_id", "rater")
            .values_list("caption_id", "image_id", "score")
        ),
        dtype=float,
    ).reshape(-1, 3)
    if len(data) == 0:
        raise ReportError(f"dataset {dataset.name!r} has no human judgments")
    caption = data[:, 0].astype(np.int64)
    metric = {}
    for key, run in runs.items():
        values = dict(MetricScore.objects.filter(run=run).values_list("caption_id", "value"))
        missing = [c for c in np.unique(caption) if c not in values]
        if missing:
            raise ReportError(f"run {run.pk} of {key!r} lacks scores for {len(missing)} judged captions")
        metric[key] = np.array([values[c] for c in caption], dtype=float)
    return Rows(caption, data[:, 1].astype(np.int64), data[:, 2], metric)


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
    kind, _, measure = weighting.partition(":")
    if kind not in WEIGHTINGS or measure not in LEXICAL_MEASURES:
        raise ReportError(
            f"weighting must be gap:<measure> or ldr:<measure> with a measure among {', '.join(LEXICAL_MEASURES)}; "
            f"got {weighting!r}"
        )
    return kind, measure


def system_weights(dataset: Dataset, kind: str, measure: str) -> tuple[dict[int, float], MetricRun]:
    """{system id: L_g or l_d} from the done run of the lexical ``measure``; ReportError if missing."""
    run = current_run(dataset, measure)
    if run is None or run.status != MetricRun.DONE:
        raise ReportError(
            f"{METRICS[measure].name} has not been computed on {dataset.name!r}; run: python manage.py "
            f"compute_metrics --dataset {dataset.name} --metric {measure} --wait"
        )
    field = "lexical_gap" if kind == "gap" else "ldr"
    weights = {
        sid: (np.nan if details.get(field) is None else float(details[field]))
        for sid, details in SystemScore.objects.filter(run=run).values_list("system_id", "details")
    }
    return weights, run


def report_key(dataset: Dataset, runs: dict[str, MetricRun], n_resamples: int, seed: int, weighting=None) -> str:
    ident = {
        "dataset": [dataset.pk, dataset.fingerprint],
        "runs": {k: [r.pk, r.version, r.params_key, r.completed, str(r.finished_at)] for k, r in sorted(runs.items())},
        "judgments": dataset_judgments(dataset).count(),
        "n_resamples": n_resamples,
        "seed": seed,
        "weighting": weighting,
    }
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()


def correlation_report(
    dataset_name: str, metrics=None, n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0, use_cache: bool = True,
    cider_df: str | None = None, weighting: str | None = None,
) -> dict:
    """The correlation report of ``dataset_name`` as a JSON-serialisable dict.

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

    Raises PipelineError (unknown dataset or metric) or ReportError (nothing computed, no judgments,
    a bad weighting or its lexical run missing).
    """
    dataset = pipeline.get_dataset(dataset_name)
    runs = completed_runs(dataset, metrics, cider_df)
    weight_spec = parse_weighting(weighting)
    weights = weight_run = None
    if weight_spec:
        weights, weight_run = system_weights(dataset, *weight_spec)
    key = report_key(dataset, runs, n_resamples, seed, [weighting, weight_run.pk if weight_run else None])
    if use_cache:
        cached = CorrelationReport.objects.filter(dataset=dataset, key=key).first()
        if cached is not None:
            return _ordered(cached.payload)
    rows = judgment_rows(dataset, runs)
    report = {
        "dataset": dataset.name,
        "criterion": dataset.criterion,
        "n_pairs": int(len(np.unique(rows.caption))),
        "n_ratings": int(len(rows.human)),
        "n_images": int(len(np.unique(rows.image))),
        "bootstrap": {"n_resamples": n_resamples, "confidence": 0.95, "seed": seed, "unit": "image"},
        "metrics": {},
    }
    entries = [(metric, run, rows.metric[metric], METRICS[metric].name) for metric, run in runs.items()]
    if weight_spec:
        kind, measure = weight_spec
        report["weighting"] = {
            "kind": kind, "measure": measure, "run": weight_run.pk,
            "formula": ("M x L_g, L_g = 1 / (1 + exp(-5 (l_d - 0.81)))" if kind == "gap" else "M x l_d"),
        }
        system_of = dict(Caption.objects.filter(id__in=np.unique(rows.caption).tolist()).values_list("id", "system_id"))
        factor = np.array([weights.get(system_of[c], np.nan) for c in rows.caption], dtype=float)
        if np.isnan(factor).any():
            raise ReportError(f"{METRICS[measure].name} is undefined for a judged system (corpus too short)")
        symbol = "L_g" if kind == "gap" else "l_d"
        entries += [
            (f"{metric}+{kind}_{measure}", run, rows.metric[metric] * factor, f"{METRICS[metric].name} x {symbol} ({METRICS[measure].name})")
            for metric, run in runs.items()
        ]
    for metric, run, scores, name in entries:
        result = correlate(scores, rows.human, rows.image, STATISTICS, n_resamples=n_resamples, seed=seed)
        _, images, values, human = per_pair(rows, scores)
        agreement = per_group_rank_agreement(values, human, images)
        entry = {"name": name, "run": run.pk, "version": run.version, "params": run.params}
        entry.update({s: _num(result.values[s]) for s in STATISTICS})
        entry["ci95"] = {s: [_num(lo), _num(hi)] for s, (lo, hi) in result.ci95.items()}
        entry["per_image"] = {
            "spearman": _num(agreement.spearman),
            "kendall_tau_b": _num(agreement.kendall_tau_b),
            "n_images": agreement.n_groups_used,
            "n_images_skipped": agreement.n_groups_skipped,
        }
        report["metrics"][metric] = entry
    CorrelationReport.objects.update_or_create(dataset=dataset, key=key, defaults={"payload": report})
    return report


_TOP_ORDER = ("dataset", "criterion", "n_pairs", "n_ratings", "n_images", "bootstrap", "weighting", "metrics")
_METRIC_ORDER = ("name", "run", "version", "params", *STATISTICS, "ci95", "per_image")


def _ordered(report: dict) -> dict:
    """Restore the documented key order (PostgreSQL's jsonb does not keep it): metrics in registry order."""
    metrics = report["metrics"]
    keys = [k for k in METRICS if k in metrics]
    keys += sorted((k for k in metrics if k not in METRICS), key=lambda k: (list(METRICS).index(k.split("+")[0]), k))
    ordered_metrics = {k: {f: metrics[k][f] for f in _METRIC_ORDER if f in metrics[k]} for k in keys}
    out = {k: report[k] for k in _TOP_ORDER if k in report}
    out["metrics"] = ordered_metrics
    return out


def _num(x: float) -> float | None:
    """JSON-safe float: NaN (undefined correlation) becomes None."""
    x = float(x)
    return None if np.isnan(x) else x


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
