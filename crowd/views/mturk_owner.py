"""The owner's Mechanical Turk page of a campaign: settings, cost estimate and live confirmation,
publishing (with a dry run that shows every request), batches, collecting and reconciliation,
review by rules, bonuses, blocks, messages, expiry, and the requester-website export and import.

Every action is a POST to ``/campaigns/<name>/mturk/<action>/``; with ``dry_run`` set nothing is
sent and the page shows the requests that would have been. The result of the last action is shown
at the top of the page. The irreversible ones (publish, review, send-bonuses, block, notify,
expire: :data:`crowd.audit.PROVIDER_ACTIONS`) are written to the campaign's audit trail when done
for real. Only the campaign's owners reach any of it (404 for anyone else).
"""
from __future__ import annotations

from decimal import Decimal

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db.models import Count, Q, Sum
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST

from crowd import audit
from crowd.models import Campaign, MTurkBatch, MTurkConfig, Payment
from crowd.mturk import publish as pub
from crowd.mturk import review, website
from crowd.mturk.client import MTurkAPI, MTurkError
from crowd.mturk.collect import collect
from crowd.mturk.questions import locale_values

from .owner import owned_campaign

RESULT_KEY = "mturk_result"


class SettingsForm(forms.ModelForm):
    public_url = forms.URLField(required=False, assume_scheme="https",
                                help_text="https address where workers reach this platform (ExternalQuestion only)")
    locales_text = forms.CharField(required=False, label="locales", help_text="comma-separated, e.g. US, GB, US-NY")
    qualification_id = forms.CharField(required=False, max_length=100,
                                       help_text="our own qualification type id in this environment (optional)")

    class Meta:
        model = MTurkConfig
        fields = ["question_type", "public_url", "frame_height", "description", "keywords", "hit_lifetime_seconds",
                  "auto_approval_seconds", "gold_assignments", "min_approval_rate", "min_approved_hits", "masters"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["locales_text"].initial = ", ".join(self.instance.locales or [])
        self.fields["qualification_id"].initial = (self.instance.qualification_ids or {}).get(self.instance.environment, "")

    def clean_locales_text(self):
        locales = [x.strip().upper() for x in self.cleaned_data["locales_text"].split(",") if x.strip()]
        try:
            locale_values(locales)
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None
        return locales

    def clean_public_url(self):
        url = self.cleaned_data["public_url"]
        if url and not url.startswith("https://"):
            raise forms.ValidationError("MTurk loads ExternalQuestion pages only over https")
        return url

    def save(self, commit=True):
        config = super().save(commit=False)
        config.locales = self.cleaned_data["locales_text"]
        config.qualification_ids = dict(config.qualification_ids or {}) | {config.environment: self.cleaned_data["qualification_id"].strip()}
        if commit:
            config.save()
        return config


def _mturk_campaign(request, name) -> Campaign:
    campaign = owned_campaign(request, name)
    if campaign.provider != Campaign.MTURK:
        raise Http404("this campaign does not use Mechanical Turk")
    return campaign


@login_required
@require_GET
def page(request, name):
    campaign = _mturk_campaign(request, name)
    config = pub.config_for(campaign)
    batches = (MTurkBatch.objects.filter(campaign=campaign)
               .annotate(n_hits=Count("hits"), published=Count("hits", filter=~Q(hits__hit_id="")),
                         failed=Count("hits", filter=Q(hits__status="error"))))
    ledger = Payment.objects.filter(assignment__campaign=campaign).values("state").annotate(n=Count("pk"), total=Sum("amount"))
    return render(request, "crowd/owner/mturk.html", {
        "campaign": campaign, "config": config, "form": SettingsForm(instance=config),
        "estimate": pub.estimate(campaign), "unpublished": pub.unpublished_items(campaign).count(),
        "batches": batches, "syncs": campaign.mturk_syncs.all()[:5], "ledger": ledger,
        "calls": campaign.mturk_calls.all()[:20], "result": request.session.pop(RESULT_KEY, None),
    })


def _limit(request):
    raw = request.POST.get("limit", "").strip()
    if not raw:
        return None
    n = int(raw)
    if n < 1:
        raise ValueError("the number of items must be at least 1")
    return n


def _run(request, campaign, action: str, dry: bool) -> list[str]:
    """Perform ``action``; returns the lines to show. Raises the module errors for the caller."""
    user = request.user.get_username()
    config = pub.config_for(campaign)
    post = request.POST
    if action == "settings":
        form = SettingsForm(post, instance=config)
        if not form.is_valid():
            raise pub.PublishError("; ".join(f"{k}: {' '.join(v)}" for k, v in form.errors.items()))
        form.save()
        return ["settings saved"]
    if action == "sandbox":
        pub.set_environment(campaign, MTurkConfig.SANDBOX)
        return ["environment: sandbox (the live confirmation was cleared)"]
    if action == "golive":
        config = pub.confirm_live(campaign, post.get("confirm", "").strip(), user)
        return [f"environment: LIVE, confirmed by {user}", *pub.estimate(campaign).lines()]
    if action == "export":
        batch = website.export_batch(campaign, limit=_limit(request), user=user)
        return [f"requester-website batch {batch.batch_id}: {batch.hits.count()} rows; download its layout and input CSV below"]
    if action == "import":
        upload = request.FILES.get("results")
        if upload is None:
            raise pub.PublishError("choose the batch results CSV to import")
        if upload.size > 50 * 1024 * 1024:
            raise pub.PublishError("the file is larger than 50 MB")
        return website.import_results(campaign, upload.read(), dry_run=dry).lines()
    if action == "grant":
        rep = review.grant_bonuses(campaign, Decimal(post.get("amount", "0") or "0"), post.get("reason", ""),
                                   post.get("label", "bonus") or "bonus",
                                   min_gold_accuracy=float(post.get("min_gold", "0") or 0))
        return ["bonus ledger: " + rep.lines()[0]]
    api = MTurkAPI.for_campaign(campaign, dry_run=dry, user=request.user)
    if action == "publish":
        return pub.publish_batch(campaign, api, limit=_limit(request), user=user).lines() + (
            ["would send:", api.describe()] if dry else [])
    if action == "collect":
        rep = collect(campaign, api)
        return rep.lines() + (["would send:", api.describe()] if dry else [])
    if action == "review":
        mg = post.get("min_gold", "").strip()
        decisions = review.plan_review(campaign, min_gold_accuracy=float(mg) if mg else None,
                                       reject_blocked=bool(post.get("reject_blocked")))
        return [*(d.line() for d in decisions[:200]), *review.apply_review(campaign, api, decisions).lines()]
    if action == "send-bonuses":
        return review.send_bonuses(campaign, api).lines()
    if action == "block":
        return review.block_workers(campaign, api).lines()
    if action == "notify":
        return review.notify_workers(campaign, api, post.get("subject", ""), post.get("message", "")).lines()
    if action == "expire":
        return review.update_expiration(campaign, api).lines()
    if action == "extend":
        return review.update_expiration(campaign, api, extend_seconds=int(float(post.get("hours", "0") or 0) * 3600)).lines()
    raise Http404("unknown action")


@login_required
@require_POST
def action(request, name, action):
    campaign = _mturk_campaign(request, name)
    dry = bool(request.POST.get("dry_run"))
    try:
        lines = _run(request, campaign, action, dry)
    except (pub.PublishError, review.ReviewError, MTurkError, ValueError, ArithmeticError) as exc:
        messages.error(request, f"{action}: {exc}")
    else:
        request.session[RESULT_KEY] = {"action": action, "dry_run": dry, "lines": [str(x) for x in lines]}
        if not dry:  # a dry run sends nothing
            audit.record_provider_action(campaign, request.user, Campaign.MTURK, action, lines)
    return redirect("crowd:mturk", name=campaign.name)


@login_required
@require_GET
def batch_file(request, name, pk, filename):
    """A requester-website batch's ``layout.html`` or ``input.csv``."""
    campaign = _mturk_campaign(request, name)
    batch = get_object_or_404(MTurkBatch, pk=pk, campaign=campaign, route=MTurkBatch.WEBSITE)
    if filename == "layout.html":
        response = HttpResponse(website.layout_html(campaign), content_type="text/html; charset=utf-8")
    elif filename == "input.csv":
        response = HttpResponse(website.input_csv(batch), content_type="text/csv; charset=utf-8")
    else:
        raise Http404("no such file")
    response["Content-Disposition"] = f'attachment; filename="{batch.batch_id}-{filename}"'
    return response
