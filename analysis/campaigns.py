"""A campaign's results as researchers report them: progress, agreement (Krippendorff's alpha),
the human ceiling (split-half reliability), and how well each computed metric agrees with the
collected judgments -- read straight from the judgment tables, with no export/import step.

Nothing here depends on which task kind a campaign has: the kind (:mod:`crowd.kinds`, looked up
with :func:`crowd.kinds.kind_of`) says what its judgments are, and the report follows:

* numeric criteria (``TaskKind.metric_criteria``, e.g. a caption's relevance, a caption set's
  diversity): each rating (``TaskKind.judgments``) against each metric's score of the rated unit --
  a caption's score, or for caption sets the set-level score; units without metric scores are left
  out and counted -- with a split-half ceiling per criterion. Each entry also has the protocol of
  Wang & Chan (2019, CVPR, Table 2) on the unit means (the mean of a unit's ratings, as the paper
  averages its 3 workers): ``per_unit_mean`` (overall Pearson and Spearman) and ``per_image`` (the
  Spearman and Kendall tau-b of each image's ranking of its units, averaged over images);
* caption-set criteria that a family of set-level measures exists to quantify
  (:data:`metrics.campaigns.CRITERION_DIRECTIONS`: diversity) are correlated with exactly those
  measures -- Self-CIDEr, LSA and mBLEU-1..4 and mix, whose runs start when the campaign is created
  (:mod:`metrics.campaigns`). Accuracy metrics (BLEU, METEOR, ROUGE-L, CIDEr-D, set accuracy) are
  left out, and a note says so: they score each caption against the image's references, not how
  the set's captions differ from one another, so a correlation of a set's mean BLEU with its
  judged diversity validates nothing (worse, the reference set, the most diverse one, has no
  accuracy score at all). Wang & Chan validate only the diversity measures against human
  diversity judgments (Table 2) and keep accuracy as the other axis of the diversity-accuracy
  plane (Sec. 5, Fig. 4); the dataset's diversity page (:mod:`analysis.diversity`) shows both axes
  per system. Other caption-set criteria (a plugin kind's) keep every metric of the kind's levels,
  with per-caption metrics as their mean over the set's captions (``TaskKind.unit_captions``);
* caption-pair votes (``TaskKind.pair_votes``): the share of pairs where the metric prefers the
  caption the human majority chose (ties count 1/2, PASCAL-50S protocol, Vedantam et al., CVPR
  2015, "CIDEr", Sec. 4), in the kind's ``report_section``;
* any other kind-specific summary (``TaskKind.summary``, e.g. the share of atoms voted visual per
  category) in the kind's ``report_section``;
* position bias from where each answer's parts were on the screen (``TaskKind.shown``).

Bootstrap intervals resample images; the split-half ceiling splits each unit's raters at random.
"""
from __future__ import annotations

from collections import defaultdict

import numpy as np

from captioneval.stats import (
    STATISTICS,
    correlation,
    finite_or_none,
    forced_choice_credit,
    metric_agreement,
    per_group_rank_agreement,
    split_half_reliability,
)
from crowd import engine, quality
from crowd.kinds import TaskKind, kind_of, report_sections
from metrics.campaigns import campaign_m, measures_of
from metrics.models import MetricScore, SetScore
from captioneval.metrics.registry import METRICS

from .reports import ReportError, completed_runs, metric_name

DEFAULT_RESAMPLES = 1000
#: the report's shape and content rules; part of the stored report's key (analysis.cached_reports).
#: 2: caption-set criteria correlated with their set-level measures only, per_unit_mean and per_image
REPORT_VERSION = 2


def _metric_scores(campaign):
    """{metric: {unit: score}} for the metrics with a complete run on the campaign's dataset, at
    the metric levels comparable with the kind's rated unit (``TaskKind.metric_levels``): units are
    caption ids for caption-level metrics and "image/system" keys for set-level ones (Self-CIDEr,
    LSA, mBLEU diversity, set accuracy), which only caption-set kinds use. Set-level runs are those
    with the campaign's ``captions_per_set`` as their ``m`` (:func:`metrics.campaigns.campaign_m`):
    the scores of the captions the raters saw."""
    try:
        runs = completed_runs(campaign.dataset, levels=kind_of(campaign).metric_levels, m=campaign_m(campaign))
    except ReportError:
        return {}
    out = {}
    for key, run in runs.items():
        if key in METRICS and METRICS[key].level == "set":
            out[key] = {
                f"{i}/{s}": v for i, s, v in SetScore.objects.filter(run=run).values_list("image_id", "system_id", "value")
                if np.isfinite(v)
            }
        else:
            out[key] = dict(MetricScore.objects.filter(run=run).values_list("caption_id", "value"))
    return out


def human_rows(campaign, criterion):
    """(unit ids, image ids, rater ids, scores as a float array) of the campaign's counted numeric
    judgments on ``criterion``, as its kind reads them (:meth:`crowd.kinds.TaskKind.judgments`):
    units are caption ids (caption-level) or "image/system" keys (caption sets)."""
    rows = kind_of(campaign).judgments(campaign, criterion)
    return list(rows.units), list(rows.images), list(rows.raters), np.array(rows.scores, float)


def validated_measures(campaign, criterion) -> list[str] | None:
    """The metric keys a caption-set ``criterion`` of ``campaign`` is correlated with: the set-level
    measures of that criterion (:func:`metrics.campaigns.measures_of`; for diversity Self-CIDEr,
    LSA, mBLEU-1..4 and mix), or None when every metric of the kind's levels applies (caption-level
    kinds, criteria no set-level family measures). See the module docstring for why accuracy
    metrics are not correlated with diversity judgments."""
    if "set" not in kind_of(campaign).metric_levels:
        return None
    return measures_of(criterion) or None


def _unit_protocol(x, y, units, images) -> dict:
    """Wang & Chan (2019, Table 2) on unit means: ``per_unit_mean`` = Pearson and Spearman between
    each unit's metric score and the mean of its ratings (n_units); ``per_image`` = the Spearman and
    Kendall tau-b of each image's units, averaged over images with at least 2 units and no constant
    side (:func:`captioneval.stats.per_group_rank_agreement`). Values None where undefined."""
    sums: dict = {}
    for xv, yv, u, g in zip(x, y, units, images):
        entry = sums.setdefault(u, [xv, 0.0, 0, g])
        entry[1] += yv
        entry[2] += 1
    mx = np.array([e[0] for e in sums.values()], float)
    my = np.array([e[1] / e[2] for e in sums.values()], float)
    groups = [e[3] for e in sums.values()]
    overall = {"pearson": None, "spearman": None, "n_units": len(sums)}
    per_image = {"spearman": None, "kendall_tau_b": None, "n_images": 0, "n_images_skipped": len(set(groups))}
    if len(sums) >= 3:
        overall.update(pearson=finite_or_none(correlation(mx, my, "pearson")),
                       spearman=finite_or_none(correlation(mx, my, "spearman")))
        ranks = per_group_rank_agreement(mx, my, groups)
        per_image = {"spearman": finite_or_none(ranks.spearman), "kendall_tau_b": finite_or_none(ranks.kendall_tau_b),
                     "n_images": ranks.n_groups_used, "n_images_skipped": ranks.n_groups_skipped}
    return {"per_unit_mean": overall, "per_image": per_image}


def _correlations(campaign, criterion, scores, n_resamples, seed):
    units, images, raters, human = human_rows(campaign, criterion)
    out, notes = {}, []
    if len(human) == 0:
        return out, notes
    measures = validated_measures(campaign, criterion)
    if measures is not None:
        left_out = [metric_name(k) for k in scores if k not in measures]
        if left_out:
            notes.append(
                f"{criterion}: accuracy metrics ({', '.join(left_out)}) are not correlated with set {criterion} "
                "judgments: they score captions against the references, not how a set's captions differ "
                "(Wang & Chan 2019 validate Self-CIDEr, LSA and mBLEU against human diversity, Table 2)"
            )
        scores = {k: v for k, v in scores.items() if k in measures}
        if not scores:
            keys = " ".join(measures)
            m = campaign_m(campaign)
            notes.append(
                f"{criterion}: no set-level {criterion} metric has been computed on dataset "
                f"{campaign.dataset.name!r}: python manage.py compute_metrics --dataset {campaign.dataset.name} "
                f"--metric {keys}{f' --m {m}' if m else ''} --wait"
            )
    members = kind_of(campaign).unit_captions(campaign)  # None: every unit is one caption
    for metric, by_caption in scores.items():
        if members is None or (metric in METRICS and METRICS[metric].level == "set"):
            value = by_caption
        else:
            value = {}
            for u in set(units):
                vals = [by_caption[c] for c in members.get(u, []) if c in by_caption]
                if vals:
                    value[u] = float(np.mean(vals))
        keep = [i for i, u in enumerate(units) if u in value]
        if len(keep) < 3 or len({images[i] for i in keep}) < 2:
            notes.append(f"{metric_name(metric)}: fewer than 3 judged units have scores")
            continue
        x = np.array([value[units[i]] for i in keep])
        y = human[keep]
        g = [images[i] for i in keep]
        info = {"n_ratings": len(keep), "n_units": len({units[i] for i in keep})}
        entry = metric_agreement(
            metric_name(metric), x, y, g, STATISTICS, n_resamples=n_resamples, seed=seed, info=info,
            extra=_unit_protocol(x, y, [units[i] for i in keep], g),
        ).to_json()
        out[metric] = entry
        left = len({u for u in units}) - entry["n_units"]
        if left:
            notes.append(f"{metric_name(metric)}: {left} judged units have no score (e.g. reference sets) and are left out")
    return out, notes


def _ceiling(campaign, criterion, seed):
    units, images, raters, human = human_rows(campaign, criterion)
    try:
        return split_half_reliability(units, raters, human, n_splits=200, seed=seed).to_dict()
    except ValueError as exc:
        return {"error": str(exc)}


def _pair_accuracy(pairs, scores) -> dict:
    """Agreement of each metric with the human majority on caption pairs (``pairs``: a list of
    :class:`crowd.kinds.PairVotes`): {"pairs": number of pairs, "metrics": {metric: {"name",
    "accuracy", "n_pairs"}}}. Pairs without a majority or without both scores are left out; a
    metric tie counts 1/2 (PASCAL-50S protocol, Vedantam et al., CVPR 2015, Sec. 4)."""
    out = {}
    for metric, by_caption in scores.items():
        hits, n = 0.0, 0
        for p in pairs:
            if p.for_b == p.for_c or p.b not in by_caption or p.c not in by_caption:
                continue
            hits += float(forced_choice_credit(by_caption[p.b], by_caption[p.c], p.for_b / (p.for_b + p.for_c)))
            n += 1
        if n:
            out[metric] = {"name": metric_name(metric), "accuracy": hits / n, "n_pairs": n}
    return {"pairs": len(pairs), "metrics": out}


def position_bias(campaign) -> dict | None:
    """How answers depend on where things were shown (the order stored on each counted assignment,
    turned into screen positions by :meth:`crowd.kinds.TaskKind.shown`): for answers that score
    each shown part -- mean score per screen position, ``{"mean_by_position": {position: mean}}``;
    for answers that choose one of the shown options -- share of choices of the first-shown option,
    with its binomial two-sided p-value against 1 / options (0.5 for two; scipy.stats.binomtest),
    ``{"first_shown_share", "n", "p_value"}``. None for kinds that show one thing or before any
    counted answer."""
    from scipy.stats import binomtest

    from crowd.models import Assignment

    spec = kind_of(campaign)
    if type(spec).shown is TaskKind.shown:
        return None
    done = Assignment.objects.filter(campaign=campaign, counted=True).values_list("order", "answer")
    shown = [s for s in (spec.shown(order, answer) for order, answer in done) if s is not None]
    chosen = [s for s in shown if s.chosen is not None]
    if chosen:
        first = [s.chosen == 1 for s in chosen]
        return {"first_shown_share": sum(first) / len(first), "n": len(first),
                "p_value": float(binomtest(sum(first), len(first), 1 / chosen[0].n_shown).pvalue)}
    by_pos = defaultdict(list)
    for s in shown:
        for pos, value in (s.scores or {}).items():
            by_pos[pos].append(value)
    return {"mean_by_position": {p: float(np.mean(v)) for p, v in sorted(by_pos.items())}} if by_pos else None


def campaign_report(campaign, n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0) -> dict:
    """The campaign report as a JSON-serialisable dict::

        {"campaign", "kind", "dataset", "progress": {...}, "agreement": {criterion: {...}},
         "ceiling": {criterion: split-half dict}, "correlations": {criterion: {metric: {...}}},
         <one key per registered kind's report_section>: {...} | None
           (built in: the forced-choice kind's pair accuracies, see _pair_accuracy, and the
           visual-atom kind's shares voted visual per category),
         "position_bias": {...} | None, "notes": [str],
         "bootstrap": {"n_resamples", "seed", "unit": "image"}}

    ``ceiling`` and ``correlations`` have one entry per numeric criterion of the kind
    (``metric_criteria``); only the campaign's own kind's section is filled. A correlation entry is
    ``{"name", "n_ratings", "n_units", <STATISTICS>, "ci95", "per_unit_mean": {"pearson",
    "spearman", "n_units"}, "per_image": {"spearman", "kendall_tau_b", "n_images",
    "n_images_skipped"}}`` (None where undefined). A caption-set criterion with set-level measures
    (diversity) lists only those (:func:`validated_measures`; the module docstring says why).
    """
    spec = kind_of(campaign)
    scores = _metric_scores(campaign)
    report = {
        "campaign": campaign.name, "kind": spec.name, "dataset": campaign.dataset.name,
        "progress": engine.campaign_counts(campaign), "agreement": quality.agreement(campaign),
        "ceiling": {}, "correlations": {}, **{key: None for key in report_sections()},
        "position_bias": position_bias(campaign), "notes": [],
        "bootstrap": {"n_resamples": n_resamples, "seed": seed, "unit": "image"},
    }
    if not scores:
        report["notes"].append(
            f"no metric has been computed on dataset {campaign.dataset.name!r}: "
            f"python manage.py compute_metrics --dataset {campaign.dataset.name} --wait"
        )
    for criterion in spec.metric_criteria:
        report["ceiling"][criterion] = _ceiling(campaign, criterion, seed)
        report["correlations"][criterion], notes = _correlations(campaign, criterion, scores, n_resamples, seed)
        report["notes"].extend(notes)
    if spec.report_section:
        pairs = spec.pair_votes(campaign)
        if pairs is not None:
            report[spec.report_section] = _pair_accuracy(pairs, scores)
        else:
            report[spec.report_section] = spec.summary(campaign, lambda: quality.aggregate(campaign))
    return report
