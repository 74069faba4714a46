"""Quality control of a campaign: gold accuracy, per-worker statistics, inter-annotator agreement
(Krippendorff's alpha with the kind's distance) and aggregation. Everything kind-specific (units,
scales, distance, aggregation) comes from the campaign's task kind (:mod:`crowd.kinds`).

Thresholds (per campaign), applied by :func:`crowd.engine.update_worker_status` after each
submission: once a worker has answered ``gold_min_answers`` gold items, a gold accuracy below
``gold_block_below`` blocks them (no more tasks; their counted judgments are taken out so other
workers redo those items) and below ``gold_warn_below`` warns them (shown to owners and, with what
happens next, to the rater: :func:`rater_warning`). Speed checks (:func:`speed_check`): among a
worker's last ``SPEED_WINDOW`` tasks, ``SPEED_WARN_AT`` answered faster than the campaign's
``min_seconds_per_task`` warn them and ``SPEED_BLOCK_AT`` block them (a speed block always follows a
warning).

Krippendorff's alpha: Krippendorff (2011), "Computing Krippendorff's Alpha-Reliability", and
(2004), *Content Analysis*, section 11.3 (:func:`captioneval.stats.krippendorff_alpha_from_triples`);
Dawid-Skene: Dawid & Skene (1979), "Maximum likelihood estimation of observer error-rates using the
EM algorithm" (:func:`captioneval.stats.dawid_skene`).
"""
from __future__ import annotations

import statistics as pystats
from collections import defaultdict

from captioneval.stats import (
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
    task, too-fast tasks and the speed flag (:func:`speed_stats`), standing, and agreement with the
    other workers (for scales 1 - mean |own - others' mean|
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
    speed = speed_stats(campaign)
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
            "too_fast": speed.get(r["worker"], {}).get("too_fast", 0),
            "speed_flag": speed.get(r["worker"], {}).get("flag", "ok"),
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


# --- speed checks ------------------------------------------------------------------------------------
#: Default floor, in seconds per task, below which an answer counts as "too fast"
#: (``settings.CROWD_MIN_SECONDS_PER_TASK`` overrides it; a campaign's option ``min_seconds_per_task``
#: overrides both; 0 turns the speed check off for that campaign). Our documented choice, not a
#: published constant: reading a caption and pressing a key takes a careful person 2 s or more (reading
#: runs at roughly 4-5 words per second, and a typical caption has 10-12 words), so answers faster
#: than that cannot come from reading the task. Crowdsourcing studies screen on completion time in
#: the same spirit (e.g. Kittur, Chi & Suh 2008, "Crowdsourcing user studies with Mechanical Turk";
#: Downs et al. 2010, "Are your participants gaming the system?").
DEFAULT_MIN_SECONDS_PER_TASK = 2.0
#: The speed check looks at a worker's last ``SPEED_WINDOW`` submitted tasks in the campaign.
SPEED_WINDOW = 10
#: ``SPEED_WARN_AT`` too-fast tasks among them warn the worker; ``SPEED_BLOCK_AT`` block a worker who
#: was warned before (a worker is always warned first: the count grows by at most one per task).
SPEED_WARN_AT = 3
SPEED_BLOCK_AT = 6


def check_min_seconds(value) -> float:
    """The option ``min_seconds_per_task`` as a number of seconds (0 <= value <= 3600); raises
    :class:`crowd.kinds.CampaignSpecError` for anything else (text, negative, NaN, huge)."""
    from .kinds import CampaignSpecError

    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise CampaignSpecError(f"min_seconds_per_task must be a number of seconds, not {value!r}") from None
    if not 0 <= seconds <= 3600:  # also refuses NaN
        raise CampaignSpecError(f"min_seconds_per_task must be between 0 and 3600 seconds, not {value!r}")
    return seconds


def min_seconds_per_task(campaign: Campaign) -> float:
    """The campaign's speed floor in seconds per task (0: no speed check): its option
    ``min_seconds_per_task``, else ``settings.CROWD_MIN_SECONDS_PER_TASK``, else
    :data:`DEFAULT_MIN_SECONDS_PER_TASK`. A stored option that is not a valid number falls back to
    the default (campaign creation refuses such options, see :func:`check_min_seconds`)."""
    from django.conf import settings

    default = getattr(settings, "CROWD_MIN_SECONDS_PER_TASK", DEFAULT_MIN_SECONDS_PER_TASK)
    value = (campaign.options or {}).get("min_seconds_per_task")
    if value is None:
        return float(default)
    try:
        return check_min_seconds(value)
    except Exception:
        return float(default)


def _timed_tasks(campaign: Campaign, worker: Worker | None = None):
    """Submitted, verified assignments with a measured work time, oldest first."""
    qs = Assignment.objects.filter(campaign=campaign, verified=True, state__in=Assignment.DONE_STATES,
                                   work_seconds__isnull=False)
    if worker is not None:
        qs = qs.filter(worker=worker)
    return qs.order_by("submitted_at", "pk")


def unblocked_at(campaign: Campaign, worker: Worker):
    """When an owner last unblocked ``worker`` in ``campaign`` (the ``unblock`` entry of the audit
    trail, :mod:`crowd.audit`), or None. The speed check starts afresh from then."""
    from django.db.models import Q

    from .models import AuditEntry

    rid = worker.rater_id
    entry = (AuditEntry.objects.filter(campaign=campaign, action="unblock")
             .filter(Q(target=rid) | Q(target__startswith=f"{rid} (")).order_by("-at").first())
    return entry.at if entry else None


def speed_check(campaign: Campaign, worker: Worker) -> dict:
    """The speed check of ``worker`` in ``campaign``, from their last :data:`SPEED_WINDOW`
    submitted tasks (work time = submission - acceptance, seconds); tasks submitted before an
    owner's last unblock (:func:`unblocked_at`) do not count.

    Returns ``{"min_seconds", "tasks", "recent", "too_fast", "verdict"}``: ``recent`` is the number
    of tasks looked at (<= SPEED_WINDOW), ``too_fast`` how many of them took less than
    ``min_seconds``; ``verdict`` is ``"ok"``, ``"warn"`` (``too_fast >= SPEED_WARN_AT``) or
    ``"block"`` (``too_fast >= SPEED_BLOCK_AT``). With ``min_seconds == 0`` the verdict is always ok.
    """
    floor = min_seconds_per_task(campaign)
    tasks = _timed_tasks(campaign, worker)
    since = unblocked_at(campaign, worker)
    if since is not None:
        tasks = tasks.filter(submitted_at__gt=since)
    seconds = list(tasks.values_list("work_seconds", flat=True))
    recent = seconds[-SPEED_WINDOW:]
    fast = sum(1 for s in recent if s < floor) if floor > 0 else 0
    verdict = "block" if fast >= SPEED_BLOCK_AT else "warn" if fast >= SPEED_WARN_AT else "ok"
    return {"min_seconds": floor, "tasks": len(seconds), "recent": len(recent), "too_fast": fast,
            "verdict": verdict}


def speed_stats(campaign: Campaign) -> dict:
    """Per worker speed figures for owner pages: ``{rater_id: {"median_seconds", "tasks",
    "too_fast", "recent", "too_fast_recent", "flag"}}`` over verified submitted tasks.
    ``median_seconds`` is the median work time (seconds) of all their submitted tasks; ``too_fast``
    counts those under the campaign's floor (:func:`min_seconds_per_task`) and ``too_fast_recent``
    those among the last :data:`SPEED_WINDOW`; ``flag`` is ``"ok"``, ``"warn"`` or ``"block"``, the
    rule of :func:`speed_check` over those last tasks (whether or not an owner unblocked the worker
    since; the worker's standing itself is in ``WorkerStatus``). Workers
    without a submitted task are absent. The floor is in every row as ``min_seconds``."""
    floor = min_seconds_per_task(campaign)
    per_worker = defaultdict(list)
    for provider, external_id, seconds in _timed_tasks(campaign).values_list(
            "worker__provider", "worker__external_id", "work_seconds"):
        per_worker[f"{provider}:{external_id}"].append(seconds)  # Worker.rater_id
    out = {}
    for rater_id, seconds in per_worker.items():
        recent = seconds[-SPEED_WINDOW:]
        fast_recent = sum(1 for s in recent if s < floor) if floor > 0 else 0
        out[rater_id] = {
            "median_seconds": pystats.median(seconds), "tasks": len(seconds),
            "too_fast": sum(1 for s in seconds if s < floor) if floor > 0 else 0,
            "recent": len(recent), "too_fast_recent": fast_recent, "min_seconds": floor,
            "flag": "block" if fast_recent >= SPEED_BLOCK_AT else "warn" if fast_recent >= SPEED_WARN_AT else "ok",
        }
    return out


def gold_verdict(campaign: Campaign, worker: Worker) -> tuple[str, str]:
    """The gold check of ``worker``: (``"ok"`` | ``"warn"`` | ``"block"``, reason for owners);
    ``"ok"`` until they have answered ``campaign.gold_min_answers`` gold items."""
    n, correct = gold_accuracy(campaign, worker)
    if n < campaign.gold_min_answers or n == 0:
        return "ok", ""
    accuracy = correct / n
    if accuracy < campaign.gold_block_below:
        return "block", f"gold accuracy {correct}/{n} = {accuracy:.0%} < {campaign.gold_block_below:.0%}"
    if accuracy < campaign.gold_warn_below:
        return "warn", f"gold accuracy {correct}/{n} = {accuracy:.0%} < {campaign.gold_warn_below:.0%}"
    return "ok", ""


def speed_reason(check: dict) -> str:
    """The owner-facing reason of a failed speed check (see :func:`speed_check`)."""
    return (f"speed: {check['too_fast']} of the last {check['recent']} tasks took under "
            f"{check['min_seconds']:g} s")


def rater_warning(campaign: Campaign, worker: Worker) -> str | None:
    """The warning shown to a *warned* rater on every task page (None for others): what happened
    (the failed gold or speed check, in plain words) and what happens next (the block)."""
    status = WorkerStatus.objects.filter(campaign=campaign, worker=worker).first()
    if status is None or status.state != WorkerStatus.WARNED:
        return None
    parts = []
    speed = speed_check(campaign, worker)
    if speed["verdict"] != "ok":
        parts.append(
            f"{speed['too_fast']} of your last {speed['recent']} answers took less than "
            f"{speed['min_seconds']:g} seconds each, too fast to have read the task. Please read each task "
            f"before answering. If {SPEED_BLOCK_AT} of your last {SPEED_WINDOW} answers are this fast, you will "
            f"be blocked from this campaign and your answers will no longer count.")
    gold, _ = gold_verdict(campaign, worker)
    if gold != "ok":
        n, correct = gold_accuracy(campaign, worker)
        parts.append(
            f"You answered {correct} of {n} check questions (tasks whose answer we know) as expected. "
            f"Please read the instructions again. If fewer than {campaign.gold_block_below:.0%} of your "
            f"answers to check questions are as expected, you will be blocked from this campaign and your "
            f"answers will no longer count.")
    if not parts:  # warned by an owner, or by a check that has since recovered
        parts.append("Your answers were flagged by the campaign's quality checks. If this continues, you "
                     "may be blocked from this campaign and your answers will no longer count.")
    return " ".join(parts)
