"""Prolific as a provider: participants arrive from a study with URL parameters (a claim), which
Prolific's API confirms before any session opens.

Facts (Prolific public API documentation and researcher help): a study's
``external_study_url`` receives ``PROLIFIC_PID`` (the participant, 24 hex characters),
``STUDY_ID`` (24 hex) and ``SESSION_ID`` (the submission id) when ``prolific_id_option`` is
``url_parameters``; anyone holding the link can type any of them, so they are only a claim until
``GET /submissions/{SESSION_ID}/`` shows that submission for that participant and that study.
A participant ends a session on ``https://app.prolific.com/submissions/complete?cc=<code>``
(``settings.PROLIFIC_COMPLETE_URL``); the completion code tells Prolific what to do next.
"""
from __future__ import annotations

import re
from urllib.parse import quote

from django.conf import settings

from crowd.models import Campaign, ParticipantSession, ProlificStudy, Worker
from crowd.prolific_client import ProlificAPI, ProlificError, ProlificUnavailable

from .base import Claim, ClaimRefused, Provider

PID = re.compile(r"^[0-9a-f]{24}$")
STUDY_ID = re.compile(r"^[0-9a-f]{24}$")
SESSION_ID = re.compile(r"^[0-9A-Za-z]{1,64}$")
OPEN_STATUSES = {"RESERVED", "ACTIVE"}
PARAMS = ("PROLIFIC_PID", "STUDY_ID", "SESSION_ID")


def worker_for(pid: str) -> Worker:
    """The worker of Prolific participant ``pid`` (provider ``prolific``, ``external_id`` = the
    PID), created on first sight: the same participant is the same worker in every study."""
    worker, _ = Worker.objects.get_or_create(provider=Campaign.PROLIFIC, external_id=pid)
    return worker


def study_of(campaign: Campaign) -> ProlificStudy | None:
    """The campaign's ProlificStudy row, read fresh (None if there is none)."""
    return ProlificStudy.objects.filter(campaign_id=campaign.pk).first()


class ProlificProvider(Provider):
    """Prolific (external studies). A request carrying ``PROLIFIC_PID``, ``STUDY_ID`` and
    ``SESSION_ID`` makes an unverified claim (:meth:`claim_from_request`); the arrival page asks
    Prolific about it (:meth:`confirm_session`) and opens a participant session only when Prolific
    knows that submission for that participant in this campaign's study. Sessions are confirmed
    on arrival, so :meth:`verify` has nothing left to do. At the end the participant is sent to
    :meth:`completion_url` with the code of the session's outcome (:meth:`completion_code`).

    ``publish``/``pause`` (inherited) only change the campaign's state here; the study on Prolific
    is created, costed, published (with confirmation), paused and stopped by
    :mod:`crowd.prolific.study` (``manage.py prolific ...``), which also sets the campaign state."""

    name = Campaign.PROLIFIC

    def claim_from_request(self, request, campaign=None, item=None) -> Claim | None:
        """The claim in the query string, or None when it has none of the three parameters.
        Raises ClaimRefused ``bad-params`` (400) when one is missing or malformed, and with
        ``campaign`` ``foreign-study`` (403) when ``STUDY_ID`` is not the campaign's study."""
        values = {k: request.GET.get(k, "") for k in PARAMS}
        if not any(values.values()):
            return None
        pid, sid, session_id = values["PROLIFIC_PID"], values["STUDY_ID"], values["SESSION_ID"]
        if not (PID.match(pid) and STUDY_ID.match(sid) and SESSION_ID.match(session_id)):
            raise ClaimRefused("The Prolific participant, study or session id is missing or malformed.",
                               "bad-params", 400)
        if campaign is not None:
            study = study_of(campaign)
            if study is None or not study.study_id or study.study_id != sid:
                raise ClaimRefused("This link does not belong to this campaign's Prolific study.",
                                   "foreign-study", 403)
        # An unsaved Worker for a participant never seen: the row is written only once Prolific has
        # confirmed the claim (crowd.views.journey.prolific_start), so forged ids leave nothing behind.
        worker = (Worker.objects.filter(provider=Campaign.PROLIFIC, external_id=pid).first()
                  or Worker(provider=Campaign.PROLIFIC, external_id=pid))
        return Claim(worker, provider_ref=session_id, verified=False,
                     extra=(("STUDY_ID", sid), ("PROLIFIC_PID", pid)))

    def worker_for_request(self, request):
        """Never: a Prolific identity in a request is only a claim."""
        return None

    def confirm_session(self, campaign: Campaign, claim: Claim, api=None) -> bool:
        """Ask Prolific (``GET /submissions/{SESSION_ID}/``) whether the claim is real: True when
        the submission belongs to the claimed participant and study (the campaign's) and is
        RESERVED or ACTIVE -- or, for a reload of a session we already opened for this worker,
        in any status. False when Prolific does not know the submission (404, 400) or it belongs
        to someone or something else. Raises ProlificUnavailable when Prolific cannot be asked
        (unreachable after retries, no token, token refused)."""
        pid, sid = claim.get("PROLIFIC_PID"), claim.get("STUDY_ID")
        study = study_of(campaign)
        if study is None or study.study_id != sid or claim.worker.external_id != pid:
            return False
        own = api is None
        try:
            api = api or ProlificAPI(campaign=campaign)
            record = api.get_submission(claim.provider_ref)
        except ProlificUnavailable:
            raise
        except ProlificError as exc:
            if exc.status in (400, 404):
                return False
            raise ProlificUnavailable(f"cannot confirm the session: {exc.detail}", exc.status) from None
        finally:
            if own and isinstance(api, ProlificAPI):
                api.close()
        if record.get("participant_id") != pid or record.get("study_id") != sid or record.get("id", claim.provider_ref) != claim.provider_ref:
            return False
        if record.get("status") in OPEN_STATUSES:
            return True
        return ParticipantSession.objects.filter(
            campaign=campaign, worker__provider=Campaign.PROLIFIC, worker__external_id=pid,
            provider_ref=claim.provider_ref).exists()

    def verify(self, campaign, assignments) -> set[int]:
        """Nothing to confirm: sessions are confirmed on arrival (:meth:`confirm_session`)."""
        return set()

    def completion_code(self, session) -> str:
        """The study's completion code for the session's outcome ("" when the outcome has none,
        e.g. returned or timed out, or the campaign has no study)."""
        study = study_of(session.campaign)
        return str((study.completion_codes or {}).get(session.outcome, "")) if study else ""

    def completion_url(self, session) -> str | None:
        """``PROLIFIC_COMPLETE_URL?cc=<code>`` for the session's code, None without a code."""
        code = session.completion_code or self.completion_code(session)
        return f"{settings.PROLIFIC_COMPLETE_URL}?cc={quote(code)}" if code else None
