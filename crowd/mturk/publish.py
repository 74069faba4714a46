"""Publishing a campaign on MTurk: settings, the cost estimate, the live confirmation, batches of HITs.

A batch is one HIT type (CreateHITType: title, reward, durations, keywords, qualification
requirements) and one HIT per item (CreateHITWithHITType: MaxAssignments = k, lifetime, Question,
RequesterAnnotation = batch id, UniqueRequestToken). HIT rows with their tokens are committed before
any call, so re-running :func:`publish_batch` after a failure resumes: HITs already made are
skipped, and a HIT whose creation did reach MTurk before the failure is found again through the
token (MTurk answers "already exists") instead of being made twice.
"""
from __future__ import annotations

import hashlib
import json
import random
import re
from dataclasses import dataclass, field

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, OuterRef
from django.template.loader import render_to_string
from django.utils import timezone

from crowd import engine
from crowd.kinds import get_kind
from crowd.models import Campaign, Item, MTurkBatch, MTurkConfig, MTurkHIT

from .client import WORKER_SITES, MTurkAPI, MTurkError
from .questions import CostEstimate, cost_estimate, external_question, html_question, qualification_requirements


class PublishError(Exception):
    """Publishing was refused before anything was sent (settings, live confirmation, nothing to publish)."""


def config_for(campaign: Campaign) -> MTurkConfig:
    """The campaign's MTurk settings (created with the defaults: sandbox, ExternalQuestion)."""
    config, _ = MTurkConfig.objects.get_or_create(campaign=campaign)
    return config


def set_environment(campaign: Campaign, environment: str) -> MTurkConfig:
    """Switch sandbox/live. Switching always clears the live confirmation (it must be given again)."""
    if environment not in (MTurkConfig.SANDBOX, MTurkConfig.LIVE):
        raise PublishError(f"unknown environment {environment!r}; use sandbox or live")
    config = config_for(campaign)
    if config.environment != environment:
        config.environment, config.live_confirmed_at, config.live_confirmed_by = environment, None, ""
        config.save()
    return config


def confirm_live(campaign: Campaign, typed_name: str, user: str = "") -> MTurkConfig:
    """The deliberate step before real money is spent: the owner types the campaign's name after
    seeing :func:`estimate`. Sets the environment to live and records who confirmed, when."""
    if typed_name != campaign.name:
        raise PublishError(f"type the campaign name {campaign.name!r} exactly to confirm publishing on live MTurk")
    config = set_environment(campaign, MTurkConfig.LIVE)
    config.live_confirmed_at, config.live_confirmed_by = timezone.now(), user
    config.save()
    return config


def unpublished_items(campaign: Campaign):
    """Items of the campaign not yet in any batch, in serving order."""
    in_batch = MTurkHIT.objects.filter(batch__campaign=campaign, item=OuterRef("pk"))
    return Item.objects.filter(campaign=campaign).exclude(Exists(in_batch)).order_by("position")


def max_assignments(campaign: Campaign, item: Item, config: MTurkConfig) -> int:
    if item.is_gold:
        return config.gold_assignments or campaign.judgments_per_item
    return campaign.judgments_per_item


def estimate(campaign: Campaign, items=None) -> CostEstimate:
    """Cost of publishing ``items`` (default: every unpublished item) at the campaign's reward."""
    config = config_for(campaign)
    items = list(unpublished_items(campaign) if items is None else items)
    return cost_estimate([max_assignments(campaign, it, config) for it in items], campaign.reward, masters=config.masters)


def request_token(batch_id: str, item_pk: int) -> str:
    """UniqueRequestToken of an item's HIT in a batch: deterministic, 43 characters (limit 64)."""
    return "ce-" + hashlib.sha256(f"{batch_id}/{item_pk}".encode()).hexdigest()[:40]


def item_marker(item_pk: int) -> str:
    """A string found in the Question of the item's HIT (used to find a HIT again by its item)."""
    return f"/item/{item_pk}/"


def external_url(config: MTurkConfig, item: Item) -> str:
    from django.urls import reverse

    if not config.public_url:
        raise PublishError("an ExternalQuestion needs the public https address of this platform (MTurk settings)")
    if not config.public_url.startswith("https://"):
        raise PublishError(f"MTurk loads ExternalQuestion pages only over https; {config.public_url!r} is not https")
    return config.public_url.rstrip("/") + reverse("crowd:mturk-task", args=[item.campaign.name, item.pk])


def html_document(campaign: Campaign, item: Item, order: dict, environment: str) -> str:
    """The self-contained HTMLQuestion page of an item: the kind's form, posting to MTurk."""
    spec = get_kind(campaign.kind)
    return render_to_string("crowd/mturk/html_question.html", {
        "campaign": campaign, "payload": item.payload, "task": spec.context(item.payload, order),
        "kind_template": spec.template, "item": item, "order_json": json.dumps(order, sort_keys=True),
        "marker": item_marker(item.pk), "data": {},
        "default_submit": WORKER_SITES[environment] + "/mturk/externalSubmit",
        "submit_origins": sorted({WORKER_SITES[environment], *settings.MTURK_SUBMIT_ORIGINS}),
    })


def question_for(campaign: Campaign, config: MTurkConfig, hit: MTurkHIT) -> str:
    if config.question_type == MTurkConfig.HTML:
        return html_question(html_document(campaign, hit.item, hit.order, config.environment), config.frame_height)
    return external_question(external_url(config, hit.item), config.frame_height)


def hit_type_params(campaign: Campaign, config: MTurkConfig) -> dict:
    """Parameters of CreateHITType for the campaign's current settings."""
    return {
        "AutoApprovalDelayInSeconds": config.auto_approval_seconds,
        "AssignmentDurationInSeconds": campaign.assignment_seconds,
        "Reward": f"{campaign.reward:.2f}",
        "Title": campaign.title[:128],
        "Keywords": config.keywords[:1000],
        "Description": (config.description or campaign.instructions)[:2000],
        "QualificationRequirements": qualification_requirements(
            config.environment, min_approval_rate=config.min_approval_rate,
            min_approved_hits=config.min_approved_hits, locales=config.locales or (), masters=config.masters,
            qualification_id=(config.qualification_ids or {}).get(config.environment, ""),
        ),
    }


@dataclass
class PublishReport:
    """What :func:`publish_batch` did: HITs ``created`` now, ``existing`` (made by an earlier run),
    ``failed`` ({item key: error}), the cost ``estimate`` and, in a dry run, the calls not sent."""

    batch: MTurkBatch | None
    estimate: CostEstimate
    created: int = 0
    existing: int = 0
    failed: dict = field(default_factory=dict)
    dry_run: bool = False
    calls: str = ""

    def lines(self) -> list[str]:
        head = f"batch {self.batch.batch_id if self.batch else '(new)'} ({'DRY RUN, nothing sent' if self.dry_run else 'sent'})"
        out = [head, *self.estimate.lines(), f"HITs created {self.created}, already there {self.existing}, failed {len(self.failed)}"]
        out += [f"  failed {k}: {v}" for k, v in self.failed.items()]
        return out


def _check(campaign: Campaign, config: MTurkConfig):
    if campaign.provider != Campaign.MTURK:
        raise PublishError(f"campaign {campaign.name!r} uses the {campaign.provider} provider, not mturk")
    if campaign.state == Campaign.FINISHED:
        raise PublishError("the campaign has finished")
    if campaign.reward <= 0:
        raise PublishError("set a reward per assignment (US dollars) before publishing on MTurk")
    if config.environment == MTurkConfig.LIVE and config.live_confirmed_at is None:
        raise PublishError(
            "live MTurk spends real money: confirm first (`manage.py mturk golive "
            f"{campaign.name} --confirm {campaign.name}` or the campaign's MTurk page), after reading the cost estimate"
        )
    if config.question_type == MTurkConfig.EXTERNAL:
        if not config.public_url:
            raise PublishError("an ExternalQuestion needs the public https address of this platform (MTurk settings)")
        if not config.public_url.startswith("https://"):
            raise PublishError(f"MTurk loads ExternalQuestion pages only over https; {config.public_url!r} is not https")


def create_batch(campaign: Campaign, *, limit: int | None = None, user: str = "", route: str = MTurkBatch.API) -> MTurkBatch:
    """Write a new batch with one HIT row (token, MaxAssignments, fixed order) per unpublished item
    (the first ``limit`` by serving position). Raises PublishError when nothing is left."""
    config = config_for(campaign)
    items = list(unpublished_items(campaign)[:limit] if limit else unpublished_items(campaign))
    if not items:
        raise PublishError("every item of the campaign is already in a batch")
    spec = get_kind(campaign.kind)
    with transaction.atomic():
        n = MTurkBatch.objects.filter(campaign=campaign).count() + 1
        batch = MTurkBatch.objects.create(
            campaign=campaign, batch_id=f"{campaign.name[:80]}-{route}-{n}", environment=config.environment,
            route=route, question_type=config.question_type, reward=campaign.reward, created_by=user,
        )
        MTurkHIT.objects.bulk_create([
            MTurkHIT(batch=batch, item=it, request_token=request_token(batch.batch_id, it.pk),
                     max_assignments=max_assignments(campaign, it, config),
                     order=spec.presentation_order(it.payload, random.Random(f"{batch.batch_id}/{it.pk}")))
            for it in items
        ])
    return batch


HIT_ID = re.compile(r"\b[0-9A-Z]{30}\b")


def _find_existing(api: MTurkAPI, batch: MTurkBatch, hit: MTurkHIT, message: str) -> str | None:
    """The id of the HIT an earlier attempt made with the same token: named in MTurk's error
    message, or found by listing the requester's HITs (RequesterAnnotation + item marker)."""
    m = HIT_ID.search(message)
    if m:
        return m.group(0)
    for h in api.paginate("list_hits", "HITs"):
        if h.get("RequesterAnnotation") == batch.batch_id and item_marker(hit.item_id) in h.get("Question", ""):
            return h["HITId"]
    return None


def publish_batch(
    campaign: Campaign, api: MTurkAPI, *, batch: MTurkBatch | None = None, limit: int | None = None,
    user: str = "", progress=None,
) -> PublishReport:
    """Publish a new batch (or resume ``batch``) with ``api``. In a dry run nothing is written or
    sent and the report lists the calls. ``progress(done, total)`` is called after each HIT.
    Raises PublishError before sending anything when the settings do not allow publishing."""
    config = config_for(campaign)
    _check(campaign, config)
    if batch is None:
        if api.dry_run:
            items = list(unpublished_items(campaign)[:limit] if limit else unpublished_items(campaign))
            if not items:
                raise PublishError("every item of the campaign is already in a batch")
            report = PublishReport(None, estimate(campaign, items), dry_run=True)
            spec = get_kind(campaign.kind)
            api.call("create_hit_type", **hit_type_params(campaign, config))
            for it in items:
                order = spec.presentation_order(it.payload, random.Random(it.pk))
                hit = MTurkHIT(item=it, order=order, request_token=request_token("(new batch)", it.pk),
                               max_assignments=max_assignments(campaign, it, config))
                api.call("create_hit_with_hit_type", HITTypeId="(from CreateHITType)",
                         MaxAssignments=hit.max_assignments, LifetimeInSeconds=config.hit_lifetime_seconds,
                         Question=question_for(campaign, config, hit), RequesterAnnotation="(new batch id)",
                         UniqueRequestToken=hit.request_token)
            report.calls = api.describe()
            return report
        batch = create_batch(campaign, limit=limit, user=user)
    hits = list(batch.hits.select_related("item").order_by("pk"))
    report = PublishReport(batch, cost_estimate([h.max_assignments for h in hits], batch.reward, masters=config.masters),
                           dry_run=api.dry_run)
    if not batch.hit_type_id:
        response = api.call("create_hit_type", **hit_type_params(campaign, config))
        if response is not None:
            batch.hit_type_id = response["HITTypeId"]
            batch.save(update_fields=["hit_type_id"])
    for done, hit in enumerate(hits, 1):
        if hit.hit_id:
            report.existing += 1
            continue
        try:
            response = api.call(
                "create_hit_with_hit_type", HITTypeId=batch.hit_type_id or "(from CreateHITType)",
                MaxAssignments=hit.max_assignments, LifetimeInSeconds=config.hit_lifetime_seconds,
                Question=question_for(campaign, config, hit), RequesterAnnotation=batch.batch_id,
                UniqueRequestToken=hit.request_token,
            )
        except MTurkError as exc:
            found = None
            if "already exists" in exc.message.lower() or "uniquerequesttoken" in exc.message.lower():
                found = _find_existing(api, batch, hit, exc.message)
            if found:
                hit.hit_id, hit.status, hit.error = found, "Assignable", ""
                hit.save(update_fields=["hit_id", "status", "error"])
                report.existing += 1
            else:
                hit.status, hit.error = "error", str(exc)
                hit.save(update_fields=["status", "error"])
                report.failed[hit.item.key] = str(exc)
            continue
        if response is not None:
            h = response["HIT"]
            hit.hit_id, hit.status, hit.error = h["HITId"], h.get("HITStatus", "Assignable"), ""
            hit.expires_at = h.get("Expiration")
            hit.save(update_fields=["hit_id", "status", "error", "expires_at"])
            report.created += 1
        if progress:
            progress(done, len(hits))
    if not api.dry_run and campaign.state in (Campaign.DRAFT, Campaign.PAUSED) and report.created + report.existing:
        engine.set_state(campaign, Campaign.LIVE)
    report.calls = api.describe() if api.dry_run else ""
    return report
