"""The campaign console's owner actions, each written to the audit trail
(:class:`crowd.models.AuditEntry`: who, when, action, target, reason).

* Invitation links: :func:`invitations` lists a local campaign's links (one local worker each,
  :func:`crowd.engine.invite_workers`) with their state; :func:`revoke_invitation` revokes one.
* Worker overrides (:func:`override_worker`): block, unblock, count (their stored answers) and
  uncount (release their counted answers).
* State changes and invitations made from the owner pages are recorded with :func:`record`, as
  are publishing a campaign's results and making them private again
  (:func:`crowd.privacy.publish_results`, :func:`crowd.privacy.unpublish_results`) and co-owner
  invitations (:mod:`crowd.owners`).
* The irreversible actions of the provider pages (:data:`PROVIDER_ACTIONS`: what spends money,
  pays, rejects, blocks, messages or ends something on Prolific or MTurk) are recorded with
  :func:`record_provider_action` once they are done (not their dry runs and previews), and so are
  the same actions done with ``manage.py prolific`` and ``manage.py mturk``, and the invitation links
  made with ``manage.py invite_raters`` (actor :data:`COMMAND_LINE`, the command in
  ``detail["command"]``: the commands are run by an operator on the server and name no user).

Tokens: an invitation link is ``/rate/join/<token>/`` where ``token`` is the worker's
``Worker.token``, a 128-bit random secret (:func:`crowd.models.campaigns.new_token`) stored as is
(not hashed), which is what the join page looks up. So every link of a campaign can be listed again
for its owners, including links created before the console existed. Revoking a link gives its worker
a new random token that is never shown (the old link then answers 404 like a link that never
existed) and revokes the worker's membership of the campaign (``CampaignRater.revoked_at``), so a
browser session the link already opened no longer sees or does the campaign either.
"""
from __future__ import annotations

from dataclasses import dataclass

from django.db import transaction
from django.db.models import Count, Q
from django.utils import timezone

from . import engine
from .models import Assignment, AuditEntry, Campaign, CampaignRater, Worker, WorkerStatus
from .models.campaigns import new_token

#: worker overrides an owner may apply from the campaign page
OVERRIDES = ("block", "unblock", "count", "uncount")
MAX_REASON = 1000
#: the actor of an action done with a management command (no user: an operator on the server)
COMMAND_LINE = "command line"


def record(campaign: Campaign, user, action: str, *, target: str = "", reason: str = "", detail=None,
           actor: str = "system") -> AuditEntry:
    """Append an entry to ``campaign``'s audit trail; ``user`` None means no logged-in user did it:
    the platform itself (``actor`` ``system``, the default) or a management command (``actor``
    :data:`COMMAND_LINE`). ``action`` is one of :attr:`AuditEntry.ACTIONS`; ValueError otherwise."""
    if action not in dict(AuditEntry.ACTIONS):
        raise ValueError(f"unknown audit action {action!r}")
    return AuditEntry.objects.create(
        campaign=campaign, user=user if user is not None and user.is_authenticated else None,
        actor=user.get_username() if user is not None and user.is_authenticated else actor,
        action=action, target=str(target)[:200], reason=str(reason).replace("\x00", "")[:MAX_REASON],
        detail=detail or {},
    )


#: the irreversible actions of the provider pages, (provider, page action) -> audit action; the
#: other page actions (settings, a draft study, the cost, pause and resume, sync, collect, a bonus not
#: yet paid, reconcile, exports) change nothing that cannot be changed back
PROVIDER_ACTIONS = {
    (Campaign.PROLIFIC, "publish"): "prolific-publish",  # the study goes live: its cost is committed
    (Campaign.PROLIFIC, "stop"): "prolific-stop",  # final on Prolific
    (Campaign.PROLIFIC, "add-places"): "prolific-add-places",  # more places paid for
    (Campaign.PROLIFIC, "approve"): "prolific-approve",  # pays the reward
    (Campaign.PROLIFIC, "review"): "prolific-review",  # approves and rejects by rules (applied)
    (Campaign.PROLIFIC, "reject"): "prolific-reject",
    (Campaign.PROLIFIC, "pay"): "prolific-pay",  # pays a bonus
    (Campaign.MTURK, "publish"): "mturk-publish",  # creates HITs: their rewards and fees are committed
    (Campaign.MTURK, "review"): "mturk-review",  # approves (pays) and rejects assignments
    (Campaign.MTURK, "send-bonuses"): "mturk-send-bonuses",
    (Campaign.MTURK, "block"): "mturk-block",  # blocks workers on MTurk
    (Campaign.MTURK, "notify"): "mturk-notify",  # messages sent to workers
    (Campaign.MTURK, "expire"): "mturk-expire",  # HITs taken off MTurk
}


def record_provider_action(campaign: Campaign, user, provider: str, action: str, lines, *,
                           target: str = "", command: str = "") -> AuditEntry | None:
    """Record the provider page action ``action`` of ``provider`` (``"prolific"`` | ``"mturk"``)
    done by ``user`` if it is irreversible (:data:`PROVIDER_ACTIONS`; None, nothing written, for
    another); ``lines`` are the lines the page shows as its result, of which the last three are kept
    (``detail["result"]``, at most 1,000 characters); ``target`` e.g. the submission or bonus.
    ``command``: the same action done by a management command (e.g. ``"manage.py prolific pay"``,
    kept as ``detail["command"]``), with ``user`` None: the actor is :data:`COMMAND_LINE`."""
    verb = PROVIDER_ACTIONS.get((provider, action))
    if verb is None:
        return None
    result = " / ".join(" ".join(str(line).split()) for line in list(lines)[-3:])
    detail = {"result": result[:1000], **({"command": command} if command else {})}
    return record(campaign, user, verb, target=target, detail=detail, actor=COMMAND_LINE if command else "system")


@dataclass
class Invitation:
    """One invitation link of a campaign, for its owners: the worker it identifies, its token (empty
    once revoked), when it was made, ``tasks`` (assignments its holder accepted) and ``state``:
    ``unused`` (no task taken yet), ``used`` or ``revoked``."""

    worker: Worker
    token: str
    created_at: object
    revoked_at: object
    tasks: int

    @property
    def state(self) -> str:
        if self.revoked_at is not None:
            return "revoked"
        return "used" if self.tasks else "unused"


def invitations(campaign: Campaign) -> list[Invitation]:
    """The campaign's invitation links, oldest first: the memberships of local workers that have no
    Django account (a logged-in user's worker is not a link)."""
    rows = (CampaignRater.objects.filter(campaign=campaign, worker__provider=Campaign.LOCAL, worker__user__isnull=True)
            .select_related("worker").order_by("created_at", "pk")
            .annotate(tasks=Count("worker__assignments", filter=Q(worker__assignments__campaign=campaign))))
    return [Invitation(r.worker, "" if r.revoked_at else r.worker.token, r.created_at, r.revoked_at, r.tasks)
            for r in rows]


def revoke_invitation(campaign: Campaign, worker_pk, user, reason: str = "") -> Invitation:
    """Revoke the invitation link of worker ``worker_pk`` in ``campaign``: the link stops joining
    (the worker's token is replaced by a new secret shown to nobody), the membership is revoked (a
    session the link opened no longer sees the campaign), and an accepted task is returned (its slot
    goes back to the pool; answers already given stay). Irreversible. Raises
    :class:`crowd.engine.EngineError` for a worker that is not a link of this campaign, or one
    already revoked (nothing changed)."""
    with transaction.atomic():
        membership = (CampaignRater.objects.select_for_update().select_related("worker")
                      .filter(campaign=campaign, worker_id=worker_pk, worker__provider=Campaign.LOCAL,
                              worker__user__isnull=True).first())
        if membership is None:
            raise engine.EngineError("no such invitation link in this campaign", "unknown")
        if membership.revoked_at is not None:
            raise engine.Conflict("this invitation link was already revoked", "revoked")
        worker = membership.worker
        membership.revoked_at = timezone.now()
        membership.save(update_fields=["revoked_at"])
        worker.token = new_token()
        worker.save(update_fields=["token"])
        returned = 0
        for a in Assignment.objects.filter(campaign=campaign, worker=worker, state=Assignment.ACCEPTED):
            engine.return_assignment(a.pk, worker, "invitation link revoked by an owner")
            returned += 1
        record(campaign, user, "revoke", target=_target(worker), reason=reason, detail={"returned": returned})
    return Invitation(worker, "", membership.created_at, membership.revoked_at, 0)


def campaign_worker(campaign: Campaign, rater_id: str) -> Worker:
    """The worker ``rater_id`` (``provider:external_id``, as on the owner pages) if they rate or
    have worked in ``campaign``; :class:`crowd.engine.EngineError` otherwise."""
    provider, _, external_id = str(rater_id).partition(":")
    worker = Worker.objects.filter(provider=provider, external_id=external_id).first()
    if worker is None or not (Assignment.objects.filter(campaign=campaign, worker=worker).exists()
                              or CampaignRater.objects.filter(campaign=campaign, worker=worker).exists()):
        raise engine.EngineError(f"no worker {str(rater_id)[:100]!r} in this campaign", "unknown")
    return worker


def _target(worker: Worker) -> str:
    return f"{worker.rater_id} ({worker.label})" if worker.label else worker.rater_id


def override_worker(campaign: Campaign, worker: Worker, action: str, user, reason: str) -> str:
    """Apply an owner's override to ``worker`` in ``campaign`` and record it; returns a sentence
    for the owner. ``reason`` is required (1..1000 characters).

    * ``block``: no more tasks (a task they hold in the local pool is returned); their counted
      answers are released (:func:`crowd.engine.release_counted_work`) so other workers redo those
      items.
    * ``unblock``: their standing becomes ``ok`` again (the campaign's checks still apply to their
      next answers, so failing them again blocks them again); their released answers stay
      uncounted unless ``count`` follows.
    * ``count``: count their stored, uncounted answers where a slot is free
      (:func:`crowd.engine.count_stored_work`; refused while they are blocked).
    * ``uncount``: release their counted answers; they may go on working.

    Raises :class:`crowd.engine.EngineError` (nothing changed) for an unknown action, a missing
    reason, or an action that does not apply (blocking a blocked worker, unblocking one who is not)."""
    reason = str(reason or "").replace("\x00", "").strip()
    if action not in OVERRIDES:
        raise engine.EngineError(f"unknown action {action!r}; use one of {', '.join(OVERRIDES)}")
    if not reason:
        raise engine.EngineError("give a reason: it is kept in the campaign's audit trail", "reason")
    if len(reason) > MAX_REASON:
        raise engine.EngineError(f"the reason must have at most {MAX_REASON} characters", "reason")
    target = _target(worker)
    with transaction.atomic():
        status, _ = WorkerStatus.objects.select_for_update().get_or_create(
            campaign=campaign, worker=worker, defaults={"state": WorkerStatus.OK})
        if action == "block":
            if status.state == WorkerStatus.BLOCKED:
                raise engine.Conflict(f"{worker.rater_id} is already blocked", "blocked")
            status.state, status.reason = WorkerStatus.BLOCKED, f"blocked by {_who(user)}: {reason}"[:1000]
            status.save()
            released = engine.release_counted_work(campaign, worker)
            held = list(Assignment.objects.filter(campaign=campaign, worker=worker, state=Assignment.ACCEPTED,
                                                  provider_ref="").values_list("pk", flat=True))
            for pk in held:  # a task they hold goes back to the pool (local pool; MTurk HITs stay MTurk's)
                engine.return_assignment(pk, worker, "worker blocked by an owner")
            record(campaign, user, action, target=target, reason=reason,
                   detail={"released": released, "returned": len(held)})
            return f"{worker.rater_id} is blocked; {released} counted answers were released."
        if action == "unblock":
            if status.state != WorkerStatus.BLOCKED:
                raise engine.Conflict(f"{worker.rater_id} is not blocked", "not-blocked")
            previous = status.reason
            status.state, status.reason = WorkerStatus.OK, f"unblocked by {_who(user)}: {reason}"[:1000]
            status.save()
            record(campaign, user, action, target=target, reason=reason, detail={"was": previous[:500]})
            return f"{worker.rater_id} is unblocked."
        if action == "uncount":
            released = engine.release_counted_work(campaign, worker)
            record(campaign, user, action, target=target, reason=reason, detail={"released": released})
            return f"{released} counted answers of {worker.rater_id} were released."
    counted = engine.count_stored_work(campaign, worker)  # its own transactions, one per answer
    record(campaign, user, "count", target=target, reason=reason, detail={"counted": counted})
    engine.finish_if_complete(campaign)
    return f"{counted} stored answers of {worker.rater_id} are now counted."


def _who(user) -> str:
    return user.get_username() if user is not None and user.is_authenticated else "system"
