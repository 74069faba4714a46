"""Campaign data stays private until its owner publishes the results (issue 21, item 7).

A campaign's data -- its judgments, its raters' texts, and the human system a description
campaign fills with its raters' descriptions (``campaign-<name>``, see
:mod:`crowd.kinds.description`) -- is shown on the owner pages only, until an owner publishes the
campaign's results (:func:`publish_results`, the "Publish results" button of the owner page, which
sets ``Campaign.results_published_at``; the page asks for a confirmation first). Until then, every
public page and download (the dataset, image and diversity pages and their JSON/CSV/PNG files)
leaves out the systems :func:`private_system_ids` names. Publishing is reversible
(:func:`unpublish_results`, the page's "Make private again"): the data leaves the public pages at
once, though what was public meanwhile may have been copied; both steps are in the audit trail.

Imported judgments and systems (``campaign`` null, names chosen by the importer) are public as
before; the public correlation and benchmark reports read imported judgments only
(``campaign__isnull=True``), so no campaign's judgments reach them.
"""
from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from . import audit
from .kinds.description import system_name
from .models import Campaign, System


def visible_campaigns(user):
    """The campaigns ``user`` may see (QuerySet), the one rule of every owner page
    (:func:`crowd.views.owner.owned_campaign`), the campaign list, the API
    (:mod:`api.campaigns`) and the status of a campaign's stored report
    (:mod:`analysis.status_views`): every campaign for an active superuser, those they own for
    any other active logged-in user (plain staff included), none for an anonymous or inactive
    user. A campaign outside it is answered 404, so its name does not leak."""
    if not (user is not None and user.is_authenticated and user.is_active):
        return Campaign.objects.none()
    return Campaign.objects.all() if user.is_superuser else Campaign.objects.filter(owners=user)


def private_campaigns(dataset=None):
    """Campaigns whose results are not published (QuerySet), optionally of one ``dataset``."""
    qs = Campaign.objects.filter(results_published_at__isnull=True)
    return qs.filter(dataset=dataset) if dataset is not None else qs


def private_system_ids(dataset=None) -> list[int]:
    """Sorted primary keys of the systems that hold an unpublished campaign's data (of ``dataset``,
    or of every dataset). Only description campaigns create a system (named
    :func:`crowd.kinds.description.system_name`, on the campaign's dataset; creating the campaign
    is refused when the dataset already has a system of that name, so the name identifies it)."""
    pairs = [(c.dataset_id, system_name(c)) for c in private_campaigns(dataset).filter(kind="description")]
    if not pairs:
        return []
    ids = set()
    for dataset_id, name in pairs:
        ids.update(System.objects.filter(dataset_id=dataset_id, name=name).values_list("pk", flat=True))
    return sorted(ids)


def public_systems(dataset):
    """The systems of ``dataset`` that public pages may show (QuerySet): all but
    :func:`private_system_ids`."""
    return System.objects.filter(dataset=dataset).exclude(pk__in=private_system_ids(dataset))


def publish_results(campaign: Campaign, user=None) -> Campaign:
    """Publish ``campaign``'s results: from now on its system and texts appear on public pages.
    The publication is written to the campaign's audit trail
    (``publish-results``, by ``user``; None: the platform) in the same transaction. Idempotent (the
    first publication time is kept, and a second call writes no entry). The caller checks that the
    user owns the campaign (the owner page does, :func:`crowd.views.owner.owned_campaign`)."""
    with transaction.atomic():
        current = Campaign.objects.select_for_update().get(pk=campaign.pk)
        if current.results_published_at is None:
            current.results_published_at = timezone.now()
            current.save(update_fields=["results_published_at"])
            audit.record(current, user, "publish-results", detail={"kind": current.kind})
    campaign.results_published_at = current.results_published_at
    return campaign


def unpublish_results(campaign: Campaign, user=None) -> Campaign:
    """Undo :func:`publish_results`: ``campaign``'s system and texts leave the public pages again
    (``results_published_at`` back to None), written to the audit trail (``unpublish-results``, by
    ``user``) in the same transaction, with the publication time it ends. Idempotent (a campaign
    whose results are not public is left as it is and no entry is written). The caller checks that
    the user owns the campaign."""
    with transaction.atomic():
        current = Campaign.objects.select_for_update().get(pk=campaign.pk)
        if current.results_published_at is not None:
            since = current.results_published_at
            current.results_published_at = None
            current.save(update_fields=["results_published_at"])
            audit.record(current, user, "unpublish-results",
                         detail={"kind": current.kind, "public_since": since.isoformat(timespec="seconds")})
    campaign.results_published_at = None
    return campaign
