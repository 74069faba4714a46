"""The owner's campaign list (``/campaigns/``, URL name ``crowd:campaigns``): each campaign with
its state, progress (complete items / items, %) and agreement (Krippendorff's alpha per criterion)
read from its newest stored campaign report -- never computed in the request. It lives in analysis
because the reports do (crowd does not import analysis); see :mod:`analysis.campaign_urls`.
"""
from __future__ import annotations

import json
from collections import Counter

from django.contrib.auth.decorators import login_required
from django.db.models import Count, F, Q
from django.shortcuts import render
from django.views.decorators.http import require_GET

from crowd import owners
from crowd.models import Assignment, Item
from crowd.privacy import visible_campaigns

from .models import Report


def stored_agreement(campaign_ids) -> dict:
    """{campaign id: {criterion: alpha or None}} from the newest done campaign report of each
    campaign (a stale one if its judgments changed since; absent when none was ever computed)."""
    out = {}
    rows = (Report.objects.filter(kind=Report.CAMPAIGN, campaign_id__in=list(campaign_ids), status=Report.DONE)
            .order_by("campaign_id", "-finished_at").values_list("campaign_id", "payload"))
    for campaign_id, payload in rows.iterator():
        if campaign_id in out:
            continue
        try:
            agreement = json.loads(payload).get("agreement") or {}
        except (ValueError, AttributeError):
            agreement = {}
        out[campaign_id] = {c: a.get("alpha") for c, a in agreement.items() if isinstance(a, dict)}
    return out


def campaign_rows(campaigns) -> list[dict]:
    """One dict per campaign: ``campaign``, ``items``, ``complete_items``, ``percent`` (complete
    items / items x 100), ``judgments``, ``needed`` and ``agreement`` ({criterion: alpha}, None
    when no report was stored). Four queries whatever the number of campaigns."""
    campaigns = list(campaigns)
    ids = [c.pk for c in campaigns]
    items = dict(Item.objects.filter(campaign_id__in=ids, is_gold=False).values_list("campaign_id")
                 .annotate(n=Count("pk")).order_by())
    judgments = dict(Assignment.objects.filter(campaign_id__in=ids, counted=True, item__is_gold=False)
                     .values_list("campaign_id").annotate(n=Count("pk")).order_by())
    complete = Counter(
        Item.objects.filter(campaign_id__in=ids, is_gold=False)
        .annotate(n=Count("assignments", filter=Q(assignments__counted=True)))
        .filter(n__gte=F("campaign__judgments_per_item")).values_list("campaign_id", flat=True))
    agreement = stored_agreement(ids)
    rows = []
    for c in campaigns:
        n = items.get(c.pk, 0)
        rows.append({
            "campaign": c, "items": n, "complete_items": complete.get(c.pk, 0),
            "percent": round(100 * complete.get(c.pk, 0) / n) if n else 0,
            "judgments": judgments.get(c.pk, 0), "needed": n * c.judgments_per_item,
            "agreement": agreement.get(c.pk),
        })
    return rows


@login_required
@require_GET
def campaign_list(request):
    """The campaigns the user may see (:func:`crowd.privacy.visible_campaigns`: those they own, every
    one for a superuser), newest first, with progress, agreement and state; above them the open
    invitations to co-own a campaign addressed to the user (:func:`crowd.owners.pending_for`), each
    with Accept and Decline buttons."""
    campaigns = visible_campaigns(request.user).select_related("dataset")
    return render(request, "crowd/owner/list.html", {"rows": campaign_rows(campaigns),
                                                     "owner_invitations": owners.pending_for(request.user)})
