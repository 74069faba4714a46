"""A campaign's results as researchers report them: progress, agreement (Krippendorff's alpha),
the human ceiling (split-half reliability), and how well each computed metric agrees with the
collected judgments -- read straight from the judgment tables, with no export/import step.

Per kind:

* diversity: each caption set's human diversity (one row per rating) against each set-level metric
  (Self-CIDEr, LSA, mBLEU diversity, set accuracy) and the set's mean of each per-caption metric
  computed on the dataset (sets without metric scores, such as the reference set under
  reference-based metrics, are left out and counted);
* rating: each rating (relevance, thoroughness) against the caption's metric score;
* forced choice: the share of pairs where the metric prefers the caption the human majority chose
  (ties count 1/2, PASCAL-50S protocol, Vedantam et al. 2015);
* visual atoms: the share of atoms voted visual per category.

Bootstrap intervals resample images; the split-half ceiling splits each unit's raters at random.
"""
from __future__ import annotations

from collections import defaultdict

import numpy as np

from analysis.statistics import STATISTICS, correlate, split_half_reliability
from crowd import engine, quality
from crowd.kinds import get_kind
from crowd.models import Caption, HumanJudgment, PairwiseJudgment
from metrics.models import MetricScore, SetScore
from metrics.scorers.registry import METRICS

from .reports import ReportError, completed_runs, metric_name

DEFAULT_RESAMPLES = 1000


def _num(x):
    x = float(x)
    return None if np.isnan(x) else x


def _metric_scores(campaign):
    """{metric: {unit: score}} for the metrics with a complete run on the campaign's dataset: units are
    caption ids for caption-level metrics and "image/system" keys for set-level ones (Self-CIDEr, LSA,
    mBLEU diversity, set accuracy), which only diversity campaigns use."""
    levels = ("caption", "set") if campaign.kind == "diversity" else ("caption",)
    try:
        runs = completed_runs(campaign.dataset, levels=levels)
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
    """(unit ids, image ids, rater ids, scores) of the campaign's counted judgments on ``criterion``:
    units are caption ids (caption-level) or "image/system" keys (caption sets)."""
    rows = list(
        HumanJudgment.objects.filter(campaign=campaign, criterion=criterion)
        .order_by("image_id", "system_id", "caption_id", "rater")
        .values_list("image_id", "system_id", "caption_id", "rater", "score")
    )
    units = [c if c is not None else f"{i}/{s}" for i, s, c, _, _ in rows]
    return units, [r[0] for r in rows], [r[3] for r in rows], np.array([r[4] for r in rows], float)


def _correlations(campaign, criterion, scores, n_resamples, seed):
    units, images, raters, human = human_rows(campaign, criterion)
    out, notes = {}, []
    if len(human) == 0:
        return out, notes
    set_level = campaign.kind == "diversity"
    if set_level:
        members = defaultdict(list)
        for pk, image_id, system_id in Caption.objects.filter(image__dataset=campaign.dataset).values_list("pk", "image_id", "system_id"):
            members[f"{image_id}/{system_id}"].append(pk)
    for metric, by_caption in scores.items():
        if set_level and metric in METRICS and METRICS[metric].level == "set":
            value = by_caption
        elif set_level:
            value = {}
            for u in set(units):
                vals = [by_caption[c] for c in members.get(u, []) if c in by_caption]
                if vals:
                    value[u] = float(np.mean(vals))
        else:
            value = by_caption
        keep = [i for i, u in enumerate(units) if u in value]
        if len(keep) < 3 or len({images[i] for i in keep}) < 2:
            notes.append(f"{metric_name(metric)}: fewer than 3 judged units have scores")
            continue
        x = np.array([value[units[i]] for i in keep])
        y = human[keep]
        g = [images[i] for i in keep]
        result = correlate(x, y, g, STATISTICS, n_resamples=n_resamples, seed=seed)
        entry = {"name": metric_name(metric), "n_ratings": len(keep), "n_units": len({units[i] for i in keep})}
        entry.update({s: _num(result.values[s]) for s in STATISTICS})
        entry["ci95"] = {s: [_num(lo), _num(hi)] for s, (lo, hi) in result.ci95.items()}
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


def _forced_choice(campaign, scores):
    votes = defaultdict(lambda: [0, 0])
    keys = {}
    for ref, b, c, choice in PairwiseJudgment.objects.filter(campaign=campaign).values_list(
        "reference_id", "caption_b_id", "caption_c_id", "choice"
    ):
        votes[(ref, b, c)][0 if choice == "b" else 1] += 1
        keys[(ref, b, c)] = (b, c)
    out = {}
    for metric, by_caption in scores.items():
        hits, n = 0.0, 0
        for key, (nb, nc) in votes.items():
            b, c = keys[key]
            if nb == nc or b not in by_caption or c not in by_caption:
                continue
            human = "b" if nb > nc else "c"
            sb, sc = by_caption[b], by_caption[c]
            hits += 0.5 if sb == sc else float(("b" if sb > sc else "c") == human)
            n += 1
        if n:
            out[metric] = {"name": metric_name(metric), "accuracy": hits / n, "n_pairs": n}
    return {"pairs": len(votes), "metrics": out}


def _visual_atoms(campaign):
    majority = quality.aggregate(campaign).get("visual", {})
    items = {it.key: it.payload for it in campaign.items.filter(is_gold=False)}
    per = defaultdict(lambda: [0, 0])
    for key, label in majority.items():
        cat = items[key]["category"] if key in items else None
        if cat:
            per[cat][0] += int(label == 1)
            per[cat][1] += 1
    return {cat: {"visual": v, "atoms": n, "share": v / n} for cat, (v, n) in sorted(per.items())}


def position_bias(campaign) -> dict | None:
    """How answers depend on where things were shown (the order stored on each assignment):
    diversity -- mean score per screen position of a set; forced choice -- share of choices of the
    first-shown caption (0.5 without bias), with its binomial two-sided p-value (scipy.stats.binomtest)."""
    from scipy.stats import binomtest

    from crowd.models import Assignment

    done = Assignment.objects.filter(campaign=campaign, counted=True).values_list("order", "answer")
    if campaign.kind == "diversity":
        by_pos = defaultdict(list)
        for order, answer in done:
            for pos, index in enumerate(order["sets"]):
                by_pos[pos + 1].append(answer["scores"][index])
        return {"mean_by_position": {p: float(np.mean(v)) for p, v in sorted(by_pos.items())}} if by_pos else None
    if campaign.kind == "forced_choice":
        first = [answer["position"] == 1 for _, answer in done]
        if not first:
            return None
        return {"first_shown_share": sum(first) / len(first), "n": len(first),
                "p_value": float(binomtest(sum(first), len(first), 0.5).pvalue)}
    return None


def campaign_report(campaign, n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0) -> dict:
    """The campaign report as a JSON-serialisable dict::

        {"campaign", "kind", "dataset", "progress": {...}, "agreement": {criterion: {...}},
         "ceiling": {criterion: split-half dict}, "correlations": {criterion: {metric: {...}}},
         "forced_choice": {...} | None, "visual_atoms": {...} | None, "position_bias": {...} | None,
         "notes": [str],
         "bootstrap": {"n_resamples", "seed", "unit": "image"}}
    """
    spec = get_kind(campaign.kind)
    scores = _metric_scores(campaign)
    report = {
        "campaign": campaign.name, "kind": campaign.kind, "dataset": campaign.dataset.name,
        "progress": engine.campaign_counts(campaign), "agreement": quality.agreement(campaign),
        "ceiling": {}, "correlations": {}, "forced_choice": None, "visual_atoms": None,
        "position_bias": position_bias(campaign), "notes": [],
        "bootstrap": {"n_resamples": n_resamples, "seed": seed, "unit": "image"},
    }
    if not scores:
        report["notes"].append(
            f"no metric has been computed on dataset {campaign.dataset.name!r}: "
            f"python manage.py compute_metrics --dataset {campaign.dataset.name} --wait"
        )
    if campaign.kind in ("diversity", "rating"):
        for criterion in spec.criteria:
            report["ceiling"][criterion] = _ceiling(campaign, criterion, seed)
            report["correlations"][criterion], notes = _correlations(campaign, criterion, scores, n_resamples, seed)
            report["notes"].extend(notes)
    elif campaign.kind == "forced_choice":
        report["forced_choice"] = _forced_choice(campaign, scores)
    elif campaign.kind == "visual_atom":
        report["visual_atoms"] = _visual_atoms(campaign)
    return report
