"""Bounds on the claims that unverified provider visits make (issue 31).

An MTurk task page opened with ``assignmentId`` / ``workerId`` in its URL records a *claim*
(:func:`crowd.engine.accept_item` with ``verified=False``): a Worker and an Assignment row that wait
for the provider's confirmation. Anyone can type those parameters, so without bounds one client
address at the rater rate limit kept thousands of claims pending, each asked about again and again.
A new claim is admitted (:func:`admit`) only within these bounds:

* **per client address**: at most ``settings.PROVIDER_CLAIMS_PER_ADDRESS`` (default 20) claims the
  provider has not said it knows -- pending ones, and ones it refused or that were released within
  the last hour (:data:`REFUSED_WINDOW`) -- so a script stores at most that many rows an hour however
  fast it asks. The address (:func:`crowd.ratelimit.client_address`, which the task view passes)
  is stored only as a keyed hash (:func:`source_of`);
* **per HIT** (item): at most ``settings.PROVIDER_CLAIMS_PER_HIT`` (default 10) pending claims the
  provider has not said it knows.

"Known" means that the provider said the id exists (``Assignment.claim_known_at``; MTurk: the
assignment was accepted but is not submitted yet). A real worker's claim is known at its first
check, so neither cap stands in the way of workers who accept and return many HITs: MTurk itself
bounds real assignments (MaxAssignments per HIT, one per worker). 0 switches a cap off.

A visit over a cap is refused with :class:`~crowd.providers.base.ClaimRefused` ``too-many-claims``
(HTTP 429 with ``Retry-After``) and writes nothing, not even the Worker row (the provider makes the
claim in one transaction: :meth:`crowd.providers.mturk.MTurkProvider.open_claim`). A repeated
visit of a claim already recorded (same id, same worker) is always let through: it stores nothing
new. One provider id is one pending claim (the engine refuses the same id for another worker,
Conflict ``claimed``). How pending claims are then checked, in batches within the provider's
throttle, is the provider's ``verify`` (MTurk: :func:`crowd.mturk.collect.verify_claims`).
"""
from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db.models import Q
from django.utils import timezone
from django.utils.crypto import salted_hmac

from crowd import engine
from crowd.models import Assignment, Campaign, Item

from .base import ClaimRefused

SALT = "crowd.providers.claims.source"
#: how long a refused or released claim still counts against its client address
REFUSED_WINDOW = timedelta(hours=1)


def source_of(address: str) -> str:
    """The claim source of a client ``address`` (:func:`crowd.ratelimit.client_address` of the
    request, which honours ``RATELIMIT_TRUSTED_PROXIES``): a keyed hash (HMAC with the site's
    ``SECRET_KEY``, 32 hexadecimal characters), so that claims are counted per address without
    storing it."""
    return salted_hmac(SALT, str(address)).hexdigest()[:32]


def per_address() -> int:
    """``settings.PROVIDER_CLAIMS_PER_ADDRESS`` (default 20; 0: no cap)."""
    return int(getattr(settings, "PROVIDER_CLAIMS_PER_ADDRESS", 20))


def per_hit() -> int:
    """``settings.PROVIDER_CLAIMS_PER_HIT`` (default 10; 0: no cap)."""
    return int(getattr(settings, "PROVIDER_CLAIMS_PER_HIT", 10))


def unknown_from(source: str, *, now=None):
    """The claims from ``source`` that count against its cap: not verified, not known to the
    provider, and pending or released less than :data:`REFUSED_WINDOW` ago (a queryset)."""
    now = now or timezone.now()
    return Assignment.objects.filter(claim_source=source, verified=False, claim_known_at__isnull=True).filter(
        Q(claim_released_at__isnull=True) | Q(claim_released_at__gte=now - REFUSED_WINDOW))


def admit(campaign: Campaign, item: Item, *, provider_ref: str, worker_external_id: str, source: str,
          now=None) -> None:
    """Let a visit record a new claim of ``provider_ref`` by worker ``worker_external_id`` on
    ``item``, or raise ClaimRefused ``too-many-claims`` (status 429, ``retry_after`` seconds) when
    ``source`` (:func:`source_of`) or the item is at its cap (see the module docstring). A claim
    already recorded for this id and worker passes without a check (the visit stores nothing new)."""
    if Assignment.objects.filter(campaign=campaign, provider_ref=provider_ref, worker__provider=campaign.provider,
                                 worker__external_id=worker_external_id).exists():
        return
    retry = int(getattr(settings, "CLAIM_VERIFY_SECONDS", 120))
    cap = per_address()
    if cap and unknown_from(source, now=now).count() >= cap:
        raise ClaimRefused("Too many unconfirmed assignments were opened from your network. Please return this HIT "
                           "or try again later.", "too-many-claims", 429, retry_after=retry)
    cap = per_hit()
    if cap and engine.pending_claims(campaign).filter(item=item, claim_known_at__isnull=True).count() >= cap:
        raise ClaimRefused("Too many unconfirmed visits of this task are waiting for confirmation. Please try "
                           "again in a few minutes.", "too-many-claims", 429, retry_after=retry)
