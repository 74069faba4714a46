"""The interface every worker source implements (:class:`Provider`) and what it returns
(:class:`Claim`)."""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

from crowd import engine
from crowd.models import Campaign, Worker

SESSION_KEY = "crowd_worker_id"


class ClaimRefused(Exception):
    """A request's identity parameters are malformed or do not belong to this task, or the visit
    would exceed the bounds on unverified claims (:mod:`crowd.providers.claims`); ``code`` names why
    (e.g. ``foreign-hit``, ``bad-origin``, ``bad-params``, ``too-many-claims``), ``status`` is the
    HTTP status, ``retry_after`` (seconds, or None) when trying later may succeed."""

    def __init__(self, message: str, code: str, status: int = 400, retry_after: int | None = None):
        self.code, self.status, self.retry_after = code, status, retry_after
        super().__init__(message)


@dataclass(frozen=True)
class Claim:
    """Who a request says it is.

    ``worker``: the (possibly new) :class:`~crowd.models.Worker` row for the identity;
    ``provider_ref``: the provider's id of this piece of work (an MTurk AssignmentId; "" for the
    local pool); ``verified``: True when the request itself proves the identity (a session this
    server created at login or from an invitation link), False when it is only asserted (URL
    parameters anyone can type) and the provider must confirm it (:meth:`Provider.verify`);
    ``extra``: other provider parameters kept with the claim (e.g. MTurk's ``hitId`` and
    ``turkSubmitTo``)."""

    worker: Worker
    provider_ref: str = ""
    verified: bool = False
    extra: tuple = ()

    def get(self, key: str, default: str = "") -> str:
        return dict(self.extra).get(key, default)


class Provider(ABC):
    """A source of workers: the local rater pool, Amazon Mechanical Turk, Prolific (issue 17)...

    The interface, and the rule it carries (docs/security.md): **nobody counts who is not verified.**

    ``claim_from_request(request, campaign=None, item=None) -> Claim | None``
        Who the request says it is, or None when it carries no identity. Raises
        :class:`ClaimRefused` for malformed or foreign parameters. Work opened under an unverified
        claim is recorded with ``Assignment.verified=False`` (:func:`crowd.engine.accept_item`):
        stored, never lost, but holding no slot, not counted (so not in reports, exports or
        correlations), not graded as gold and never the reason for a block.
    ``verify(campaign, assignments) -> set[int]``
        Ask the provider's own records about the campaign's unverified ``assignments`` (a queryset
        of :class:`~crowd.models.Assignment`) and confirm (:func:`crowd.engine.confirm_claim`) each one
        they prove: the provider knows that piece of work (``provider_ref``) for that worker and
        that task, and the answer it stored carries the token we issued. Returns the primary keys
        of the assignments confirmed now. Never raises for one bad claim: it stays provisional.
    ``worker_for_request(request) -> Worker | None``
        The worker of a verified request (the local pool), None otherwise.
    ``publish(campaign)`` / ``pause(campaign)``
        Make the campaign's work available to this provider's workers, or stop offering it.

    New claims from unverified visits are bounded per client address and per task, and one provider
    id is one pending claim (:mod:`crowd.providers.claims`; a refused visit writes nothing).
    ``verify`` asks about the due claims only (:func:`crowd.engine.due_claims`), within the
    provider's own throttle, releases at once the ones the provider refuses
    (:func:`crowd.engine.release_claims`) and asks again later, less and less often, about the others
    (:func:`crowd.engine.ask_again`). Unconfirmed claims are released after their deadline plus
    ``settings.PROVIDER_CLAIM_GRACE_SECONDS`` (:func:`crowd.engine.release_unconfirmed`);
    :func:`crowd.providers.verify_all` (the periodic Celery task ``crowd.verify_claims``) runs
    ``verify`` for every campaign and then releases.
    A new provider subclasses this, sets ``name`` (a ``Campaign.provider`` value) and is added to
    :data:`crowd.providers.PROVIDERS`.
    """

    name = ""

    @abstractmethod
    def claim_from_request(self, request, campaign: Campaign | None = None, item=None) -> Claim | None:
        """See the class docstring."""

    @abstractmethod
    def verify(self, campaign: Campaign, assignments) -> set[int]:
        """See the class docstring."""

    def worker_for_request(self, request) -> Worker | None:
        """The worker making ``request`` if the request itself proves it, else None."""
        claim = self.claim_from_request(request)
        return claim.worker if claim is not None and claim.verified else None

    def completion_code(self, session) -> str:
        """The code a participant session (:class:`~crowd.models.ParticipantSession`) ends with,
        for its outcome; "" when the provider has none (the local pool)."""
        return ""

    def completion_url(self, session) -> str | None:
        """Where the completion page sends the participant (e.g. Prolific's completion URL with
        the code), or None to stay on our thank-you page."""
        return None

    def publish(self, campaign: Campaign) -> None:
        """Make the campaign's work available to this provider's workers."""
        engine.set_state(campaign, Campaign.LIVE)

    def pause(self, campaign: Campaign) -> None:
        """Stop offering the campaign's work."""
        engine.set_state(campaign, Campaign.PAUSED)
