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
* identities from URL parameters (an MTurk ``workerId`` / ``assignmentId``) are *claims*
  (``Assignment.verified=False``): stored, never lost, but holding no slot, never counted, never
  graded as gold and never the reason for a block until the provider's own records confirm them
  (:func:`confirm_claim`, run by the collector); unconfirmed ones are released after their deadline
  plus a grace period (:func:`release_unconfirmed`), or at once when the provider refuses them
  (:func:`release_claims`). A claim never evicts anyone, and one provider id is one pending claim;
* in a local campaign with gold, a worker's judgments count only once they have passed the
  minimum gold checks; until then they are stored with ``awaiting_gold``, hold no slot, and are
  counted afterwards, each once, where their item still has a free slot (:func:`count_awaiting_gold`);
  a returned or expired gold check stays due (the rule: :func:`gold_checks_required`);
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
from collections import Counter
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal

from django.db import IntegrityError, transaction
from django.db.models import Case, Count, Exists, F, IntegerField, OuterRef, Q, Subquery, Value, When
from django.db.models.functions import Coalesce
from django.utils import timezone

from . import images
from .kinds import AnswerError, CampaignSpecError, get_kind
from .kinds.base import TaskKind, check_url_template
from .models import (
    Assignment,
    Campaign,
    CampaignRater,
    Item,
    Worker,
    WorkerStatus,
)
from .quality import check_min_seconds, gold_verdict, speed_check, speed_reason

ACTIVE = Assignment.ACCEPTED
#: providers whose tasks this server serves itself (the gold rule of :func:`gold_checks_required`
#: applies); MTurk workers choose their HITs on MTurk, so MTurk campaigns keep no gate
SERVED_PROVIDERS = (Campaign.LOCAL, Campaign.PROLIFIC)


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
    ``finished``, ``expired``, ``blocked``, ``gold`` (a gold check is due and none is left to serve)."""

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
    "gold": "You can no longer take tasks in this campaign: a quality check is due, and you have returned "
            "or not finished every quality check it has.",
}


# --- campaigns ------------------------------------------------------------------------------------
def create_campaign(
    dataset, kind: str, *, name: str, owners=(), title: str = "", instructions: str | None = None,
    k: int | None = None, per_worker_cap: int | None = None, assignment_seconds: int = 600,
    lifetime: timedelta | None = None, reward=0, options: dict | None = None, seed: int = 0,
    gold_every: int = 10, state: str = Campaign.DRAFT, provider: str = Campaign.LOCAL,
    bundle_size: int = 0, session_minutes: int = 0, consent_text: str = "", practice: int = 0,
    practice_pass: float = 0.8, attention_max_failures: int = 1,
) -> Campaign:
    """Create a campaign of ``kind`` over ``dataset`` with its items, in one transaction.

    ``options`` are kind options (e.g. ``images``, ``systems``, ``captions_per_set``, ``gold``,
    ``atoms``, ``image_url``) and ``min_seconds_per_task`` (the speed check's floor, seconds, 0-3600,
    :func:`crowd.quality.min_seconds_per_task`); ``seed`` fixes the sample of images, gold items and serving order.
    ``provider`` is ``local`` (invited raters), ``mturk`` (Mechanical Turk, see crowd.mturk) or
    ``prolific`` (Prolific, see crowd.prolific).

    The participant journey (:mod:`crowd.journey`): ``bundle_size`` tasks per session (0-1000; 0:
    no bundle), a time budget of ``session_minutes`` per session (0-1440; 0: none), a
    ``consent_text`` shown first (at most 20,000 characters; empty: no consent page), ``practice``
    items (0-100) with known answers that a participant must get right in a share of at least
    ``practice_pass`` (in (0, 1]) before any task, and ``attention_max_failures`` failed attention
    checks (gold items, 0-1000) a session tolerates. Practice items are extra gold items of the
    kind (it is asked for ``practice`` more than its usual gold, ``options["gold"]``) moved out of
    the items into ``options["practice"]`` as ``[{"key", "payload", "gold"}]`` (picture URLs filled
    like the items'), so they are never served as tasks.

    Raises CampaignSpecError (nothing written) for a bad name, kind, option (e.g. an ``image_url``
    template that is not http(s), :func:`crowd.kinds.base.check_url_template`, or an image key
    that cannot go into it), a journey value out of range, practice for a kind without gold items
    (free-text description) or with too few, or an empty result.
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
    check_journey_options(bundle_size=bundle_size, session_minutes=session_minutes, consent_text=consent_text,
                          practice=practice, practice_pass=practice_pass, attention_max_failures=attention_max_failures)
    if practice and type(spec).check_gold is TaskKind.check_gold:
        raise CampaignSpecError(f"campaigns of kind {kind!r} have no gold items, so no practice items either")
    if Campaign.objects.filter(name=name).exists():
        raise CampaignSpecError(f"a campaign named {name!r} exists already")
    if options.get("image_url"):  # http(s) only, whatever the kind does with it
        check_url_template(str(options["image_url"]))
    if options.get("min_seconds_per_task") is not None:  # the speed check's floor (crowd.quality)
        options["min_seconds_per_task"] = check_min_seconds(options["min_seconds_per_task"])
    rng = random.Random(seed)
    items = spec.build_items(dataset, options, rng)
    practice_items = []
    if practice:  # practice items: `practice` more gold items, moved out of the items
        n_gold = sum(1 for it in items if it.gold is not None)
        rng = random.Random(seed)
        items = spec.build_items(dataset, {**options, "gold": n_gold + practice}, rng)
        gold = [it for it in items if it.gold is not None]
        if len(gold) < n_gold + practice:
            raise CampaignSpecError(
                f"{practice} practice items need {practice} gold items besides the {n_gold} attention checks, "
                f"but kind {kind!r} built only {len(gold)} gold items from these options")
        practice_items = gold[-practice:]
        moved = {id(it) for it in practice_items}
        items = [it for it in items if id(it) not in moved]
    images.fill_urls(dataset, [it.payload for it in items + practice_items])  # pictures from the image source
    if practice_items:
        options["practice"] = [{"key": it.key, "payload": it.payload, "gold": it.gold} for it in practice_items]
    positions = list(range(len(items)))
    rng.shuffle(positions)
    options["seed"] = seed
    with transaction.atomic():
        campaign = Campaign.objects.create(
            name=name, title=title or f"{spec.title}: {dataset.name}", kind=kind, dataset=dataset,
            instructions=instructions or spec.instructions, judgments_per_item=k, per_worker_cap=per_worker_cap,
            assignment_seconds=assignment_seconds, expires_at=timezone.now() + lifetime if lifetime else None,
            reward=reward, state=state, template_version=spec.template_version, options=options,
            gold_every=gold_every, provider=provider, bundle_size=bundle_size, session_minutes=session_minutes,
            consent_text=consent_text, practice_pass=float(practice_pass), attention_max_failures=attention_max_failures,
        )
        campaign.owners.set(owners)
        Item.objects.bulk_create(
            [Item(campaign=campaign, position=p, key=it.key, payload=it.payload, is_gold=it.gold is not None, gold=it.gold)
             for p, it in zip(positions, items)],
            batch_size=1000,
        )
        spec.prepare(campaign)
        if state == Campaign.LIVE and (problem := images.campaign_image_problem(campaign)):
            raise CampaignSpecError(problem)  # rolls the campaign back: nothing written
    return campaign


MAX_CONSENT_CHARS = 20_000


def check_journey_options(*, bundle_size=0, session_minutes=0, consent_text="", practice=0, practice_pass=0.8,
                          attention_max_failures=1) -> None:
    """Check the participant-journey settings of a campaign (see :func:`create_campaign`): whole
    numbers ``bundle_size`` 0-1000, ``session_minutes`` 0-1440 (a day), ``practice`` 0-100,
    ``attention_max_failures`` 0-1000; ``practice_pass`` a share in (0, 1]; ``consent_text`` text
    of at most :data:`MAX_CONSENT_CHARS` characters without NUL. Raises CampaignSpecError (one line)."""
    for name, value, hi in (("bundle size", bundle_size, 1000), ("session minutes", session_minutes, 1440),
                            ("practice items", practice, 100),
                            ("attention max failures", attention_max_failures, 1000)):
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= hi:
            raise CampaignSpecError(f"the {name} must be a whole number from 0 to {hi}, not {value!r}")
    try:
        share = float(practice_pass)
    except (TypeError, ValueError):
        share = float("nan")
    if isinstance(practice_pass, bool) or not 0 < share <= 1:  # also refuses NaN
        raise CampaignSpecError(f"the practice pass mark must be a share in (0, 1], not {practice_pass!r}")
    if not isinstance(consent_text, str) or len(consent_text) > MAX_CONSENT_CHARS or "\x00" in consent_text:
        raise CampaignSpecError(f"the consent text must be text of at most {MAX_CONSENT_CHARS:,} characters")


TRANSITIONS = {
    Campaign.DRAFT: {Campaign.LIVE, Campaign.FINISHED},
    Campaign.LIVE: {Campaign.PAUSED, Campaign.FINISHED},
    Campaign.PAUSED: {Campaign.LIVE, Campaign.FINISHED},
    Campaign.FINISHED: set(),
}


def set_state(campaign: Campaign, state: str) -> Campaign:
    """Move a campaign to ``state`` (draft -> live <-> paused -> finished); EngineError otherwise.
    Going live needs a picture for every item of a kind that shows images
    (:func:`crowd.images.campaign_image_problem`; Conflict with a one-line message otherwise)."""
    if state not in TRANSITIONS:
        raise EngineError(f"unknown state {state!r}")
    with transaction.atomic():
        current = Campaign.objects.select_for_update().get(pk=campaign.pk)
        if state != current.state and state not in TRANSITIONS[current.state]:
            raise Conflict(f"a {current.state} campaign cannot become {state}")
        if state == Campaign.LIVE and state != current.state and (problem := images.campaign_image_problem(current)):
            raise Conflict(problem)  # a kind that shows images needs pictures (crowd.images)
        current.state = state
        current.save(update_fields=["state"])
    campaign.state = state
    return campaign


# --- workers --------------------------------------------------------------------------------------
def worker_for_user(user) -> Worker:
    """The local worker of a logged-in Django user (created on first use).

    Being logged in makes nobody a rater: this worker rates only the campaigns it was made a rater
    of (:func:`add_raters`; the migration that introduced memberships kept every campaign a worker
    already had assignments in). That holds for owners, staff and superusers too: an owner cannot
    rate their own campaign or a rival's unless invited (opening an invitation link puts the
    invited worker, bound to its campaign, in the browser session; see :func:`invite_workers`)."""
    worker, _ = Worker.objects.get_or_create(
        provider=Campaign.LOCAL, external_id=f"user-{user.pk}", defaults={"user": user, "label": user.get_username()}
    )
    return worker


def invite_workers(n: int, label: str = "", campaign: Campaign | None = None) -> list[Worker]:
    """Create ``n`` local workers identified by invitation links (``/rate/join/<token>/``).

    With ``campaign`` (a local campaign) each new worker is made a rater of that campaign only
    (:func:`add_raters`, in the same transaction): the link lets its holder see and do that
    campaign's tasks and no other. Without it the workers rate nothing until :func:`add_raters`
    is called for them. ``label`` + a running number (1..n) names them for owners. Raises
    EngineError (nothing created) for a campaign of another provider."""
    with transaction.atomic():
        workers = [
            Worker.objects.create(provider=Campaign.LOCAL, external_id=f"invite-{secrets.token_hex(6)}",
                                  label=f"{label}{i + 1}" if label else "")
            for i in range(n)
        ]
        if campaign is not None:
            add_raters(campaign, workers)
    return workers


def add_raters(campaign: Campaign, workers) -> int:
    """Make the local ``workers`` raters of ``campaign`` (a :class:`crowd.models.CampaignRater`
    each; idempotent). Returns how many memberships are new. Raises EngineError for a campaign
    whose workers come from another provider (e.g. MTurk) or a worker that is not local."""
    if campaign.provider != Campaign.LOCAL:
        raise EngineError(f"campaign {campaign.name!r} takes its workers from {campaign.provider}, not invitations")
    workers = list(workers)
    if any(w.provider != Campaign.LOCAL for w in workers):
        raise EngineError("only local workers (invitation links, accounts) can be invited to a campaign")
    before = CampaignRater.objects.filter(campaign=campaign).count()
    CampaignRater.objects.bulk_create([CampaignRater(campaign=campaign, worker=w) for w in workers],
                                      ignore_conflicts=True)
    return CampaignRater.objects.filter(campaign=campaign).count() - before


def rater_campaigns(worker: Worker):
    """The local campaigns ``worker`` is a rater of (a queryset; the rater pages list and serve
    only these). A revoked membership (:func:`crowd.audit.revoke_invitation`) does not count."""
    return Campaign.objects.filter(provider=Campaign.LOCAL, raters__worker=worker, raters__revoked_at__isnull=True)


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
            campaign=campaign, worker=worker, item__is_gold=False, verified=True,
            state__in=(ACTIVE, *Assignment.DONE_STATES),
        ).count()
        if done >= campaign.per_worker_cap:
            return "cap"
    if gold_withheld(campaign, worker):
        return "gold"
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


# --- gold checks ------------------------------------------------------------------------------------
def gold_checks_required(campaign: Campaign) -> int:
    """The number of graded gold answers a worker of ``campaign`` needs before their judgments
    count: ``min(campaign.gold_min_answers, gold items)`` for a local campaign serving gold, else 0.

    The rule (local campaigns, whose tasks we serve; ``crowd.quality`` applies the thresholds):

    * Gold is *due* for a worker when ``graded <= normal // (gold_every - 1)`` (``gold_every >= 2``;
      always for ``gold_every == 1``; never for 0), where ``graded`` is the number of the worker's
      gold answers that were graded and ``normal`` the number of their non-gold tasks not returned
      (accepted, submitted, approved, rejected or expired). So the 1st task is gold and then one task
      in ``gold_every``, as before; but a returned or expired gold task is not a graded answer, so gold
      stays due: returning gold never earns a normal task.
    * A due gold check serves the first gold item (by serving position) the worker has never been
      given: a returned or expired gold task is replaced by an unseen one. When every gold item has
      been given and some were returned or expired unanswered, the worker gets no more tasks in the
      campaign (reason ``gold``, :func:`gold_withheld`): the rows of returned tasks are never
      reopened (they are the record), and skipping the check is not a way on. Only when every gold
      item has been answered do normal items follow without gold.
    * Judgments count only after the minimum gold checks: ``required = min(gold_min_answers, number of
      gold items)``; while the worker has fewer than ``required`` graded gold answers (or is blocked), a
      submitted non-gold answer is stored with ``awaiting_gold=True``, holds no slot and is not counted.
      Once the worker has ``required`` graded answers and is not blocked, :func:`count_awaiting_gold`
      counts each awaiting answer that still finds a free slot on its item (in submission order; one
      that finds none stays stored and uncounted, like a late answer). A worker blocked by the gold
      thresholds never has awaiting answers counted. When no normal item is left for a worker who
      has not passed yet, the gold checks they still need are served at once (so that their waiting
      answers can count). Campaigns that serve no gold (``gold_every == 0`` or no gold item) and
      campaigns of providers whose tasks we do not serve (MTurk workers choose their HITs) have no
      gate: the rule applies to :data:`SERVED_PROVIDERS` (local and Prolific).
    * In a participant session with a bundle of N tasks (:mod:`crowd.journey`), the gold checks a
      worker still needs are served once the tasks left in the bundle are no more than those
      checks (:func:`accept` with ``session``), so a completed bundle can count.
    """
    if campaign.provider not in SERVED_PROVIDERS or not campaign.gold_every or not campaign.gold_min_answers:
        return 0
    # a LIMIT-ed count: constant time whatever the number of gold items (task pages call this)
    return Item.objects.filter(campaign=campaign, is_gold=True)[:campaign.gold_min_answers].count()


def _graded_gold(campaign: Campaign, worker: Worker) -> int:
    return Assignment.objects.filter(
        campaign=campaign, worker=worker, item__is_gold=True, gold_correct__isnull=False).count()


def gold_checks_passed(campaign: Campaign, worker: Worker) -> bool:
    """Whether ``worker``'s judgments in ``campaign`` count: they are not blocked and have at least
    :func:`gold_checks_required` graded gold answers (always True when the campaign has no gate)."""
    required = gold_checks_required(campaign)
    if not required:
        return True
    return worker_state(campaign, worker) != WorkerStatus.BLOCKED and _graded_gold(campaign, worker) >= required


def gold_is_due(campaign: Campaign, worker: Worker) -> bool:
    """Whether ``worker``'s next task in ``campaign`` must be a gold check (the rule above)."""
    if not campaign.gold_every:
        return False
    if campaign.gold_every == 1:
        return True
    graded = _graded_gold(campaign, worker)
    normal = (Assignment.objects.filter(campaign=campaign, worker=worker, item__is_gold=False, verified=True)
              .exclude(state=Assignment.RETURNED).count())
    return graded <= normal // (campaign.gold_every - 1)


def _unseen_gold(campaign: Campaign, worker: Worker) -> Item | None:
    """The first gold item (by serving position) never given to ``worker``."""
    return (
        Item.objects.filter(campaign=campaign, is_gold=True)
        .exclude(Exists(Assignment.objects.filter(item=OuterRef("pk"), worker=worker)))
        .order_by("position").first()
    )


def _gold_due(campaign: Campaign, worker: Worker, *, qualify: bool = False) -> Item | None:
    """The gold item to serve ``worker`` now: one never given to them, when a check is due (or,
    with ``qualify``, when they have not passed the minimum gold checks yet: no normal item is left
    for them). None otherwise, or when none is left (see :func:`gold_withheld`)."""
    if qualify:
        if not gold_checks_required(campaign) or gold_checks_passed(campaign, worker):
            return None
    elif not gold_is_due(campaign, worker):
        return None
    return _unseen_gold(campaign, worker)


def gold_withheld(campaign: Campaign, worker: Worker) -> bool:
    """Whether ``worker`` gets no more tasks in ``campaign`` (a provider of :data:`SERVED_PROVIDERS`) because a gold check is due
    and every gold item was given to them, some returned or left to expire unanswered (answering
    them was the only way on: a returned gold item is replaced by an unseen one, never skipped)."""
    if campaign.provider not in SERVED_PROVIDERS or not gold_is_due(campaign, worker):
        return False
    if _unseen_gold(campaign, worker) is not None:
        return False
    return Assignment.objects.filter(
        campaign=campaign, worker=worker, item__is_gold=True,
        state__in=(Assignment.RETURNED, Assignment.EXPIRED), gold_correct__isnull=True,
    ).exists()


def count_awaiting_gold(campaign: Campaign, worker: Worker) -> int:
    """Count ``worker``'s answers that wait for the gold checks (``awaiting_gold``), now that they
    have passed them (:func:`gold_checks_passed`; otherwise nothing happens). Each answer, in
    submission order, in its own transaction under its row lock (so each is counted at most once,
    whoever calls this at the same time) and its item's row lock (so an item never gets more than k
    counted judgments), takes a free slot and is recorded by the campaign's kind; one that finds
    no free slot stays stored, uncounted. The worker's standing is read under its row lock, so a
    block that lands at the same time either comes first (nothing counted) or releases what was
    counted. Nothing is counted in a finished campaign. Called after every submission that may
    change the outcome; idempotent. Returns the number of answers counted."""
    if campaign.state == Campaign.FINISHED or not gold_checks_passed(campaign, worker):
        return 0
    spec = get_kind(campaign.kind)
    counted = 0
    pks = list(Assignment.objects.filter(campaign=campaign, worker=worker, awaiting_gold=True)
               .order_by("submitted_at", "pk").values_list("pk", flat=True))
    for pk in pks:
        with transaction.atomic():
            standing = (WorkerStatus.objects.select_for_update().filter(campaign=campaign, worker=worker)
                        .values_list("state", flat=True).first())
            if standing == WorkerStatus.BLOCKED:
                break
            a = (Assignment.objects.select_for_update(of=("self",)).select_related("item")
                 .filter(pk=pk, awaiting_gold=True).first())
            if a is None:  # counted by a concurrent call
                continue
            Item.objects.select_for_update().get(pk=a.item_id)
            held = set(Assignment.objects.filter(item_id=a.item_id, slot__isnull=False).values_list("slot", flat=True))
            free = [s for s in range(campaign.judgments_per_item) if s not in held]
            a.awaiting_gold = False
            if free:
                a.slot, a.counted = free[0], True
                _took_slot(a.item_id, free)
            a.save(update_fields=["awaiting_gold", "slot", "counted"])
            if free:
                spec.record(a, a.answer)
                counted += 1
    return counted


def preview(campaign: Campaign, worker: Worker) -> Item | None:
    """The item ``accept`` would most likely give ``worker`` now (nothing is claimed)."""
    if unavailable_reason(campaign, worker):
        return None
    return (_gold_due(campaign, worker) or _open_items(campaign, worker).first()
            or _gold_due(campaign, worker, qualify=True))


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


def _new_assignment(campaign, item, worker, slot, now, *, order=None, provider_ref="", verified=True,
                    session=None, source="") -> Assignment:
    spec = get_kind(campaign.kind)
    seed = secrets.randbits(62)
    return Assignment.objects.create(
        campaign=campaign, item=item, worker=worker, slot=slot, state=ACTIVE, accepted_at=now,
        deadline=now + timedelta(seconds=campaign.assignment_seconds), seed=seed,
        order=spec.presentation_order(item.payload, random.Random(seed)) if order is None else order,
        template_version=campaign.template_version, provider_ref=provider_ref, verified=verified,
        session=session, claim_source=source if not verified else "",
    )


def accept_item(
    campaign: Campaign, worker: Worker, item: Item, *, provider_ref: str, order: dict | None = None,
    accepted_at=None, enforce: bool = True, verified: bool = True, source: str = "",
) -> Assignment:
    """Open an assignment of a *given* item for a provider's assignment ``provider_ref`` (e.g. an
    MTurk AssignmentId: MTurk, not we, chose the item and the worker). Idempotent: the same
    ``provider_ref`` (and, for a claim, the same claimed worker) returns the existing assignment.

    ``verified=False`` records a *claim*: the identity came from URL parameters anyone can type.
    A claim holds no slot, never counts, is never graded as gold and never evicts anyone; it becomes
    verified only when the provider confirms it (:func:`confirm_claim`). One ``provider_ref`` is one
    pending claim: while it waits, the same id claimed by another worker or for another item raises
    Conflict ``claimed`` (a database constraint backs this); ``source`` is stored with a claim (the
    keyed hash of the client address, :func:`crowd.providers.claims.source_of`). ``verified=True`` (the provider's
    own records, e.g. the MTurk collector) takes a free slot if there is one; if there is none the
    assignment is stored without a slot (its submission then counts only if a slot is free) --
    nobody is ever evicted: the provider itself limits how many workers hold its task.
    ``enforce`` applies the campaign's availability rules (state, block, cap) and raises NoTask;
    the collector passes False because work already done on MTurk must be recorded whatever happens.
    Raises Conflict when the worker already has another verified assignment of this item, or
    ``provider_ref`` is verified as another worker's or item's.
    """
    mine = Assignment.objects.filter(campaign=campaign, provider_ref=provider_ref, worker=worker)
    existing = (mine if not verified else mine.filter(verified=True)).select_related("item").first()
    if existing is None and verified:
        existing = Assignment.objects.filter(campaign=campaign, provider_ref=provider_ref, verified=True).first()
    if existing:
        if existing.worker_id != worker.pk or existing.item_id != item.pk:
            raise Conflict(f"assignment {provider_ref} belongs to another worker or item", "foreign")
        return existing
    if not verified and Assignment.objects.filter(campaign=campaign, provider_ref=provider_ref, verified=True).exists():
        raise Conflict(f"assignment {provider_ref} belongs to another worker or item", "foreign")
    if not verified and pending_claims(campaign).filter(provider_ref=provider_ref).exists():
        raise Conflict(f"assignment {provider_ref} is already claimed by another worker or for another item", "claimed")
    if enforce:
        reason = unavailable_reason(campaign, worker)
        if reason:
            raise NoTask(REASONS[reason], reason)
    now = accepted_at or timezone.now()
    try:
        with transaction.atomic():
            if not verified:
                if Assignment.objects.filter(item=item, worker=worker, verified=True).exists():
                    raise Conflict("this worker has already done this item (in another HIT or batch)", "duplicate")
                return _new_assignment(campaign, item, worker, None, now, order=order, provider_ref=provider_ref,
                                       verified=False, source=source)
            Item.objects.select_for_update().get(pk=item.pk)
            if Assignment.objects.filter(item=item, worker=worker, verified=True).exists():
                raise Conflict("this worker has already done this item (in another HIT or batch)", "duplicate")
            slot = None
            if not item.is_gold:
                held = set(Assignment.objects.filter(item=item, slot__isnull=False).values_list("slot", flat=True))
                free = [s for s in range(campaign.judgments_per_item) if s not in held]
                if free:
                    slot = free[0]
                    _took_slot(item.pk, free)
            return _new_assignment(campaign, item, worker, slot, now, order=order, provider_ref=provider_ref)
    except IntegrityError:
        existing = mine.first() if not verified else (
            Assignment.objects.filter(campaign=campaign, provider_ref=provider_ref, verified=True).first())
        if existing:
            return existing
        if not verified and pending_claims(campaign).filter(provider_ref=provider_ref).exists():
            raise Conflict(f"assignment {provider_ref} is already claimed by another worker or for another item",
                           "claimed") from None
        raise Conflict("the task could not be claimed; please try again", "retry") from None


def _bundle_needs_gold(campaign: Campaign, worker: Worker, session) -> bool:
    """Whether the tasks left in ``session``'s bundle are no more than the gold checks ``worker``
    still needs (:func:`gold_checks_required`): then the next task must be one of them."""
    if session is None or not session.tasks_target:
        return False
    need = gold_checks_required(campaign) - _graded_gold(campaign, worker)
    return need > 0 and session.tasks_target - session.tasks_done <= need


def accept(campaign: Campaign, worker: Worker, *, session=None) -> Assignment:
    """Give ``worker`` a task: their unfinished one if they have it, else a gold check when one is
    due (an unseen gold item: see the rule in :func:`gold_checks_required`), else the first open
    item (by serving position) they have not done, else (a worker who has not passed the minimum
    gold checks and has no normal item left) an unseen gold item. Raises NoTask (with the reason)
    when there is none.

    ``session`` (a :class:`crowd.models.ParticipantSession`, :mod:`crowd.journey`): a new
    assignment is stored with it; with a bundle (``session.tasks_target``), the gold checks the
    worker still needs are served first once the tasks left in the bundle are no more than those
    checks, so the bundle's judgments can count."""
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
            if gold is None and _bundle_needs_gold(campaign, worker, session):
                gold = _gold_due(campaign, worker, qualify=True)
            if gold is not None:
                return _new_assignment(campaign, gold, worker, None, now, session=session)
            skipped = []
            for _ in range(20):
                item = (
                    _open_items(campaign, worker).exclude(pk__in=skipped)
                    .select_for_update(skip_locked=True, of=("self",)).first()
                )
                if item is None:
                    break
                # .order_by(): no join to the campaign for Assignment's default ordering, under the lock
                held = set(Assignment.objects.filter(item=item, slot__isnull=False).order_by()
                           .values_list("slot", flat=True))
                free = [s for s in range(campaign.judgments_per_item) if s not in held]
                if free:
                    _took_slot(item.pk, free)
                    return _new_assignment(campaign, item, worker, free[0], now, session=session)
                skipped.append(item.pk)  # filled since our snapshot: look further
            gold = _gold_due(campaign, worker, qualify=True)  # nothing else: the checks they still need
            if gold is not None:
                return _new_assignment(campaign, gold, worker, None, now, session=session)
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


def _locked_assignment(assignment_id, worker: Worker, scope: Q | None = None) -> Assignment:
    """``worker``'s assignment ``assignment_id`` with its item and campaign, its row locked
    (``SELECT ... FOR UPDATE``; call inside ``transaction.atomic``), in one statement. ``scope``
    narrows the lookup (e.g. the campaign named in the URL, the campaigns the worker rates, a
    participant session): a row outside it is "no such assignment", so a view needs no lookup of
    its own before this one. Raises EngineError ``unknown`` (no such row, a malformed id, outside
    ``scope``) or Forbidden ``forbidden`` (another worker's)."""
    qs = Assignment.objects.select_for_update(of=("self",)).select_related("item", "campaign")
    if scope is not None:
        qs = qs.filter(scope)
    try:
        a = qs.get(pk=assignment_id)
    except (Assignment.DoesNotExist, ValueError, TypeError):
        raise EngineError("no such assignment", "unknown") from None
    if a.worker_id != worker.pk:
        raise Forbidden("this assignment belongs to another worker", "forbidden")
    a.worker = worker  # the same row (checked above): no second query for it
    return a


def submit(
    assignment_id, worker: Worker, data, *, submit_key: str = "", item_id=None, submitted_at=None,
    scope: Q | None = None,
) -> SubmitResult:
    """Record ``worker``'s answer (form ``data``) to their assignment.

    Raises: EngineError (unknown assignment, forged item id, answer invalid -> AnswerError via
    ``errors``), Forbidden (another worker's assignment), Conflict (returned, rejected, or already
    submitted with a different key, campaign finished). A repeat of a submission (same key, or the
    same answer) returns the stored result with ``created=False``. ``submitted_at`` records when a
    provider says the work was submitted (results collected later); default now. In a local
    campaign with gold, a worker's answers before they pass the minimum gold checks are stored with
    ``awaiting_gold`` and counted later (see the rule in :func:`gold_checks_required`).
    ``scope`` (a Q over Assignment, optional) narrows the one locked lookup of the assignment
    (:func:`_locked_assignment`): views pass what their URL names (the campaign, the worker's
    campaigns, the participant session) instead of looking the assignment up first; a row outside
    it raises EngineError ``unknown``, nothing changed.
    """
    spec = None
    now = submitted_at or timezone.now()
    submit_key = _text(submit_key)[:64]
    with transaction.atomic():
        a = _locked_assignment(assignment_id, worker, scope)
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
        if a.item.is_gold or not a.verified:  # a claim counts only once confirmed (confirm_claim)
            counted = False
        elif worker_state(a.campaign, worker) == WorkerStatus.BLOCKED:
            if a.slot is not None:
                _reopen([a.item_id])
            counted, a.slot = False, None  # kept for the record, never counted
        elif not gold_checks_passed(a.campaign, worker):  # stored; counted once they pass (count_awaiting_gold)
            if a.slot is not None:
                _reopen([a.item_id])
            counted, a.slot, a.awaiting_gold = False, None, True
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
        if not a.verified:  # a claim with an answer: ask the provider about it first (crowd.engine.due_claims)
            a.claim_next_check = None
        if a.item.is_gold and a.verified:  # a claim's gold answer is graded once confirmed
            a.gold_correct = spec.check_gold(answer, a.item.gold)
        a.save()
        if counted:
            spec.record(a, answer)
        if a.verified:  # gold thresholds and speed checks (crowd.quality)
            update_worker_status(a.campaign, worker)
    newly = 0
    if a.awaiting_gold or a.gold_correct is not None:  # after the commit: see count_awaiting_gold
        newly = count_awaiting_gold(a.campaign, worker)
    # The campaign can have become complete only if this item now has its k counted judgments (or
    # waiting answers were counted just now): one indexed count of the item's, read after the commit
    # (so of two last submissions the later one sees both), instead of is_complete's campaign-wide
    # counts on every submission. finish_if_complete closes local campaigns only: others skip both.
    if newly or counted and a.campaign.provider == Campaign.LOCAL and (
            Assignment.objects.filter(item_id=a.item_id, counted=True).count() >= a.campaign.judgments_per_item):
        finish_if_complete(a.campaign)
    return SubmitResult(a, True, late, counted)


def return_assignment(assignment_id, worker: Worker, reason: str = "") -> Assignment:
    """Give an accepted task back (with an optional reason); its slot returns to the pool. The
    worker will not be offered the same item again (a gold check stays due, though: another gold
    item is served instead, see :func:`gold_checks_required`)."""
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


# --- claims (identities from URL parameters) -------------------------------------------------------
def confirm_claim(assignment_id, *, at=None) -> Assignment:
    """The provider's own records confirm the claim ``assignment_id`` (see :func:`accept_item`):
    it becomes verified, and what it would have done had it been verified from the start happens
    now, under the item's row lock: a submitted answer takes a free slot (if one is left, else it
    stays stored and uncounted, like late work) and is recorded -- or waits for the worker's gold
    checks (:func:`gold_checks_passed`, ``awaiting_gold``); a gold answer is graded, the worker's
    standing updated (:func:`update_worker_status`) and their waiting answers counted if they now
    pass (:func:`count_awaiting_gold`). A verified assignment is returned
    unchanged. Raises Conflict (nothing changed) when the worker already has a verified
    assignment of the item or the provider id is verified as someone else's."""
    now = at or timezone.now()
    with transaction.atomic():
        a = (Assignment.objects.select_for_update(of=("self",)).select_related("item", "campaign", "worker")
             .get(pk=assignment_id))
        if a.verified:
            return a
        Item.objects.select_for_update().get(pk=a.item_id)
        if Assignment.objects.filter(item_id=a.item_id, worker_id=a.worker_id, verified=True).exists():
            raise Conflict("this worker has already done this item (in another HIT or batch)", "duplicate")
        if a.provider_ref and Assignment.objects.filter(
                campaign_id=a.campaign_id, provider_ref=a.provider_ref, verified=True).exists():
            raise Conflict(f"assignment {a.provider_ref} belongs to another worker or item", "foreign")
        a.verified, a.verified_at, a.claim_released_at = True, now, None
        spec = get_kind(a.campaign.kind)
        graded = False
        if a.state in Assignment.DONE_STATES and a.answer is not None:
            if a.item.is_gold:
                a.gold_correct, graded = spec.check_gold(a.answer, a.item.gold), True
            elif worker_state(a.campaign, a.worker) == WorkerStatus.BLOCKED:
                pass  # kept for the record, never counted
            elif not gold_checks_passed(a.campaign, a.worker):  # the gold gate, as in submit()
                a.awaiting_gold = True
            else:
                held = set(Assignment.objects.filter(item_id=a.item_id, slot__isnull=False).values_list("slot", flat=True))
                free = [s for s in range(a.campaign.judgments_per_item) if s not in held]
                if free:
                    _took_slot(a.item_id, free)
                    a.slot, a.counted = free[0], True
        elif a.state == ACTIVE and not a.item.is_gold:
            held = set(Assignment.objects.filter(item_id=a.item_id, slot__isnull=False).values_list("slot", flat=True))
            free = [s for s in range(a.campaign.judgments_per_item) if s not in held]
            if free:
                _took_slot(a.item_id, free)
                a.slot = free[0]
        a.save()
        if a.counted:
            spec.record(a, a.answer)
        if graded:
            update_worker_status(a.campaign, a.worker)
    if a.awaiting_gold or graded:  # after the commit, as in submit()
        count_awaiting_gold(a.campaign, a.worker)
    return a


def claim_grace_seconds() -> int:
    """Seconds an unconfirmed claim waits after its deadline before it is released
    (``settings.PROVIDER_CLAIM_GRACE_SECONDS``, default 3600)."""
    from django.conf import settings

    return int(getattr(settings, "PROVIDER_CLAIM_GRACE_SECONDS", 3600))


def pending_claims(campaign: Campaign | None = None):
    """Claims still waiting for the provider's confirmation (not verified, not released)."""
    qs = Assignment.objects.filter(verified=False, claim_released_at__isnull=True)
    return qs.filter(campaign=campaign) if campaign is not None else qs


def due_claims(claims, *, now=None):
    """Of ``claims`` (a queryset of assignments), the pending ones due to be asked about now
    (``claim_next_check`` empty or past), in the order to ask: claims with an answer first (their
    confirmation is what a worker waits for), then the ones never asked, then the longest due."""
    now = now or timezone.now()
    return (claims.filter(verified=False, claim_released_at__isnull=True)
            .filter(Q(claim_next_check__isnull=True) | Q(claim_next_check__lte=now))
            .annotate(_answered=Case(When(state__in=Assignment.DONE_STATES, then=Value(0)), default=Value(1),
                                     output_field=IntegerField()))
            .order_by("_answered", F("claim_next_check").asc(nulls_first=True), "pk"))


def ask_again(claim_ids, *, now=None, base_seconds: float | None = None) -> None:
    """The provider neither confirmed nor refused these claims (e.g. MTurk: the assignment exists
    but is not submitted yet): count the check and ask again after ``base_seconds`` (default
    ``settings.CLAIM_VERIFY_SECONDS``, 120) times 2 ** (checks so far), at most an hour later, so a
    claim pending for its whole deadline plus grace is asked about a handful of times."""
    from django.conf import settings

    now = now or timezone.now()
    base = float(getattr(settings, "CLAIM_VERIFY_SECONDS", 120) if base_seconds is None else base_seconds)
    for a in Assignment.objects.filter(pk__in=list(claim_ids)).only("pk", "claim_checks"):
        wait = min(base * 2 ** a.claim_checks, 3600.0)
        Assignment.objects.filter(pk=a.pk).update(claim_checks=a.claim_checks + 1,
                                                  claim_next_check=now + timedelta(seconds=wait))


def release_claims(claims, reason: str, *, now=None) -> int:
    """Stop waiting for the provider on the pending claims among ``claims`` (a queryset of
    assignments): each gets ``claim_released_at`` = ``now`` and ``reason`` as its
    ``return_reason``, and an accepted one expires (it held no slot: nothing else changes). Used when
    the provider refuses a claim (:mod:`crowd.mturk.collect`) and by :func:`release_unconfirmed`.
    The rows and answers stay; a later collection that finds the assignment in the provider's
    records still confirms it. Returns the number released."""
    now = now or timezone.now()
    claims = claims.filter(verified=False, claim_released_at__isnull=True)
    with transaction.atomic():
        claims.filter(state=ACTIVE).update(state=Assignment.EXPIRED, expired_at=now)
        return claims.update(claim_released_at=now, return_reason=_text(reason)[:1000])


def release_unconfirmed(campaign: Campaign | None = None, *, now=None, grace_seconds: int | None = None) -> int:
    """Release the claims the provider has not confirmed by their deadline (accepted_at + the
    assignment duration) plus ``grace_seconds`` (default :func:`claim_grace_seconds`): an accepted
    one expires, and every one stops waiting (``claim_released_at``), so it is no longer asked
    about. Claims hold no slot, so nothing else changes; the rows and answers stay, and a later
    collection that finds the assignment in the provider's records still confirms it. Returns the
    number released."""
    now = now or timezone.now()
    grace = claim_grace_seconds() if grace_seconds is None else grace_seconds
    due = pending_claims(campaign).filter(deadline__lte=now - timedelta(seconds=grace))
    return release_claims(due, "claim never confirmed by the provider", now=now)


def update_worker_status(campaign: Campaign, worker: Worker) -> str:
    """Apply the campaign's quality checks to ``worker`` (see :mod:`crowd.quality`): the gold
    thresholds (:func:`crowd.quality.gold_verdict`) and the speed check
    (:func:`crowd.quality.speed_check`); returns the new state (ok, warned, blocked), the worse of
    the two. The policy is ok -> warned -> blocked: a failed speed check blocks only a worker who
    was warned already (otherwise it warns), so a rater always sees a warning before a speed block;
    a gold accuracy under ``gold_block_below`` blocks at once, as before. A block is final (an owner
    may lift it) and releases the worker's counted work (:func:`release_counted_work`). Called after
    each verified submission (:func:`submit`) and each confirmed gold answer."""
    with transaction.atomic():
        status, _ = WorkerStatus.objects.select_for_update().get_or_create(
            campaign=campaign, worker=worker, defaults={"state": WorkerStatus.OK})
        if status.state == WorkerStatus.BLOCKED:
            return status.state
        gold, gold_reason = gold_verdict(campaign, worker)
        speed = speed_check(campaign, worker)
        fast = speed["verdict"]
        if fast == "block" and status.state != WorkerStatus.WARNED:
            fast = "warn"  # warned first, blocked on the next failed check
        if gold == "block" or fast == "block":
            state = WorkerStatus.BLOCKED
            reason = gold_reason if gold == "block" else speed_reason(speed)
        elif gold == "warn" or fast == "warn":
            state = WorkerStatus.WARNED
            reason = "; ".join(r for r in (gold_reason if gold == "warn" else "",
                                           speed_reason(speed) if fast == "warn" else "") if r)
        else:
            state, reason = WorkerStatus.OK, ""
        if (state, reason) != (status.state, status.reason):
            status.state, status.reason = state, reason
            status.save()
        if state == WorkerStatus.BLOCKED:
            release_counted_work(campaign, worker)
    return state


def release_counted_work(campaign: Campaign, worker: Worker) -> int:
    """Take a (blocked) worker's counted judgments out of the campaign: their assignments keep their
    answers but stop counting and free their slots, and the campaign's kind removes what it recorded
    from them (:meth:`crowd.kinds.base.TaskKind.release`: judgment rows, collected captions), so the
    items are offered to other workers again. Returns the number of assignments released."""
    with transaction.atomic():
        qs = Assignment.objects.select_for_update().filter(campaign=campaign, worker=worker, counted=True)
        ids = list(qs.values_list("pk", flat=True))
        get_kind(campaign.kind).release(campaign, worker, ids)
        _reopen(qs.filter(slot__isnull=False).values_list("item_id", flat=True))
        Assignment.objects.filter(pk__in=ids).update(counted=False, slot=None)
    return len(ids)


class _RolledBack(Exception):
    """Raised to roll a savepoint back on purpose (see :func:`release_assignments`)."""


def _judgment_rows(campaign: Campaign, worker: Worker) -> dict:
    """``worker``'s rows of the judgment tables of ``campaign``: {model: [row, ...]}."""
    from .models import HumanJudgment, PairwiseJudgment

    return {m: list(m.objects.filter(campaign=campaign, rater=worker.rater_id).order_by("pk"))
            for m in (HumanJudgment, PairwiseJudgment)}


def _row_key(row) -> tuple:
    """What a judgment row says (every column but its id and creation time)."""
    return tuple(getattr(row, f.attname) for f in row._meta.concrete_fields if f.attname not in ("id", "created_at"))


def release_assignments(campaign: Campaign, worker: Worker, assignment_ids) -> int:
    """Like :func:`release_counted_work`, for some of ``worker``'s assignments only (e.g. the work
    of one participant session that the provider rejected, :func:`crowd.journey.release_session`):
    those of ``assignment_ids`` that are counted stop counting and free their slots, the campaign's
    kind removes what it recorded from them, and the worker's other counted work stays recorded.
    Ids of other workers or campaigns, or not counted, are ignored; answers waiting for the gold
    checks among them (``awaiting_gold``) stop waiting (released work is never counted later).
    One transaction under the assignments' row locks; idempotent. Returns how many counted
    assignments were released.

    A kind's :meth:`~crowd.kinds.base.TaskKind.release` removes all the worker's rows of the
    judgment tables (``HumanJudgment``, ``PairwiseJudgment``: they name no assignment) plus what it
    recorded elsewhere for the given assignments only (e.g. collected captions). So the rows of the
    worker's other counted assignments are put back, unchanged (same ids and times): the rows the
    released assignments wrote are found by recording them again inside a savepoint that is rolled
    back, and every other row the worker had is restored."""
    wanted = set()
    for i in assignment_ids:
        try:
            wanted.add(int(i))
        except (TypeError, ValueError):
            continue
    if not wanted:
        return 0
    with transaction.atomic():
        mine = list(Assignment.objects.select_for_update(of=("self",)).select_related("item", "campaign", "worker")
                    .filter(campaign=campaign, worker=worker).filter(Q(counted=True) | Q(pk__in=wanted))
                    .order_by("pk"))
        Assignment.objects.filter(pk__in=[a.pk for a in mine if a.pk in wanted and a.awaiting_gold]).update(
            awaiting_gold=False)
        released = [a for a in mine if a.counted and a.pk in wanted]
        if not released:
            return 0
        others = [a for a in mine if a.counted and a.pk not in wanted]
        spec = get_kind(campaign.kind)
        before = _judgment_rows(campaign, worker) if others else {}
        ids = [a.pk for a in released]
        spec.release(campaign, worker, ids)
        if others:
            theirs = {}
            try:
                with transaction.atomic():  # what the released assignments wrote: record them again, roll back
                    for model in before:
                        model.objects.filter(campaign=campaign, rater=worker.rater_id).delete()
                    for a in released:
                        spec.record(a, a.answer)
                    theirs = {m: Counter(_row_key(r) for r in rows) for m, rows in _judgment_rows(campaign, worker).items()}
                    raise _RolledBack
            except _RolledBack:
                pass
            for model, rows in before.items():
                present = set(model.objects.filter(pk__in=[r.pk for r in rows]).values_list("pk", flat=True))
                drop = theirs.get(model, Counter())
                restore = []
                for row in rows:
                    key = _row_key(row)
                    if drop[key] > 0:
                        drop[key] -= 1
                    elif row.pk not in present:
                        restore.append(row)
                if restore:
                    created = {r.pk: r.created_at for r in restore}
                    model.objects.bulk_create(restore)
                    for pk, at in created.items():  # auto_now_add stamped them anew
                        model.objects.filter(pk=pk).update(created_at=at)
        _reopen([a.item_id for a in released if a.slot is not None])
        Assignment.objects.filter(pk__in=ids).update(counted=False, slot=None)
    return len(ids)


def is_complete(campaign: Campaign) -> bool:
    """Whether every (non-gold) item of ``campaign`` has its k counted judgments. One count: an item
    never has more than k counted judgments (its k slots), so the campaign is complete exactly when
    the counted non-gold assignments number items x k. A campaign without items is not complete."""
    n_items = Item.objects.filter(campaign=campaign, is_gold=False).count()
    if not n_items:
        return False
    counted = Assignment.objects.filter(campaign=campaign, counted=True, item__is_gold=False).count()
    return counted >= n_items * campaign.judgments_per_item


def finish_if_complete(campaign: Campaign) -> bool:
    """Close a live local campaign whose every item is complete (:func:`is_complete`): its state
    becomes ``finished`` (under the campaign's row lock, so two last submissions finish it once) and
    an :class:`crowd.models.AuditEntry` ``auto-finish`` by ``system`` records it. Called by
    :func:`submit` after a submission that counted. MTurk campaigns are left alone: work already
    done on MTurk must still be collected (a finished campaign refuses submissions). Returns
    whether the campaign was finished now."""
    from .models import AuditEntry

    if campaign.provider != Campaign.LOCAL or not is_complete(campaign):
        return False
    with transaction.atomic():
        current = Campaign.objects.select_for_update().get(pk=campaign.pk)
        if current.state != Campaign.LIVE:
            return False
        current.state = Campaign.FINISHED
        current.save(update_fields=["state"])
        n = Item.objects.filter(campaign=current, is_gold=False).count()
        AuditEntry.objects.create(campaign=current, actor="system", action="auto-finish",
                                  reason=f"every item is complete ({n} items x k = {current.judgments_per_item})",
                                  detail={"items": n, "k": current.judgments_per_item})
    campaign.state = Campaign.FINISHED
    return True


def count_stored_work(campaign: Campaign, worker: Worker) -> int:
    """An owner's override: count ``worker``'s stored, uncounted answers in ``campaign`` (submitted
    or approved, verified, non-gold; e.g. released by a block or an owner's uncount), each in its own
    transaction under its row lock and its item's row lock, where the item still has a free slot (in
    submission order; an answer finding none stays stored and uncounted, like a late one). The
    campaign's kind records each counted answer. The gold gate is not applied (the owner decided);
    a blocked worker's answers are not counted (unblock first). Returns the number counted."""
    if worker_state(campaign, worker) == WorkerStatus.BLOCKED:
        raise Conflict("this worker is blocked: unblock them before counting their answers", "blocked")
    spec = get_kind(campaign.kind)
    pks = list(Assignment.objects.filter(
        campaign=campaign, worker=worker, verified=True, counted=False, item__is_gold=False,
        state__in=(Assignment.SUBMITTED, Assignment.APPROVED), answer__isnull=False,
    ).order_by("submitted_at", "pk").values_list("pk", flat=True))
    counted = 0
    for pk in pks:
        with transaction.atomic():
            a = (Assignment.objects.select_for_update(of=("self",)).select_related("item")
                 .filter(pk=pk, counted=False).first())
            if a is None:
                continue
            Item.objects.select_for_update().get(pk=a.item_id)
            held = set(Assignment.objects.filter(item_id=a.item_id, slot__isnull=False).values_list("slot", flat=True))
            free = [s for s in range(campaign.judgments_per_item) if s not in held]
            if not free:
                continue
            a.slot, a.counted, a.awaiting_gold = free[0], True, False
            _took_slot(a.item_id, free)
            a.save(update_fields=["slot", "counted", "awaiting_gold"])
            spec.record(a, a.answer)
            counted += 1
    return counted


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


def rater_counts(campaign: Campaign) -> list[dict]:
    """Where each rater of ``campaign`` stands now, for the owners' console (the campaign page and
    ``status.json``, polled while the page is open): one dict per worker with a verified assignment,
    by rater id: ``worker`` (rater id), ``worker_pk``, ``label``, ``accepted`` (tasks held now),
    ``submitted`` (answers given, gold checks included), ``gold_graded`` (graded gold answers),
    ``awaiting_gold`` (answers stored but not counted until the rater has passed the campaign's
    minimum gold checks, :func:`gold_checks_required`), ``gold_needed`` (checks still missing
    before those count; 0 once passed), ``counted`` (judgments counted), ``status``
    (``ok``/``warned``/``blocked``) and ``reason`` (why warned or blocked; for a rater whose answers
    wait, what they wait for). Three queries whatever the campaign's size: one grouped count per
    worker, the standings, and the number of gold items (:func:`gold_checks_required`). A blocked
    rater's waiting answers never count (:func:`count_awaiting_gold`): :func:`awaiting_total`
    leaves them out."""
    required = gold_checks_required(campaign)
    done = Q(assignments__state__in=Assignment.DONE_STATES)
    mine = Q(assignments__campaign=campaign, assignments__verified=True)
    rows = (Worker.objects.filter(mine).distinct().order_by("provider", "external_id")
            .annotate(n_accepted=Count("assignments", filter=mine & Q(assignments__state=Assignment.ACCEPTED)),
                      n_submitted=Count("assignments", filter=mine & done),
                      n_graded=Count("assignments", filter=mine & Q(assignments__gold_correct__isnull=False)),
                      n_awaiting=Count("assignments", filter=mine & Q(assignments__awaiting_gold=True)),
                      n_counted=Count("assignments", filter=mine & Q(assignments__counted=True)))
            .values("pk", "provider", "external_id", "label", "n_accepted", "n_submitted", "n_graded", "n_awaiting",
                    "n_counted"))
    standing = {w: (s, r) for w, s, r in
                WorkerStatus.objects.filter(campaign=campaign).values_list("worker_id", "state", "reason")}
    out = []
    for r in rows:
        status, reason = standing.get(r["pk"], (WorkerStatus.OK, ""))
        needed = max(0, required - r["n_graded"]) if required else 0
        if r["n_awaiting"] and status != WorkerStatus.BLOCKED and not reason:
            one = r["n_awaiting"] == 1
            reason = (f"{r['n_awaiting']} answer{'' if one else 's'} wait{'s' if one else ''} for {needed} more gold "
                      f"check{'s' if needed != 1 else ''} ({r['n_graded']} of {required} passed) before "
                      f"{'it counts' if one else 'they count'}")
        out.append({
            "worker": f"{r['provider']}:{r['external_id']}", "worker_pk": r["pk"], "label": r["label"],
            "accepted": r["n_accepted"], "submitted": r["n_submitted"], "gold_graded": r["n_graded"],
            "awaiting_gold": r["n_awaiting"], "gold_needed": needed, "counted": r["n_counted"],
            "status": status, "reason": reason,
        })
    return out


def awaiting_total(raters: list[dict]) -> int:
    """The answers of :func:`rater_counts` rows that wait for gold checks and may still count (their
    rater is not blocked)."""
    return sum(r["awaiting_gold"] for r in raters if r["status"] != WorkerStatus.BLOCKED)
