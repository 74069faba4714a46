"""Amazon Mechanical Turk records of a campaign: its settings, batches of HITs, one HIT per item,
the payment (bonus) ledger, every call made to MTurk, and the collector's reconciliation reports.

Design (see ``crowd/mturk/__init__.py``): a campaign whose ``provider`` is ``mturk`` is published
as batches; a batch is one HIT type and one HIT per item with ``MaxAssignments = k`` (gold items are
HITs too, outside the k slots). Every HIT row is written with its ``UniqueRequestToken`` *before*
CreateHITWithHITType is called, so a retry after a crash or a timeout never makes a second HIT.
Credentials are never stored here: boto3 reads them from the standard AWS chain.
"""
from django.conf import settings
from django.db import models


class MTurkConfig(models.Model):
    """How a campaign is published on MTurk. ``environment`` is explicit (sandbox by default);
    going live needs ``live_confirmed_at`` (set by the confirmation step that shows the cost)."""

    SANDBOX, LIVE = "sandbox", "live"
    ENVIRONMENTS = [(SANDBOX, "sandbox (no money, workersandbox.mturk.com)"), (LIVE, "live (real workers, real money)")]
    EXTERNAL, HTML = "external", "html"
    QUESTION_TYPES = [
        (EXTERNAL, "ExternalQuestion: this platform's task page inside MTurk's frame"),
        (HTML, "HTMLQuestion: a self-contained page hosted by MTurk"),
    ]

    campaign = models.OneToOneField("crowd.Campaign", on_delete=models.CASCADE, related_name="mturk")
    environment = models.CharField(max_length=10, choices=ENVIRONMENTS, default=SANDBOX)
    question_type = models.CharField(max_length=10, choices=QUESTION_TYPES, default=EXTERNAL)
    public_url = models.URLField(
        blank=True, help_text="https address where workers reach this platform (ExternalQuestion only)"
    )
    frame_height = models.PositiveIntegerField(default=0, help_text="pixels; 0 lets MTurk size the frame")
    description = models.CharField(max_length=2000, blank=True)
    keywords = models.CharField(max_length=1000, default="image, caption, rating")
    hit_lifetime_seconds = models.PositiveIntegerField(default=7 * 24 * 3600)
    auto_approval_seconds = models.PositiveIntegerField(default=3 * 24 * 3600)
    gold_assignments = models.PositiveSmallIntegerField(
        null=True, blank=True, help_text="MaxAssignments of gold HITs (default: k)"
    )
    min_approval_rate = models.PositiveSmallIntegerField(null=True, blank=True, default=95)
    min_approved_hits = models.PositiveIntegerField(null=True, blank=True, default=500)
    locales = models.JSONField(default=list, blank=True, help_text='e.g. ["US", "GB"] or ["US-NY"]')
    masters = models.BooleanField(default=False)
    qualification_ids = models.JSONField(
        default=dict, blank=True, help_text='our own qualification per environment: {"sandbox": id, "live": id}'
    )
    live_confirmed_at = models.DateTimeField(null=True, blank=True)
    live_confirmed_by = models.CharField(max_length=150, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "MTurk settings"
        verbose_name_plural = "MTurk settings"

    def __str__(self):
        return f"{self.campaign.name} on MTurk ({self.environment})"


class MTurkBatch(models.Model):
    """A batch: one HIT type and the HITs of (some of) the campaign's items. ``batch_id`` is sent as
    every HIT's RequesterAnnotation. ``route`` is ``api`` (published with boto3) or ``website``
    (exported for the requester website; HIT ids become known when results are imported)."""

    API, WEBSITE = "api", "website"
    campaign = models.ForeignKey("crowd.Campaign", on_delete=models.CASCADE, related_name="mturk_batches")
    batch_id = models.CharField(max_length=100, unique=True)
    environment = models.CharField(max_length=10, choices=MTurkConfig.ENVIRONMENTS)
    route = models.CharField(max_length=10, choices=[(API, "API"), (WEBSITE, "requester website")], default=API)
    question_type = models.CharField(max_length=10, choices=MTurkConfig.QUESTION_TYPES, default=MTurkConfig.EXTERNAL)
    hit_type_id = models.CharField(max_length=100, blank=True)
    reward = models.DecimalField(max_digits=6, decimal_places=2)
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.CharField(max_length=150, blank=True)

    class Meta:
        ordering = ["campaign", "created_at"]

    def __str__(self):
        return self.batch_id


class MTurkHIT(models.Model):
    """One HIT: one item of the campaign in one batch. ``request_token`` is the UniqueRequestToken
    (<= 64 characters, honoured by MTurk for 24 hours). ``order`` is the presentation order baked
    into HTMLQuestion and requester-website HITs (ExternalQuestion pages draw one per assignment)."""

    batch = models.ForeignKey(MTurkBatch, on_delete=models.CASCADE, related_name="hits")
    item = models.ForeignKey("crowd.Item", on_delete=models.PROTECT, related_name="mturk_hits")
    hit_id = models.CharField(max_length=100, blank=True)
    request_token = models.CharField(max_length=64, unique=True)
    max_assignments = models.PositiveSmallIntegerField()
    order = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=30, blank=True, help_text="MTurk's HITStatus, or 'error' with the reason")
    error = models.TextField(blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["batch", "pk"]
        constraints = [
            models.UniqueConstraint(fields=["batch", "item"], name="mturk_hit_one_per_item"),
            models.UniqueConstraint(fields=["hit_id"], name="mturk_hit_unique_id", condition=~models.Q(hit_id="")),
        ]

    def __str__(self):
        return self.hit_id or f"(unpublished) {self.request_token}"


class Payment(models.Model):
    """The bonus ledger. A row is written before SendBonus is called and carries the call's
    UniqueRequestToken, so a retry can never pay twice; (assignment, label) is unique, so the same
    bonus cannot even be granted twice. Only assignments held locally can be paid."""

    PENDING, SENT, FAILED = "pending", "sent", "failed"
    assignment = models.ForeignKey("crowd.Assignment", on_delete=models.PROTECT, related_name="payments")
    label = models.SlugField(max_length=50, help_text="what the bonus is for, e.g. 'gold-accuracy'")
    amount = models.DecimalField(max_digits=6, decimal_places=2)
    reason = models.TextField(help_text="shown to the worker")
    request_token = models.CharField(max_length=64, unique=True)
    state = models.CharField(max_length=10, choices=[(s, s) for s in (PENDING, SENT, FAILED)], default=PENDING)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created_at"]
        constraints = [
            models.UniqueConstraint(fields=["assignment", "label"], name="payment_once_per_label"),
            models.CheckConstraint(condition=models.Q(amount__gt=0), name="payment_positive"),
        ]

    def __str__(self):
        return f"bonus ${self.amount} for assignment {self.assignment_id} ({self.state})"


class MTurkCall(models.Model):
    """Every request sent to MTurk (and every dry run): operation, parameters, outcome. The audit
    trail an owner reads when a worker writes about a payment."""

    campaign = models.ForeignKey("crowd.Campaign", on_delete=models.CASCADE, related_name="mturk_calls")
    environment = models.CharField(max_length=10)
    operation = models.CharField(max_length=60)
    params = models.JSONField()
    ok = models.BooleanField(default=False)
    dry_run = models.BooleanField(default=False)
    error_code = models.CharField(max_length=100, blank=True)
    error = models.TextField(blank=True)
    at = models.DateTimeField(auto_now_add=True)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)

    class Meta:
        ordering = ["-at"]
        indexes = [  # the calls of one operation in a recent window (MTurkAPI.calls_left)
            models.Index(fields=["environment", "operation", "at"], name="mturkcall_recent"),
        ]


class MTurkSync(models.Model):
    """One run of the collector (or of a results-CSV import) with its reconciliation report."""

    campaign = models.ForeignKey("crowd.Campaign", on_delete=models.CASCADE, related_name="mturk_syncs")
    source = models.CharField(max_length=20, help_text="'api' (collector) or 'csv' (requester website results)")
    started_at = models.DateTimeField(auto_now_add=True)
    ok = models.BooleanField(default=True)
    report = models.JSONField(default=dict)

    class Meta:
        ordering = ["-started_at"]
