"""Meta-evaluation of caption metrics on human-judgment benchmarks: the numbers a paper reports.

One *benchmark report* per dataset (and judged criterion) gathers, for every metric with a complete
run:

* correlations at three levels (google-research/mt-metrics-eval's ``average_by``: the report's
  ``item`` level is ``average_by="none"``, ``image`` is ``average_by="item"``):
  ``item`` -- pooled over all rows (each rating a row, or each caption's mean, as the dataset's
  protocol says), with 95% bootstrap intervals resampling images;
  ``image`` -- the within-image correlation across an image's candidates, averaged over images
  (Wang & Chan 2019, Table 2 "per-image"), bootstrap over images;
  ``system`` -- one mean score per system (metric and humans), correlated across systems
  (Kasai et al. 2022, THumB), bootstrap over images and, separately, over systems;
* pairwise accuracy with ties acc_23, Kendall tau_23 and the tie-calibrated accuracy acc_eq with
  its epsilon (Deutsch et al. 2023, "Ties Matter"), over all pairs of rows at the item level
  (``average_by="none"``: no grouping, so the per-group averages of these statistics do not apply);
* significance between every two metrics on the same rows: a paired permutation test on the
  headline statistic and Williams' test on Pearson, with WMT-style significance clusters (ranks);
* the human ceiling: leave-one-rater-out (each rating is a row) or split-half (per-caption means)
  agreement with its bootstrap interval, drawn on every chart.

Forced-choice benchmarks (PASCAL-50S) report the share of pairs where the metric prefers the
caption the human majority preferred, per category (HC, HI, HM, MM) and overall, with the
leave-one-vote-out human ceiling and a paired sign-flip permutation test between metrics.

:func:`comparison` puts the headline number of every metric on every benchmark into one matrix
with intervals and cluster ranks, exported by :func:`comparison_csv_rows` and
:func:`comparison_latex`. Every report stores its seeds and resample counts; the same inputs and
settings give identical numbers, and reports are cached under a key of all inputs.
"""
from __future__ import annotations

import contextvars
import os
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
from threadpoolctl import threadpool_limits

from captioneval.stats.engine import vectorised
from captioneval.stats import (
    STATISTICS,
    compare_forced_choice,
    compare_metrics,
    finite_or_none,
    forced_choice_accuracy,
    forced_choice_credit,
    forced_choice_ceiling,
    leave_one_rater_out,
    metric_agreement,
    per_group_correlation,
    split_half_ceiling,
    system_level_correlation,
    tie_calibrated_accuracy,
)
from crowd.models import Dataset, System
from metrics import pipeline, uploads
from metrics.models import MetricScore

from . import published
from .models import CorrelationReport
from .reports import (
    ReportError,
    check_criterion,
    completed_runs,
    dataset_judgments,
    fetch_rows,
    judgment_rows,
    metric_name,
    per_pair,
    protocol,
    report_key,
)

LEVELS = ("item", "image", "system")
PAIRWISE = ("kendall_tau_23", "pairwise_accuracy", "acc_eq")
DEFAULT_RESAMPLES = 1000
DEFAULT_PERMUTATIONS = 1000
DEFAULT_ALPHA = 0.05
LABELS = {
    "pearson": "Pearson r", "spearman": "Spearman rho", "kendall_tau_b": "Kendall tau-b",
    "kendall_tau_c": "Kendall tau-c", "kendall_tau_23": "Kendall tau_23", "pairwise_accuracy": "acc_23",
    "acc_eq": "acc_eq (tie-calibrated)", "accuracy": "accuracy",
}
#: /2: the system level has "without_human" when the protocol names a human system (THumB)
REPORT_VERSION = "benchmark-report/2"


def headline_first(statistics, headline: str | None) -> list[str]:
    """``statistics`` in their order with the protocol's headline statistic moved first (Flickr8k-
    CrowdFlower: Kendall tau-b, Hessel et al. 2021 appendix A; Flickr8k-Expert: tau-c; THumB: Pearson)."""
    statistics = list(statistics)
    return ([headline] if headline in statistics else []) + [s for s in statistics if s != headline]


def check_settings(levels, statistics, n_resamples: int, n_permutations: int, alpha: float) -> tuple[tuple, tuple]:
    """Validate the report settings; returns (levels, statistics). ReportError names the bad value."""
    levels = tuple(levels or LEVELS)
    bad = [lv for lv in levels if lv not in LEVELS]
    if bad:
        raise ReportError(f"unknown level {bad[0]!r}; levels: {', '.join(LEVELS)}")
    statistics = tuple(statistics or STATISTICS)
    bad = [s for s in statistics if s not in STATISTICS]
    if bad:
        raise ReportError(f"unknown statistic {bad[0]!r}; statistics: {', '.join(STATISTICS)} (pairwise: always reported)")
    for name, value in (("resamples", n_resamples), ("permutations", n_permutations)):
        if int(value) != value or value < 0:
            raise ReportError(f"{name} must be a non-negative integer, got {value!r}")
    if not 0 < alpha < 1:
        raise ReportError(f"alpha must be in (0, 1), got {alpha!r}")
    return levels, statistics


def benchmark_report(
    dataset_name: str, metrics=None, criterion: str | None = None, levels=LEVELS, statistics=STATISTICS,
    n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0, n_permutations: int = DEFAULT_PERMUTATIONS,
    alpha: float = DEFAULT_ALPHA, significance: bool = True, use_cache: bool = True, cider_df: str | None = None,
) -> dict:
    """The full meta-evaluation report of one benchmark, as a JSON-serialisable dict.

    Shape (rating benchmarks)::

        {"version": str, "dataset": str, "criterion": str, "task": "rating", "protocol": {...},
         "headline": statistic, "counts": {"rows", "captions", "images", "systems", "ratings"},
         "settings": {"levels", "statistics", "n_resamples", "confidence": 0.95, "seed",
                      "n_permutations", "alpha", "bootstrap_unit": "image"},
         "metrics": {key: {"name", "run", "version",
                           "item": {"values": {stat: x}, "ci95": {stat: [lo, hi]},
                                    "pairwise": {"kendall_tau_23", "pairwise_accuracy", "acc_eq", "epsilon"}},
                           "image": {"values", "ci95", "n_images_used", "n_images_skipped"},
                           "system": {"values", "ci95", "ci95_systems", "n_systems",
                                      "without_human": {"left_out", "values", "ci95", "ci95_systems",
                                                        "n_systems"} | {"left_out", "error"}
                                      (only when the protocol names a judged ``human_system``)}
                                     | {"error": str}}},
         "ceiling": {"item": CeilingResult dict | {"error": str}},   (forced choice: also "per_category")
         "significance": {"permutation": MetricComparison dict, "williams": MetricComparison dict},
         "published": analysis.published.block (published values of the attached benchmark beside
                      ours; not stored with the report, remade from the bundled table) | None}

    Forced-choice benchmarks (``protocol.task == "forced_choice"``) have ``"task": "forced_choice"``,
    ``"headline": "accuracy"`` and per metric ``{"accuracy", "ci95", "n_pairs", "n_excluded",
    "per_category": {cat: {"accuracy", "n_pairs", "ci95"}}}``.

    Parameters: ``metrics`` (keys; default every computed caption-level metric), ``criterion``
    (default the dataset's main one), ``levels`` among :data:`LEVELS`, ``statistics`` among
    pearson/spearman/kendall_tau_b/kendall_tau_c, ``n_resamples`` bootstrap resamples (0 = no
    intervals), ``seed`` (bootstrap and permutation draws), ``n_permutations`` and ``alpha`` of
    the significance tests (``significance=False`` skips them).

    Raises PipelineError (unknown dataset/metric) or ReportError (nothing computed, no
    judgments, bad settings).
    """
    levels, statistics = check_settings(levels, statistics, n_resamples, n_permutations, alpha)
    dataset, proto, criterion, runs, settings, key = _plan(
        dataset_name, metrics, criterion, levels, statistics, n_resamples, seed, n_permutations, alpha, significance, cider_df)
    if use_cache:
        cached = CorrelationReport.objects.filter(dataset=dataset, key=key).first()
        if cached is not None:
            return published.attach(dataset, _restore_order(cached.payload, runs))
    if proto["task"] == Dataset.TASK_FORCED_CHOICE:
        report = _forced_choice_report(dataset, proto, runs, settings, significance)
    else:
        report = _rating_report(dataset, proto, criterion, runs, settings, levels, statistics, significance)
    CorrelationReport.objects.update_or_create(dataset=dataset, key=key, defaults={"payload": report})
    # The published values (static data, analysis.published) are added to what is returned, not to
    # the stored payload; the pages and downloads remake them from the bundled table when they read it.
    return published.attach(dataset, report)


def _plan(dataset_name, metrics, criterion, levels, statistics, n_resamples, seed, n_permutations, alpha, significance,
          cider_df):
    """(dataset, protocol, criterion, runs, settings, cache key) of a benchmark report request."""
    dataset = pipeline.get_dataset(dataset_name)
    proto = protocol(dataset)
    if proto["task"] == Dataset.TASK_FORCED_CHOICE:
        criterion = None
    else:
        criterion = check_criterion(dataset, criterion)
    runs = completed_runs(dataset, metrics, cider_df)
    settings = {
        "levels": list(levels), "statistics": list(statistics), "n_resamples": int(n_resamples), "confidence": 0.95,
        "seed": int(seed), "n_permutations": int(n_permutations) if significance else 0, "alpha": float(alpha),
        "bootstrap_unit": "pair" if proto["task"] == Dataset.TASK_FORCED_CHOICE else "image",
    }
    key = report_key(dataset, runs, n_resamples, seed, None, criterion=criterion, kind=REPORT_VERSION, settings=settings)
    return dataset, proto, criterion, runs, settings, key


def stored_benchmark_report(
    dataset_name: str, metrics=None, criterion: str | None = None, levels=LEVELS, statistics=STATISTICS,
    n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0, n_permutations: int = DEFAULT_PERMUTATIONS,
    alpha: float = DEFAULT_ALPHA,
) -> dict | None:
    """The benchmark report :func:`benchmark_report` would return from its cache for these
    arguments (the same key: dataset version, runs, judgments, settings), or None when none is
    stored. Computes nothing. Raises what :func:`benchmark_report` raises for bad arguments."""
    levels, statistics = check_settings(levels, statistics, n_resamples, n_permutations, alpha)
    dataset, _, _, runs, _, key = _plan(
        dataset_name, metrics, criterion, levels, statistics, n_resamples, seed, n_permutations, alpha, True, None)
    cached = CorrelationReport.objects.filter(dataset=dataset, key=key).first()
    return None if cached is None else published.attach(dataset, _restore_order(cached.payload, runs))


def _restore_order(report: dict, runs: dict) -> dict:
    """PostgreSQL's jsonb sorts keys: put metrics back in the run order (registry order)."""
    metrics = report["metrics"]
    report["metrics"] = {k: metrics[k] for k in runs if k in metrics}
    return report


def _header(dataset: Dataset, proto: dict, runs: dict, settings: dict, task: str, criterion=None) -> dict:
    return {
        "version": REPORT_VERSION, "dataset": dataset.name, "criterion": criterion, "task": task,
        "protocol": proto, "headline": proto["headline"] if task == Dataset.TASK_RATING else "accuracy",
        "settings": settings, "metrics": {},
    }


def report_threads() -> int:
    """Threads that compute the independent parts of one report (settings.REPORT_THREADS, default
    the CPU count, at most 4; 1 computes everything in the calling thread). The statistics are
    numpy and BLAS calls that release the GIL; each part is seeded on its own, so the numbers do
    not depend on the thread count."""
    from django.conf import settings as django_settings

    if not vectorised():  # the reference path is the one-thread code the parts replaced
        return 1
    configured = getattr(django_settings, "REPORT_THREADS", None)
    return max(1, int(configured) if configured else min(4, os.cpu_count() or 1))


class _Parts:
    """Runs independent report parts on a thread pool (or inline with one thread); each part runs in a
    copy of the caller's context, so :func:`captioneval.stats.engine.reference_path` applies to it.
    Database queries stay in the calling thread (a test's transaction is not visible to others).

    Inside, BLAS (OpenBLAS, MKL) is held to one thread (threadpoolctl), with or without a pool: the
    parts are the parallelism, BLAS threads beside them only spin (on 2 cores the CrowdFlower report
    took 10.0 s of CPU for 5.5 s instead of 8.2 s for 4.65 s), and a threaded BLAS splits the float
    sums of Pearson's r by its thread count, so the last bits of a report would depend on the
    machine's cores."""

    def __init__(self, threads: int):
        self.pool = ThreadPoolExecutor(max_workers=threads) if threads > 1 else None
        self._blas = None

    def submit(self, fn, *args):
        if self.pool is None:
            done = Future()
            done.set_result(fn(*args))
            return done
        return self.pool.submit(contextvars.copy_context().run, fn, *args)

    def __enter__(self):
        self._blas = threadpool_limits(limits=1, user_api="blas")
        return self

    def __exit__(self, *exc):
        try:
            if self.pool is not None:
                self.pool.shutdown(wait=True, cancel_futures=exc[0] is not None)
        finally:
            self._blas.restore_original_limits()


def _item_block(name, x, rows, statistics, n_resamples, seed) -> dict:
    """The item level's correlations with their bootstrap intervals (without "pairwise")."""
    return metric_agreement(name, x, rows.human, rows.image, statistics, n_resamples=n_resamples, seed=seed).level_block()


def _pairwise_block(x, rows) -> dict:
    """The item level's "pairwise" entry: tau_23, acc_23 and acc_eq over all pairs of rows (no
    grouping: mt-metrics-eval average_by="none", so the per-group averages do not apply)."""
    calibrated = tie_calibrated_accuracy(x, rows.human)
    counts = calibrated.counts_at_zero  # kendall_tau_23 and pairwise_accuracy of these rows, one pair count
    return {
        "kendall_tau_23": finite_or_none(counts.tau_23()),
        "pairwise_accuracy": finite_or_none(counts.acc_23()),
        "acc_eq": finite_or_none(calibrated.accuracy),
        "epsilon": finite_or_none(calibrated.epsilon),
    }


def _image_block(x, rows, statistics, n_resamples, seed) -> dict:
    _, images, values, human = per_pair(rows, x)
    per_image = {}
    for s in statistics:
        per_image[s] = per_group_correlation(values, human, images, statistic=s, n_resamples=n_resamples, seed=seed)
    first = next(iter(per_image.values()))
    return {
        "values": {s: finite_or_none(r.estimate.value) for s, r in per_image.items()},
        "ci95": {s: r.estimate.interval_json() for s, r in per_image.items()},
        "n_images_used": int(first.n_groups_used), "n_images_skipped": int(first.n_groups_skipped),
    }


def _system_block(x, rows, statistics, n_resamples, seed, human_system) -> dict:
    by_images = {s: system_level_correlation(x, rows.human, rows.system, rows.image, statistic=s, resample="images",
                                             n_resamples=n_resamples, seed=seed) for s in statistics}
    by_systems = {s: system_level_correlation(x, rows.human, rows.system, rows.image, statistic=s, resample="systems",
                                              n_resamples=n_resamples, seed=seed) for s in statistics}
    block = {
        "values": {s: finite_or_none(r.estimate.value) for s, r in by_images.items()},
        "ci95": {s: r.estimate.interval_json() for s, r in by_images.items()},
        "ci95_systems": {s: r.estimate.interval_json() for s, r in by_systems.items()},
        "n_systems": int(len(np.unique(rows.system))),
    }
    if human_system is not None:
        block["without_human"] = _system_level(
            x, rows, rows.system != human_system[0], statistics, n_resamples, seed, human_system[1])
    return block


def _significance_block(rows, runs, names, headline, settings, threads: int) -> dict:
    scores = {m: rows.metric[m] for m in runs}
    return {
        "permutation": _named(compare_metrics(
            scores, rows.human, statistic=headline, groups=rows.image, level="item", test="permutation",
            n_resamples=settings["n_permutations"], seed=settings["seed"], alpha=settings["alpha"], n_jobs=threads,
        ).to_dict(), names),
        "williams": _named(compare_metrics(
            scores, rows.human, statistic="pearson", level="item", test="williams", alpha=settings["alpha"],
        ).to_dict(), names),
    }


def _rating_report(dataset, proto, criterion, runs, settings, levels, statistics, significance) -> dict:
    rows = judgment_rows(dataset, runs, criterion)
    n_resamples, seed = settings["n_resamples"], settings["seed"]
    headline = proto["headline"] if proto["headline"] in STATISTICS else "kendall_tau_b"
    report = _header(dataset, proto, runs, settings, Dataset.TASK_RATING, criterion or dataset.criterion)
    report["headline"] = headline
    n_systems = len(np.unique(rows.system))
    human_system = _human_system(dataset, proto, rows) if "system" in levels else None
    report["counts"] = {
        "rows": int(len(rows.human)), "captions": int(len(np.unique(rows.caption))),
        "images": int(len(np.unique(rows.image))), "systems": int(n_systems),
        "ratings": int(dataset_judgments(dataset, criterion).count()),
    }
    names = {metric: metric_name(metric, run) for metric, run in runs.items()}
    threads = report_threads()
    with_sig = significance and len(runs) >= 2 and settings["n_permutations"] > 0
    # the permutation part only waits for its own threads (one per pair of metrics): one more thread here
    with _Parts(threads + 1 if with_sig and threads > 1 else threads) as parts:
        # the longest parts first (a part waits for a free thread in submission order): the permutation
        # tests, the item level of the metric with the most distinct values (the bootstrap's cell
        # tables grow with them), the ceiling (its ratings read meanwhile: database reads stay in this
        # thread), that metric's pairwise entry, then the other item levels and the image and system
        # levels
        sig = None
        if with_sig:
            sig = parts.submit(_significance_block, rows, runs, names, headline, settings, threads)
        by_cost = sorted(runs, key=lambda m: -np.unique(rows.metric[m]).size)
        pending = {}

        heavy, rest = by_cost[:1], by_cost[1:]

        def submit_item(metric):
            pending[metric, "item"] = parts.submit(_item_block, names[metric], rows.metric[metric], rows, statistics,
                                                   n_resamples, seed)

        def submit_pairwise(metric):
            pending[metric, "pairwise"] = parts.submit(_pairwise_block, rows.metric[metric], rows)

        if "item" in levels:
            for metric in heavy:
                submit_item(metric)
        ceiling_data = _ceiling_data(dataset, criterion)
        ceiling = parts.submit(_rating_ceiling, ceiling_data, proto, headline, n_resamples, seed)
        if "item" in levels:
            for submit, metrics in ((submit_pairwise, heavy), (submit_item, rest), (submit_pairwise, rest)):
                for metric in metrics:
                    submit(metric)
        for metric in by_cost:
            x = rows.metric[metric]
            if "image" in levels:
                pending[metric, "image"] = parts.submit(_image_block, x, rows, statistics, n_resamples, seed)
            if "system" in levels and n_systems >= 3:
                pending[metric, "system"] = parts.submit(_system_block, x, rows, statistics, n_resamples, seed, human_system)
        for metric, run in runs.items():
            entry = {"name": names[metric], "run": run.pk, "version": run.version}
            for level in ("item", "image", "system"):
                if (metric, level) in pending:
                    entry[level] = pending[metric, level].result()
                    if level == "item":
                        entry[level]["pairwise"] = pending[metric, "pairwise"].result()
                elif level == "system" and level in levels:
                    entry["system"] = {"error": f"{n_systems} judged system(s): a system-level correlation needs at least 3"}
            report["metrics"][metric] = entry
        report["ceiling"] = {"item": ceiling.result()}
        if sig is not None:
            report["significance"] = sig.result()
    return report


def _human_system(dataset, proto: dict, rows) -> tuple[int, str] | None:
    """(id, name) of the protocol's human system (``protocol["human_system"]``, THumB's "Human")
    when it is among the judged systems, else None."""
    name = proto.get("human_system")
    if not name:
        return None
    pk = System.objects.filter(dataset=dataset, name=name).values_list("pk", flat=True).first()
    return (pk, name) if pk is not None and np.any(rows.system == pk) else None


def _system_level(x, rows, keep, statistics, n_resamples, seed, left_out: str) -> dict:
    """The system-level block over the rows ``keep`` (bool (n,)): the result "without" the system
    ``left_out`` (Kasai et al. 2022, THumB, report system-level correlations with and without the
    Human system): {"left_out", "values", "ci95", "ci95_systems", "n_systems"}, or
    {"left_out", "error"} when fewer than 3 systems remain."""
    systems, images, xs, hs = rows.system[keep], rows.image[keep], x[keep], rows.human[keep]
    n = len(np.unique(systems))
    if n < 3:
        return {"left_out": left_out, "error": f"{n} judged system(s) without {left_out}: a system-level correlation needs at least 3"}
    by_images = {s: system_level_correlation(xs, hs, systems, images, statistic=s, resample="images",
                                             n_resamples=n_resamples, seed=seed) for s in statistics}
    by_systems = {s: system_level_correlation(xs, hs, systems, images, statistic=s, resample="systems",
                                              n_resamples=n_resamples, seed=seed) for s in statistics}
    return {
        "left_out": left_out,
        "values": {s: finite_or_none(r.estimate.value) for s, r in by_images.items()},
        "ci95": {s: r.estimate.interval_json() for s, r in by_images.items()},
        "ci95_systems": {s: r.estimate.interval_json() for s, r in by_systems.items()},
        "n_systems": int(n),
    }


def _named(comparison: dict, names: dict) -> dict:
    comparison["display_names"] = [names.get(k, k) for k in comparison["names"]]
    return comparison


def _ceiling_data(dataset, criterion):
    """(caption ids, raters, scores) of every rating of the criterion: the human ceiling's input."""
    # ordered by caption and rater, as the report's rows (the model's default order joins five tables)
    data = fetch_rows(dataset_judgments(dataset, criterion).order_by("caption_id", "rater", "pk")
                      .values_list("caption_id", "rater", "score"))
    items = np.array([d[0] for d in data])
    raters = np.array([d[1] for d in data], dtype=object)
    scores = np.array([d[2] for d in data], float)
    return items, raters, scores


def _rating_ceiling(data, proto, statistic, n_resamples, seed) -> dict:
    """Leave-one-rater-out when every rating is a row (the metric predicts single ratings), split-half
    of the per-caption means when the protocol correlates means; an error entry when no caption has
    two ratings. ``data``: :func:`_ceiling_data`."""
    items, raters, scores = data
    if len(items) == 0 or np.bincount(np.unique(items, return_inverse=True)[1]).max() < 2:
        return {"error": "one rating per caption: the human ceiling cannot be estimated from this dataset"}
    try:
        if proto["rows"] == Dataset.ROWS_MEAN:
            result = split_half_ceiling(items, raters, scores, statistic=statistic, n_resamples=min(n_resamples, 200) or 0, seed=seed)
        else:
            result = leave_one_rater_out(items, raters, scores, statistic=statistic, n_resamples=n_resamples, seed=seed)
    except ValueError as exc:
        return {"error": str(exc)}
    return result.to_dict()


def forced_choice_data(dataset: Dataset, runs: dict):
    """(categories (n,), votes for B (n,), votes (n,), {metric: (score_b (n,), score_c (n,))}) of a
    forced-choice benchmark, one row per pair."""
    from crowd.importers.pascal50s import forced_choice_rows

    pairs = forced_choice_rows(dataset)
    if not pairs:
        raise ReportError(f"dataset {dataset.name!r} has no forced-choice judgments")
    b = np.array([p[0] for p in pairs])
    c = np.array([p[1] for p in pairs])
    categories = np.array([p[2] for p in pairs], dtype=object)
    votes_b = np.array([p[3] for p in pairs], float)
    votes = np.array([p[4] for p in pairs], float)
    scores = {}
    for key, run in runs.items():
        values = dict(MetricScore.objects.filter(run=run, caption_id__in=np.union1d(b, c).tolist()).values_list("caption_id", "value"))
        missing = [i for i in np.union1d(b, c) if int(i) not in values]
        if missing:
            raise ReportError(f"run {run.pk} of {key!r} lacks scores for {len(missing)} judged captions")
        sign = uploads.metric_sign(key, run)  # lower-is-better metrics are negated (see judgment_rows)
        scores[key] = (sign * np.array([values[int(i)] for i in b]), sign * np.array([values[int(i)] for i in c]))
    return categories, votes_b, votes, scores


def _vote_ceiling(vote_lists, settings) -> dict:
    """Leave-one-vote-out accuracy of the human votes (their agreement with the other voters' majority)."""
    try:
        return forced_choice_ceiling(vote_lists, n_resamples=settings["n_resamples"], seed=settings["seed"]).to_dict()
    except ValueError as exc:
        return {"error": str(exc)}


def _forced_choice_report(dataset, proto, runs, settings, significance) -> dict:
    categories, votes_b, votes, scores = forced_choice_data(dataset, runs)
    report = _header(dataset, proto, runs, settings, Dataset.TASK_FORCED_CHOICE)
    human_b = votes_b / votes
    report["counts"] = {
        "pairs": int(len(votes)), "votes": int(votes.sum()), "tied_pairs": int(np.sum(human_b == 0.5)),
        "per_category": {str(c): int(np.sum(categories == c)) for c in sorted(set(categories))},
    }
    correct = {}
    for metric, run in runs.items():
        sb, sc = scores[metric]
        result = forced_choice_accuracy(sb, sc, human_b, categories, n_resamples=settings["n_resamples"], seed=settings["seed"])
        entry = {"name": metric_name(metric, run), "run": run.pk, "version": run.version}
        entry.update(result.to_dict())
        report["metrics"][metric] = entry
        decided = human_b != 0.5
        correct[metric] = forced_choice_credit(sb, sc, human_b)[decided]
    vote_lists = [np.r_[np.ones(int(vb)), np.zeros(int(v - vb))] for vb, v in zip(votes_b, votes)]
    report["ceiling"] = {"item": _vote_ceiling(vote_lists, settings), "per_category": {
        str(cat): _vote_ceiling([vote_lists[i] for i in np.flatnonzero(categories == cat)], settings)
        for cat in sorted(set(categories))
    }}
    if significance and len(runs) >= 2 and settings["n_permutations"] > 0:
        names = {m: report["metrics"][m]["name"] for m in runs}
        report["significance"] = {"permutation": _named(compare_forced_choice(
            correct, n_resamples=settings["n_permutations"], seed=settings["seed"], alpha=settings["alpha"],
        ).to_dict(), names)}
    return report


# --------------------------------------------------------------------------------------------
# All benchmarks in one matrix
# --------------------------------------------------------------------------------------------


def benchmark_columns(dataset: Dataset) -> list[dict]:
    """The comparison-matrix columns one dataset contributes: one per judged criterion of a rating
    benchmark (THumB: human_score, precision, recall), one per category plus the overall accuracy
    of a forced-choice benchmark (PASCAL-50S: HC, HI, HM, MM, all)."""
    proto = protocol(dataset)
    if proto["task"] == Dataset.TASK_FORCED_CHOICE:
        cats = proto.get("categories") or []
        return [
            {"id": f"{dataset.name}:{c}", "dataset": dataset.name, "criterion": None, "category": c, "statistic": "accuracy"}
            for c in [*cats, "all"]
        ]
    return [
        {"id": f"{dataset.name}:{c}" if len(proto["criteria"]) > 1 else dataset.name, "dataset": dataset.name,
         "criterion": c, "category": None, "statistic": proto["headline"]}
        for c in (proto["criteria"] or [dataset.criterion])
    ]


def comparison_column_report(name: str, metrics, criterion, n_resamples: int, seed: int, n_permutations: int,
                             alpha: float, reuse: bool = True) -> dict:
    """The benchmark report one comparison column reads (its item level, ceiling and permutation ranks).

    ``reuse`` (default): the stored full benchmark report of these settings (the one the benchmark
    page and ``warm_reports`` store: every level, the same seed, resamples and permutations), else a
    stored item-level-only report; when neither is stored the full report is computed (and stored,
    so the benchmark page finds it). The item level of a full report is the item-level-only report's
    (each level draws its own resamples from ``seed``), so the matrix is the same either way.
    ``reuse=False``: the item-level-only report, from its cache or computed (the path before reports
    were shared; ``benchmarks/report_speed.py`` times it).
    """
    if reuse:
        for levels in (LEVELS, ("item",)):
            stored = stored_benchmark_report(name, metrics, criterion=criterion, levels=levels, n_resamples=n_resamples,
                                             seed=seed, n_permutations=n_permutations, alpha=alpha)
            if stored is not None:
                return stored
        return benchmark_report(name, metrics, criterion=criterion, n_resamples=n_resamples, seed=seed,
                                n_permutations=n_permutations, alpha=alpha)
    return benchmark_report(name, metrics, criterion=criterion, levels=("item",), n_resamples=n_resamples, seed=seed,
                            n_permutations=n_permutations, alpha=alpha)


def comparison(
    datasets=None, metrics=None, n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0,
    n_permutations: int = DEFAULT_PERMUTATIONS, alpha: float = DEFAULT_ALPHA, *, reuse: bool = True,
) -> dict:
    """Every metric on every benchmark: the headline statistic at the item level (x1, not x100)
    with its 95% interval and the metric's significance-cluster rank within that benchmark.

    Shape::

        {"settings": {...}, "columns": [{"id", "dataset", "criterion", "category", "statistic",
                                         "ceiling": {"value", "ci95"} | None}],
         "rows": [{"metric": key, "name": str, "cells": {column id: {"value", "ci95", "rank"}}}],
         "skipped": [{"dataset": name, "reason": str}],
         "published": [analysis.published.block of each dataset attached to a published benchmark]}

    ``datasets``: names (default every dataset with human judgments); a dataset whose report
    cannot be made is listed in ``skipped`` with the reason (unless it was named explicitly, then
    ReportError). Ranks come from the permutation test on the overall statistic; per-category
    columns of forced-choice benchmarks carry no rank. Each column reads the stored benchmark report
    of the same settings (:func:`comparison_column_report`; ``reuse=False`` recomputes the
    item-level-only reports as before reports were shared).
    """
    explicit = bool(datasets)
    names = list(datasets) if datasets else list(Dataset.objects.order_by("name").values_list("name", flat=True))
    out = {
        "settings": {"n_resamples": n_resamples, "seed": seed, "n_permutations": n_permutations, "alpha": alpha,
                     "level": "item", "confidence": 0.95},
        "columns": [], "rows": [], "skipped": [],
    }
    rows: dict[str, dict] = {}
    attached = []  # (dataset, report of its first column) for the published values
    for name in names:
        dataset = pipeline.get_dataset(name)
        for column in benchmark_columns(dataset):
            try:
                report = comparison_column_report(name, metrics, column["criterion"], n_resamples, seed, n_permutations,
                                                  alpha, reuse=reuse)
            except ReportError as exc:
                if explicit:
                    raise
                if not any(s["dataset"] == name for s in out["skipped"]):
                    out["skipped"].append({"dataset": name, "reason": str(exc)})
                break
            ceiling = report["ceiling"]["item"]
            if column["category"] not in (None, "all"):
                ceiling = report["ceiling"].get("per_category", {}).get(column["category"], {"error": "no ceiling"})
            column = dict(column, ceiling=None if "error" in ceiling else {"value": ceiling["value"], "ci95": ceiling["ci95"]})
            ranks = (report.get("significance", {}).get("permutation") or {}).get("ranks", {})
            if not any(d is dataset for d, _ in attached):
                attached.append((dataset, report))
            out["columns"].append(column)
            for metric, entry in report["metrics"].items():
                row = rows.setdefault(metric, {"metric": metric, "name": entry["name"], "cells": {}})
                if report["task"] == Dataset.TASK_FORCED_CHOICE:
                    if column["category"] == "all":
                        cell = {"value": entry["accuracy"], "ci95": entry["ci95"], "rank": ranks.get(metric)}
                    else:
                        cat = entry["per_category"].get(column["category"], {})
                        cell = {"value": cat.get("accuracy"), "ci95": cat.get("ci95", [None, None]), "rank": None}
                else:
                    stat = column["statistic"]
                    cell = {"value": entry["item"]["values"].get(stat), "ci95": entry["item"]["ci95"].get(stat, [None, None]),
                            "rank": ranks.get(metric)}
                row["cells"][column["id"]] = cell
    out["rows"] = list(rows.values())
    out["published"] = published.comparison_blocks(attached)
    return out


COMPARISON_CSV_COLUMNS = ["metric", "name", "benchmark", "dataset", "criterion", "category", "statistic",
                          "value", "ci95_lo", "ci95_hi", "rank", "source", "citation"]
COMPUTED_HERE = "computed here"


def comparison_csv_rows(matrix: dict):
    """Long-format rows of the comparison (header first), one per metric x benchmark cell, plus a
    ``human_ceiling`` row per benchmark that has one; values as in the JSON (not x100), ``source``
    "computed here". Then one row per published value of the matrix's ``"published"`` blocks
    (:mod:`analysis.published`): metric ``published:<folder>``, the benchmark column of its dataset,
    value x1 (the table's x100 / 100), no interval or rank, ``source`` "published, not computed here"
    and the ``citation`` (paper table, repository and commit)."""
    yield COMPARISON_CSV_COLUMNS
    for col in matrix["columns"]:
        if col["ceiling"]:
            yield ["human_ceiling", "Human ceiling", col["id"], col["dataset"], col["criterion"], col["category"],
                   col["statistic"], col["ceiling"]["value"], *col["ceiling"]["ci95"], None, COMPUTED_HERE, None]
    for row in matrix["rows"]:
        for col in matrix["columns"]:
            cell = row["cells"].get(col["id"])
            if cell is None:
                continue
            yield [row["metric"], row["name"], col["id"], col["dataset"], col["criterion"], col["category"],
                   col["statistic"], cell["value"], *cell["ci95"], cell["rank"], COMPUTED_HERE, None]
    for b in matrix.get("published") or []:
        col = next((c for c in matrix["columns"] if c["dataset"] == b["dataset"]), None)
        for r in b["rows"]:
            yield [f"published:{r['metric']}", r["name"], col["id"] if col else b["dataset"], b["dataset"],
                   col["criterion"] if col else None, None, r["statistic"], r["value"] / 100, None, None, None,
                   published.NOTE, r["citation"]]


def published_latex(blocks: list[dict]) -> str:
    """A second booktabs ``table`` with the published values of ``blocks`` (:mod:`analysis.published`):
    one row per benchmark, metric and statistic, the published value x100 and ours where computed,
    each published value marked with a footnote letter naming its source table, and the repository
    citation. Empty string when there is nothing published."""
    rows = [(b, r) for b in blocks for r in b["rows"]]
    if not rows:
        return ""
    notes: dict[str, str] = {}
    lines = [
        "% Published values, not computed here (analysis.published; data/published_correlations)",
        "\\begin{table}[t]", "\\centering", "\\small",
        "\\begin{tabular}{lllcc}", "\\toprule",
        "Benchmark & Metric & Statistic & Published & Ours \\\\", "\\cmidrule(lr){1-5}",
    ]
    for b, r in rows:
        mark = notes.setdefault(r["source"], chr(ord("a") + len(notes)) if len(notes) < 26 else str(len(notes) + 1))
        ours = "--" if r["ours"] is None else f"{r['ours']:.1f}"
        if not r["computed_here"]:
            ours = "not computed here"
        lines.append(" & ".join([latex_escape(f"{b['title']} ({b['dataset']})"), latex_escape(r["name"]),
                                 latex_escape(r["label"]), f"{r['value']:.1f}$^{{{mark}}}$", latex_escape(ours)]) + " \\\\")
    lines += ["\\bottomrule", "\\end{tabular}", "", "\\par\\smallskip{\\footnotesize"]
    lines += [f"$^{{{mark}}}$ {latex_escape(source)}.\\\\" for source, mark in notes.items()]
    lines += [latex_escape(blocks[0]["citation"]) + ".}",
              "\\caption{Published Kendall correlations with human judgments (x100), " + published.NOTE
              + ": copied from the papers in the footnotes; ours (item level, same statistic) where this platform computes the metric.}",
              "\\label{tab:published-agreement}", "\\end{table}"]
    return "\n".join(lines) + "\n"


_LATEX_ESCAPES = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                  "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}


def latex_escape(text: str) -> str:
    """Escape LaTeX's special characters in plain text."""
    return "".join(_LATEX_ESCAPES.get(ch, ch) for ch in str(text))


def _latex_number(v) -> str:
    return "--" if v is None else f"{100 * v:.1f}"


def comparison_latex(matrix: dict) -> str:
    """A booktabs ``table`` a researcher can paste into a paper: one row per metric, one column per
    benchmark, cells ``value^{rank}`` with the 95% interval below in small type, all x100; the last
    row is the human ceiling. Needs ``\\usepackage{booktabs}``."""
    cols = matrix["columns"]
    lines = [
        "% Generated by captioneval (analysis.benchmarks.comparison_latex); requires \\usepackage{booktabs}",
        "\\begin{table}[t]", "\\centering", "\\small",
        "\\begin{tabular}{l" + "c" * len(cols) + "}", "\\toprule",
        "Metric & " + " & ".join(latex_escape(_column_title(c)) for c in cols) + " \\\\",
        " & " + " & ".join(latex_escape(LABELS.get(c["statistic"], c["statistic"])) for c in cols) + " \\\\",
        "\\midrule",
    ]
    for row in matrix["rows"]:
        cells = []
        for col in cols:
            cell = row["cells"].get(col["id"])
            if cell is None or cell["value"] is None:
                cells.append("--")
                continue
            text = _latex_number(cell["value"]) + (f"$^{{{cell['rank']}}}$" if cell.get("rank") else "")
            lo, hi = cell["ci95"]
            if lo is not None and hi is not None:
                text += f" {{\\scriptsize [{_latex_number(lo)}, {_latex_number(hi)}]}}"
            cells.append(text)
        lines.append(latex_escape(row["name"]) + " & " + " & ".join(cells) + " \\\\")
    lines.append("\\midrule")
    lines.append("Human ceiling & " + " & ".join(
        "--" if not c["ceiling"] else _latex_number(c["ceiling"]["value"]) for c in cols) + " \\\\")
    s = matrix["settings"]
    lines += [
        "\\bottomrule", "\\end{tabular}",
        f"\\caption{{Agreement with human judgments (x100). Brackets: 95\\% bootstrap interval "
        f"({s['n_resamples']} resamples, seed {s['seed']}); superscripts: significance cluster "
        f"(paired permutation test, {s['n_permutations']} permutations, $\\alpha = {s['alpha']}$).}}",
        "\\label{tab:metric-human-agreement}", "\\end{table}",
    ]
    extra = published_latex(matrix.get("published") or [])
    return "\n".join(lines) + "\n" + ("\n" + extra if extra else "")


def _column_title(col: dict) -> str:
    if col["category"]:
        return f"{col['dataset']} {col['category']}"
    if col["id"] != col["dataset"]:
        return f"{col['dataset']} {col['criterion']}"
    return col["dataset"]


def column_title(col: dict) -> str:
    """Human-readable title of a comparison column ("thumb precision", "pascal50s HC")."""
    return _column_title(col)
