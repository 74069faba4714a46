"""Amazon Mechanical Turk as a provider: identities are claims until MTurk's records confirm them."""
from __future__ import annotations

import re

from django.conf import settings
from django.db import transaction

from crowd import engine
from crowd.models import Assignment, Campaign, MTurkHIT
from crowd.mturk.client import MTurkAPI, MTurkError
from crowd.mturk.collect import verify_claims, worker_for
from crowd.mturk.publish import publish_batch
from crowd.mturk.questions import PREVIEW_ASSIGNMENT
from crowd.mturk.review import update_expiration

from . import claims
from .base import Claim, ClaimRefused, Provider

WORKER_ID = re.compile(r"^[0-9A-Za-z]{5,64}$")


class MTurkProvider(Provider):
    """Amazon Mechanical Turk. MTurk appends ``assignmentId``, ``hitId``, ``workerId`` and
    ``turkSubmitTo`` to the task page's URL; anyone can type them, so they make an unverified
    claim. What MTurk guarantees, and what we check: a HIT has at most ``MaxAssignments`` (= k)
    assignments at once, an AssignmentId belongs to one worker and one HIT, and
    ListAssignmentsForHIT / GetAssignment return only assignments MTurk really made, with the
    answer the worker's browser posted to ``externalSubmit`` -- which carries the signed token our
    page issued (:mod:`crowd.mturk.tokens`). :meth:`verify` (GetAssignment) and the collector
    (:func:`crowd.mturk.collect.collect`, ListAssignmentsForHIT) confirm a claim only then.
    New claims are bounded per client address and per HIT, one AssignmentId is one pending claim
    (:mod:`crowd.providers.claims`), and :meth:`verify` asks about them in batches within
    ``settings.MTURK_VERIFY_RATE``. Publishing creates a batch of HITs (:mod:`crowd.mturk.publish`),
    pausing expires them."""

    name = Campaign.MTURK

    def claim_from_request(self, request, campaign=None, item=None) -> Claim | None:
        """The claim of an accepted HIT's task page, or None for a preview (no assignment).
        With ``campaign`` and ``item``, raises ClaimRefused unless ``hitId`` is a published HIT of
        that item and ``turkSubmitTo`` one of ``settings.MTURK_SUBMIT_ORIGINS``. Makes the worker
        row: a page visit opens its claim with :meth:`open_claim`, which bounds it."""
        aid = request.GET.get("assignmentId", "")
        if not aid or aid == PREVIEW_ASSIGNMENT:
            return None
        hit_id, worker_id = request.GET.get("hitId", ""), request.GET.get("workerId", "")
        submit_to = request.GET.get("turkSubmitTo", "")
        if campaign is not None and not MTurkHIT.objects.filter(
                batch__campaign=campaign, item=item, hit_id=hit_id).exclude(hit_id="").exists():
            raise ClaimRefused("This page does not belong to the HIT you accepted.", "foreign-hit")
        if submit_to.rstrip("/") not in settings.MTURK_SUBMIT_ORIGINS:
            raise ClaimRefused("This page must be opened from Mechanical Turk.", "bad-origin")
        if not WORKER_ID.match(worker_id) or len(aid) > 100:
            raise ClaimRefused("The worker or assignment id is missing or malformed.", "bad-params")
        return Claim(worker_for(worker_id), provider_ref=aid, verified=False,
                     extra=(("hitId", hit_id), ("turkSubmitTo", submit_to)))

    def open_claim(self, request, campaign, item, *, source: str) -> tuple[Claim | None, Assignment | None]:
        """What a visit of ``item``'s task page opens: ``(None, None)`` for a preview, else the
        claim and its assignment (new, or the one this AssignmentId and worker opened before;
        :func:`crowd.engine.accept_item` with ``verified=False``), stored with ``source`` (the
        client address's :func:`crowd.providers.claims.source_of`). Raises ClaimRefused
        (:meth:`claim_from_request`; ``too-many-claims`` from :func:`crowd.providers.claims.admit`),
        engine.NoTask or EngineError (e.g. Conflict ``claimed``: the AssignmentId is pending for
        another worker); a refused visit writes nothing, not even the worker row (one transaction)."""
        with transaction.atomic():
            claim = self.claim_from_request(request, campaign, item)
            if claim is None:
                return None, None
            claims.admit(campaign, item, provider_ref=claim.provider_ref,
                         worker_external_id=claim.worker.external_id, source=source)
            return claim, engine.accept_item(campaign, claim.worker, item, provider_ref=claim.provider_ref,
                                             verified=False, source=source)

    def worker_for_request(self, request):
        """Never: an MTurk identity in a request is only a claim."""
        return None

    def verify(self, campaign, assignments, api=None) -> set[int]:
        """Confirm the claims MTurk's GetAssignment proves and release the ones it refuses, the due
        ones among ``assignments`` first and no more than ``settings.MTURK_VERIFY_RATE`` allows
        (:func:`crowd.mturk.collect.verify_claims`). Without credentials (MTurkError) nothing is
        confirmed and the claims wait."""
        before = set(assignments.values_list("pk", flat=True))
        try:
            verify_claims(campaign, api or MTurkAPI.for_campaign(campaign), assignments)
        except MTurkError:
            return set()
        return set(Assignment.objects.filter(pk__in=before, verified=True).values_list("pk", flat=True))

    def publish(self, campaign: Campaign, api=None) -> None:
        publish_batch(campaign, api or MTurkAPI.for_campaign(campaign))

    def pause(self, campaign: Campaign, api=None) -> None:
        update_expiration(campaign, api or MTurkAPI.for_campaign(campaign))
        engine.set_state(campaign, Campaign.PAUSED)
