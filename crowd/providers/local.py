"""The local rater pool: raters invited by link or logged in; verified by their session."""
from __future__ import annotations

from crowd import engine
from crowd.models import Campaign, Worker

from .base import SESSION_KEY, Claim, Provider


class LocalProvider(Provider):
    """Raters invited by link (the worker id is kept in the browser session, which this server
    created) or logged-in users. The session proves the identity, so every claim is verified and
    their work counts as it is submitted (the exactly-once guarantees of :mod:`crowd.engine`)."""

    name = Campaign.LOCAL

    def login(self, request, worker: Worker) -> None:
        """Bind ``worker`` to this browser session (a new session key, against fixation)."""
        request.session.cycle_key()
        request.session[SESSION_KEY] = worker.pk

    def claim_from_request(self, request, campaign=None, item=None) -> Claim | None:
        wid = request.session.get(SESSION_KEY)
        if wid:
            worker = Worker.objects.filter(pk=wid, provider=self.name).first()
            if worker:
                return Claim(worker, verified=True)
        if request.user.is_authenticated:
            return Claim(engine.worker_for_user(request.user), verified=True)
        return None

    def verify(self, campaign, assignments) -> set[int]:
        """Local work is verified when it is opened; nothing is left to confirm."""
        return set()
