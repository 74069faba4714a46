"""Where workers come from: a campaign's *provider*.

A provider says who is behind a request (a :class:`~.base.Claim`, verified or not), confirms
unverified claims against its own records, and publishes or withdraws a campaign's work. The
interface is :class:`~.base.Provider` (its docstring is the contract); one module per provider:
:mod:`.local` (invitation links and Django accounts, verified by the session), :mod:`.mturk`
(Amazon Mechanical Turk, URL-parameter claims confirmed by MTurk's records) and :mod:`.prolific`
(Prolific studies, URL-parameter claims confirmed by Prolific's API on arrival). Others plug in
by subclassing :class:`Provider` and registering in :data:`PROVIDERS`.
Workers are stored per provider (``Worker.provider`` + ``external_id``, e.g. an MTurk WorkerId),
and an assignment keeps the provider's own id for it in ``Assignment.provider_ref``.
"""
from __future__ import annotations

from crowd import engine
from crowd.models import Campaign

from .base import SESSION_KEY, Claim, ClaimRefused, Provider
from .local import LocalProvider
from .mturk import MTurkProvider
from .prolific import ProlificProvider

PROVIDERS: dict[str, Provider] = {p.name: p for p in (LocalProvider(), MTurkProvider(), ProlificProvider())}

__all__ = ["SESSION_KEY", "Claim", "ClaimRefused", "Provider", "LocalProvider", "MTurkProvider", "ProlificProvider",
           "PROVIDERS",
           "get_provider", "verify_all"]


def get_provider(name: str) -> Provider:
    """The registered provider ``name``; ValueError naming the known ones otherwise."""
    try:
        return PROVIDERS[name]
    except KeyError:
        raise ValueError(f"unknown provider {name!r}; known: {', '.join(PROVIDERS)}") from None


def verify_all() -> dict:
    """Ask the providers about the pending claims due now (:func:`crowd.engine.due_claims`; each
    provider keeps to its own throttle and releases the claims it refuses), then release the overdue
    ones (the periodic task ``crowd.verify_claims``). Returns {"confirmed": n, "released": n}
    (released: overdue ones; refused ones are not counted here)."""
    confirmed = 0
    ids = engine.due_claims(engine.pending_claims()).order_by().values_list("campaign_id", flat=True).distinct()
    for campaign in Campaign.objects.filter(pk__in=list(ids)):
        provider = PROVIDERS.get(campaign.provider)
        if provider is not None:
            confirmed += len(provider.verify(campaign, engine.pending_claims(campaign)))
    return {"confirmed": confirmed, "released": engine.release_unconfirmed()}
