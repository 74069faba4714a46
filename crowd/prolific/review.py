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
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from django.db import transaction
from django.utils import timezone

from crowd.models import Assignment, ProlificStudy, ProlificSubmission

REJECTION_CATEGORIES = ("BAD_CODE", "FAILED_CHECK", "FAILED_INSTRUCTIONS", "INCOMP_LONGITUDINAL", "LOW_EFFORT",
                        "MALINGERING", "NO_CODE", "NO_DATA", "OTHER", "TOO_QUICKLY", "TOO_SLOWLY", "UNSUPP_DEVICE")
MIN_MESSAGE = 100
MAX_MESSAGE = 2000
BULK_CHUNK = 1000
APPROVE, REJECT, SKIP = "APPROVE", "REJECT", "SKIP"
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
    """What the rules say about one submission: APPROVE, REJECT (with a category and message) or
    SKIP (not reviewable: ``reasons`` say why)."""

    submission: ProlificSubmission
    action: str
    reasons: list = field(default_factory=list)
    category: str = ""
    message: str = ""
    gold: tuple = (0, 0)
    median_seconds: float | None = None

    def line(self) -> str:
        n, c = self.gold
        med = "-" if self.median_seconds is None else f"{self.median_seconds:.1f}s"
        why = "; ".join(self.reasons) or "passes the rules"
        return (f"{self.action} {self.submission.submission_id} (participant {self.submission.participant_id}, "
                f"gold {c}/{n}, median {med}): {why}")


def _message(reasons: list[str]) -> str:
    text = ("Thank you for taking part. We cannot approve this submission because it did not meet the quality "
            "checks described in the study instructions: " + "; ".join(reasons) + ".")
    return text if len(text) >= MIN_MESSAGE else text + " These checks are applied to every participant alike."


def rule_verdicts(study: ProlificStudy, *, min_gold_accuracy: float | None = None,
                  max_attention_failures: int | None = None, min_seconds: float | None = None) -> list[Verdict]:
    """Verdicts for the study's submissions in AWAITING REVIEW not yet reviewed, from the session's
    submitted tasks: gold accuracy below ``min_gold_accuracy`` (0-1; gold items with a grade),
    more than ``max_attention_failures`` failed attention checks (default: the campaign's
    ``attention_max_failures``), median seconds per task below ``min_seconds`` (too fast). A rule
    set to None is off (except attention failures). First rule broken -> REJECT (FAILED_CHECK or
    TOO_QUICKLY) with a message of at least 100 characters; none -> APPROVE; no session of ours ->
    SKIP. Raises ReviewError for out-of-range thresholds."""
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
        if sub.session_id is None:
            out.append(Verdict(sub, SKIP, ["no session of ours for this submission"]))
            continue
        rows = list(Assignment.objects.filter(session_id=sub.session_id, state__in=Assignment.DONE_STATES)
                    .values_list("item__is_gold", "gold_correct", "work_seconds"))
        graded = [ok for is_gold, ok, _ in rows if is_gold and ok is not None]
        n, correct = len(graded), sum(1 for ok in graded if ok)
        failures = max(n - correct, sub.session.attention_failures)
        secs = [s for is_gold, _, s in rows if s is not None]
        median = statistics.median(secs) if secs else None
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
        if reasons:
            out.append(Verdict(sub, REJECT, reasons, category, _message(reasons), (n, correct), median))
        else:
            out.append(Verdict(sub, APPROVE, [], "", "", (n, correct), median))
    return out


def bulk_review(study: ProlificStudy, api, verdicts: list[Verdict], *, user: str = "") -> dict:
    """Carry out ``verdicts``: approvals in bulk-approve calls, rejections one by one (each with its
    category and message). Returns {"approved": [ids], "rejected": [ids], "skipped": [[id, why]],
    "failed": [[id, why]]}; a refused rejection does not stop the others."""
    from crowd.prolific_client import ProlificError

    approve_ids = [v.submission.submission_id for v in verdicts if v.action == APPROVE]
    result = bulk_approve(study, api, approve_ids, user=user) if approve_ids else {"approved": [], "skipped": []}
    out = {"approved": result["approved"], "rejected": [], "skipped": list(result["skipped"]), "failed": []}
    out["skipped"] += [[v.submission.submission_id, "; ".join(v.reasons)] for v in verdicts if v.action == SKIP]
    for v in verdicts:
        if v.action != REJECT:
            continue
        try:
            reject(v.submission, api, v.category, v.message, user=user)
            out["rejected"].append(v.submission.submission_id)
        except (ReviewError, ProlificError) as exc:
            out["failed"].append([v.submission.submission_id, str(exc)])
    return out
