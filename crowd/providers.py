"""Where workers come from: a campaign's *provider*.

A provider identifies the worker behind a request and publishes or withdraws a campaign's work.
The local rater pool (invitation links and Django accounts) and Amazon Mechanical Turk
(:mod:`crowd.mturk`) are built in; others (e.g. Prolific) plug in by subclassing :class:`Provider`
and registering in :data:`PROVIDERS`.
Workers are stored per provider (``Worker.provider`` + ``external_id``, e.g. an MTurk WorkerId),
and an assignment keeps the provider's own id for it in ``Assignment.provider_ref``.
"""
from __future__ import annotations

from abc import ABC, abstractmethod

from . import engine
from .models import Campaign, Worker

SESSION_KEY = "crowd_worker_id"


class Provider(ABC):
    """Interface of a worker source."""

    name = ""

    @abstractmethod
    def worker_for_request(self, request) -> Worker | None:
        """The worker making ``request``, or None if the request carries no identity."""

    def publish(self, campaign: Campaign) -> None:
        """Make the campaign's work available to this provider's workers."""
        engine.set_state(campaign, Campaign.LIVE)

    def pause(self, campaign: Campaign) -> None:
        engine.set_state(campaign, Campaign.PAUSED)


class LocalProvider(Provider):
    """Raters invited by link (the worker id is kept in the browser session) or logged-in users."""

    name = Campaign.LOCAL

    def login(self, request, worker: Worker) -> None:
        """Bind ``worker`` to this browser session (a new session key, against fixation)."""
        request.session.cycle_key()
        request.session[SESSION_KEY] = worker.pk

    def worker_for_request(self, request) -> Worker | None:
        wid = request.session.get(SESSION_KEY)
        if wid:
            worker = Worker.objects.filter(pk=wid, provider=self.name).first()
            if worker:
                return worker
        if request.user.is_authenticated:
            return engine.worker_for_user(request.user)
        return None


class MTurkProvider(Provider):
    """Amazon Mechanical Turk: the worker is the ``workerId`` MTurk appends to the task page's URL;
    publishing creates a batch of HITs (:mod:`crowd.mturk.publish`), pausing expires them."""

    name = Campaign.MTURK

    def worker_for_request(self, request) -> Worker | None:
        wid = request.GET.get("workerId", "")
        if not wid:
            return None
        from .mturk.collect import worker_for

        return worker_for(wid)

    def publish(self, campaign: Campaign, api=None) -> None:
        from .mturk.client import MTurkAPI
        from .mturk.publish import publish_batch

        publish_batch(campaign, api or MTurkAPI.for_campaign(campaign))

    def pause(self, campaign: Campaign, api=None) -> None:
        from .mturk.client import MTurkAPI
        from .mturk.review import update_expiration

        update_expiration(campaign, api or MTurkAPI.for_campaign(campaign))
        engine.set_state(campaign, Campaign.PAUSED)


PROVIDERS: dict[str, Provider] = {p.name: p for p in (LocalProvider(), MTurkProvider())}


def get_provider(name: str) -> Provider:
    try:
        return PROVIDERS[name]
    except KeyError:
        raise ValueError(f"unknown provider {name!r}; known: {', '.join(PROVIDERS)}") from None
