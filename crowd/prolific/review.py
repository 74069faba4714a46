"""Approving and rejecting Prolific submissions, one by one and in bulk by rules.

Only submissions Prolific itself reported (a synced :class:`~crowd.models.ProlificSubmission`) in
``AWAITING REVIEW``, linked to a session of ours and not reviewed by us yet, are ever approved or
rejected (never an id typed into a form: paying ids one does not hold pays twice, psiTurk PR #283).

Prolific's rules (API reference, "Approve or reject a submission",
https://docs.prolific.com/api-reference/submissions/transition-submission): ``POST
/submissions/{id}/transition/`` with ``action`` APPROVE or REJECT; a rejection needs a
``rejection_category`` from :data:`REJECTION_CATEGORIES` and a ``message`` of at least 100
characters; a transition is idempotent and cannot be undone. Bulk approval: ``POST
/submissions/bulk-approve/`` with ``submission_ids`` (recommended over participant ids; at most
1,000 per request, "Bulk approve submissions"). Everything is validated here before any call.

Review by rules (:func:`rule_verdicts`) pays only for work: it approves a submission only when its
session completed the bundle with at least one counted task and broke no rule. A session that
ended without work gets what its completion code says instead (declined consent: a return request,
``POST /submissions/{id}/request-return/`` with ``request_return_reasons``; screened out by the
practice: the fixed screen-out payment, ``POST /studies/{id}/screen-out-submissions/`` with
``submission_ids`` and ``bonus_per_submission`` in major units; no code at all because it did no
task: a return request, as the participant's last page asked) or is left for a person. The plan
(:func:`plan_lines`: per submission what is paid and why, and the total) is shown before anything
is sent.
"""
from __future__ import annotations

import hashlib
import json
import statistics
from dataclasses import dataclass, field

from django.db import transaction
from django.utils import timezone

from crowd.models import Assignment, ParticipantSession as PS, ProlificStudy, ProlificSubmission

from . import study as st

REJECTION_CATEGORIES = ("BAD_CODE", "FAILED_CHECK", "FAILED_INSTRUCTIONS", "INCOMP_LONGITUDINAL", "LOW_EFFORT",
                        "MALINGERING", "NO_CODE", "NO_DATA", "OTHER", "TOO_QUICKLY", "TOO_SLOWLY", "UNSUPP_DEVICE")
MIN_MESSAGE = 100
MAX_MESSAGE = 2000
BULK_CHUNK = 1000
APPROVE, REJECT, SKIP = "APPROVE", "REJECT", "SKIP"
#: a return request (the participant is asked to return the submission: unpaid) and the fixed
#: screen-out payment; recorded in ``ProlificSubmission.review_action`` like APPROVE and REJECT
RETURN, SCREEN_OUT = "RETURN", "SCREEN_OUT"
#: the action of a completion code (Prolific's names) -> what review by rules does for a session
#: that ended with that code; any other action (MANUALLY_REVIEW...) goes through the rules
CODE_ACTIONS = {"REQUEST_RETURN": RETURN, "FIXED_SCREEN_OUT_PAYMENT": SCREEN_OUT}
#: the reasons sent with a return request (Prolific's own wording of its reasons)
RETURN_REASONS = {PS.NO_CONSENT: ("Withdrew consent.",)}
NO_WORK_REASONS = ("Did not finish study.",)
REVIEWABLE = "AWAITING REVIEW"


class ReviewError(Exception):
    """A review refused before anything was sent (one line)."""


def check_rejection(category: str, message: str) -> tuple[str, str]:
    """(category, message stripped) if Prolific would accept them; ReviewError otherwise."""
    category = (category or "").strip().upper()
    if category not in REJECTION_CATEGORIES:
        raise ReviewError(f"rejection category must be one of {', '.join(REJECTION_CATEGORIES)}")
    message = (message or "").strip()
    if len(message) < MIN_MESSAGE:
        raise ReviewError(f"a rejection message must have at least {MIN_MESSAGE} characters "
                          f"(this one has {len(message)})")
    if len(message) > MAX_MESSAGE:
        raise ReviewError(f"a rejection message must have at most {MAX_MESSAGE} characters")
    return category, message


def check_reviewable(sub: ProlificSubmission) -> None:
    """ReviewError unless ``sub`` is Prolific's, AWAITING REVIEW, linked to our session, unreviewed."""
    if sub.review_action:
        raise ReviewError(f"submission {sub.submission_id} was already reviewed ({sub.review_action})")
    if sub.status != REVIEWABLE:
        raise ReviewError(f"submission {sub.submission_id} is {sub.status}; only AWAITING REVIEW can be reviewed")
    if sub.session_id is None:
        raise ReviewError(f"submission {sub.submission_id} has no session of ours: never reviewed")


def _record(sub: ProlificSubmission, action: str, category: str, message: str, user: str) -> None:
    sub.review_action, sub.rejection_category, sub.review_message = action, category, message
    sub.reviewed_at, sub.reviewed_by = timezone.now(), (user or "")[:150]
    sub.save(update_fields=["review_action", "rejection_category", "review_message", "reviewed_at", "reviewed_by",
                            "synced_at"])


def _apply_answer(sub: ProlificSubmission, answer, status: str) -> ProlificSubmission:
    """Store Prolific's answer to a transition (a submission record) or, if it sent none, the new status."""
    from .sync import SyncError, apply_submission

    if isinstance(answer, dict) and answer.get("id") == sub.submission_id:
        try:
            return apply_submission(sub.study, answer)
        except SyncError:
            pass
    record = dict(sub.raw or {}, id=sub.submission_id, participant_id=sub.participant_id, status=status)
    return apply_submission(sub.study, record)


def approve(sub: ProlificSubmission, api, *, user: str = "") -> ProlificSubmission:
    """Approve one submission (Prolific pays its reward). ReviewError before any call if it is not
    reviewable; the client's ProlificError if Prolific refuses (nothing recorded)."""
    check_reviewable(sub)
    answer = api.transition_submission(sub.submission_id, "APPROVE")
    if getattr(api, "dry_run", False):
        return sub
    _record(sub, APPROVE, "", "", user)
    return _apply_answer(sub, answer, "APPROVED")


def reject(sub: ProlificSubmission, api, category: str, message: str, *, user: str = "") -> ProlificSubmission:
    """Reject one submission with ``category`` and ``message`` (>= 100 characters), both checked
    before any call; the session's counted work is released (:mod:`.sync`). Raises ReviewError or
    the client's ProlificError."""
    category, message = check_rejection(category, message)
    check_reviewable(sub)
    answer = api.transition_submission(sub.submission_id, "REJECT", message=message, rejection_category=category)
    if getattr(api, "dry_run", False):
        return sub
    _record(sub, REJECT, category, message, user)
    return _apply_answer(sub, answer, "REJECTED")


def request_return(sub: ProlificSubmission, api, reasons, *, user: str = "") -> ProlificSubmission:
    """Ask the participant of ``sub`` to return it (unpaid; their place reopens once they do) with
    ``reasons`` (short texts). ReviewError before any call if it is not reviewable; the client's
    ProlificError if Prolific refuses (nothing recorded). Prolific keeps the submission AWAITING
    REVIEW until the participant returns it (the next sync then shows RETURNED); it is recorded as
    reviewed (``RETURN``) so that no later review pays it."""
    check_reviewable(sub)
    reasons = [str(r) for r in reasons if str(r).strip()]
    if not reasons:
        raise ReviewError("a return request needs a reason")
    api.request_return(sub.submission_id, reasons)
    if getattr(api, "dry_run", False):
        return sub
    _record(sub, RETURN, "", " ".join(reasons), user)
    return sub


def screen_out(sub: ProlificSubmission, api, amount: int, *, user: str = "") -> ProlificSubmission:
    """Screen ``sub`` out with the study's fixed screen-out payment ``amount`` (minor units, > 0,
    below the study's reward; sent in major units). ReviewError before any call if it is not
    reviewable or the amount is wrong; the client's ProlificError if Prolific refuses or its
    answer is lost (then nothing is recorded: sync before trying again, the call pays)."""
    check_reviewable(sub)
    study = sub.study
    if isinstance(amount, bool) or not isinstance(amount, int) or not 0 < amount < study.reward:
        raise ReviewError(f"the screen-out payment must be 1 to {study.reward - 1} minor units, not {amount!r}")
    answer = api.screen_out(study.study_id, [sub.submission_id], amount / 100)
    if getattr(api, "dry_run", False):
        return sub
    _record(sub, SCREEN_OUT, "", f"fixed screen-out payment {st.money(amount)} {study.currency}", user)
    return _apply_answer(sub, answer, "SCREENED OUT")


def bulk_approve(study: ProlificStudy, api, submission_ids, *, user: str = "") -> dict:
    """Approve the given submissions of ``study`` with bulk-approve calls (submission ids, at most
    1,000 per call). Ids that are not reviewable submissions of the study are skipped and listed.
    Returns {"approved": [ids], "skipped": [[id, why]]}. Bulk approval is asynchronous on Prolific:
    the status is updated by the next sync; ``review_action`` is recorded now."""
    wanted = list(dict.fromkeys(str(x).strip() for x in submission_ids if str(x).strip()))
    subs = {s.submission_id: s for s in ProlificSubmission.objects.filter(study=study, submission_id__in=wanted)}
    ok, skipped = [], []
    for sid in wanted:
        sub = subs.get(sid)
        if sub is None:
            skipped.append([sid, "not a submission Prolific reported for this study"])
            continue
        try:
            check_reviewable(sub)
        except ReviewError as exc:
            skipped.append([sid, str(exc)])
            continue
        ok.append(sub)
    approved = []
    for i in range(0, len(ok), BULK_CHUNK):
        chunk = ok[i:i + BULK_CHUNK]
        api.bulk_approve(study.study_id, [s.submission_id for s in chunk])
        if getattr(api, "dry_run", False):
            continue
        with transaction.atomic():
            for s in chunk:
                _record(s, APPROVE, "", "", user)
        approved += [s.submission_id for s in chunk]
    return {"approved": approved, "skipped": skipped}


# --- rules ------------------------------------------------------------------------------------------
@dataclass
class Verdict:
    """What the review does with one submission: APPROVE (pays the reward), REJECT (with a category
    and message), RETURN (a return request with ``return_reasons``), SCREEN_OUT (pays the fixed
    screen-out payment) or SKIP (left for a person: ``reasons`` say why). ``amount``: what carrying
    it out pays the participant, minor units (0 for REJECT, RETURN, SKIP); ``session``: our session's
    outcome (or open stage) and tasks, as text."""

    submission: ProlificSubmission
    action: str
    reasons: list = field(default_factory=list)
    category: str = ""
    message: str = ""
    gold: tuple = (0, 0)
    median_seconds: float | None = None
    amount: int = 0
    session: str = ""
    return_reasons: tuple = ()

    def line(self, currency: str = "") -> str:
        """One line for the plan: action, submission, participant, session, gold, median time, what
        it pays and why."""
        n, c = self.gold
        med = "-" if self.median_seconds is None else f"{self.median_seconds:.1f}s"
        why = "; ".join(self.reasons) or "passes the rules"
        pays = f"pays {st.money(self.amount)} {currency}".rstrip() if self.amount else "pays nothing"
        where = f"{self.session}, " if self.session else ""
        return (f"{self.action} {self.submission.submission_id} (participant {self.submission.participant_id}, "
                f"{where}gold {c}/{n}, median {med}): {pays}: {why}")


def _message(reasons: list[str]) -> str:
    text = ("Thank you for taking part. We cannot approve this submission because it did not meet the quality "
            "checks described in the study instructions: " + "; ".join(reasons) + ".")
    return text if len(text) >= MIN_MESSAGE else text + " These checks are applied to every participant alike."


def _rules_broken(failures: int, max_fail: int, graded: tuple, median, min_gold_accuracy, min_seconds):
    """(reasons, category) of the rules a session's work breaks (both empty: none)."""
    n, correct = graded
    reasons, category = [], ""
    if failures > max_fail:
        reasons.append(f"{failures} attention checks failed (at most {max_fail} allowed)")
        category = "FAILED_CHECK"
    if min_gold_accuracy is not None and n and correct / n < min_gold_accuracy:
        reasons.append(f"{correct} of {n} check questions answered correctly "
                       f"({correct / n:.0%}, at least {min_gold_accuracy:.0%} needed)")
        category = category or "FAILED_CHECK"
    if min_seconds is not None and median is not None and median < min_seconds:
        reasons.append(f"a median of {median:.1f} seconds per task "
                       f"(at least {min_seconds:g} needed to read a task)")
        category = category or "TOO_QUICKLY"
    return reasons, category


def _by_code(study: ProlificStudy, s, v: Verdict) -> Verdict:
    """The verdict for a session that ended without work and with a code (declined consent,
    screened out): what the code's action says (RETURN, SCREEN_OUT), else left for a person."""
    entry = st.outcome_code(study, s.outcome)
    actions = [a.get("action", "") for a in entry["actions"]] if entry else []
    todo = next((CODE_ACTIONS[a] for a in actions if a in CODE_ACTIONS), "")
    what = {PS.NO_CONSENT: "declined consent", PS.SCREENED_OUT: "screened out by the practice"}[s.outcome]
    if not todo:
        v.reasons = [f"{what}, no task done; its code's action ({', '.join(actions) or 'none'}) is not one the "
                     "review carries out: left for a person"]
        return v
    v.action = todo
    if todo == SCREEN_OUT:
        v.amount = st.screen_out_reward(study)
        v.reasons = [f"{what}, no task done: its code {entry['code']} says FIXED_SCREEN_OUT_PAYMENT"]
    else:
        v.return_reasons = RETURN_REASONS.get(s.outcome, NO_WORK_REASONS)
        v.reasons = [f"{what}, no task done: its code {entry['code']} says REQUEST_RETURN"]
    return v


def rule_verdicts(study: ProlificStudy, *, min_gold_accuracy: float | None = None,
                  max_attention_failures: int | None = None, min_seconds: float | None = None) -> list[Verdict]:
    """Verdicts for the study's submissions in AWAITING REVIEW not yet reviewed, from our session:

    * no session of ours -> SKIP;
    * the session declined consent or was screened out by the practice -> its completion code's
      action: REQUEST_RETURN -> RETURN (reason "Withdrew consent."), FIXED_SCREEN_OUT_PAYMENT ->
      SCREEN_OUT (the study's fixed screen-out payment); any other action -> SKIP;
    * the session completed, or failed its attention checks -> the rules: gold accuracy below
      ``min_gold_accuracy`` (0-1; gold items with a grade), more than ``max_attention_failures``
      failed attention checks (default: the campaign's ``attention_max_failures``), median seconds
      per task below ``min_seconds`` (too fast); a rule set to None is off (except attention
      failures). First rule broken -> REJECT (FAILED_CHECK or TOO_QUICKLY) with a message of at least
      100 characters. None broken -> APPROVE (pays the study's reward) only when the session ended
      ``completed`` with its bundle done (``tasks_done >= tasks_target``) and at least one counted
      task (a task whose judgment counts: the gold checks the campaign requires were passed);
      otherwise SKIP (left for a person: partial work, nothing counted, or blocked by the quality
      checks);
    * any other session (timed out, no task, still open: no completion code was given) -> RETURN
      (reason "Did not finish study.", as its last page asked the participant to return the study)
      when it did no task; SKIP when it did some.

    Raises ReviewError for out-of-range thresholds."""
    if min_gold_accuracy is not None and not 0 <= min_gold_accuracy <= 1:
        raise ReviewError("the minimum gold accuracy is a fraction between 0 and 1")
    if max_attention_failures is not None and max_attention_failures < 0:
        raise ReviewError("the maximum number of attention failures cannot be negative")
    if min_seconds is not None and not 0 <= min_seconds <= 3600:
        raise ReviewError("the minimum seconds per task must be between 0 and 3600")
    campaign = study.campaign
    max_fail = campaign.attention_max_failures if max_attention_failures is None else max_attention_failures
    out = []
    subs = (ProlificSubmission.objects.filter(study=study, status=REVIEWABLE, review_action="")
            .select_related("session", "study").order_by("pk"))
    for sub in subs:
        s = sub.session
        if s is None:
            out.append(Verdict(sub, SKIP, ["no session of ours for this submission"]))
            continue
        rows = list(Assignment.objects.filter(session_id=s.pk, state__in=Assignment.DONE_STATES)
                    .values_list("item__is_gold", "gold_correct", "work_seconds", "counted"))
        graded = [ok for is_gold, ok, _, _ in rows if is_gold and ok is not None]
        gold = (len(graded), sum(1 for ok in graded if ok))
        counted = sum(1 for is_gold, _, _, c in rows if c and not is_gold)
        secs = [sec for _, _, sec, _ in rows if sec is not None]
        median = statistics.median(secs) if secs else None
        target = f"/{s.tasks_target}" if s.tasks_target else ""
        where = s.outcome or f"open at {s.stage}"
        v = Verdict(sub, SKIP, gold=gold, median_seconds=median,
                    session=f"session {where}, tasks {s.tasks_done}{target}, {counted} counted")
        if s.outcome in (PS.NO_CONSENT, PS.SCREENED_OUT) and not s.tasks_done:
            out.append(_by_code(study, s, v))
            continue
        if s.outcome not in (PS.COMPLETED, PS.FAILED_ATTENTION):
            if s.tasks_done:
                tasks = f"{s.tasks_done} task{'s' if s.tasks_done != 1 else ''}"
                v.reasons = [f"did {tasks} but was given no completion code: left for a person"]
            else:
                v.action, v.return_reasons = RETURN, NO_WORK_REASONS
                v.reasons = ["did no task and was given no completion code (its last page asked for a return)"]
            out.append(v)
            continue
        failures = max(gold[0] - gold[1], s.attention_failures)
        reasons, category = _rules_broken(failures, max_fail, gold, median, min_gold_accuracy, min_seconds)
        if reasons:
            v.action, v.reasons, v.category, v.message = REJECT, reasons, category, _message(reasons)
        elif s.outcome != PS.COMPLETED:
            v.reasons = [f"ended {s.outcome} (blocked by the campaign's quality checks) although no rule here "
                         "rejects it: left for a person"]
        elif s.tasks_target and s.tasks_done < s.tasks_target:
            v.reasons = [f"did {s.tasks_done} of {s.tasks_target} tasks: partial work left for a person"]
        elif not counted:
            v.reasons = ["no counted task (the required attention checks were not passed): left for a person"]
        else:
            v.action, v.amount = APPROVE, study.reward
            v.reasons = ["completed the bundle and passes the rules"]
        out.append(v)
    return out


def plan_summary(study: ProlificStudy, verdicts: list[Verdict]) -> dict:
    """What carrying out ``verdicts`` pays: {"counts": {action: n}, "paid": {action: minor units},
    "total": minor units paid to participants (before Prolific's fees and VAT), "currency"}."""
    counts = {a: 0 for a in (APPROVE, SCREEN_OUT, RETURN, REJECT, SKIP)}
    paid = {APPROVE: 0, SCREEN_OUT: 0}
    for v in verdicts:
        counts[v.action] = counts.get(v.action, 0) + 1
        if v.action in paid:
            paid[v.action] += v.amount
    return {"counts": counts, "paid": paid, "total": sum(paid.values()), "currency": study.currency}


def plan_lines(study: ProlificStudy, verdicts: list[Verdict], limit: int = 300) -> list[str]:
    """The plan as text: one line per verdict (at most ``limit``; the summary counts all) and the
    total, e.g. ``TOTAL 1.65 GBP to participants ...: approve 1 (1.50), screen out 1 (0.15);
    unpaid: return requests 2, rejections 0; left for a person 0``."""
    cur = study.currency
    lines = [v.line(cur) for v in verdicts[:limit]]
    if len(verdicts) > limit:
        lines.append(f"... and {len(verdicts) - limit} more")
    p = plan_summary(study, verdicts)
    n, paid = p["counts"], p["paid"]
    lines.append(f"TOTAL {st.money(p['total'])} {cur} to participants (before Prolific's fees and VAT): "
                 f"approve {n[APPROVE]} ({st.money(paid[APPROVE])}), screen out {n[SCREEN_OUT]} "
                 f"({st.money(paid[SCREEN_OUT])}); unpaid: return requests {n[RETURN]}, rejections {n[REJECT]}; "
                 f"left for a person {n[SKIP]}")
    return lines


def plan_key(verdicts: list[Verdict]) -> str:
    """A fingerprint of the plan (each submission's action, category and amount): the owner page
    sends a plan only if it is the one it showed."""
    rows = [[v.submission.submission_id, v.action, v.category, v.amount] for v in verdicts]
    return hashlib.sha256(json.dumps(rows).encode()).hexdigest()


def bulk_review(study: ProlificStudy, api, verdicts: list[Verdict], *, user: str = "") -> dict:
    """Carry out ``verdicts``: approvals in bulk-approve calls, then rejections, return requests
    and screen-outs one by one. Returns {"approved", "rejected", "returned", "screened_out": [ids],
    "skipped": [[id, why]], "failed": [[id, why]]}; a refused call does not stop the others."""
    from crowd.prolific_client import ProlificError

    approve_ids = [v.submission.submission_id for v in verdicts if v.action == APPROVE]
    result = bulk_approve(study, api, approve_ids, user=user) if approve_ids else {"approved": [], "skipped": []}
    out = {"approved": result["approved"], "rejected": [], "returned": [], "screened_out": [],
           "skipped": list(result["skipped"]), "failed": []}
    out["skipped"] += [[v.submission.submission_id, "; ".join(v.reasons)] for v in verdicts if v.action == SKIP]
    for v in verdicts:
        sid = v.submission.submission_id
        try:
            if v.action == REJECT:
                reject(v.submission, api, v.category, v.message, user=user)
                out["rejected"].append(sid)
            elif v.action == RETURN:
                request_return(v.submission, api, v.return_reasons or NO_WORK_REASONS, user=user)
                out["returned"].append(sid)
            elif v.action == SCREEN_OUT:
                screen_out(v.submission, api, v.amount, user=user)
                out["screened_out"].append(sid)
        except (ReviewError, ProlificError) as exc:
            out["failed"].append([sid, str(exc)])
    return out


def result_line(r: dict) -> str:
    """The outcome of :func:`bulk_review` in one line."""
    return (f"approved {len(r['approved'])}, rejected {len(r['rejected'])}, return requested {len(r['returned'])}, "
            f"screened out {len(r['screened_out'])}, skipped {len(r['skipped'])}, failed {len(r['failed'])}")
