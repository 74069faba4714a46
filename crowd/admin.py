from django.contrib import admin

from .models import (
    MTurkCall,
    MTurkConfig,
    MTurkHIT,
    Payment,
    Assignment,
    AuditEntry,
    Campaign,
    CampaignRater,
    Caption,
    Dataset,
    HumanJudgment,
    Image,
    OwnerInvitation,
    System,
    Worker,
    WorkerStatus,
)


@admin.register(Dataset)
class DatasetAdmin(admin.ModelAdmin):
    list_display = ("name", "kind", "criterion", "created_at")
    search_fields = ("name",)


@admin.register(Image)
class ImageAdmin(admin.ModelAdmin):
    list_display = ("key", "dataset")
    list_filter = ("dataset",)
    search_fields = ("key",)


@admin.register(System)
class SystemAdmin(admin.ModelAdmin):
    list_display = ("name", "kind", "dataset")
    list_filter = ("dataset", "kind")


@admin.register(Caption)
class CaptionAdmin(admin.ModelAdmin):
    list_display = ("key", "text", "system", "image")
    list_filter = ("system__dataset", "system")
    search_fields = ("key", "text")
    raw_id_fields = ("image",)


@admin.register(HumanJudgment)
class HumanJudgmentAdmin(admin.ModelAdmin):
    list_display = ("image", "system", "caption", "criterion", "rater", "score", "source")
    list_filter = ("criterion", "source")
    raw_id_fields = ("image", "caption")


@admin.register(Campaign)
class CampaignAdmin(admin.ModelAdmin):
    list_display = ("name", "kind", "dataset", "state", "judgments_per_item", "created_at")
    list_filter = ("kind", "state")
    filter_horizontal = ("owners",)


@admin.register(Worker)
class WorkerAdmin(admin.ModelAdmin):
    list_display = ("provider", "external_id", "label", "user", "created_at")
    search_fields = ("external_id", "label")


@admin.register(WorkerStatus)
class WorkerStatusAdmin(admin.ModelAdmin):
    list_display = ("campaign", "worker", "state", "reason", "updated_at")
    list_filter = ("state", "campaign")


@admin.register(Assignment)
class AssignmentAdmin(admin.ModelAdmin):
    """Assignments are never deleted (they are the audit trail of the campaign)."""

    list_display = ("pk", "campaign", "item", "worker", "state", "slot", "counted", "late", "submitted_at")
    list_filter = ("campaign", "state", "counted", "late")
    raw_id_fields = ("item", "worker")

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(MTurkConfig)
class MTurkConfigAdmin(admin.ModelAdmin):
    list_display = ("campaign", "environment", "question_type", "live_confirmed_at")
    readonly_fields = ("live_confirmed_at", "live_confirmed_by")  # going live: the MTurk page's confirmation


@admin.register(MTurkHIT)
class MTurkHITAdmin(admin.ModelAdmin):
    list_display = ("hit_id", "batch", "item", "max_assignments", "status")
    search_fields = ("hit_id", "batch__batch_id")
    list_filter = ("status",)


@admin.register(Payment)
class PaymentAdmin(admin.ModelAdmin):
    """The bonus ledger is append-only from the admin: rows are sent by `manage.py mturk send-bonuses`."""

    list_display = ("assignment", "label", "amount", "state", "sent_at")
    list_filter = ("state",)
    readonly_fields = ("assignment", "label", "amount", "request_token", "state", "sent_at", "error")


@admin.register(MTurkCall)
class MTurkCallAdmin(admin.ModelAdmin):
    list_display = ("at", "campaign", "environment", "operation", "ok", "dry_run", "error_code")
    list_filter = ("operation", "ok", "dry_run", "environment")

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(CampaignRater)
class CampaignRaterAdmin(admin.ModelAdmin):
    """Who rates which local campaign (issue 21). Revoking is done on the campaign page (it also
    retires the invitation link and is audited), so ``revoked_at`` is read-only here."""

    list_display = ("campaign", "worker", "created_at", "revoked_at")
    list_filter = ("campaign", ("revoked_at", admin.EmptyFieldListFilter))
    search_fields = ("worker__external_id", "worker__label", "campaign__name")
    raw_id_fields = ("worker",)
    readonly_fields = ("created_at", "revoked_at")


@admin.register(AuditEntry)
class AuditEntryAdmin(admin.ModelAdmin):
    """The campaigns' audit trail (crowd.audit): read-only, never deleted from the admin."""

    list_display = ("at", "campaign", "actor", "action", "target", "reason")
    list_filter = ("action", "campaign")
    search_fields = ("target", "reason", "actor")
    date_hierarchy = "at"

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(OwnerInvitation)
class OwnerInvitationAdmin(admin.ModelAdmin):
    """Co-owner invitations (crowd.owners), for superusers to see and search. They are made, revoked,
    accepted and declined on the campaign pages (each written to the audit trail, and accepting one
    is what makes its user an owner), so nothing is added or deleted here and everything but the
    expiry is read-only: a state set by hand would say "accepted" of a user who owns nothing. A
    superuser sets owners directly on the campaign instead."""

    list_display = ("campaign", "username", "invited_by", "state", "created_at", "expires_at", "answered_at")
    list_filter = ("state", ("answered_at", admin.EmptyFieldListFilter), "campaign")
    search_fields = ("username", "campaign__name", "invited_by__username")
    date_hierarchy = "created_at"
    list_select_related = ("campaign", "invited_by")
    readonly_fields = ("campaign", "username", "invited_by", "created_at", "state", "answered_at")
    fields = ("campaign", "username", "invited_by", "state", "created_at", "expires_at", "answered_at")

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
