"""Prolific: the study behind a campaign, its submissions, reviews, the bonus ledger, the call
log and received webhook events (:mod:`crowd.prolific`, docs/prolific.md).

The API token is read from the environment (``PROLIFIC_TOKEN``) and never stored here.
Amounts: ``reward`` is in minor units (pence / cents) as Prolific's study API takes it; bonus
amounts are in major units (pounds / dollars) as its bonus API takes them.
"""
from django.conf import settings
from django.db import models


class ProlificStudy(models.Model):
    """The Prolific study of one campaign (a draft until published). ``completion_codes`` maps an
    outcome of :class:`~crowd.models.ParticipantSession` (``completed``, ``failed_attention``,
    ``no_consent``, ``screened_out``) to its code; ``request`` is the body of the last create or
    update call, as sent."""

    campaign = models.OneToOneField("crowd.Campaign", on_delete=models.CASCADE, related_name="prolific_study")
    study_id = models.CharField(max_length=64, blank=True, help_text="Prolific's id (empty until created)")
    status = models.CharField(max_length=30, blank=True, help_text="Prolific's status: UNPUBLISHED, ACTIVE, ...")
    name = models.CharField(max_length=200)
    internal_name = models.CharField(max_length=200, blank=True)
    description = models.TextField()
    places = models.PositiveIntegerField()
    reward = models.PositiveIntegerField(help_text="per submission, minor units (pence/cents)")
    currency = models.CharField(max_length=3, default="GBP")
    estimated_minutes = models.PositiveIntegerField()
    max_minutes = models.PositiveIntegerField(null=True, blank=True)
    filters = models.JSONField(default=list, blank=True)
    device_compatibility = models.JSONField(default=list, blank=True, help_text='e.g. ["desktop", "tablet"]')
    completion_codes = models.JSONField(default=dict, blank=True)
    request = models.JSONField(default=dict, blank=True)
    cost = models.JSONField(default=dict, blank=True, help_text="the last cost calculator answer")
    created_at = models.DateTimeField(auto_now_add=True)
    published_at = models.DateTimeField(null=True, blank=True)
    published_by = models.CharField(max_length=150, blank=True)
    last_synced_at = models.DateTimeField(null=True, blank=True)

    def __str__(self):
        return f"Prolific study {self.study_id or '(draft)'} of {self.campaign}"


class ProlificSubmission(models.Model):
    """Prolific's record of one submission (= one participant session), as last synced (poll or
    webhook), and our review of it. ``session`` is our side (None: Prolific knows a submission we
    never saw, e.g. a participant who never reached us)."""

    study = models.ForeignKey(ProlificStudy, on_delete=models.CASCADE, related_name="submissions")
    submission_id = models.CharField(max_length=64, unique=True)
    participant_id = models.CharField(max_length=64)
    status = models.CharField(max_length=30)
    study_code = models.CharField(max_length=40, blank=True, help_text="the completion code Prolific recorded")
    started_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    session = models.ForeignKey("crowd.ParticipantSession", null=True, blank=True, on_delete=models.SET_NULL,
                                related_name="prolific_submissions")
    review_action = models.CharField(max_length=10, blank=True, help_text="APPROVE or REJECT, once sent")
    rejection_category = models.CharField(max_length=30, blank=True)
    review_message = models.TextField(blank=True)
    reviewed_at = models.DateTimeField(null=True, blank=True)
    reviewed_by = models.CharField(max_length=150, blank=True)
    released_at = models.DateTimeField(null=True, blank=True,
                                       help_text="when its work went back to the pool (RETURNED, TIMED-OUT, REJECTED)")
    raw = models.JSONField(default=dict, blank=True)
    synced_at = models.DateTimeField(auto_now=True)

    class Meta:
        indexes = [models.Index(fields=["study", "status"]), models.Index(fields=["study", "participant_id"])]

    def __str__(self):
        return f"submission {self.submission_id} ({self.status})"


class ProlificBonus(models.Model):
    """One bulk bonus in the ledger. Created on Prolific (``bonus_id``) and then paid; the pay
    call is not idempotent, so ``state`` records what we know: ``created`` (not paid),
    ``paying`` (pay call sent, outcome unknown: read Prolific's state before any retry), ``paid``,
    ``failed`` (Prolific says it was not paid). ``entries`` is [{"participant_id", "amount"}]
    with amounts as strings in major units."""

    CREATED, PAYING, PAID, FAILED = "created", "paying", "paid", "failed"
    study = models.ForeignKey(ProlificStudy, on_delete=models.CASCADE, related_name="bonuses")
    request_key = models.CharField(max_length=64, unique=True, help_text="our idempotency key for the creation")
    bonus_id = models.CharField(max_length=64, blank=True)
    entries = models.JSONField()
    total = models.DecimalField(max_digits=10, decimal_places=2)
    reason = models.TextField(blank=True)
    state = models.CharField(max_length=10, choices=[(s, s) for s in (CREATED, PAYING, PAID, FAILED)], default=CREATED)
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.CharField(max_length=150, blank=True)
    pay_sent_at = models.DateTimeField(null=True, blank=True)
    paid_at = models.DateTimeField(null=True, blank=True)
    detail = models.JSONField(default=dict, blank=True)

    def __str__(self):
        return f"bonus {self.bonus_id or self.request_key} ({self.state})"


class ProlificCall(models.Model):
    """One call to Prolific's API (or one that a dry run would have made), for the record."""

    campaign = models.ForeignKey("crowd.Campaign", null=True, blank=True, on_delete=models.CASCADE,
                                 related_name="prolific_calls")
    method = models.CharField(max_length=10)
    path = models.CharField(max_length=300)
    body = models.JSONField(null=True, blank=True)
    status = models.PositiveSmallIntegerField(null=True, blank=True, help_text="HTTP status (None: no answer)")
    ok = models.BooleanField(default=False)
    dry_run = models.BooleanField(default=False)
    error = models.TextField(blank=True)
    attempts = models.PositiveSmallIntegerField(default=1)
    at = models.DateTimeField(auto_now_add=True)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)

    class Meta:
        ordering = ["-at", "-pk"]


class ProlificEvent(models.Model):
    """A webhook delivery we accepted (signature checked); ``event_key`` (a hash of the signed
    timestamp and body) makes a redelivery a no-op."""

    event_key = models.CharField(max_length=64, unique=True)
    event_type = models.CharField(max_length=60)
    resource_id = models.CharField(max_length=64, blank=True)
    status = models.CharField(max_length=30, blank=True)
    payload = models.JSONField()
    received_at = models.DateTimeField(auto_now_add=True)
    processed = models.BooleanField(default=False)
