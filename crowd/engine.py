"""The assignment engine: creating campaigns, claiming items, submitting, returning, expiring.

Guarantees (tested under concurrency on PostgreSQL, ``tests/test_campaign_concurrency.py``):

* an item gets at most k counted judgments and never two from the same worker: claims lock the
  item row with ``SELECT ... FOR UPDATE SKIP LOCKED`` (concurrent raters skip each other's rows
  instead of queueing) and take a numbered slot; the unique constraints of
  :class:`crowd.models.Assignment` make a double claim impossible even if this code were wrong;
* nothing is lost: assignments are never deleted; an expired one releases its slot and keeps its
  row; a late submission is stored, flagged ``late``, and counts only if a slot is still free;
* submitting is idempotent: a repeated request (double click, retry) finds the assignment already
  submitted and records nothing new;
* bad input changes nothing: every state change runs in one transaction after validation;
* claims stay fast however full the campaign is: ``Item.full`` is set, under the item's row
  lock, by the claim that takes an item's last slot and cleared by every release (return, expiry,
  blocked worker), so the search for an open item skips full ones through a partial index. The flag
  may only ever be stale in the safe direction (``False`` on a full item; the slot count is still
  checked), never ``True`` on an item with a free slot.

On SQLite (the embedded quick-start database) row locks do not exist; SQLite serialises writers
and the same constraints hold.
"""
from __future__ import annotations

import random
import secrets
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal

from django.db import IntegrityError, transaction
from django.db.models import Count, Exists, OuterRef, Q, Subquery
from django.db.models.functions import Coalesce
from django.utils import timezone

from .kinds import AnswerError, CampaignSpecError, get_kind
from .models import (
    Assignment,
    Campaign,
    HumanJudgment,
    Item,
    PairwiseJudgment,
    Worker,
    WorkerStatus,
)

ACTIVE = Assignment.ACCEPTED


class EngineError(Exception):
    """A request the engine refuses; ``status`` is the HTTP status a view should answer with."""

    status = 400

    def __init__(self, message: str, code: str = "invalid"):
        self.code = code
        super().__init__(message)


class Forbidden(EngineError):
    status = 403


class Conflict(EngineError):
    status = 409


class NoTask(EngineError):
    """No task for this worker now; ``code`` says why: ``done``, ``cap``, ``paused``, ``draft``,
    ``finished``, ``expired``, ``blocked``."""

    status = 200


REASONS = {
    "done": "There is nothing left for you to do in this campaign: every item has all its judgments "
            "or you have already done it. Thank you!",
    "cap": "You have reached the maximum number of tasks one person may do in this campaign. Thank you!",
    "paused": "This campaign is paused by its owner. Please come back later.",
    "draft": "This campaign has not started yet.",
    "finished": "This campaign has finished. Thank you!",
    "expired": "This campaign's time is over.",
    "blocked": "You can no longer take tasks in this campaign (quality checks).",
}


# --- campaigns ------------------------------------------------------------------------------------
def create_campaign(
    dataset, kind: str, *, name: str, owners=(), title: str = "", instructions: str | None = None,
    k: int | None = None, per_worker_cap: int | None = None, assignment_seconds: int = 600,
    lifetime: timedelta | None = None, reward=0, options: dict | None = None, seed: int = 0,
    gold_every: int = 10, state: str = Campaign.DRAFT, provider: str = Campaign.LOCAL,
) -> Campaign:
    """Create a campaign of ``kind`` over ``dataset`` with its items, in one transaction.

    ``options`` are kind options (e.g. ``images``, ``systems``, ``captions_per_set``, ``gold``,
    ``atoms``, ``image_url``); ``seed`` fixes the sample of images, gold items and serving order.
    ``provider`` is ``local`` (invited raters) or ``mturk`` (Mechanical Turk, see crowd.mturk).
    Raises CampaignSpecError (nothing written) for a bad name, kind, option or an empty result.
    """
    spec = get_kind(kind)
    options = dict(options or {})
    try:
        reward = Decimal(str(reward)).quantize(Decimal("0.01"))
    except ArithmeticError:
        raise CampaignSpecError(f"the reward {reward!r} is not an amount of dollars") from None
    if reward < 0:
        raise CampaignSpecError("the reward cannot be negative")
    k = spec.default_k if k is None else k
    if k < 1:
        raise CampaignSpecError("judgments per item (k) must be at least 1")
    if per_worker_cap is not None and per_worker_cap < 1:
        raise CampaignSpecError("the per-worker cap must be at least 1")
    if assignment_seconds < 10:
        raise CampaignSpecError("the assignment duration must be at least 10 seconds")
    if provider not in dict(Campaign.PROVIDERS):
        raise CampaignSpecError(f"unknown provider {provider!r}; use one of {', '.join(dict(Campaign.PROVIDERS))}")
    if Campaign.objects.filter(name=name).exists():
        raise CampaignSpecError(f"a campaign named {name!r} exists already")
    rng = random.Random(seed)
    items = spec.build_items(dataset, options, rng)
    positions = list(range(len(items)))
    rng.shuffle(positions)
    options["seed"] = seed
    with transaction.atomic():
        campaign = Campaign.objects.create(
            name=name, title=title or f"{spec.title}: {dataset.name}", kind=kind, dataset=dataset,
            instructions=instructions or spec.instructions, judgments_per_item=k, per_worker_cap=per_worker_cap,
            assignment_seconds=assignment_seconds, expires_at=timezone.now() + lifetime if lifetime else None,
            reward=reward, state=state, template_version=spec.template_version, options=options,
            gold_every=gold_every, provider=provider,
        )
        campaign.owners.set(owners)
        Item.objects.bulk_create(
            [Item(campaign=campaign, position=p, key=it.key, payload=it.payload, is_gold=it.gold is not None, gold=it.gold)
             for p, it in zip(positions, items)],
            batch_size=1000,
        )
        spec.prepare(campaign)
    return campaign


TRANSITIONS = {
    Campaign.DRAFT: {Campaign.LIVE, Campaign.FINISHED},
    Campaign.LIVE: {Campaign.PAUSED, Campaign.FINISHED},
    Campaign.PAUSED: {Campaign.LIVE, Campaign.FINISHED},
    Campaign.FINISHED: set(),
}


def set_state(campaign: Campaign, state: str) -> Campaign:
    """Move a campaign to ``state`` (draft -> live <-> paused -> finished); EngineError otherwise."""
    if state not in TRANSITIONS:
        raise EngineError(f"unknown state {state!r}")
    with transaction.atomic():
        current = Campaign.objects.select_for_update().get(pk=campaign.pk)
        if state != current.state and state not in TRANSITIONS[current.state]:
            raise Conflict(f"a {current.state} campaign cannot become {state}")
        current.state = state
        current.save(update_fields=["state"])
    campaign.state = state
    return campaign


# --- workers --------------------------------------------------------------------------------------
def worker_for_user(user) -> Worker:
    """The local worker of a Django user (created on first use)."""
    worker, _ = Worker.objects.get_or_create(
        provider=Campaign.LOCAL, external_id=f"user-{user.pk}", defaults={"user": user, "label": user.get_username()}
    )
    return worker


def invite_workers(n: int, label: str = "") -> list[Worker]:
    """Create ``n`` local workers identified by invitation links (``/rate/join/<token>/``)."""
    return [
        Worker.objects.create(provider=Campaign.LOCAL, external_id=f"invite-{secrets.token_hex(6)}",
                              label=f"{label}{i + 1}" if label else "")
        for i in range(n)
    ]


def worker_state(campaign: Campaign, worker: Worker) -> str:
    status = WorkerStatus.objects.filter(campaign=campaign, worker=worker).values_list("state", flat=True).first()
    return status or WorkerStatus.OK


# --- claiming -------------------------------------------------------------------------------------
def unavailable_reason(campaign: Campaign, worker: Worker) -> str | None:
    """Why ``worker`` cannot take a new task now (a key of REASONS), or None."""
    if campaign.state != Campaign.LIVE:
        return campaign.state
    if campaign.is_expired:
        return "expired"
    if worker_state(campaign, worker) == WorkerStatus.BLOCKED:
        return "blocked"
    if campaign.per_worker_cap is not None:
        done = Assignment.objects.filter(
            campaign=campaign, worker=worker, item__is_gold=False,
            state__in=(ACTIVE, *Assignment.DONE_STATES),
        ).count()
        if done >= campaign.per_worker_cap:
            return "cap"
    return None


def active_assignment(campaign: Campaign, worker: Worker) -> Assignment | None:
    """The worker's accepted, not yet overdue assignment in ``campaign``, if any."""
    return (
        Assignment.objects.filter(campaign=campaign, worker=worker, state=ACTIVE, deadline__gt=timezone.now())
        .select_related("item").first()
    )


def _open_items(campaign: Campaign, worker: Worker):
    held = (
        Assignment.objects.filter(item=OuterRef("pk"), slot__isnull=False)
        .order_by().values("item").annotate(n=Count("pk")).values("n")
    )
    return (
        Item.objects.filter(campaign=campaign, is_gold=False, full=False)
        .annotate(held=Coalesce(Subquery(held), 0))
        .filter(held__lt=campaign.judgments_per_item)
        .exclude(Exists(Assignment.objects.filter(item=OuterRef("pk"), worker=worker)))
        .order_by("position")
    )


def _gold_due(campaign: Campaign, worker: Worker) -> Item | None:
    if not campaign.gold_every:
        return None
    n = Assignment.objects.filter(campaign=campaign, worker=worker).exclude(state=Assignment.RETURNED).count()
    if n % campaign.gold_every:
        return None
    return (
        Item.objects.filter(campaign=campaign, is_gold=True)
        .exclude(Exists(Assignment.objects.filter(item=OuterRef("pk"), worker=worker)))
        .order_by("position").first()
    )


def preview(campaign: Campaign, worker: Worker) -> Item | None:
    """The item ``accept`` would most likely give ``worker`` now (nothing is claimed)."""
    if unavailable_reason(campaign, worker):
        return None
    return _gold_due(campaign, worker) or _open_items(campaign, worker).first()


def _took_slot(item_id, free: list) -> None:
    """Call after taking ``free[0]`` under the item's row lock: the item is full if it was the last."""
    if len(free) == 1:
        Item.objects.filter(pk=item_id).update(full=True)


def _reopen(item_ids) -> None:
    """Slots of these items were released: they are open again.

    Deliberately no ``full=True`` filter: the UPDATE must reach (and so wait for the row lock of) an
    item that a concurrent claim has locked and is about to mark full after counting the slot this
    transaction is releasing; filtered on ``full=True``, it would skip the still-unmarked row, and
    the claim would then leave the item marked full with a free slot (found by the 50-rater test).
    """
    Item.objects.filter(pk__in=list(item_ids)).update(full=False)


def _new_assignment(campaign, item, worker, slot, now, *, order=None, provider_ref="") -> Assignment:
    spec = get_kind(campaign.kind)
    seed = secrets.randbits(62)
    return Assignment.objects.create(
        campaign=campaign, item=item, worker=worker, slot=slot, state=ACTIVE, accepted_at=now,
        deadline=now + timedelta(seconds=campaign.assignment_seconds), seed=seed,
        order=spec.presentation_order(item.payload, random.Random(seed)) if order is None else order,
        template_version=campaign.template_version, provider_ref=provider_ref,
    )


def accept_item(
    campaign: Campaign, worker: Worker, item: Item, *, provider_ref: str, order: dict | None = None,
    accepted_at=None, enforce: bool = True,
) -> Assignment:
    """Open an assignment of a *given* item for a provider's assignment ``provider_ref`` (e.g. an
    MTurk AssignmentId: MTurk, not we, chose the item and the worker). Idempotent: the same
    ``provider_ref`` returns the existing assignment.

    The item's slot is taken if one is free. If none is free but another worker's *accepted*
    assignment holds one, that holder has been dropped by the provider (MTurk never lets more than
    MaxAssignments = k workers hold a HIT at once), so it is expired and its slot handed over.
    ``enforce`` applies the campaign's availability rules (state, block, cap) and raises NoTask;
    the collector passes False because work already done on MTurk must be recorded whatever happens.
    Raises Conflict when the worker already has another assignment of this item.
    """
    existing = Assignment.objects.filter(campaign=campaign, provider_ref=provider_ref).select_related("item").first()
    if existing:
        if existing.worker_id != worker.pk or existing.item_id != item.pk:
            raise Conflict(f"assignment {provider_ref} belongs to another worker or item", "foreign")
        return existing
    if enforce:
        reason = unavailable_reason(campaign, worker)
        if reason:
            raise NoTask(REASONS[reason], reason)
    now = accepted_at or timezone.now()
    try:
        with transaction.atomic():
            Item.objects.select_for_update().get(pk=item.pk)
            if Assignment.objects.filter(item=item, worker=worker).exists():
                raise Conflict("this worker has already done this item (in another HIT or batch)", "duplicate")
            slot = None
            if not item.is_gold:
                holders = {a.slot: a for a in Assignment.objects.filter(item=item, slot__isnull=False).order_by("accepted_at")}
                free = [s for s in range(campaign.judgments_per_item) if s not in holders]
                if free:
                    slot = free[0]
                    _took_slot(item.pk, free)
                else:
                    stale = next((a for a in holders.values() if a.state == ACTIVE and a.provider_ref), None)
                    if stale is not None:
                        Assignment.objects.filter(pk=stale.pk).update(
                            state=Assignment.EXPIRED, slot=None, expired_at=now,
                            return_reason="superseded: the provider gave this HIT to another worker",
                        )
                        slot = stale.slot
            return _new_assignment(campaign, item, worker, slot, now, order=order, provider_ref=provider_ref)
    except IntegrityError:
        existing = Assignment.objects.filter(campaign=campaign, provider_ref=provider_ref).first()
        if existing:
            return existing
        raise Conflict("the task could not be claimed; please try again", "retry") from None


def accept(campaign: Campaign, worker: Worker) -> Assignment:
    """Give ``worker`` a task: their unfinished one if they have it, else a gold item when one is
    due, else the first open item (by serving position) they have not done. Raises NoTask (with
    the reason) when there is none."""
    current = active_assignment(campaign, worker)
    if current:
        return current
    expire_overdue(campaign)
    reason = unavailable_reason(campaign, worker)
    if reason:
        raise NoTask(REASONS[reason], reason)
    now = timezone.now()
    try:
        with transaction.atomic():
            gold = _gold_due(campaign, worker)
            if gold is not None:
                return _new_assignment(campaign, gold, worker, None, now)
            skipped = []
            for _ in range(20):
                item = (
                    _open_items(campaign, worker).exclude(pk__in=skipped)
                    .select_for_update(skip_locked=True, of=("self",)).first()
                )
                if item is None:
                    break
                held = set(Assignment.objects.filter(item=item, slot__isnull=False).values_list("slot", flat=True))
                free = [s for s in range(campaign.judgments_per_item) if s not in held]
                if free:
                    _took_slot(item.pk, free)
                    return _new_assignment(campaign, item, worker, free[0], now)
                skipped.append(item.pk)  # filled since our snapshot: look further
    except IntegrityError:
        # the same worker accepted twice at once: the other request created their assignment
        current = active_assignment(campaign, worker)
        if current:
            return current
        raise Conflict("the task could not be claimed; please try again", "retry") from None
    raise NoTask(REASONS["done"], "done")


# --- submitting -----------------------------------------------------------------------------------
@dataclass
class SubmitResult:
    assignment: Assignment
    created: bool  # False: this was a repeat of an earlier submission, nothing new was recorded
    late: bool
    counted: bool


def _text(value) -> str:
    """Free text from a form, storable in PostgreSQL (which refuses NUL characters in text)."""
    return str(value or "").replace("\x00", "")


def _locked_assignment(assignment_id, worker: Worker) -> Assignment:
    try:
        a = Assignment.objects.select_for_update(of=("self",)).select_related("item", "campaign", "worker").get(pk=assignment_id)
    except (Assignment.DoesNotExist, ValueError, TypeError):
        raise EngineError("no such assignment", "unknown") from None
    if a.worker_id != worker.pk:
        raise Forbidden("this assignment belongs to another worker", "forbidden")
    return a


def submit(
    assignment_id, worker: Worker, data, *, submit_key: str = "", item_id=None, submitted_at=None,
) -> SubmitResult:
    """Record ``worker``'s answer (form ``data``) to their assignment.

    Raises: EngineError (unknown assignment, forged item id, answer invalid -> AnswerError via
    ``errors``), Forbidden (another worker's assignment), Conflict (returned, rejected, or already
    submitted with a different key, campaign finished). A repeat of a submission (same key, or the
    same answer) returns the stored result with ``created=False``. ``submitted_at`` records when a
    provider says the work was submitted (results collected later); default now.
    """
    spec = None
    now = submitted_at or timezone.now()
    submit_key = _text(submit_key)[:64]
    with transaction.atomic():
        a = _locked_assignment(assignment_id, worker)
        if item_id is not None and str(item_id) != str(a.item_id):
            raise EngineError("the item does not match this assignment", "forged-item")
        if a.state in Assignment.DONE_STATES:
            spec = get_kind(a.campaign.kind)
            same = submit_key and submit_key == a.submit_key
            if not same:
                try:
                    same = spec.clean(a.item.payload, a.order, data) == a.answer
                except AnswerError:
                    same = False
            if same:
                return SubmitResult(a, False, a.late, a.counted)
            raise Conflict("this task was already submitted", "already-submitted")
        if a.state == Assignment.RETURNED:
            raise Conflict("you returned this task", "returned")
        if a.campaign.state == Campaign.FINISHED:
            raise Conflict("this campaign has finished; the answer was not stored", "finished")
        spec = get_kind(a.campaign.kind)
        answer = spec.clean(a.item.payload, a.order, data, item=a.item)  # AnswerError: nothing stored
        late = a.state == Assignment.EXPIRED or a.deadline <= now
        if a.item.is_gold:
            counted = False
        elif worker_state(a.campaign, worker) == WorkerStatus.BLOCKED:
            if a.slot is not None:
                _reopen([a.item_id])
            counted, a.slot = False, None  # kept for the record, never counted
        elif a.slot is not None:
            counted = True
        else:  # expired: its slot went back to the pool; take a free one if there is still one
            Item.objects.select_for_update().get(pk=a.item_id)
            held = set(Assignment.objects.filter(item_id=a.item_id, slot__isnull=False).values_list("slot", flat=True))
            free = [s for s in range(a.campaign.judgments_per_item) if s not in held]
            counted = bool(free)
            a.slot = free[0] if free else None
            if free:
                _took_slot(a.item_id, free)
        a.state = Assignment.SUBMITTED
        a.submitted_at, a.late, a.counted, a.answer = now, late, counted, answer
        a.submit_key = submit_key
        a.work_seconds = (now - a.accepted_at).total_seconds()
        if a.item.is_gold:
            a.gold_correct = spec.check_gold(answer, a.item.gold)
        a.save()
        if counted:
            spec.record(a, answer)
        if a.item.is_gold:
            from .quality import update_worker_status

            update_worker_status(a.campaign, worker)
    return SubmitResult(a, True, late, counted)


def return_assignment(assignment_id, worker: Worker, reason: str = "") -> Assignment:
    """Give an accepted task back (with an optional reason); its slot returns to the pool. The
    worker will not be offered the same item again."""
    with transaction.atomic():
        a = _locked_assignment(assignment_id, worker)
        if a.state != ACTIVE:
            raise Conflict(f"only an accepted task can be returned; this one is {a.state}", "not-active")
        if a.slot is not None:
            _reopen([a.item_id])
        a.state, a.slot, a.return_reason = Assignment.RETURNED, None, _text(reason).strip()[:1000]
        a.save(update_fields=["state", "slot", "return_reason"])
    return a


def expire_overdue(campaign: Campaign | None = None) -> int:
    """Mark accepted assignments past their deadline ``expired`` and release their slots (the rows
    stay). Returns how many expired. Run by the periodic Celery task and before every claim."""
    now = timezone.now()
    qs = Assignment.objects.filter(state=ACTIVE, deadline__lte=now)
    if campaign is not None:
        qs = qs.filter(campaign=campaign)
    due = list(qs.values_list("pk", "item_id", "slot"))  # the cut-off is fixed: no new row can match
    if not due:
        return 0
    with transaction.atomic():
        n = Assignment.objects.filter(pk__in=[d[0] for d in due], state=ACTIVE).update(
            state=Assignment.EXPIRED, slot=None, expired_at=now)
        _reopen({item for _, item, slot in due if slot is not None})
    return n


def release_counted_work(campaign: Campaign, worker: Worker) -> int:
    """Take a (blocked) worker's counted judgments out of the campaign: their assignments keep their
    answers but stop counting and free their slots, the derived judgment rows are removed, so the
    items are offered to other workers again. Returns the number of assignments released."""
    with transaction.atomic():
        qs = Assignment.objects.select_for_update().filter(campaign=campaign, worker=worker, counted=True)
        ids = list(qs.values_list("pk", flat=True))
        HumanJudgment.objects.filter(campaign=campaign, rater=worker.rater_id).delete()
        PairwiseJudgment.objects.filter(campaign=campaign, rater=worker.rater_id).delete()
        if campaign.kind == "description":
            from .models import Caption

            Caption.objects.filter(system__dataset=campaign.dataset, key__in=[f"assignment-{i}" for i in ids]).delete()
        _reopen(qs.filter(slot__isnull=False).values_list("item_id", flat=True))
        Assignment.objects.filter(pk__in=ids).update(counted=False, slot=None)
    return len(ids)


def campaign_counts(campaign: Campaign) -> dict:
    """Progress: items, gold items, counted judgments, open slots, and assignments by state."""
    by_state = dict(
        Assignment.objects.filter(campaign=campaign).values_list("state").annotate(n=Count("pk")).order_by()
    )
    n_items = Item.objects.filter(campaign=campaign, is_gold=False).count()
    counted = Assignment.objects.filter(campaign=campaign, counted=True).count()
    complete = (
        Item.objects.filter(campaign=campaign, is_gold=False)
        .annotate(n=Count("assignments", filter=Q(assignments__counted=True)))
        .filter(n__gte=campaign.judgments_per_item).count()
    )
    return {
        "items": n_items,
        "gold_items": Item.objects.filter(campaign=campaign, is_gold=True).count(),
        "judgments": counted,
        "needed": n_items * campaign.judgments_per_item,
        "complete_items": complete,
        "late": Assignment.objects.filter(campaign=campaign, late=True).count(),
        "by_state": by_state,
    }
