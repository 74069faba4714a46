"""Collecting MTurk's results and reconciling them with our records.

MTurk is one record of what happened, our ``Assignment`` rows are the other; neither is trusted to
be complete (lost submissions are a known failure of crowd tools, e.g. NYUCCL/psiTurk issues #390
and #436).
:func:`collect` lists every assignment of every HIT (all pages), and for each one:

* we have it submitted with the same answer: nothing to do (its MTurk status is copied);
* we have it accepted or expired (our page never got the submit): the answer from MTurk's
  QuestionFormAnswers XML is submitted through the engine (``recorded``);
* we do not have it (HTMLQuestion HITs, or a worker who bypassed our page): the assignment is
  created from MTurk's record and submitted (``recorded``);
* the answers differ (``mismatched``) or cannot be accepted (``invalid``): reported, never guessed;
* our submitted assignments MTurk does not list (``extra``): reported, never paid.

Claims. An assignment our ExternalQuestion page opened holds only a *claim* of identity (the
``workerId`` / ``assignmentId`` in the URL, which anyone can type); it counts nowhere until it is
confirmed here (:func:`crowd.engine.confirm_claim`): MTurk lists that AssignmentId for that WorkerId
on a HIT of that item, and, when we stored an answer for it, the answer MTurk stored carries the
signed token our page issued for this very assignment (:mod:`.tokens`). A claim MTurk lists without
our token is reported (``unconfirmed``) and stays provisional; claims MTurk does not list are
reported as ``unconfirmed`` too (a forged id, or an externalSubmit that has not reached MTurk yet;
until they are released) and never make the report fail. :func:`verify_claims` asks MTurk about
the due pending claims (GetAssignment), a batch within ``settings.MTURK_VERIFY_RATE`` per run of the
periodic task: it confirms them, releases at once the ones MTurk refuses, and asks again later,
less and less often, about the ones MTurk has not received yet.

:func:`ingest` is shared with the requester-website results import (:mod:`crowd.mturk.website`).
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace

from django.db import transaction
from django.utils import timezone

from crowd import engine
from crowd.kinds import AnswerError, get_kind
from crowd.models import Assignment, Campaign, Item, MTurkBatch, MTurkHIT, MTurkSync, Worker

from . import tokens
from .client import MTurkAPI, MTurkError
from .questions import parse_answers

STATUS_TO_STATE = {"Approved": Assignment.APPROVED, "Rejected": Assignment.REJECTED}
LISTED = ["Submitted", "Approved", "Rejected"]
FORM_FIELDS = {"assignmentId", "hitId", "workerId", "turkSubmitTo", "csrfmiddlewaretoken", "token", tokens.FIELD}


@dataclass
class Reconciliation:
    """The collector's report (also stored as ``MTurkSync.report``)."""

    hits: int = 0
    mturk_assignments: int = 0
    recorded: list = field(default_factory=list)        # AssignmentIds whose answers were stored now
    unchanged: int = 0
    status_changes: list = field(default_factory=list)  # [AssignmentId, old local state, new]
    mismatched: list = field(default_factory=list)      # [AssignmentId, why]
    invalid: list = field(default_factory=list)         # [AssignmentId, why]
    extra: list = field(default_factory=list)           # [AssignmentId, local state] MTurk does not list
    errors: list = field(default_factory=list)          # [HITId, error]
    confirmed: list = field(default_factory=list)       # AssignmentIds whose claims MTurk confirmed now
    unconfirmed: list = field(default_factory=list)     # [AssignmentId, why]: claims still provisional
    refused: list = field(default_factory=list)         # [AssignmentId, why]: claims MTurk refused, released now

    @property
    def ok(self) -> bool:
        return not (self.mismatched or self.invalid or self.extra or self.errors)

    def as_dict(self) -> dict:
        return asdict(self) | {"ok": self.ok}

    def lines(self) -> list[str]:
        out = [
            f"HITs checked {self.hits}, MTurk assignments {self.mturk_assignments}",
            f"recorded now {len(self.recorded)}, unchanged {self.unchanged}, status changes {len(self.status_changes)}",
            f"mismatched {len(self.mismatched)}, invalid {len(self.invalid)}, extra (ours only) {len(self.extra)}, "
            f"errors {len(self.errors)}",
            f"claims confirmed now {len(self.confirmed)}, unconfirmed {len(self.unconfirmed)}"
            + (f", refused {len(self.refused)}" if self.refused else ""),
        ]
        for name in ("status_changes", "mismatched", "invalid", "extra", "errors", "unconfirmed", "refused"):
            out += [f"  {name.replace('_', ' ')}: {' '.join(map(str, row))}" for row in getattr(self, name)[:50]]
        return out


def worker_for(worker_id: str) -> Worker:
    worker, _ = Worker.objects.get_or_create(provider=Campaign.MTURK, external_id=worker_id)
    return worker


def form_data(answers: dict) -> dict:
    """Answer fields without MTurk's and our own bookkeeping fields."""
    return {k: v for k, v in answers.items() if k not in FORM_FIELDS}


def order_from(answers: dict, default: dict | None):
    raw = answers.get("order")
    if raw:
        try:
            value = json.loads(raw)
            if isinstance(value, dict):
                return value
        except ValueError:
            pass
    return default


def ingest(
    campaign: Campaign, item: Item, report: Reconciliation, *, assignment_id: str, worker_id: str, status: str,
    answers: dict, order: dict | None = None, accepted_at=None, submitted_at=None,
) -> None:
    """Bring one of MTurk's assignments into our records (see the module docstring). Each call is
    atomic: an answer that fails validation leaves nothing behind and is reported ``invalid``."""
    spec = get_kind(campaign.kind)
    data = form_data(answers)
    try:
        with transaction.atomic():
            worker = worker_for(worker_id)
            local = Assignment.objects.filter(campaign=campaign, provider_ref=assignment_id, verified=True).first()
            if local is None:  # the claim made for the worker and item MTurk names (forged ones stay claims)
                local = Assignment.objects.filter(campaign=campaign, provider_ref=assignment_id, worker=worker,
                                                  item=item, verified=False).first()
            if local is not None and (local.worker_id != worker.pk or local.item_id != item.pk):
                report.invalid.append([assignment_id, "our record of this AssignmentId has another worker or item"])
                return
            if local is not None and not local.verified:
                if local.answer is not None and not tokens.matches(
                        answers.get(tokens.FIELD, ""), local, assignment_id=assignment_id, worker_id=worker_id):
                    report.unconfirmed.append(
                        [assignment_id, "MTurk's answer does not carry the token our page issued for this assignment"])
                    return
                engine.confirm_claim(local.pk)
                report.confirmed.append(assignment_id)
                local.refresh_from_db()
            if local is None:
                local = engine.accept_item(
                    campaign, worker, item, provider_ref=assignment_id, order=order_from(answers, order),
                    accepted_at=accepted_at, enforce=False,
                )
            if local.state in (Assignment.ACCEPTED, Assignment.EXPIRED):
                engine.submit(local.pk, worker, data, submit_key=f"mturk:{assignment_id}"[:64], submitted_at=submitted_at)
                report.recorded.append(assignment_id)
                local.refresh_from_db()
            elif local.state == Assignment.RETURNED:
                report.invalid.append([assignment_id, "returned here but submitted on MTurk"])
                return
            else:
                if "ce_answer" in data:  # re-sent by our page for a submission we already had
                    theirs = json.loads(data["ce_answer"])
                else:
                    theirs = spec.clean(item.payload, local.order, data, item=item)
                if theirs != local.answer:
                    report.mismatched.append([assignment_id, "MTurk's answer differs from ours (ours kept)"])
                else:
                    report.unchanged += 1
            new_state = STATUS_TO_STATE.get(status)
            if new_state and local.state != new_state:
                report.status_changes.append([assignment_id, local.state, new_state])
                local.state = new_state
            local.provider_status = status
            local.save(update_fields=["state", "provider_status"])
    except AnswerError as exc:
        report.invalid.append([assignment_id, f"answer invalid: {exc}"])
    except (engine.EngineError, ValueError) as exc:
        report.invalid.append([assignment_id, str(exc)])


def collect(campaign: Campaign, api: MTurkAPI, *, save: bool = True) -> Reconciliation:
    """List the assignments of every published HIT of the campaign (API batches) and reconcile.
    Errors on one HIT (e.g. it was already disposed) are reported and the others still collected."""
    report = Reconciliation()
    hits = (MTurkHIT.objects.filter(batch__campaign=campaign, batch__route=MTurkBatch.API).exclude(hit_id="")
            .select_related("item", "batch").order_by("pk"))
    seen, checked = set(), set()
    for hit in hits:
        report.hits += 1
        try:
            rows = list(api.paginate("list_assignments_for_hit", "Assignments", HITId=hit.hit_id, AssignmentStatuses=LISTED))
        except MTurkError as exc:
            report.errors.append([hit.hit_id, f"{exc.code}: {exc.message}"])
            continue
        checked.add(hit.item_id)
        for a in rows:
            report.mturk_assignments += 1
            seen.add(a["AssignmentId"])
            try:
                answers = parse_answers(a.get("Answer", ""))
            except ValueError as exc:
                report.invalid.append([a["AssignmentId"], str(exc)])
                continue
            ingest(
                campaign, hit.item, report, assignment_id=a["AssignmentId"], worker_id=a["WorkerId"],
                status=a["AssignmentStatus"], answers=answers, order=hit.order or None,
                accepted_at=a.get("AcceptTime"), submitted_at=a.get("SubmitTime"),
            )
    if not api.dry_run:
        ours = (Assignment.objects.filter(campaign=campaign, item_id__in=checked, state__in=Assignment.DONE_STATES)
                .exclude(provider_ref="").exclude(provider_ref__in=seen))
        report.extra = [[a.provider_ref, a.state] for a in ours.filter(verified=True)]
        reported = {row[0] for row in report.unconfirmed}
        claims = (Assignment.objects.filter(campaign=campaign, item_id__in=checked, state__in=Assignment.DONE_STATES,
                                            verified=False, claim_released_at__isnull=True)
                  .exclude(provider_ref="").exclude(provider_ref__in=reported))
        report.unconfirmed += [
            [a.provider_ref, "claim MTurk does not list" if a.provider_ref not in seen
             else "MTurk lists this AssignmentId for another worker or HIT"] for a in claims.order_by("pk")]
    if save and not api.dry_run:
        MTurkSync.objects.create(campaign=campaign, source="api", ok=report.ok, report=report.as_dict())
    return report


#: MTurk's answers to GetAssignment that refuse a claim outright (the id never existed, or is malformed)
REFUSALS = ("does not exist", "doesnotexist", "validationexception", "failed to satisfy constraint")


def refuses(exc: MTurkError) -> bool:
    """Whether MTurk's error says the AssignmentId does not exist (or cannot be one): the claim is
    forged. Other request errors (MTurk answers GetAssignment only for a Submitted, Approved or
    Rejected assignment, so an accepted one is an error too) mean "not yet"."""
    text = f"{exc.code} {exc.message}".lower()
    return any(r in text for r in REFUSALS)


def verify_claims(campaign: Campaign, api: MTurkAPI, claims=None, *, now=None) -> Reconciliation:
    """Ask MTurk about the due pending claims among ``claims`` (default: the campaign's,
    :func:`crowd.engine.pending_claims`; order and due times: :func:`crowd.engine.due_claims`), one
    GetAssignment each, and no more calls than ``settings.MTURK_VERIFY_RATE`` leaves now
    (:meth:`MTurkAPI.calls_left`: a sliding window over the call log of the environment, shared by
    every campaign and run). Per claim, MTurk's answer:

    * the assignment, Submitted/Approved/Rejected, for the claimed worker on a HIT of the claimed
      item: confirmed through :func:`ingest` (the token rule and the answer reconciliation are the
      collector's) -- unless the answer lacks the token our page issued for it: refused;
    * the assignment for another worker or on another HIT, or "does not exist" (:func:`refuses`):
      refused -- released at once (:func:`crowd.engine.release_claims`: an accepted claim expires);
      an assignment MTurk does hold on a HIT of ours is still recorded from its record;
    * any other request error (MTurk answers GetAssignment only for submitted work) or a status not
      submitted yet: MTurk knows the id (``claim_known_at``), ask again later, less and less often
      (:func:`crowd.engine.ask_again`);
    * throttling (not retried here), no credentials, MTurk unreachable: the run stops; the rest wait.

    Returns the report (``confirmed``, ``refused``, ``unconfirmed``: asked again later, ``errors``)."""
    from django.conf import settings

    from crowd.models import Assignment

    now = now or timezone.now()
    report = Reconciliation()
    claims = engine.pending_claims(campaign) if claims is None else claims
    left = api.calls_left("get_assignment", getattr(settings, "MTURK_VERIFY_RATE", "20/m"), now=now)
    batch = list(engine.due_claims(claims, now=now).select_related("worker")[:left])
    api = replace(api, retries=0)  # a throttled call ends the run instead of waiting
    hits = {h.hit_id: h for h in MTurkHIT.objects.filter(batch__campaign=campaign).exclude(hit_id="").select_related("item")}
    refused, later = {}, []
    for claim in batch:
        ref = claim.provider_ref
        try:
            response = api.call("get_assignment", AssignmentId=ref)
        except MTurkError as exc:
            if refuses(exc):
                refused[claim.pk] = exc.message[:300]
            elif exc.code == "RequestError":
                later.append(claim.pk)
            else:  # throttled, no credentials, unreachable: stop here
                report.errors.append([ref, f"{exc.code}: {exc.message}"])
                break
            continue
        if response is None:  # dry run
            continue
        a, hit = response.get("Assignment", {}), hits.get(response.get("HIT", {}).get("HITId", ""))
        status = a.get("AssignmentStatus")
        if a.get("WorkerId") != claim.worker.external_id or hit is None or hit.item_id != claim.item_id:
            refused[claim.pk] = "it records this AssignmentId for another worker or HIT"
            if hit is None or status not in LISTED:
                continue
        elif status not in LISTED:
            later.append(claim.pk)
            continue
        report.mturk_assignments += 1
        try:
            answers = parse_answers(a.get("Answer", ""))
        except ValueError as exc:
            report.invalid.append([ref, str(exc)])
            if claim.pk not in refused:
                later.append(claim.pk)
            continue
        before = len(report.unconfirmed)
        ingest(campaign, hit.item, report, assignment_id=ref, worker_id=a.get("WorkerId", ""),
               status=status, answers=answers, order=hit.order or None,
               accepted_at=a.get("AcceptTime"), submitted_at=a.get("SubmitTime"))
        if claim.pk in refused:
            continue
        if len(report.unconfirmed) > before:  # MTurk's final answer lacks our token for this assignment
            refused[claim.pk] = report.unconfirmed.pop()[1]
        elif ref not in report.confirmed:
            later.append(claim.pk)
    if later:
        Assignment.objects.filter(pk__in=later, claim_known_at__isnull=True).update(claim_known_at=now)
        engine.ask_again(later, now=now)
        report.unconfirmed += [[ref, "not confirmed yet: asked again later"]
                               for ref in Assignment.objects.filter(pk__in=later).values_list("provider_ref", flat=True)]
    for pk, why in refused.items():
        engine.release_claims(Assignment.objects.filter(pk=pk), f"refused by MTurk: {why}", now=now)
    report.refused = [[ref, refused[pk]] for pk, ref in
                      Assignment.objects.filter(pk__in=list(refused)).values_list("pk", "provider_ref")]
    return report


def collect_all() -> dict:
    """Collect every live or paused MTurk campaign (the periodic Celery task). {name: summary}."""
    out = {}
    for campaign in Campaign.objects.filter(provider=Campaign.MTURK, state__in=[Campaign.LIVE, Campaign.PAUSED]):
        if not MTurkHIT.objects.filter(batch__campaign=campaign).exclude(hit_id="").exists():
            continue
        try:
            report = collect(campaign, MTurkAPI.for_campaign(campaign))
            out[campaign.name] = " | ".join(report.lines()[:4])
        except MTurkError as exc:  # e.g. no credentials on this machine
            MTurkSync.objects.create(campaign=campaign, source="api", ok=False, report={"errors": [["", str(exc)]]})
            out[campaign.name] = f"failed: {exc}"
    return out
