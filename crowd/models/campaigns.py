"""Rating campaigns: what is asked (kind, items), of whom (workers) and every attempt (assignments).

Invariants the database itself enforces (the assignment engine, :mod:`crowd.engine`, relies on them):

* one assignment per (item, worker): no worker ever judges an item twice, even after returning it
  (among *verified* assignments: unconfirmed claims, below, are all recorded);
* one *slot* per (item, slot number): an item has ``k`` slots (numbers ``0 .. k-1``); an active or a
  counted submitted assignment holds one, an expired or returned one releases it (its ``slot``
  becomes NULL); so an item never has more than ``k`` counted judgments;
* at most one active (accepted) assignment per worker and campaign in the local pool (an MTurk
  worker may hold several HITs at once; their assignments are unique by MTurk AssignmentId).

An assignment opened from a provider's URL parameters (an MTurk ``workerId`` / ``assignmentId``)
is a *claim* (``verified=False``) until the provider's own records confirm it: it holds no slot, is
never counted nor graded as gold, and so can neither fill an item nor get anyone blocked
(:func:`crowd.engine.confirm_claim`, :mod:`crowd.providers`).

Assignments are never deleted: their state records what happened (accepted, submitted, approved,
rejected, returned, expired). A submission that arrives after the deadline is kept and flagged
``late``; it counts only if its item still has a free slot.
"""
import secrets

from django.conf import settings
from django.db import models
from django.utils import timezone


def new_token() -> str:
    """A URL-safe secret of 22 characters (128 bits) for invitation links."""
    return secrets.token_urlsafe(16)


class Campaign(models.Model):
    """A rating campaign of one task kind over items built from a dataset.

    ``judgments_per_item`` is k (the number of distinct workers whose judgments count per item);
    ``per_worker_cap`` bounds how many items one worker may do (None: no cap);
    ``assignment_seconds`` is how long a worker holds an accepted item before it expires;
    ``expires_at`` ends the campaign's lifetime; ``reward`` is per assignment, in US dollars.
    """

    DRAFT, LIVE, PAUSED, FINISHED = "draft", "live", "paused", "finished"
    STATES = [(DRAFT, "draft"), (LIVE, "live"), (PAUSED, "paused"), (FINISHED, "finished")]
    LOCAL, MTURK, PROLIFIC = "local", "mturk", "prolific"
    PROVIDERS = [(LOCAL, "local rater pool"), (MTURK, "Amazon Mechanical Turk"), (PROLIFIC, "Prolific")]

    name = models.SlugField(max_length=100, unique=True)
    title = models.CharField(max_length=200)
    kind = models.CharField(max_length=30)
    dataset = models.ForeignKey("crowd.Dataset", on_delete=models.PROTECT, related_name="campaigns")
    owners = models.ManyToManyField(settings.AUTH_USER_MODEL, related_name="campaigns")
    instructions = models.TextField()
    judgments_per_item = models.PositiveSmallIntegerField(default=3)
    per_worker_cap = models.PositiveIntegerField(null=True, blank=True)
    assignment_seconds = models.PositiveIntegerField(default=600)
    expires_at = models.DateTimeField(null=True, blank=True)
    reward = models.DecimalField(max_digits=6, decimal_places=2, default=0)
    state = models.CharField(max_length=10, choices=STATES, default=DRAFT)
    provider = models.CharField(max_length=20, choices=PROVIDERS, default=LOCAL)
    template_version = models.CharField(max_length=20)
    options = models.JSONField(default=dict, blank=True, help_text="kind options used to build the items")
    gold_every = models.PositiveSmallIntegerField(
        default=10, help_text="a gold item is served as a worker's 1st task and then every n-th (0: never)"
    )
    gold_warn_below = models.FloatField(default=0.8, help_text="warn a worker whose gold accuracy is below")
    gold_block_below = models.FloatField(default=0.5, help_text="block a worker whose gold accuracy is below")
    gold_min_answers = models.PositiveSmallIntegerField(
        default=3, help_text="gold answers needed before the thresholds apply"
    )
    # the participant journey (crowd.journey): bundle, time budget, consent, practice, attention checks
    bundle_size = models.PositiveSmallIntegerField(
        default=0, help_text="tasks per participant session (0: no bundle, a rater takes tasks until none is left)")
    session_minutes = models.PositiveIntegerField(
        default=0, help_text="time budget of one participant session in minutes (0: none beyond each task's own)")
    consent_text = models.TextField(blank=True, help_text="consent shown before any task (empty: no consent page)")
    consent_version = models.PositiveIntegerField(default=1, help_text="raised whenever consent_text changes")
    practice_pass = models.FloatField(
        default=0.8, help_text="share of practice items (options['practice']) a participant must get right")
    attention_max_failures = models.PositiveSmallIntegerField(
        default=1, help_text="failed attention checks (gold items) a session tolerates; one more ends it")
    created_at = models.DateTimeField(auto_now_add=True)
    results_published_at = models.DateTimeField(
        null=True, blank=True,
        help_text="when an owner published the results (None: the campaign's data is on owner pages only)")

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(condition=models.Q(judgments_per_item__gte=1), name="campaign_k_positive"),
            models.CheckConstraint(condition=models.Q(assignment_seconds__gte=10), name="campaign_duration_min"),
        ]

    def __str__(self):
        return self.name

    @property
    def is_expired(self) -> bool:
        return self.expires_at is not None and self.expires_at <= timezone.now()


class Item(models.Model):
    """One unit of work: what a worker sees, frozen at creation as ``payload`` (texts included, so
    the record shows exactly what was rated). Gold items carry the expected answer in ``gold`` and
    are served to every worker once, outside the k slots."""

    campaign = models.ForeignKey(Campaign, on_delete=models.CASCADE, related_name="items")
    position = models.PositiveIntegerField(help_text="serving order (shuffled with the campaign seed)")
    key = models.CharField(max_length=100, help_text="stable id of the item within its campaign")
    payload = models.JSONField()
    is_gold = models.BooleanField(default=False)
    gold = models.JSONField(null=True, blank=True)
    full = models.BooleanField(
        default=False, help_text="all k slots are held (kept by crowd.engine; lets claims skip full items)")

    class Meta:
        ordering = ["campaign", "position"]
        constraints = [
            models.UniqueConstraint(fields=["campaign", "key"], name="item_unique_key"),
            models.UniqueConstraint(fields=["campaign", "position"], name="item_unique_position"),
        ]
        indexes = [
            models.Index(fields=["campaign", "is_gold", "position"]),
            models.Index(fields=["campaign", "position"], condition=models.Q(full=False, is_gold=False),
                         name="item_open_position"),
        ]

    def __str__(self):
        return f"{self.campaign.name}/{self.key}"


class Worker(models.Model):
    """A rater, identified per provider: a local account (``user``), an invitation link
    (``token``), or an external id such as an MTurk WorkerId."""

    provider = models.CharField(max_length=20, default=Campaign.LOCAL)
    external_id = models.CharField(max_length=100)
    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="worker"
    )
    token = models.CharField(max_length=32, unique=True, default=new_token)
    label = models.CharField(max_length=100, blank=True, help_text="who the invitation was for")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["provider", "external_id"], name="worker_unique_external_id"),
        ]

    def __str__(self):
        return f"{self.provider}:{self.external_id}"

    @property
    def rater_id(self) -> str:
        """The rater name written into judgments and exports."""
        return f"{self.provider}:{self.external_id}"


class WorkerStatus(models.Model):
    """A worker's standing in one campaign: ``warned`` or ``blocked`` by quality control (or by an
    owner), with the reason shown to owners; blocked workers are given no more tasks."""

    OK, WARNED, BLOCKED = "ok", "warned", "blocked"
    campaign = models.ForeignKey(Campaign, on_delete=models.CASCADE, related_name="worker_statuses")
    worker = models.ForeignKey(Worker, on_delete=models.CASCADE, related_name="statuses")
    state = models.CharField(max_length=10, choices=[(OK, "ok"), (WARNED, "warned"), (BLOCKED, "blocked")])
    reason = models.TextField(blank=True)
    practice_passed_at = models.DateTimeField(
        null=True, blank=True, help_text="when the worker passed the campaign's practice (remembered per campaign)")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["campaign", "worker"], name="worker_status_unique"),
        ]


class Assignment(models.Model):
    """One worker's attempt at one item (the MTurk sense of *assignment*)."""

    ACCEPTED, SUBMITTED, APPROVED, REJECTED, RETURNED, EXPIRED = (
        "accepted", "submitted", "approved", "rejected", "returned", "expired",
    )
    STATES = [(s, s) for s in (ACCEPTED, SUBMITTED, APPROVED, REJECTED, RETURNED, EXPIRED)]
    DONE_STATES = (SUBMITTED, APPROVED, REJECTED)

    campaign = models.ForeignKey(Campaign, on_delete=models.CASCADE, related_name="assignments")
    item = models.ForeignKey(Item, on_delete=models.CASCADE, related_name="assignments")
    worker = models.ForeignKey(Worker, on_delete=models.PROTECT, related_name="assignments")
    slot = models.SmallIntegerField(
        null=True, blank=True, help_text="slot held (0..k-1); NULL for gold, expired, returned or uncounted late work"
    )
    state = models.CharField(max_length=10, choices=STATES, default=ACCEPTED)
    accepted_at = models.DateTimeField(default=timezone.now)
    deadline = models.DateTimeField()
    submitted_at = models.DateTimeField(null=True, blank=True)
    expired_at = models.DateTimeField(null=True, blank=True)
    late = models.BooleanField(default=False, help_text="submitted after its deadline")
    counted = models.BooleanField(default=False, help_text="its judgment is one of the item's k")
    answer = models.JSONField(null=True, blank=True, help_text="validated answer, in item (not screen) order")
    submit_key = models.CharField(max_length=64, blank=True, help_text="idempotency key of the submission")
    work_seconds = models.FloatField(null=True, blank=True)
    gold_correct = models.BooleanField(null=True, blank=True)
    seed = models.BigIntegerField(help_text="seed of the presentation order")
    order = models.JSONField(help_text="presentation order shown to the worker (kind-specific)")
    template_version = models.CharField(max_length=20)
    return_reason = models.TextField(blank=True)
    provider_ref = models.CharField(max_length=100, blank=True, help_text="e.g. the MTurk AssignmentId")
    provider_status = models.CharField(
        max_length=20, blank=True, help_text="the provider's own status, e.g. MTurk's Submitted/Approved/Rejected"
    )
    feedback = models.TextField(blank=True, help_text="feedback sent to the worker with an approval or rejection")
    verified = models.BooleanField(
        default=True, help_text="the worker's identity is confirmed (a local session, or the provider's own records); "
                                "False: a claim from URL parameters, stored but never counted or graded until confirmed")
    verified_at = models.DateTimeField(null=True, blank=True, help_text="when the provider confirmed a claim")
    claim_released_at = models.DateTimeField(
        null=True, blank=True, help_text="when an unconfirmed claim stopped waiting (assignment duration + grace "
                                         "passed, or the provider refused it)")
    claim_source = models.CharField(
        max_length=32, blank=True, help_text="for a claim: a keyed hash of the client address that opened it "
                                             "(crowd.providers.claims.source_of; the address itself is not stored)")
    claim_checks = models.PositiveSmallIntegerField(default=0, help_text="for a claim: how often the provider was asked")
    claim_next_check = models.DateTimeField(
        null=True, blank=True, help_text="for a pending claim: when to ask the provider again (empty: as soon as possible)")
    claim_known_at = models.DateTimeField(
        null=True, blank=True, help_text="for a claim: when the provider first said it knows this id (e.g. an MTurk "
                                         "assignment accepted but not submitted yet)")
    session = models.ForeignKey(
        "crowd.ParticipantSession", null=True, blank=True, on_delete=models.PROTECT, related_name="assignments",
        help_text="the participant session (bundle) this task was served in, if any")
    awaiting_gold = models.BooleanField(
        default=False, help_text="submitted before its worker passed the campaign's minimum gold checks: stored, "
                                 "holds no slot, counted once they pass (crowd.engine.count_awaiting_gold)")

    class Meta:
        ordering = ["campaign", "accepted_at"]
        constraints = [
            models.UniqueConstraint(fields=["item", "worker"], name="assignment_one_per_worker",
                                    condition=models.Q(verified=True)),
            models.UniqueConstraint(
                fields=["item", "slot"], name="assignment_one_per_slot", condition=models.Q(slot__isnull=False)
            ),
            models.UniqueConstraint(
                fields=["campaign", "worker"], name="assignment_one_active_per_worker",
                condition=models.Q(state="accepted", provider_ref=""),
            ),
            models.UniqueConstraint(
                fields=["campaign", "provider_ref"], name="assignment_unique_provider_ref",
                condition=~models.Q(provider_ref="") & models.Q(verified=True),
            ),
            models.UniqueConstraint(
                fields=["campaign", "provider_ref", "worker"], name="assignment_one_claim_per_ref",
                condition=~models.Q(provider_ref=""),
            ),
            models.UniqueConstraint(  # the same claimed id is one claim (crowd.providers.claims)
                fields=["campaign", "provider_ref"], name="assignment_one_pending_claim_per_ref",
                condition=~models.Q(provider_ref="") & models.Q(verified=False, claim_released_at__isnull=True),
            ),
            models.CheckConstraint(
                condition=models.Q(verified=True) | (models.Q(slot__isnull=True) & models.Q(counted=False)),
                name="claim_holds_no_slot_and_never_counts",
            ),
            models.CheckConstraint(condition=models.Q(slot__gte=0) | models.Q(slot__isnull=True), name="slot_nonnegative"),
            models.CheckConstraint(
                condition=~models.Q(state__in=["returned", "expired"]) | models.Q(slot__isnull=True),
                name="released_holds_no_slot",
            ),
        ]
        indexes = [
            models.Index(fields=["campaign", "state", "deadline"]),
            models.Index(fields=["campaign", "worker", "state"]),
            models.Index(fields=["campaign", "deadline"], name="assignment_pending_claims",
                         condition=models.Q(verified=False, claim_released_at__isnull=True)),
            models.Index(fields=["campaign", "claim_next_check"], name="assignment_due_claims",
                         condition=models.Q(verified=False, claim_released_at__isnull=True)),
            models.Index(fields=["claim_source", "claim_released_at"], name="assignment_claims_by_source",
                         condition=models.Q(verified=False, claim_known_at__isnull=True)),
        ]

    def __str__(self):
        return f"assignment {self.pk} ({self.state})"

    @property
    def is_overdue(self) -> bool:
        return self.state == self.ACCEPTED and self.deadline <= timezone.now()


class CampaignRater(models.Model):
    """A local worker's membership of one campaign: the only campaigns whose rater pages (``/rate/``)
    list and serve the worker. Made by an invitation link bound to the campaign
    (:func:`crowd.engine.invite_workers`, ``invite_raters --campaign``, the owner's invitation
    links) or :func:`crowd.engine.add_raters`; a logged-in user's worker is a rater only where it
    was made one this way."""

    campaign = models.ForeignKey(Campaign, on_delete=models.CASCADE, related_name="raters")
    worker = models.ForeignKey(Worker, on_delete=models.CASCADE, related_name="memberships")
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(
        null=True, blank=True, help_text="when an owner revoked the membership (its invitation link): the worker "
                                         "no longer sees or does this campaign (crowd.audit.revoke_invitation)")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["campaign", "worker"], name="campaign_rater_unique"),
        ]

    def __str__(self):
        return f"{self.worker} rates {self.campaign}"


class AuditEntry(models.Model):
    """One owner action (or automatic one) on a campaign, kept for the record: who (``user``, and
    ``actor``, their user name at the time, or ``"system"``), when (``at``), what (``action``), on
    whom (``target``, e.g. a worker's rater id) and why (``reason``); ``detail`` holds numbers such
    as the judgments released. Written by :mod:`crowd.audit`; never edited or deleted from the admin."""

    ACTIONS = [(a, a) for a in (
        "publish", "pause", "resume", "finish", "auto-finish", "invite", "revoke", "block", "unblock", "count",
        "uncount", "publish-results", "unpublish-results",
        # co-owners (crowd.owners): an owner invites a user name, the invitation is revoked, or its user answers
        "owner-invite", "owner-revoke", "owner-accept", "owner-decline",
        # the irreversible actions of the provider pages (crowd.audit.PROVIDER_ACTIONS)
        "prolific-publish", "prolific-stop", "prolific-add-places", "prolific-approve", "prolific-review",
        "prolific-reject", "prolific-pay", "mturk-publish", "mturk-review", "mturk-send-bonuses", "mturk-block",
        "mturk-notify", "mturk-expire",
    )]
    campaign = models.ForeignKey(Campaign, on_delete=models.CASCADE, related_name="audit_entries")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                             related_name="+")
    actor = models.CharField(max_length=150, help_text="the user name at the time, or 'system'")
    at = models.DateTimeField(default=timezone.now)
    action = models.CharField(max_length=20, choices=ACTIONS)
    target = models.CharField(max_length=200, blank=True, help_text="e.g. the worker's rater id")
    reason = models.TextField(blank=True)
    detail = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-at", "-pk"]
        indexes = [models.Index(fields=["campaign", "at"])]

    def __str__(self):
        return f"{self.at:%Y-%m-%d %H:%M} {self.actor} {self.action} {self.target}".rstrip()

    @property
    def detail_text(self) -> str:
        """``detail`` as ``key value, key value`` for pages (a key such as ``items`` would shadow
        ``dict.items`` in a template)."""
        return ", ".join(f"{k} {v}" for k, v in (self.detail or {}).items())


class OwnerInvitation(models.Model):
    """An owner's invitation to another user to co-own ``campaign`` (:mod:`crowd.owners`).

    ``username`` is the name the owner typed, never looked up when the invitation is made, so that
    inviting answers the same whether or not an account of that name exists (user names cannot be
    probed). The user of that name, once logged in, sees it (the campaign list, the API) and
    accepts it (becoming an owner) or declines it, until ``expires_at``; an owner may revoke it
    before. ``state``: pending, accepted, declined, revoked or expired (``answered_at``: when it
    left pending). At most one pending invitation per campaign and user name."""

    PENDING, ACCEPTED, DECLINED, REVOKED, EXPIRED = "pending", "accepted", "declined", "revoked", "expired"
    STATES = [(s, s) for s in (PENDING, ACCEPTED, DECLINED, REVOKED, EXPIRED)]

    campaign = models.ForeignKey(Campaign, on_delete=models.CASCADE, related_name="owner_invitations")
    username = models.CharField(max_length=150, help_text="the invited user name, as the owner typed it")
    invited_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()
    state = models.CharField(max_length=10, choices=STATES, default=PENDING)
    answered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-pk"]
        constraints = [
            models.UniqueConstraint(fields=["campaign", "username"], condition=models.Q(state="pending"),
                                    name="owner_invitation_one_pending"),
        ]

    def __str__(self):
        return f"{self.username} invited to co-own {self.campaign} ({self.state})"

    @property
    def is_open(self) -> bool:
        """Pending and not expired: its user may still accept or decline it."""
        return self.state == self.PENDING and self.expires_at > timezone.now()
