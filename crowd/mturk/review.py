"""Reviewing and paying on MTurk: approve or reject by rules, bonuses through the ledger, worker
blocks, messages to workers, expiring and extending HITs.

Only assignments we hold locally (an ``Assignment`` with the MTurk AssignmentId in
``provider_ref``) and MTurk has confirmed (``verified``) are ever approved, rejected or paid (psiTurk PR #283: paying ids one does not
hold pays twice). An assignment MTurk has already auto-approved (AutoApprovalDelay passed) is
recorded as approved, not reported as a failure.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from decimal import Decimal

from django.db import IntegrityError, transaction
from django.utils import timezone

from crowd.models import Assignment, Campaign, MTurkCall, MTurkHIT, Payment, WorkerStatus
from crowd.quality import gold_accuracy

from .client import MTurkAPI, MTurkError

APPROVE, REJECT = "approve", "reject"
NOTIFY_CHUNK = 100  # NotifyWorkers takes at most 100 WorkerIds per call


class ReviewError(Exception):
    """A review or payment request refused before anything was sent."""


@dataclass
class Decision:
    assignment: Assignment
    action: str
    feedback: str

    def line(self) -> str:
        return f"{self.action} {self.assignment.provider_ref} (worker {self.assignment.worker.external_id}): {self.feedback}"


def plan_review(
    campaign: Campaign, *, min_gold_accuracy: float | None = None, reject_blocked: bool = True,
    approve_rest: bool = True, approve_feedback: str = "Thank you!", reject_feedback: str = "",
) -> list[Decision]:
    """Decisions for the campaign's submitted MTurk assignments not yet reviewed on MTurk.

    Only assignments MTurk has confirmed (``verified``; unconfirmed claims are never reviewed).
    Rules, first match wins: the worker is blocked by quality control -> reject (feedback: the
    reason, e.g. gold accuracy); the worker answered at least ``campaign.gold_min_answers`` gold
    items with accuracy below ``min_gold_accuracy`` -> reject; otherwise approve (if ``approve_rest``).
    """
    qs = (Assignment.objects.filter(campaign=campaign, state=Assignment.SUBMITTED, verified=True).exclude(provider_ref="")
          .exclude(provider_status__in=["Approved", "Rejected"]).select_related("worker").order_by("pk"))
    status = {s.worker_id: s for s in WorkerStatus.objects.filter(campaign=campaign)}
    gold = {}
    out = []
    for a in qs:
        st = status.get(a.worker_id)
        if a.worker_id not in gold:
            gold[a.worker_id] = gold_accuracy(campaign, a.worker)
        n, correct = gold[a.worker_id]
        if reject_blocked and st is not None and st.state == WorkerStatus.BLOCKED:
            out.append(Decision(a, REJECT, reject_feedback or f"Rejected by quality control: {st.reason}."))
        elif min_gold_accuracy is not None and n >= campaign.gold_min_answers and correct / n < min_gold_accuracy:
            out.append(Decision(a, REJECT, reject_feedback or
                                f"Rejected: {correct} of {n} check questions answered correctly "
                                f"({correct / n:.0%} < {min_gold_accuracy:.0%})."))
        elif approve_rest:
            out.append(Decision(a, APPROVE, approve_feedback))
    return out


@dataclass
class ActionReport:
    """Outcome of a bulk action: counts per outcome and the failures with MTurk's message."""

    done: dict = field(default_factory=dict)
    failed: list = field(default_factory=list)
    dry_run: bool = False
    calls: str = ""

    def add(self, outcome: str, n: int = 1):
        self.done[outcome] = self.done.get(outcome, 0) + n

    def as_dict(self):
        return asdict(self)

    def lines(self) -> list[str]:
        head = "DRY RUN, nothing sent: " if self.dry_run else ""
        out = [head + (", ".join(f"{k} {v}" for k, v in sorted(self.done.items())) or "nothing to do")]
        out += [f"  failed {ref}: {msg}" for ref, msg in self.failed]
        if self.dry_run and self.calls:
            out += ["would send:", self.calls]
        return out


def _auto_approved(exc: MTurkError) -> bool:
    """MTurk refused because the assignment is no longer Submitted: it was auto-approved. The real
    service says only "This operation can be called with a status of: Submitted (<time>)", without
    naming the current status; a message naming another status (rejected, still accepted, returned;
    "status of: null" for an assignment not yet submitted) is a real failure."""
    m = exc.message.lower()
    if any(s in m for s in ("rejected", "accepted", "returned", "abandoned", "status of: null")):
        return False
    return ("approved" in m and ("status" in m or "already" in m)) or "can be called with a status of: submitted" in m


def apply_review(campaign: Campaign, api: MTurkAPI, decisions: list[Decision]) -> ActionReport:
    """Send the decisions (ApproveAssignment / RejectAssignment with RequesterFeedback) and record
    them locally. An assignment already auto-approved by MTurk is recorded ``approved``."""
    report = ActionReport(dry_run=api.dry_run)
    for d in decisions:
        a = d.assignment
        if a.campaign_id != campaign.pk or not a.provider_ref:
            report.failed.append((a.pk, "not an MTurk assignment of this campaign"))
            continue
        if not a.verified:
            report.failed.append((a.provider_ref, "not confirmed by MTurk's records (a claim): never approved or rejected"))
            continue
        op = "approve_assignment" if d.action == APPROVE else "reject_assignment"
        try:
            api.call(op, AssignmentId=a.provider_ref, RequesterFeedback=d.feedback[:1024])
        except MTurkError as exc:
            if _auto_approved(exc):
                a.state, a.provider_status = Assignment.APPROVED, "Approved"
                a.save(update_fields=["state", "provider_status"])
                report.add("already approved by MTurk")
            else:
                report.failed.append((a.provider_ref, f"{exc.code}: {exc.message}"))
            continue
        if api.dry_run:
            report.add(f"would {d.action}")
            continue
        a.state = Assignment.APPROVED if d.action == APPROVE else Assignment.REJECTED
        a.provider_status, a.feedback = ("Approved" if d.action == APPROVE else "Rejected"), d.feedback
        a.save(update_fields=["state", "provider_status", "feedback"])
        report.add("approved" if d.action == APPROVE else "rejected")
    report.calls = api.describe() if api.dry_run else ""
    return report


# --- bonuses --------------------------------------------------------------------------------------
def grant_bonus(assignment: Assignment, amount, reason: str, label: str = "bonus") -> Payment:
    """Write a pending bonus into the ledger. Raises ReviewError for an assignment we do not hold
    as an MTurk submission, a non-positive amount, an empty reason, or a bonus with this ``label``
    already granted for the assignment (never twice)."""
    amount = Decimal(str(amount)).quantize(Decimal("0.01"))
    if amount <= 0:
        raise ReviewError("a bonus must be positive")
    if not reason.strip():
        raise ReviewError("MTurk shows the reason to the worker; it cannot be empty")
    if assignment.campaign.provider != Campaign.MTURK or not assignment.provider_ref or not assignment.verified:
        raise ReviewError(f"assignment {assignment.pk} is not an MTurk assignment we hold")
    if assignment.state not in (Assignment.SUBMITTED, Assignment.APPROVED):
        raise ReviewError(f"assignment {assignment.provider_ref} is {assignment.state}; only submitted or approved work gets a bonus")
    token = f"bonus-{assignment.provider_ref}-{label}"
    if len(token) > 64:
        import hashlib

        token = "bonus-" + hashlib.sha256(token.encode()).hexdigest()[:50]
    try:
        with transaction.atomic():
            return Payment.objects.create(assignment=assignment, label=label, amount=amount, reason=reason.strip(),
                                          request_token=token)
    except IntegrityError:
        raise ReviewError(f"a {label!r} bonus was already granted for assignment {assignment.provider_ref}") from None


def grant_bonuses(campaign: Campaign, amount, reason: str, label: str, *, min_gold_accuracy: float = 0.0,
                  min_gold_answers: int = 1) -> ActionReport:
    """Grant ``amount`` to every approved assignment whose worker answered at least
    ``min_gold_answers`` gold items with accuracy >= ``min_gold_accuracy`` (ledger only; send with
    :func:`send_bonuses`). Assignments that already have this bonus are skipped and counted."""
    report = ActionReport()
    acc = {}
    for a in (Assignment.objects.filter(campaign=campaign, state=Assignment.APPROVED, verified=True).exclude(provider_ref="")
              .select_related("worker", "campaign")):
        if a.worker_id not in acc:
            acc[a.worker_id] = gold_accuracy(campaign, a.worker)
        n, correct = acc[a.worker_id]
        if n < min_gold_answers or (n and correct / n < min_gold_accuracy):
            report.add("not eligible")
            continue
        try:
            grant_bonus(a, amount, reason, label)
            report.add("granted")
        except ReviewError:
            report.add("already granted")
    return report


def send_bonuses(campaign: Campaign, api: MTurkAPI) -> ActionReport:
    """Send the campaign's pending (and failed) ledger bonuses with SendBonus and their tokens. An
    answer that the token was already used means the bonus went through earlier: recorded sent."""
    report = ActionReport(dry_run=api.dry_run)
    pending = Payment.objects.filter(assignment__campaign=campaign, state__in=[Payment.PENDING, Payment.FAILED])
    for p in pending.select_related("assignment__worker"):
        a = p.assignment
        try:
            api.call("send_bonus", WorkerId=a.worker.external_id, BonusAmount=f"{p.amount:.2f}", AssignmentId=a.provider_ref,
                     Reason=p.reason, UniqueRequestToken=p.request_token)
        except MTurkError as exc:
            m = exc.message.lower()
            if "uniquerequesttoken" in m or "already" in m:
                p.state, p.sent_at, p.error = Payment.SENT, timezone.now(), ""
                p.save(update_fields=["state", "sent_at", "error"])
                report.add("sent earlier")
            else:
                p.state, p.error = Payment.FAILED, f"{exc.code}: {exc.message}"
                p.save(update_fields=["state", "error"])
                report.failed.append((a.provider_ref, p.error))
            continue
        if api.dry_run:
            report.add("would send")
            continue
        p.state, p.sent_at, p.error = Payment.SENT, timezone.now(), ""
        p.save(update_fields=["state", "sent_at", "error"])
        report.add("sent")
    report.calls = api.describe() if api.dry_run else ""
    return report


# --- workers --------------------------------------------------------------------------------------
def block_workers(campaign: Campaign, api: MTurkAPI, reason: str = "") -> ActionReport:
    """CreateWorkerBlock for the campaign's MTurk workers blocked by quality control, once each.
    Quality control blocks only on verified gold answers (:func:`crowd.quality.gold_accuracy`), so a
    forged claim can never put an innocent worker here; a worker with no verified assignment in the
    campaign is skipped (``not confirmed``) whatever their status says."""
    report = ActionReport(dry_run=api.dry_run)
    done = set(MTurkCall.objects.filter(campaign=campaign, operation="create_worker_block", ok=True, dry_run=False)
               .values_list("params__WorkerId", flat=True))
    for st in WorkerStatus.objects.filter(campaign=campaign, state=WorkerStatus.BLOCKED,
                                          worker__provider=Campaign.MTURK).select_related("worker"):
        wid = st.worker.external_id
        if not Assignment.objects.filter(campaign=campaign, worker=st.worker, verified=True).exists():
            report.add("not confirmed")
            continue
        if wid in done:
            report.add("blocked earlier")
            continue
        try:
            api.call("create_worker_block", WorkerId=wid, Reason=(reason or st.reason or "quality control")[:1024])
            report.add("would block" if api.dry_run else "blocked")
        except MTurkError as exc:
            report.failed.append((wid, f"{exc.code}: {exc.message}"))
    report.calls = api.describe() if api.dry_run else ""
    return report


def campaign_worker_ids(campaign: Campaign) -> list[str]:
    return sorted(set(Assignment.objects.filter(campaign=campaign, worker__provider=Campaign.MTURK)
                      .values_list("worker__external_id", flat=True)))


def notify_workers(campaign: Campaign, api: MTurkAPI, subject: str, message: str, worker_ids=None) -> ActionReport:
    """NotifyWorkers (an e-mail through MTurk) to ``worker_ids`` (default: every MTurk worker of the
    campaign), in calls of at most 100 workers. Per-worker failures MTurk reports are listed."""
    if not subject.strip() or not message.strip():
        raise ReviewError("a message needs a subject and a text")
    if len(subject) > 200 or len(message) > 4096:
        raise ReviewError("MTurk limits the subject to 200 and the message to 4,096 characters")
    ids = list(worker_ids) if worker_ids is not None else campaign_worker_ids(campaign)
    report = ActionReport(dry_run=api.dry_run)
    for i in range(0, len(ids), NOTIFY_CHUNK):
        chunk = ids[i:i + NOTIFY_CHUNK]
        try:
            response = api.call("notify_workers", Subject=subject, MessageText=message, WorkerIds=chunk)
        except MTurkError as exc:
            report.failed += [(w, f"{exc.code}: {exc.message}") for w in chunk]
            continue
        failures = (response or {}).get("NotifyWorkersFailureStatuses", [])
        report.failed += [(f["WorkerId"], f.get("NotifyWorkersFailureMessage", "")) for f in failures]
        report.add("would notify" if api.dry_run else "notified", len(chunk) - len(failures))
    report.calls = api.describe() if api.dry_run else ""
    return report


# --- HITs -----------------------------------------------------------------------------------------
def update_expiration(campaign: Campaign, api: MTurkAPI, *, extend_seconds: int | None = None) -> ActionReport:
    """Expire every published HIT of the campaign now (``extend_seconds`` None) or move its
    expiration to now + ``extend_seconds`` (UpdateExpirationForHIT). A HIT MTurk no longer has
    (disposed) is reported and skipped."""
    if extend_seconds is not None and extend_seconds < 60:
        raise ReviewError("extend by at least 60 seconds")
    when = (timezone.now() + timedelta(seconds=extend_seconds)) if extend_seconds else datetime(2015, 1, 1, tzinfo=dt_timezone.utc)
    report = ActionReport(dry_run=api.dry_run)
    for hit in MTurkHIT.objects.filter(batch__campaign=campaign).exclude(hit_id="").order_by("pk"):
        try:
            api.call("update_expiration_for_hit", HITId=hit.hit_id, ExpireAt=when)
        except MTurkError as exc:
            report.failed.append((hit.hit_id, f"{exc.code}: {exc.message}"))
            continue
        if api.dry_run:
            report.add("would update")
            continue
        hit.expires_at = when if extend_seconds else timezone.now()
        hit.save(update_fields=["expires_at"])
        report.add("extended" if extend_seconds else "expired")
    report.calls = api.describe() if api.dry_run else ""
    return report
