"""Keeping our records of a study's submissions in step with Prolific's (poll and webhook).

Prolific's submission record is the authority on what it will pay; our
:class:`~crowd.models.ParticipantSession` is the authority on the work done. :func:`apply_submission`
stores Prolific's record (:class:`~crowd.models.ProlificSubmission`), links it to our session
(same campaign, ``provider_ref`` == the submission id, the participant we know under that id) and,
when Prolific says the participant's place is gone, gives the work back to the pool exactly once
(``released_at``):

* ``RETURNED`` (the participant withdrew) and ``TIMED-OUT`` (the maximum time passed): the
  session's unfinished task goes back (:func:`crowd.journey.release_session` with ``counted=False``);
  what was submitted and counted stays counted;
* ``REJECTED`` (Prolific will not pay): the session's counted work is released too
  (``counted=True``), so those items are served to other participants.

Statuses as documented by Prolific's API reference ("Submissions": RESERVED, ACTIVE, AWAITING
REVIEW, APPROVED, REJECTED, RETURNED, TIMED-OUT, SCREENED OUT, PARTIALLY APPROVED, PROCESSING,
https://docs.prolific.com/api-reference/submissions/). :func:`sync_study` is the poll (the Celery
beat task ``crowd.sync_prolific`` runs :func:`sync_all`); the webhook (:mod:`.webhooks`) calls
:func:`apply_submission` with the record it fetched.
"""
from __future__ import annotations

import re

from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from crowd.models import Campaign, ParticipantSession, ProlificStudy, ProlificSubmission

#: every submission status Prolific documents (anything else in a record is refused)
STATUSES = ("RESERVED", "ACTIVE", "AWAITING REVIEW", "APPROVED", "REJECTED", "RETURNED", "TIMED-OUT",
            "SCREENED OUT", "PARTIALLY APPROVED", "PROCESSING")
#: Prolific status -> (our session outcome, whether counted work is released too)
RELEASES = {
    "RETURNED": (ParticipantSession.RETURNED, False),
    "TIMED-OUT": (ParticipantSession.TIMED_OUT, False),
    "REJECTED": (ParticipantSession.REJECTED, True),
}
#: statuses in which the participant is (still) working
OPEN_STATUSES = ("RESERVED", "ACTIVE")
ID_RE = re.compile(r"^[0-9A-Za-z]{1,64}$")
CODE_RE = re.compile(r"^[0-9A-Za-z_-]{0,40}$")


class SyncError(ValueError):
    """A submission record that cannot be stored as it is (bad id, unknown status, another study)."""


def _id(record: dict, *names) -> str:
    for name in names:
        value = record.get(name)
        if isinstance(value, dict):  # some answers nest {"id": ...}
            value = value.get("id")
        if value not in (None, ""):
            return str(value)
    return ""


def _when(value):
    if not value or not isinstance(value, str):
        return None
    try:
        return parse_datetime(value)
    except ValueError:
        return None


def clean_record(study: ProlificStudy, record) -> dict:
    """The fields we keep from one of Prolific's submission records, checked: ``id`` and
    ``participant_id`` (``participant``) of 1-64 letters/digits, a documented ``status``, the
    record's study (``study_id`` / ``study``, when present) equal to ``study.study_id``, a
    completion code (``study_code``) of at most 40 characters. Raises :class:`SyncError`."""
    if not isinstance(record, dict):
        raise SyncError("a submission record must be an object")
    sid, pid = _id(record, "id"), _id(record, "participant_id", "participant")
    if not ID_RE.match(sid):
        raise SyncError(f"bad submission id {sid[:80]!r}")
    if not ID_RE.match(pid):
        raise SyncError(f"submission {sid}: bad participant id {pid[:80]!r}")
    status = record.get("status")
    if status not in STATUSES:
        raise SyncError(f"submission {sid}: unknown status {str(status)[:40]!r}")
    their_study = _id(record, "study_id", "study")
    if their_study and their_study != study.study_id:
        raise SyncError(f"submission {sid} belongs to study {their_study[:64]}, not {study.study_id}")
    code = record.get("study_code") or ""
    if not isinstance(code, str) or not CODE_RE.match(code):
        raise SyncError(f"submission {sid}: bad completion code")
    return {"submission_id": sid, "participant_id": pid, "status": status, "study_code": code,
            "started_at": _when(record.get("started_at")), "completed_at": _when(record.get("completed_at"))}


def _session_for(study: ProlificStudy, sid: str, pid: str) -> ParticipantSession | None:
    """Our session with provider_ref == the submission id in the study's campaign, if it belongs to
    the participant Prolific names (a session opened under another PID stays unlinked and shows up
    in the reconciliation)."""
    s = (ParticipantSession.objects.filter(campaign_id=study.campaign_id, provider_ref=sid)
         .select_related("worker").first())
    if s is None or s.worker.external_id != pid or (s.study_ref and s.study_ref != study.study_id):
        return None
    return s


def apply_submission(study: ProlificStudy, record: dict) -> ProlificSubmission:
    """Store Prolific's ``record`` of one submission of ``study`` (create or update
    :class:`~crowd.models.ProlificSubmission`), link our session, and release the session's work
    once if the status is RETURNED, TIMED-OUT (unfinished work) or REJECTED (counted work too),
    through :func:`crowd.journey.release_session`. Idempotent; atomic. Raises :class:`SyncError`
    for a record that fails :func:`clean_record` or names a submission stored for another study."""
    from crowd import journey

    fields = clean_record(study, record)
    sid = fields["submission_id"]
    with transaction.atomic():
        sub = ProlificSubmission.objects.select_for_update().filter(submission_id=sid).first()
        if sub is None:
            try:
                with transaction.atomic():  # a concurrent poll or webhook may create it first
                    sub = ProlificSubmission.objects.create(study=study, submission_id=sid,
                                                            participant_id=fields["participant_id"],
                                                            status=fields["status"])
            except IntegrityError:
                sub = ProlificSubmission.objects.select_for_update().get(submission_id=sid)
        if sub.study_id != study.pk:
            raise SyncError(f"submission {sid} is stored for another study")
        elif sub.participant_id and sub.participant_id != fields["participant_id"]:
            raise SyncError(f"submission {sid}: Prolific now names another participant")
        for name, value in fields.items():
            if name in ("started_at", "completed_at") and value is None:
                continue
            setattr(sub, name, value)
        sub.raw = {k: v for k, v in record.items() if isinstance(k, str)}
        if sub.session_id is None:
            sub.session = _session_for(study, sid, fields["participant_id"])
        sub.save()
        release = RELEASES.get(sub.status)
        if release and sub.released_at is None and sub.session_id is not None:
            outcome, counted = release
            journey.release_session(sub.session, outcome=outcome, counted=counted)
            sub.released_at = timezone.now()
            sub.save(update_fields=["released_at", "synced_at"])
    return sub


def sync_study(study: ProlificStudy, api) -> dict:
    """Poll: list every submission of ``study`` (all pages, ``api.list_submissions``) and apply each.
    Returns {"listed", "created", "changed", "released", "errors": [[submission id, why]]}; a bad
    record is reported and the others still applied. Raises the client's ``ProlificError`` when the
    list cannot be read (nothing half-applied: each record is its own transaction)."""
    if not study.study_id:
        raise SyncError("the study has not been created on Prolific yet")
    out = {"listed": 0, "created": 0, "changed": 0, "released": 0, "errors": []}
    before = {s.submission_id: (s.status, s.released_at is not None)
              for s in ProlificSubmission.objects.filter(study=study)}
    for record in api.list_submissions(study.study_id):
        out["listed"] += 1
        try:
            sub = apply_submission(study, record)
        except SyncError as exc:
            out["errors"].append([_id(record, "id") if isinstance(record, dict) else "", str(exc)])
            continue
        old = before.get(sub.submission_id)
        if old is None:
            out["created"] += 1
        elif old[0] != sub.status:
            out["changed"] += 1
        if sub.released_at is not None and not (old and old[1]):
            out["released"] += 1
    study.last_synced_at = timezone.now()
    study.save(update_fields=["last_synced_at"])
    return out


def sync_all() -> dict:
    """Sync every published Prolific study of a Prolific campaign (the periodic task
    ``crowd.sync_prolific``). Returns {campaign name: summary line or "failed: ..."}; one study's
    failure (no token, Prolific unreachable) does not stop the others."""
    from crowd.prolific_client import ProlificAPI, ProlificError

    out = {}
    studies = (ProlificStudy.objects.exclude(study_id="").exclude(status__in=["", "UNPUBLISHED"])
               .filter(campaign__provider=Campaign.PROLIFIC).select_related("campaign"))
    for study in studies:
        name = study.campaign.name
        try:
            r = sync_study(study, ProlificAPI(campaign=study.campaign))
        except (ProlificError, SyncError) as exc:
            out[name] = f"failed: {exc}"
            continue
        out[name] = (f"listed {r['listed']}, new {r['created']}, changed {r['changed']}, released {r['released']}, "
                     f"errors {len(r['errors'])}")
    return out
