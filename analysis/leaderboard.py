"""System leaderboards: every candidate system's corpus score per metric and mean per human
criterion, with 95% bootstrap intervals over images, ranks, paired significance tests between
systems, significance clusters and system-level metric-human agreement (issue 16, part 2).

Data (all read from the database, nothing recomputed but the corpus statistics):

* systems: the dataset's candidate systems (every system but the reference system, and none of
  the systems that hold an unpublished campaign's data, :func:`crowd.privacy.public_systems`, as
  every public report);
* metrics: the done runs of the dataset (:func:`analysis.reports.completed_runs`, caption, set and
  system level, including plugin metrics and uploaded scores). For each system and metric one row
  per *image* the system captioned (the bootstrap's resampling unit), holding the system's summed
  per-caption statistics for that image:

  - metrics with a corpus statistic (:func:`captioneval.kernels.corpus.corpus_statistic`: BLEU-1..4 and
    CIDEr-D) are recomputed from the PTB tokens the pipeline stored (:class:`metrics.models.CaptionTokens`)
    and the image's references, **for each system alone**, as COCOEvalCap scores one model's
    results: corpus BLEU from summed n-gram statistics (pycocoevalcap ``BleuScorer``, option
    "closest"; Papineni et al. 2002, Eq. 1-2), CIDEr-D with the document frequencies of that
    system's evaluation set (Vedantam et al. 2015, Eq. 2-4, pycocoevalcap ``CiderScorer``);
  - other caption-level metrics: the stored per-caption scores (:class:`metrics.models.MetricScore`),
    columns ``[score, 1]``, corpus score = the mean over the system's captions (NaN = undefined,
    left out);
  - set-level metrics (diversity): the stored caption-set scores (:class:`metrics.models.SetScore`)
    per image, corpus score = their mean over images;
  - system-level metrics (vocabulary, lexical diversity): the stored value
    (:class:`metrics.models.SystemScore`), no interval, no paired test.

* humans: the dataset's imported caption-level judgments per criterion; a system's mean is the mean
  of all its ratings (protocol rows "rating", THumB, Flickr8k-Expert) or of its captions' mean
  ratings (protocol rows "mean", Flickr8k-CrowdFlower), with rows ``[sum, count]`` per image.

Statistics (:mod:`captioneval.stats.systems`): the percentile bootstrap over images
(:func:`corpus_estimate`), paired bootstrap resampling (Koehn 2004; sacrebleu ``--paired-bs``) or
approximate randomization (Riezler & Maxwell 2005; sacrebleu ``--paired-ar``) on the images both
systems captioned, significance clusters, and Kendall/Pearson agreement over systems. The paired
bootstrap's p-value is the centred one (:data:`BOOTSTRAP_P`): sacrebleu's own is not uniform under
the null hypothesis (``tests/test_system_significance.py`` shows both; the delta and its interval
are sacrebleu's either way).

METEOR's corpus score is the METEOR 1.5 jar's aggregate over the system's captions, as
pycocoevalcap's ``Meteor().compute_score`` gives it (:class:`captioneval.kernels.corpus.MeteorCorpus`;
it is not the mean of per-caption scores), when Java is installed (``java`` on the PATH, as the
metric run itself needed); without Java the mean of the stored per-caption scores is shown, and a
note says so.
"""
from __future__ import annotations

import math
from collections import defaultdict
from typing import Callable

import numpy as np

from captioneval.stats import systems as system_stats
from crowd import privacy
from crowd.models import Caption, Dataset, HumanJudgment
from metrics import learned, pipeline, uploads
from metrics.models import MetricRun, MetricScore, SetScore, SystemScore
from captioneval.kernels import corpus as corpus_module
from captioneval.kernels import meteor as meteor_kernel
from captioneval.metrics.registry import METRICS
from captioneval.utils.numbers import finite_or_none

from .benchmarks import latex_escape
from .reports import ReportError, completed_runs, metric_name, protocol

#: version of the report's shape and numbers: part of the stored report's key
VERSION = 2
#: p-value of the paired bootstrap (:func:`captioneval.stats.systems.paired_bootstrap`'s ``p_method``)
BOOTSTRAP_P = "centred"
TESTS = ("bootstrap", "randomization")
DEFAULT_RESAMPLES = 1000
DEFAULT_SEED = 0
DEFAULT_TEST = "bootstrap"
DEFAULT_ALPHA = 0.05
#: fewer systems than this: the system-level agreement is printed with a caveat (as the issue asks)
FEW_SYSTEMS = 5
LEVELS = ("caption", "set", "system")


class LeaderboardError(ReportError):
    """The leaderboard cannot be made from these inputs (unknown dataset, metric, criterion or
    baseline; fewer than 2 systems; nothing computed and nothing judged; a bad setting). One line.
    A :class:`analysis.reports.ReportError`, so a stored report keeps it as its problem."""


def default_settings() -> dict:
    """The settings of the leaderboard a page shows when its URL gives none (and ``warm_reports``
    computes): every computed metric, every criterion, all pairs, paired bootstrap."""
    return {"metrics": None, "criteria": None, "baseline": None, "resamples": DEFAULT_RESAMPLES,
            "seed": DEFAULT_SEED, "test": DEFAULT_TEST, "alpha": DEFAULT_ALPHA}


def settings_from_query(query) -> dict:
    """Leaderboard settings from a page's query parameters (a mapping with ``getlist``, e.g.
    ``request.GET``, or a plain dict): ``metric`` and ``criterion`` (repeatable), ``baseline``,
    ``resamples``, ``seed``, ``test``, ``alpha``; missing ones take :func:`default_settings`.
    Returns the dict :func:`analysis.cached_reports.leaderboard_key` takes. Raises
    LeaderboardError (one line) for a non-numeric or out-of-range number or an unknown test; the
    names (metric, criterion, baseline) are checked when the report is computed."""
    out = default_settings()

    def many(name):
        values = query.getlist(name) if hasattr(query, "getlist") else query.get(name) or []
        values = [values] if isinstance(values, str) else list(values)
        return [v for v in values if v] or None

    out["metrics"], out["criteria"] = many("metric"), many("criterion")
    out["baseline"] = query.get("baseline") or None
    for name, kind in (("resamples", int), ("seed", int), ("alpha", float)):
        raw = query.get(name)
        if raw not in (None, ""):
            try:
                out[name] = kind(raw)
            except (TypeError, ValueError):
                raise LeaderboardError(f"{name} must be {'an integer' if kind is int else 'a number'}, got {str(raw)[:40]!r}") from None
    out["test"] = query.get("test") or DEFAULT_TEST
    _check_settings(out["resamples"], out["seed"], out["test"], out["alpha"])
    return out


def candidate_systems(dataset: Dataset) -> list:
    """The systems a leaderboard of ``dataset`` ranks, by name: public systems
    (:func:`crowd.privacy.public_systems`) other than the reference system that have captions."""
    qs = privacy.public_systems(dataset).filter(captions__isnull=False).distinct()
    if dataset.reference_system_id:
        qs = qs.exclude(pk=dataset.reference_system_id)
    return sorted(qs, key=lambda s: s.name)


# --- per-image statistics -------------------------------------------------------------------------
def _sum_by_image(image_ids: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sorted unique image ids (m,), per-image sums (m, k)) of row statistics ``values`` (n, k)."""
    images, inverse = np.unique(image_ids, return_inverse=True)
    sums = np.zeros((len(images), values.shape[1]))
    np.add.at(sums, inverse, values)
    return images, sums


def _mean_rows(image_ids, values) -> tuple[np.ndarray, np.ndarray]:
    """Per-image ``[sum, count]`` rows of scalar ``values`` (NaN = undefined, not counted); images
    where every value is undefined are left out."""
    values = np.asarray(values, dtype=float)
    defined = np.isfinite(values)
    cols = np.column_stack([np.where(defined, values, 0.0), defined.astype(float)])
    images, sums = _sum_by_image(np.asarray(image_ids, dtype=np.int64), cols)
    keep = sums[:, 1] > 0
    return images[keep], sums[keep]


class _Data:
    """The captions of the leaderboard's systems: per system, (caption ids, image ids) in
    (image, key) order; tokens and references are read on first use."""

    def __init__(self, dataset: Dataset, systems: list):
        self.dataset = dataset
        self.systems = systems
        rows = list(Caption.objects.filter(system__in=systems).order_by("system_id", "image_id", "key")
                    .values_list("id", "image_id", "system_id"))
        by_system: dict[int, list] = defaultdict(list)
        for cid, image_id, system_id in rows:
            by_system[system_id].append((cid, image_id))
        self.captions = {s.pk: np.array([c for c, _ in by_system[s.pk]], dtype=np.int64) for s in systems}
        self.images = {s.pk: np.array([i for _, i in by_system[s.pk]], dtype=np.int64) for s in systems}
        self._tokens = None
        self._refs = None
        #: (statistic class, columns, system id) -> :func:`_corpus_rows` of that system
        self.corpus_cache: dict[tuple, tuple] = {}

    def tokens(self) -> dict[int, str]:
        if self._tokens is None:
            ids = [int(c) for arr in self.captions.values() for c in arr]
            self._tokens = pipeline._ensure_tokens(self.dataset, ids)
        return self._tokens

    def references(self) -> dict[int, list[str]]:
        if self._refs is None:
            self._refs = pipeline._references_by_image(self.dataset) if self.dataset.reference_system_id else {}
        return self._refs


def _corpus_rows(data: _Data, statistic, system) -> tuple[np.ndarray, np.ndarray, int]:
    """(image ids, per-image summed statistics, captions left out for lack of references) of
    ``system`` for a :class:`captioneval.kernels.corpus.CorpusStatistic`, over that system's captions
    alone (so CIDEr-D's document frequencies are those of this system's evaluation set)."""
    tokens, refs = data.tokens(), data.references()
    caps, imgs = data.captions[system.pk], data.images[system.pk]
    keep = np.array([bool(refs.get(int(i))) for i in imgs], dtype=bool)
    if not keep.any():
        return np.zeros(0, dtype=np.int64), np.zeros((0, len(statistic.columns))), int(len(caps))
    stats = np.asarray(statistic.statistics([tokens[int(c)] for c in caps[keep]],
                                            [refs[int(i)] for i in imgs[keep]]), dtype=float)
    images, sums = _sum_by_image(imgs[keep], stats)
    return images, sums, int((~keep).sum())


def _metric_rows(data: _Data, key: str, run: MetricRun, progress) -> dict:
    """{system id: (image ids, rows)} of one caption- or set-level metric, and how it is computed."""
    spec = METRICS.get(key)
    level = spec.level if spec is not None else "caption"
    statistic = None
    if level == "caption" and key in METRICS:
        statistic = corpus_module.corpus_statistic(key, jvm=meteor_kernel.available())
    out, dropped, note = {}, 0, None
    if statistic is not None:
        try:
            for system in data.systems:
                progress(f"{metric_name(key, run)}: corpus statistics of {system.name}")
                # BLEU-1..4 share their statistics: computed once per system
                cache_key = (type(statistic).__name__, tuple(statistic.columns), system.pk)
                if cache_key not in data.corpus_cache:
                    data.corpus_cache[cache_key] = _corpus_rows(data, statistic, system)
                images, rows, missing = data.corpus_cache[cache_key]
                dropped += missing
                out[system.pk] = (images, rows)
            return {"rows": out, "score_fn": statistic.score, "corpus": statistic.description, "dropped": dropped}
        except (OSError, RuntimeError) as exc:  # the METEOR jar could not run: fall back to the stored scores
            note = (f"{metric_name(key, run)}: the reference implementation's corpus statistics could not be "
                    f"computed ({str(exc)[:120]}); the mean of the stored per-caption scores is shown instead.")
            out, dropped = {}, 0
    if level == "caption":
        values = dict(MetricScore.objects.filter(run=run).values_list("caption_id", "value"))
        for system in data.systems:
            caps = data.captions[system.pk]
            out[system.pk] = _mean_rows(data.images[system.pk], [values.get(int(c), math.nan) for c in caps])
        corpus = f"{corpus_module.corpus_description(key, metric_name(key, run))} (stored scores of run {run.pk})"
    else:  # set level
        by_pair = {(i, s): v for i, s, v in SetScore.objects.filter(run=run).values_list("image_id", "system_id", "value")}
        for system in data.systems:
            images = np.unique(data.images[system.pk])
            out[system.pk] = _mean_rows(images, [by_pair.get((int(i), system.pk), math.nan) for i in images])
        corpus = f"mean over images of the stored caption-set scores (run {run.pk})"
    return {"rows": out, "score_fn": system_stats.mean_score_fn, "corpus": corpus, "dropped": 0, "note": note}


def _human_rows(dataset: Dataset, systems: list, criterion: str, rows_mode: str) -> dict:
    """{system id: (image ids, [sum, count] rows)} of ``criterion``'s imported caption-level
    judgments: every rating (rows "rating") or every caption's mean rating (rows "mean")."""
    data = list(HumanJudgment.objects.filter(
        image__dataset=dataset, campaign__isnull=True, caption__isnull=False, criterion=criterion,
        system__in=systems).values_list("caption_id", "image_id", "system_id", "score"))
    by_system: dict[int, list] = defaultdict(list)
    for caption, image, system, score in data:
        by_system[system].append((caption, image, score))
    out = {}
    for system in systems:
        items = by_system.get(system.pk, [])
        if not items:
            continue
        arr = np.array(items, dtype=float)
        if rows_mode == Dataset.ROWS_MEAN:
            captions, first, inverse = np.unique(arr[:, 0], return_index=True, return_inverse=True)
            means = np.bincount(inverse, weights=arr[:, 2]) / np.bincount(inverse)
            arr = np.column_stack([captions, arr[first, 1], means])
        out[system.pk] = (*_mean_rows(arr[:, 1].astype(np.int64), arr[:, 2]), len(items))
    return out


# --- ranks and multiple comparisons ---------------------------------------------------------------
def _ranks(values: dict[str, float | None], sign: int) -> dict[str, int | None]:
    """Rank 1 = best (``sign`` +1: higher is better, -1: lower is better); ties share the best rank
    of the tie ("1224" competition ranking); None for a missing value."""
    known = {k: sign * v for k, v in values.items() if v is not None and math.isfinite(v)}
    return {k: (1 + sum(1 for o in known.values() if o > known[k]) if k in known else None) for k in values}


def _by_rank(systems: dict, metric_keys: list[str], criteria: list[str]) -> dict:
    """``systems`` ordered as a leaderboard reads: by the rank under the first metric (then the first
    human criterion when there is no metric), unranked systems last, ties by name."""
    def rank(item):
        name, entry = item
        if metric_keys:
            r = entry["metrics"].get(metric_keys[0], {}).get("rank")
        elif criteria:
            r = entry["human"].get(criteria[0], {}).get("rank")
        else:
            r = None
        return (r is None, r or 0, name)

    return dict(sorted(systems.items(), key=rank))


def holm(p_values: list[float]) -> list[float]:
    """Holm's (1979) step-down adjusted p-values, same order as ``p_values``:
    p_(i) adjusted = max_{j <= i} min(1, (m - j + 1) p_(j)) over the sorted p-values (1-indexed)."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    out, running = [0.0] * m, 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        out[i] = running
    return out


def _interval(ci) -> list:
    return [finite_or_none(ci[0]), finite_or_none(ci[1])]


def _estimate(rows: np.ndarray, score_fn, n_resamples: int, seed: int) -> tuple[float | None, list]:
    """(corpus score, [lo, hi]) of per-image ``rows`` (:func:`captioneval.stats.systems.corpus_estimate`);
    with a single image the score and no interval."""
    if len(rows) < 2:
        with np.errstate(invalid="ignore", divide="ignore"):
            return finite_or_none(np.asarray(score_fn(rows.sum(axis=0)[None, :]), dtype=float).reshape(-1)[0]), [None, None]
    try:
        est = system_stats.corpus_estimate(rows, score_fn, n_resamples=n_resamples, seed=seed)
    except ValueError:  # a resample without a defined score: the score alone, no interval
        with np.errstate(invalid="ignore", divide="ignore"):
            return finite_or_none(np.asarray(score_fn(rows.sum(axis=0)[None, :]), dtype=float).reshape(-1)[0]), [None, None]
    return finite_or_none(est.score), _interval(est.ci95)


# --- the report -----------------------------------------------------------------------------------
def _check_settings(n_resamples, seed, test, alpha):
    if test not in TESTS:
        raise LeaderboardError(f"test must be one of {', '.join(TESTS)}, got {test!r}")
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, int) or not 1 <= n_resamples <= 100000:
        raise LeaderboardError(f"resamples must be an integer between 1 and 100000, got {n_resamples!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise LeaderboardError(f"seed must be a non-negative integer, got {seed!r}")
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 < alpha < 1:
        raise LeaderboardError(f"alpha must be between 0 and 1, got {alpha!r}")


def _runs(dataset: Dataset, metrics) -> dict[str, MetricRun]:
    try:
        return completed_runs(dataset, list(metrics) if metrics else None, levels=LEVELS)
    except pipeline.PipelineError as exc:
        raise LeaderboardError(str(exc)) from None
    except ReportError as exc:
        if metrics:
            raise LeaderboardError(str(exc)) from None
        return {}  # nothing computed: a leaderboard of human judgments only, if there are any


def _criteria(dataset: Dataset, systems: list, criteria) -> list[str]:
    judged = HumanJudgment.objects.filter(image__dataset=dataset, campaign__isnull=True, caption__isnull=False,
                                          system__in=systems)
    known = list(judged.order_by().values_list("criterion", flat=True).distinct())
    if criteria:
        for c in criteria:
            if c not in known:
                raise LeaderboardError(
                    f"dataset {dataset.name!r} has no judgments of its candidate systems on criterion {c!r}; "
                    f"its criteria: {', '.join(sorted(known)) or 'none'}")
        return list(dict.fromkeys(criteria))
    order = [c for c in protocol(dataset)["criteria"] if c in known]
    return order + sorted(c for c in known if c not in order)


def leaderboard(dataset, metrics=None, criteria=None, baseline=None, n_resamples: int = DEFAULT_RESAMPLES,
                seed: int = DEFAULT_SEED, test: str = DEFAULT_TEST, alpha: float = DEFAULT_ALPHA,
                progress: Callable[[str], None] | None = None) -> dict:
    """The system leaderboard of ``dataset`` (a :class:`crowd.models.Dataset` or its name) as a
    JSON-serialisable dict.

    ``metrics``: metric keys (default: every metric with a done run, caption, set and system level,
    plugins and uploads included); ``criteria``: human criteria (default: every judged one, the
    protocol's order first); ``baseline``: a system name -- compare every other system with it
    (None: all pairs); ``n_resamples``: bootstrap resamples (and randomization trials), 1..100000;
    ``seed``; ``test``: "bootstrap" (paired bootstrap resampling, Koehn 2004) or "randomization"
    (approximate randomization, Riezler & Maxwell 2005); ``alpha``: significance level in (0, 1);
    ``progress``: called with a short line before each long step (the command prints it on stderr).

    Shape::

        {"dataset": name, "baseline": S | None,
         "settings": {"n_resamples", "seed", "test", "alpha", "confidence": 0.95, "bootstrap_unit": "image",
                      "tokenizer", "version", "metrics": {M: {"run", "version", "params", "signature"}},
                      "criteria": [...], "human_rows": "rating" | "mean"},
         "systems": {S: {"kind", "n_images", "n_captions",
                         "metrics": {M: {"score", "ci95": [lo, hi], "rank", "n_images"}},
                         "human": {C: {"mean", "ci95": [lo, hi], "rank", "n_ratings"}}}},
         "metrics": [{"key", "name", "higher", "level", "corpus"}], "criteria": [C, ...],
         "comparisons": [{"a", "b", "metric", "delta", "ci95", "p_value", "p_holm", "test",
                          "significant", "better", "n_images"}],
         "clusters": {M: {S: cluster rank}},
         "system_agreement": {M: {C: {"kendall_tau", "pearson", "n_systems", "caveat"}}},
         "multiple_comparisons": str, "notes": [str, ...]}

    Scores are in the metric's own units (BLEU and CIDEr-D as pycocoevalcap prints them, not x100);
    ``rank`` 1 = best, respecting the metric's direction (``higher``); ``delta`` = score(a) -
    score(b) on the images both captioned, ``p_value`` of the paired test (two-sided),
    ``significant`` = p < alpha (unadjusted; ``p_holm`` is Holm's adjustment over the metric's
    reported comparisons). A score with no data is None, with ci95 [None, None] and rank None.

    Raises LeaderboardError (one line): unknown dataset, metric, criterion or baseline; a metric
    not computed; fewer than 2 candidate systems; neither a done run nor a judgment; bad settings.
    """
    progress = progress or (lambda message: None)
    _check_settings(n_resamples, seed, test, alpha)
    if not isinstance(dataset, Dataset):
        try:
            dataset = pipeline.get_dataset(dataset)
        except pipeline.PipelineError as exc:
            raise LeaderboardError(str(exc)) from None
    systems = candidate_systems(dataset)
    if len(systems) < 2:
        raise LeaderboardError(
            f"dataset {dataset.name!r} has {len(systems)} candidate system(s) besides its references: a leaderboard "
            "needs at least 2 (import them with: python manage.py import_coco --name "
            f"{dataset.name} --results SYSTEM=FILE ...)")
    names = [s.name for s in systems]
    if baseline is not None and baseline not in names:
        raise LeaderboardError(f"unknown baseline system {baseline!r} in dataset {dataset.name!r}; "
                               f"its systems: {', '.join(names)}")
    runs = _runs(dataset, metrics)
    criteria = _criteria(dataset, systems, criteria)
    if not runs and not criteria:
        raise LeaderboardError(
            f"dataset {dataset.name!r} has no computed metric and no human judgments; run: "
            f"python manage.py compute_metrics --dataset {dataset.name} --wait")
    data = _Data(dataset, systems)
    rows_mode = protocol(dataset)["rows"]
    report_systems = {
        s.name: {"kind": s.kind, "n_images": int(len(np.unique(data.images[s.pk]))),
                 "n_captions": int(len(data.captions[s.pk])), "metrics": {}, "human": {}}
        for s in systems
    }
    notes = []
    if dataset.reference_system_id:
        notes.append(f"The reference system {dataset.reference_system.name!r} is not ranked: its captions are the references.")
    hidden = len(privacy.private_system_ids(dataset))
    if hidden:
        notes.append(f"{hidden} system(s) holding an unpublished campaign's data are left out.")
    metric_info, settings_metrics, per_image = [], {}, {}
    oriented_scores: dict[str, dict[str, float | None]] = {}
    for key, run in runs.items():
        spec = METRICS.get(key)
        level = spec.level if spec is not None else "caption"
        higher = uploads.metric_direction(key, run)
        sign = uploads.metric_sign(key, run)
        settings_metrics[key] = {"run": run.pk, "version": run.version, "params": run.params,
                                 "signature": (learned.signature_string(run) if learned.is_learned(key) else
                                               spec.signature_string() if spec is not None else None)}
        scores: dict[str, float | None] = {}
        if level == "system":
            values = dict(SystemScore.objects.filter(run=run).values_list("system_id", "value"))
            for s in systems:
                scores[s.name] = finite_or_none(values.get(s.pk))
                report_systems[s.name]["metrics"][key] = {"score": scores[s.name], "ci95": [None, None], "rank": None,
                                                          "n_images": None}
            corpus = f"the stored system-level value (run {run.pk}) of the system's whole caption corpus; no interval"
        else:
            built = _metric_rows(data, key, run, progress)
            corpus = built["corpus"]
            if built.get("note"):
                notes.append(built["note"])
            per_image[key] = built
            progress(f"{metric_name(key, run)}: bootstrap intervals")
            for s in systems:
                images, rows = built["rows"][s.pk]
                if len(images) == 0:
                    scores[s.name] = None
                    entry = {"score": None, "ci95": [None, None], "rank": None, "n_images": 0}
                else:
                    score, ci = _estimate(rows, built["score_fn"], n_resamples, seed)
                    scores[s.name] = score
                    entry = {"score": score, "ci95": ci, "rank": None, "n_images": int(len(images))}
                report_systems[s.name]["metrics"][key] = entry
            if built["dropped"]:
                notes.append(f"{metric_name(key, run)}: {built['dropped']} caption(s) of images without references left out.")
        for name, rank in _ranks(scores, sign).items():
            report_systems[name]["metrics"][key]["rank"] = rank
        oriented_scores[key] = {n: (None if v is None else sign * v) for n, v in scores.items()}
        metric_info.append({"key": key, "name": metric_name(key, run), "higher": higher, "level": level,
                            "corpus": corpus})

    human_means: dict[str, dict[str, float]] = {}
    for criterion in criteria:
        progress(f"human {criterion}: bootstrap intervals")
        by_system = _human_rows(dataset, systems, criterion, rows_mode)
        means = {}
        for s in systems:
            if s.pk not in by_system:
                means[s.name] = None
                report_systems[s.name]["human"][criterion] = {"mean": None, "ci95": [None, None], "rank": None,
                                                              "n_ratings": 0}
                continue
            images, rows, n_ratings = by_system[s.pk]
            means[s.name], ci = _estimate(rows, system_stats.mean_score_fn, n_resamples, seed)
            report_systems[s.name]["human"][criterion] = {"mean": means[s.name], "ci95": ci,
                                                          "rank": None, "n_ratings": int(n_ratings)}
        for name, rank in _ranks(means, 1).items():
            report_systems[name]["human"][criterion]["rank"] = rank
        human_means[criterion] = {n: v for n, v in means.items() if v is not None}

    # paired tests: every pair (the clusters need them all); reported: all pairs or those with the baseline
    comparisons, clusters = [], {}
    pairs = [(a, b) for i, a in enumerate(systems) for b in systems[i + 1:]]
    for key, built in per_image.items():
        progress(f"{metric_name(key, runs[key])}: paired {test} tests ({len(pairs)} pairs)")
        sign = uploads.metric_sign(key, runs[key])
        p_values, reported = {}, []
        for a, b in pairs:
            if baseline is not None and a.name == baseline:
                a, b = b, a  # against the baseline: delta = other - baseline
            ia, ra = built["rows"][a.pk]
            ib, rb = built["rows"][b.pk]
            common, pa, pb = np.intersect1d(ia, ib, return_indices=True)
            if len(common) < 2:
                continue
            try:
                result = system_stats.paired_test(test, ra[pa], rb[pb], built["score_fn"], n_resamples, seed,
                                                   p_method=BOOTSTRAP_P)
            except ValueError as exc:  # e.g. a resample with an undefined score
                notes.append(f"{metric_name(key, runs[key])}: {a.name} vs {b.name} not tested ({exc}).")
                continue
            p = float(result.p_value)
            p_values[(a.name, b.name)] = p
            if baseline is None or baseline in (a.name, b.name):
                delta = finite_or_none(result.delta)
                better = None if not delta else (a.name if sign * delta > 0 else b.name)
                reported.append({"a": a.name, "b": b.name, "metric": key, "delta": delta,
                                 "ci95": _interval(result.ci95), "p_value": p, "test": result.test,
                                 "significant": bool(p < alpha), "better": better, "n_images": int(len(common))})
        for entry, adjusted in zip(reported, holm([c["p_value"] for c in reported])):
            entry["p_holm"] = adjusted
        comparisons += reported
        known = [n for n in names if oriented_scores[key].get(n) is not None]
        if len(known) >= 2:
            clusters[key] = system_stats.significance_clusters(
                known, [oriented_scores[key][n] for n in known],
                {(x, y): p_values.get((x, y), p_values.get((y, x), math.nan))
                 for i, x in enumerate(known) for y in known[i + 1:]},
                alpha=alpha, higher_is_better=True)

    agreement = {}
    for key in runs:
        agreement[key] = {}
        for criterion in criteria:
            both = [n for n in names if oriented_scores[key].get(n) is not None and n in human_means[criterion]]
            if len(both) < 2:
                agreement[key][criterion] = {"kendall_tau": None, "pearson": None, "n_systems": len(both),
                                             "caveat": f"{len(both)} system(s) with both scores: no agreement"}
                continue
            result = system_stats.system_agreement({n: oriented_scores[key][n] for n in both},
                                                   {n: human_means[criterion][n] for n in both})
            agreement[key][criterion] = {f: result.get(f) for f in ("kendall_tau", "pearson", "n_systems", "caveat")}
            for f in ("kendall_tau", "pearson"):
                agreement[key][criterion][f] = finite_or_none(agreement[key][criterion][f])
            if len(both) < FEW_SYSTEMS and not agreement[key][criterion]["caveat"]:
                agreement[key][criterion]["caveat"] = (
                    f"only {len(both)} systems: a system-level correlation over so few points is very uncertain")

    n_pairs = len(pairs) if baseline is None else len(systems) - 1
    n_tested = len(per_image)
    if baseline is None:
        multiple = (f"{n_pairs} pairwise comparisons per metric ({len(systems)} systems; {n_pairs * n_tested} in all over "
                    f"{n_tested} metric(s)). 'significant' is p < {alpha} unadjusted; with {n_pairs} tests per metric "
                    f"the Bonferroni threshold is {alpha}/{n_pairs} = {alpha / max(n_pairs, 1):.4g}, and p_holm gives "
                    "Holm's step-down adjusted p-values (significant after correction when p_holm < alpha).")
    else:
        multiple = (f"{n_pairs} comparison{'s' if n_pairs != 1 else ''} with the baseline {baseline!r} per metric. 'significant' is p < {alpha} "
                    f"unadjusted; the Bonferroni threshold is {alpha}/{n_pairs} = {alpha / max(n_pairs, 1):.4g}, and "
                    "p_holm gives Holm's adjusted p-values.")
    if per_image:
        notes.append(f"Significance clusters use the paired {test} test between every pair of systems at alpha {alpha} "
                     "(unadjusted): systems in one cluster are not significantly different from its best.")
    if any(i["level"] == "system" for i in metric_info):
        notes.append("System-level metrics (one value per system corpus) have no interval and no paired test.")
    if len(systems) < FEW_SYSTEMS and runs and criteria:
        notes.append(f"Only {len(systems)} systems: system-level agreement between metrics and humans is very uncertain.")

    return {
        "dataset": dataset.name,
        "baseline": baseline,
        "settings": {"n_resamples": n_resamples, "seed": seed, "test": test, "alpha": alpha, "confidence": 0.95,
                     "bootstrap_unit": "image", "bootstrap_p": BOOTSTRAP_P, "tokenizer": pipeline.TOKENIZER, "version": VERSION,
                     "metrics": settings_metrics, "criteria": criteria, "human_rows": rows_mode},
        "systems": _by_rank(report_systems, [m["key"] for m in metric_info], criteria),
        "metrics": metric_info,
        "criteria": criteria,
        "comparisons": comparisons,
        "clusters": clusters,
        "system_agreement": agreement,
        "multiple_comparisons": multiple,
        "notes": notes,
    }


# --- formatting -----------------------------------------------------------------------------------
def _num(v) -> str:
    if v is None:
        return "n/a"
    return f"{v:.1f}" if abs(v) >= 100 else f"{v:.3f}"


def _cell(score, ci, rank) -> str:
    text = _num(score)
    if score is not None and ci and ci[0] is not None:
        text += f" [{_num(ci[0])}, {_num(ci[1])}]"
    if rank is not None:
        text += f" #{rank}"
    return text


def _p(p) -> str:
    return "n/a" if p is None else ("<0.001" if p < 0.001 else f"{p:.3f}")


def _columns(report: dict) -> list[tuple[str, str, Callable[[dict], tuple]]]:
    """(title, kind, getter) of each leaderboard column: metrics, then human criteria."""
    cols = []
    for m in report["metrics"]:
        cols.append((m["name"], "metric", lambda s, k=m["key"]: (s["metrics"][k]["score"], s["metrics"][k]["ci95"],
                                                                  s["metrics"][k]["rank"])))
    for c in report["criteria"]:
        cols.append((f"{c} (human)", "human", lambda s, c=c: (s["human"][c]["mean"], s["human"][c]["ci95"],
                                                            s["human"][c]["rank"])))
    return cols


def leaderboard_table(report: dict) -> str:
    """The report as aligned plain text: one row per system with ``score [lo, hi] #rank`` for each
    metric and human criterion, then the paired comparisons, clusters, system-level agreement, the
    multiple-comparisons note and the notes."""
    s = report["settings"]
    names = list(report["systems"])
    lines = [f"{report['dataset']}: {len(names)} systems; 95% CI from {s['n_resamples']} bootstrap resamples of images "
             f"(seed {s['seed']}); #rank 1 = best; paired {s['test']} test, alpha {s['alpha']}"]
    width = max(len(n) for n in names + ["system"]) + 2
    cols = _columns(report)
    if cols:
        cells = [[_cell(*get(report["systems"][n])) for _, _, get in cols] for n in names]
        widths = [max([len(t)] + [len(r[i]) for r in cells]) + 2 for i, (t, _, _) in enumerate(cols)]
        lines.append("")
        lines.append(f"{'system':<{width}}" + "".join(f"{t:>{w}}" for (t, _, _), w in zip(cols, widths)))
        for n, row in zip(names, cells):
            lines.append(f"{n:<{width}}" + "".join(f"{c:>{w}}" for c, w in zip(row, widths)))
    for m in report["metrics"]:
        lines.append(f"  {m['name']}: {m['corpus']}")
    if report["comparisons"]:
        lines += ["", "paired comparisons (delta = a - b on the images both captioned)"]
        by_name = {m["key"]: m["name"] for m in report["metrics"]}
        rows = [(f"{c['a']} vs {c['b']}", by_name.get(c["metric"], c["metric"]),
                 f"{_num(c['delta'])} [{_num(c['ci95'][0])}, {_num(c['ci95'][1])}]", _p(c["p_value"]),
                 _p(c.get("p_holm")), "*" if c["significant"] else "") for c in report["comparisons"]]
        head = ("pair", "metric", "delta [95% CI]", "p", "p (Holm)", "")
        w = [max(len(str(r[i])) for r in rows + [head]) + 2 for i in range(6)]
        lines.append("".join(f"{h:<{w[i]}}" if i < 2 else f"{h:>{w[i]}}" for i, h in enumerate(head)))
        for r in rows:
            lines.append("".join(f"{v:<{w[i]}}" if i < 2 else f"{v:>{w[i]}}" for i, v in enumerate(r)))
    if report["clusters"]:
        lines += ["", "significance clusters (1 = best)"]
        by_name = {m["key"]: m["name"] for m in report["metrics"]}
        for key, ranks in report["clusters"].items():
            lines.append(f"  {by_name.get(key, key)}: " + ", ".join(f"{n} {r}" for n, r in sorted(ranks.items(), key=lambda x: (x[1], x[0]))))
    agreement = [(k, c, a) for k, per in report["system_agreement"].items() for c, a in per.items()]
    if agreement:
        lines += ["", "system-level agreement with humans (over systems)"]
        by_name = {m["key"]: m["name"] for m in report["metrics"]}
        for key, criterion, a in agreement:
            text = f"  {by_name.get(key, key)} vs human {criterion}: Kendall tau {_num(a['kendall_tau'])}, " \
                   f"Pearson {_num(a['pearson'])} ({a['n_systems']} systems)"
            if a.get("caveat"):
                text += f" -- {a['caveat']}"
            lines.append(text)
    lines += ["", report["multiple_comparisons"], *report["notes"]]
    return "\n".join(lines)


def leaderboard_csv_rows(report: dict) -> list[list]:
    """Rows of the systems CSV, header first: system, kind, n_images, n_captions, then for each
    metric ``<key>``, ``<key>_ci95_lo``, ``<key>_ci95_hi``, ``<key>_rank`` and for each criterion
    ``human_<criterion>`` with the same suffixes. Numbers as in the JSON report."""
    header = ["system", "kind", "n_images", "n_captions"]
    for m in report["metrics"]:
        header += [m["key"], f"{m['key']}_ci95_lo", f"{m['key']}_ci95_hi", f"{m['key']}_rank"]
    for c in report["criteria"]:
        header += [f"human_{c}", f"human_{c}_ci95_lo", f"human_{c}_ci95_hi", f"human_{c}_rank"]
    rows = [header]
    for name, s in report["systems"].items():
        row = [name, s["kind"], s["n_images"], s["n_captions"]]
        for m in report["metrics"]:
            e = s["metrics"][m["key"]]
            row += [e["score"], e["ci95"][0], e["ci95"][1], e["rank"]]
        for c in report["criteria"]:
            e = s["human"][c]
            row += [e["mean"], e["ci95"][0], e["ci95"][1], e["rank"]]
        rows.append(row)
    return rows


def comparison_csv_rows(report: dict) -> list[list]:
    """Rows of the paired-comparisons CSV, header first: a, b, metric, delta, ci95_lo, ci95_hi,
    p_value, p_holm, test, significant, better, n_images."""
    header = ["a", "b", "metric", "delta", "ci95_lo", "ci95_hi", "p_value", "p_holm", "test", "significant", "better",
              "n_images"]
    return [header] + [[c["a"], c["b"], c["metric"], c["delta"], c["ci95"][0], c["ci95"][1], c["p_value"],
                        c.get("p_holm"), c["test"], c["significant"], c.get("better"), c.get("n_images")]
                       for c in report["comparisons"]]


def _tex(v) -> str:
    return "--" if v is None else _num(v)


def leaderboard_latex(report: dict) -> str:
    """A booktabs ``table``: one row per system, one column per metric and human criterion, cells
    ``score^{rank}`` with the 95% interval below in small type. Needs ``\\usepackage{booktabs}``."""
    cols = _columns(report)
    s = report["settings"]
    lines = ["% Generated by captioneval (analysis.leaderboard.leaderboard_latex); requires \\usepackage{booktabs}",
             "\\begin{table}[t]", "\\centering", "\\small",
             "\\begin{tabular}{l" + "c" * len(cols) + "}", "\\toprule",
             "System" + "".join(" & " + latex_escape(t) for t, _, _ in cols) + " \\\\", "\\midrule"]
    for name, system in report["systems"].items():
        cells = []
        for _, _, get in cols:
            score, ci, rank = get(system)
            text = _tex(score) + (f"$^{{{rank}}}$" if rank is not None and score is not None else "")
            if score is not None and ci[0] is not None:
                text += f" {{\\scriptsize [{_tex(ci[0])}, {_tex(ci[1])}]}}"
            cells.append(text)
        lines.append(latex_escape(name) + "".join(" & " + c for c in cells) + " \\\\")
    lines += ["\\bottomrule", "\\end{tabular}",
              f"\\caption{{System leaderboard of {latex_escape(report['dataset'])}. Brackets: 95\\% bootstrap interval "
              f"over images ({s['n_resamples']} resamples, seed {s['seed']}); superscripts: rank (1 = best).}}",
              "\\label{tab:system-leaderboard}", "\\end{table}"]
    return "\n".join(lines) + "\n"
