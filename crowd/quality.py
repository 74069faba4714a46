"""Quality control of a campaign: gold accuracy, per-worker statistics, inter-annotator agreement
(Krippendorff's alpha with the kind's distance) and aggregation. Everything kind-specific (units,
scales, distance, aggregation) comes from the campaign's task kind (:mod:`crowd.kinds`).

Thresholds (per campaign), applied by :func:`crowd.engine.update_worker_status` after each gold
answer: once a worker has answered ``gold_min_answers`` gold items, a gold accuracy below
``gold_block_below`` blocks them (no more tasks; their counted judgments are taken out so other
workers redo those items) and below ``gold_warn_below`` warns them (shown to owners).

Krippendorff's alpha: Krippendorff (2011), "Computing Krippendorff's Alpha-Reliability", and
(2004), *Content Analysis*, section 11.3 (:func:`analysis.statistics.krippendorff_alpha_from_triples`);
Dawid-Skene: Dawid & Skene (1979), "Maximum likelihood estimation of observer error-rates using the
EM algorithm" (:func:`analysis.statistics.dawid_skene`).
"""
from __future__ import annotations

import statistics as pystats
from collections import defaultdict

from analysis.statistics import (
    dawid_skene,
    krippendorff_alpha_from_triples,
    majority_vote,
)

from .kinds import get_kind
from .models import Assignment, Campaign, Worker, WorkerStatus


def gold_accuracy(campaign: Campaign, worker: Worker) -> tuple[int, int]:
    """(gold items answered, answered correctly) by ``worker`` in ``campaign``: verified answers
    only (an unconfirmed provider claim is never graded, so it can never get anyone blocked)."""
    rows = list(
        Assignment.objects.filter(campaign=campaign, worker=worker, item__is_gold=True, gold_correct__isnull=False,
                                  verified=True)
        .values_list("gold_correct", flat=True)
    )
    return len(rows), sum(rows)


def counted_units(campaign: Campaign):
    """Agreement units of the campaign's counted answers: list of (unit key, criterion, rater, value)."""
    spec = get_kind(campaign.kind)
    out = []
    qs = (
        Assignment.objects.filter(campaign=campaign, counted=True)
        .select_related("item", "worker").order_by("item__position", "worker_id")
    )
    for a in qs:
        for u in spec.units(a.item.key, a.item.payload, a.answer):
            out.append((u.key, u.criterion, a.worker.rater_id, u.value))
    return out


def agreement(campaign: Campaign) -> dict:
    """Krippendorff's alpha per criterion with the kind's distance (interval for sliders, ordinal
    for Likert, nominal for votes), over counted judgments. {criterion: {"alpha", "level",
    "units", "ratings"}}; alpha is None when undefined (fewer than 2 ratings per unit, no variation)."""
    spec = get_kind(campaign.kind)
    if spec.agreement_level is None:
        return {}
    by_criterion = defaultdict(list)
    for unit, criterion, rater, value in counted_units(campaign):
        by_criterion[criterion].append((unit, rater, value))
    out = {}
    for criterion in spec.criteria:
        triples = by_criterion.get(criterion, [])
        try:
            alpha = krippendorff_alpha_from_triples(triples, level=spec.agreement_level)
        except ValueError:
            alpha = None
        if alpha is not None and alpha != alpha:  # NaN: undefined
            alpha = None
        out[criterion] = {
            "alpha": alpha, "level": spec.agreement_level,
            "units": len({u for u, _, _ in triples}), "ratings": len(triples),
        }
    return out


def aggregate(campaign: Campaign, method: str | None = None) -> dict:
    """Aggregated answer per (unit, criterion): the mean for scales, the majority vote (or
    Dawid-Skene with ``method="dawid_skene"``) for votes. {criterion: {unit: value}}."""
    spec = get_kind(campaign.kind)
    rows = counted_units(campaign)
    by_criterion = defaultdict(list)
    for unit, criterion, rater, value in rows:
        by_criterion[criterion].append((unit, rater, value))
    out = {}
    for criterion, triples in by_criterion.items():
        units, raters, values = zip(*triples)
        if spec.aggregation == "majority":
            if method == "dawid_skene":
                out[criterion] = dict(dawid_skene(units, raters, values).labels)
            else:
                out[criterion] = dict(majority_vote(units, values))
        else:
            acc = defaultdict(list)
            for u, v in zip(units, values):
                acc[u].append(v)
            out[criterion] = {u: sum(v) / len(v) for u, v in acc.items()}
    return out


def worker_stats(campaign: Campaign) -> list[dict]:
    """One row per worker: tasks by state, counted judgments, gold accuracy, median seconds per
    task, standing, and agreement with the other workers (for scales 1 - mean |own - others' mean|
    / scale range; for votes the share of units where the worker agrees with the others' majority).
    Verified assignments only: unconfirmed provider claims are nobody's record yet."""
    spec = get_kind(campaign.kind)
    rows = {}
    qs = Assignment.objects.filter(campaign=campaign, verified=True).select_related("worker", "item")  # no claims
    for a in qs:
        r = rows.setdefault(a.worker_id, {
            "worker": a.worker.rater_id, "label": a.worker.label, "states": defaultdict(int), "counted": 0,
            "gold_answered": 0, "gold_correct": 0, "seconds": [], "late": 0,
        })
        r["states"][a.state] += 1
        r["counted"] += a.counted
        r["late"] += a.late
        if a.work_seconds is not None:
            r["seconds"].append(a.work_seconds)
        if a.gold_correct is not None:
            r["gold_answered"] += 1
            r["gold_correct"] += a.gold_correct
    statuses = dict(WorkerStatus.objects.filter(campaign=campaign).values_list("worker_id", "state"))
    reasons = dict(WorkerStatus.objects.filter(campaign=campaign).values_list("worker_id", "reason"))
    agree = _agreement_with_others(campaign, spec)
    out = []
    for wid, r in rows.items():
        out.append({
            "worker": r["worker"], "label": r["label"], "submitted": sum(r["states"][s] for s in Assignment.DONE_STATES),
            "counted": r["counted"], "returned": r["states"][Assignment.RETURNED],
            "expired": r["states"][Assignment.EXPIRED], "late": r["late"],
            "gold_answered": r["gold_answered"], "gold_correct": r["gold_correct"],
            "gold_accuracy": r["gold_correct"] / r["gold_answered"] if r["gold_answered"] else None,
            "median_seconds": pystats.median(r["seconds"]) if r["seconds"] else None,
            "agreement": agree.get(r["worker"]),
            "status": statuses.get(wid, WorkerStatus.OK), "reason": reasons.get(wid, ""),
        })
    return sorted(out, key=lambda r: r["worker"])


def _agreement_with_others(campaign, spec) -> dict:
    if spec.agreement_level is None:
        return {}
    by_unit = defaultdict(list)
    for unit, criterion, rater, value in counted_units(campaign):
        by_unit[(unit, criterion)].append((rater, value))
    scores = defaultdict(list)
    for (unit, criterion), ratings in by_unit.items():
        for i, (rater, value) in enumerate(ratings):
            others = [v for j, (_, v) in enumerate(ratings) if j != i]
            if not others:
                continue
            if spec.agreement_level == "nominal":
                counts = defaultdict(int)
                for v in others:
                    counts[v] += 1
                top = max(counts.values())
                scores[rater].append(1.0 if counts.get(value, 0) == top else 0.0)
            else:
                span = spec.scale(criterion).span
                scores[rater].append(1.0 - abs(value - sum(others) / len(others)) / span)
    return {r: sum(v) / len(v) for r, v in scores.items()}
