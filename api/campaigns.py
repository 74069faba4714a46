"""REST resources of rating campaigns: list, create, detail, state transitions, progress, the
campaign report, the judgments export and worker statistics.

=============================================  ======  ============================================================
resource                                       method  the same as
=============================================  ======  ============================================================
``/api/campaigns/``                            GET     the campaign list ``/campaigns/`` (:func:`analysis.campaign_list.campaign_rows`), paginated
``/api/campaigns/``                            POST    ``manage.py create_campaign`` (its checks, then :func:`crowd.engine.create_campaign` called as it calls it)
``/api/campaigns/<name>/``                     GET     the campaign's settings, progress and the states it may move to
``/api/campaigns/<name>/state/``               POST    the campaign page's Publish / Pause / Resume / Finish (:func:`crowd.engine.set_state`, audit trail)
``/api/campaigns/<name>/progress/``            GET     ``/campaigns/<name>/status.json`` (:func:`crowd.engine.campaign_counts`)
``/api/campaigns/<name>/report/``              GET     ``/campaigns/<name>/report.json`` (the stored campaign report; 202 while computed, 503 at the cap)
``/api/campaigns/<name>/judgments/``           GET     ``/campaigns/<name>/judgments.csv|jsonl`` and ``export_campaign`` (:mod:`crowd.export`)
``/api/campaigns/<name>/workers/``             GET     the worker table of the campaign page (:func:`crowd.quality.worker_stats`, cached)
=============================================  ======  ============================================================

Who may do what, as on the owner pages: every resource needs an authenticated user (401
otherwise); a campaign is visible to its owners and superusers only
(:func:`api.base.owned_campaign`, :func:`api.base.visible_campaigns`); to anyone else it does not
exist (404, so names do not leak). Any authenticated user may create a campaign, as with the
page's form, and becomes one of its owners. Only a superuser names further ``owners`` directly;
anyone else invites co-owners, who accept (:mod:`api.owners`), and a non-empty ``owners`` from
them is refused with one message whatever the names, so user names cannot be probed.

Creating takes the options of ``create_campaign`` by their names (``kind``, ``dataset``, ``name``,
``title``, ``owners``, ``k``, ``images``, ``systems``, ``captions_per_set``, ``pairs_per_image``,
``atoms`` (the CSV text of an atoms file), ``image_url``, ``gold``, ``gold_every``, ``cap``,
``minutes``, ``lifetime_days``, ``reward``, ``seed``, ``live``, ``provider``, ``bundle``,
``session_minutes``, ``consent_text`` (the text of ``--consent-file``), ``practice``,
``practice_pass``, ``attention_max_failures``), checked by the command's own
:meth:`~crowd.management.commands.create_campaign.Command.check_options` and by the engine; a
refusal is a 400 problem naming the field and nothing is written. ``--images-dir`` has no API
counterpart: a client does not name folders of the server (give ``image_url``, or set the dataset's
image source with ``set_image_source``). A name already taken is 409. The write honours
``Idempotency-Key`` (:func:`api.base.idempotent`): the same key and body answer the first response
again instead of failing on the name.

The judgments export is JSON by default (an array of the JSON Lines export's objects), CSV with
``?format=csv`` (the page's file, formula-safe cells: :mod:`captioneval.utils.csvsafe`) or JSON Lines with
``?format=jsonl``.
"""
from __future__ import annotations

import csv
import json
import re

from django.contrib.auth import get_user_model
from django.core.management.base import CommandError
from django.db import IntegrityError, transaction
from django.http import Http404, HttpResponse
from django.urls import reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import exceptions, mixins, permissions, renderers, serializers, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from analysis import cached_reports, campaign_list, campaign_views, limits
from analysis.models import Report
from analysis.tasks import request_report
from crowd import audit, engine, export, images
from crowd.kinds import KINDS, CampaignSpecError
from crowd.kinds.visual_atom import atoms_text
from crowd.management.commands.create_campaign import Command as CreateCampaign
from crowd.models import Campaign, Dataset
from crowd.views import owner

from .base import ProblemSerializer, RateThrottle, idempotent_write, owned_campaign, visible_campaigns
from .reports import STORED, Busy, ReportThrottle, answer

#: a campaign name in a path (a slug, as the pages' URLs)
NAME = r"[-a-zA-Z0-9_]+"


# --- representations -------------------------------------------------------------------------------------
class CampaignProgress(serializers.Serializer):
    """Live counts of a campaign (``/campaigns/<name>/status.json``, :func:`crowd.views.owner.live_status`)."""

    campaign = serializers.CharField()
    state = serializers.CharField()
    items = serializers.IntegerField(help_text="real items (gold items not counted)")
    gold_items = serializers.IntegerField()
    judgments = serializers.IntegerField(help_text="counted judgments")
    needed = serializers.IntegerField(help_text="items x judgments per item")
    complete_items = serializers.IntegerField()
    late = serializers.IntegerField()
    by_state = serializers.DictField(child=serializers.IntegerField(), help_text="assignments by state")
    percent = serializers.FloatField(help_text="judgments / needed x 100, one decimal")
    gold_required = serializers.IntegerField(help_text="gold checks a rater passes before their answers count")
    awaiting_gold = serializers.IntegerField(help_text="answers kept but not counted until their rater passes them")
    raters = serializers.ListField(
        child=serializers.DictField(), help_text="per rater (crowd.engine.rater_counts): worker, label, accepted, "
        "submitted, gold_graded, awaiting_gold, gold_needed, counted, status, reason")
    invitations = serializers.ListField(
        child=serializers.DictField(), help_text="a local campaign's invitation links: worker (id), rater, state "
        "(unused, used, revoked), tasks")


class CampaignHeading(serializers.Serializer):
    """What every representation of a campaign starts with (:func:`heading_of`)."""

    name = serializers.CharField()
    title = serializers.CharField()
    kind = serializers.CharField()
    dataset = serializers.CharField(help_text="the dataset's name")
    state = serializers.CharField()
    provider = serializers.CharField()
    created_at = serializers.DateTimeField()


def heading_of(campaign: Campaign) -> dict:
    """The :class:`CampaignHeading` fields of ``campaign``: name, title, kind, dataset name, state,
    provider and creation time (a datetime)."""
    return {"name": campaign.name, "title": campaign.title, "kind": campaign.kind, "dataset": campaign.dataset.name,
            "state": campaign.state, "provider": campaign.provider, "created_at": campaign.created_at}


class CampaignSummary(CampaignHeading):
    """One campaign of the list: what the page ``/campaigns/`` shows of it."""

    items = serializers.IntegerField()
    complete_items = serializers.IntegerField()
    percent = serializers.IntegerField(help_text="complete items / items x 100")
    judgments = serializers.IntegerField()
    needed = serializers.IntegerField()
    agreement = serializers.DictField(child=serializers.FloatField(allow_null=True), allow_null=True,
                                      help_text="Krippendorff's alpha per criterion from the newest stored report "
                                                "(null: none computed yet)")
    url = serializers.URLField()


class CampaignDetail(CampaignHeading):
    """A campaign's settings, live progress and the states it may move to."""

    transitions = serializers.ListField(child=serializers.CharField(), help_text="states it may move to")
    owners = serializers.ListField(child=serializers.CharField())
    k = serializers.IntegerField(help_text="judgments per item")
    per_worker_cap = serializers.IntegerField(allow_null=True)
    assignment_seconds = serializers.IntegerField()
    reward = serializers.CharField(help_text="US dollars per assignment")
    gold_every = serializers.IntegerField()
    seed = serializers.IntegerField(allow_null=True)
    expires_at = serializers.DateTimeField(allow_null=True)
    results_published_at = serializers.DateTimeField(allow_null=True)
    progress = CampaignProgress()


class JudgmentRow(serializers.Serializer):
    """One row of the long-format export (:data:`crowd.export.COLUMNS`, :func:`crowd.export.rows`)."""

    campaign = serializers.CharField()
    kind = serializers.CharField()
    item = serializers.CharField(help_text="the item's key")
    unit = serializers.CharField(help_text="what was rated: a caption, a caption set, a pair...")
    criterion = serializers.CharField()
    worker = serializers.CharField(help_text="provider:external id")
    value = serializers.JSONField(help_text="the answer for this unit and criterion (a number, a choice, a text)")
    assignment = serializers.IntegerField()
    state = serializers.CharField()
    counted = serializers.BooleanField()
    late = serializers.BooleanField()
    gold = serializers.BooleanField()
    gold_correct = serializers.BooleanField(allow_null=True)
    accepted_at = serializers.CharField(help_text="ISO 8601")
    submitted_at = serializers.CharField(allow_null=True, help_text="ISO 8601")
    work_seconds = serializers.FloatField(allow_null=True)
    order = serializers.JSONField(help_text="the presentation order shown")
    seed = serializers.IntegerField()
    template_version = serializers.CharField()
    image_key = serializers.CharField(allow_null=True, help_text="the rated image's key in its dataset (None: no image)")
    system = serializers.JSONField(
        allow_null=True, help_text="the system whose caption was rated (forced choice: [B's, C's]; None: a gold item)")
    caption = serializers.JSONField(
        allow_null=True, help_text="the caption text rated (forced choice: [B, C]; diversity: the set's texts; "
                                   "visual atoms: the word; description: None, the value is the rater's text)")


def progress_of(campaign: Campaign) -> dict:
    """The campaign's live counts as ``/campaigns/<name>/status.json`` gives them
    (:func:`crowd.views.owner.live_status`)."""
    return owner.live_status(campaign)


def detail_of(request, campaign: Campaign) -> dict:
    """The :class:`CampaignDetail` of ``campaign`` (JSON types: times as ISO 8601 text, so that an
    idempotent write can store it)."""
    return CampaignDetail({
        **heading_of(campaign), "transitions": sorted(engine.TRANSITIONS[campaign.state]),
        "owners": sorted(campaign.owners.values_list("username", flat=True)),
        "k": campaign.judgments_per_item, "per_worker_cap": campaign.per_worker_cap,
        "assignment_seconds": campaign.assignment_seconds, "reward": str(campaign.reward),
        "gold_every": campaign.gold_every, "seed": (campaign.options or {}).get("seed"),
        "expires_at": campaign.expires_at, "results_published_at": campaign.results_published_at,
        "progress": progress_of(campaign),
    }).data


def campaign_url(request, campaign: Campaign) -> str:
    return request.build_absolute_uri(reverse("api:campaign-detail", args=[campaign.name]))


# --- create --------------------------------------------------------------------------------------------
class CampaignCreate(serializers.Serializer):
    """The options of ``manage.py create_campaign`` (see the module docstring); defaults as the command's."""

    kind = serializers.ChoiceField(choices=list(KINDS))
    dataset = serializers.CharField(max_length=200, help_text="the dataset's name")
    name = serializers.CharField(max_length=200, help_text="campaign name (1-100 letters, digits, - and _; unique)")
    title = serializers.CharField(max_length=1000, required=False, default="", allow_blank=True)
    owners = serializers.ListField(child=serializers.CharField(max_length=150), required=False, default=list,
                                   max_length=100, help_text="superusers only: user names of further owners (you are "
                                                                   "one anyway); others invite co-owners")
    k = serializers.IntegerField(required=False, allow_null=True, default=None,
                                 help_text="judgments per item (default: the kind's, 3 or 5)")
    images = serializers.IntegerField(required=False, allow_null=True, default=None, min_value=1,
                                      help_text="a random sample of this many images (default all)")
    systems = serializers.ListField(child=serializers.CharField(max_length=200), required=False, default=list,
                                    help_text="diversity: system names (default all)")
    captions_per_set = serializers.IntegerField(required=False, allow_null=True, default=None,
                                                help_text="diversity: the first m captions of each set")
    pairs_per_image = serializers.IntegerField(required=False, allow_null=True, default=None,
                                               help_text="forced choice: (B, C) pairs per image")
    atoms = serializers.CharField(required=False, default="", allow_blank=True, max_length=5_000_000,
                                  help_text="visual atoms: the text of a CSV file of word,category[,count]")
    image_url = serializers.CharField(required=False, default="", allow_blank=True, max_length=2000,
                                      help_text="image URL template: http:// or https:// with {key}")
    gold = serializers.IntegerField(required=False, allow_null=True, default=None,
                                    help_text="number of gold items (default 5% of the items, >= 2)")
    gold_every = serializers.IntegerField(required=False, default=10, help_text="a gold item every n tasks (0: none)")
    cap = serializers.IntegerField(required=False, allow_null=True, default=None,
                                   help_text="at most this many items per worker")
    minutes = serializers.FloatField(required=False, default=10, help_text="time a worker has for one task")
    lifetime_days = serializers.FloatField(required=False, allow_null=True, default=None)
    reward = serializers.CharField(required=False, default="0", max_length=50, help_text="US dollars per assignment")
    seed = serializers.IntegerField(required=False, default=0, min_value=-(2**63), max_value=2**63 - 1)
    live = serializers.BooleanField(required=False, default=False, help_text="publish at once (default: draft)")
    provider = serializers.ChoiceField(choices=[c for c, _ in Campaign.PROVIDERS], required=False, default=Campaign.LOCAL)
    bundle = serializers.IntegerField(required=False, default=0, help_text="tasks per participant session, 0-1000")
    session_minutes = serializers.IntegerField(required=False, default=0, help_text="session time budget, 0-1440")
    consent_text = serializers.CharField(required=False, default="", allow_blank=True, trim_whitespace=True,
                                         max_length=engine.MAX_CONSENT_CHARS, help_text="consent shown before any task")
    practice = serializers.IntegerField(required=False, default=0, help_text="practice items, 0-100")
    practice_pass = serializers.FloatField(required=False, default=0.8, help_text="pass mark, in (0, 1]")
    attention_max_failures = serializers.IntegerField(required=False, default=1, help_text="0-1000")


def _field_of(message: str) -> str:
    """The field the first option a message of ``create_campaign`` names is (``invalid --name ...`` -> name,
    ``--lifetime-days must ...`` -> lifetime_days); ``non_field_errors`` when it names none."""
    found = re.search(r"--([a-z][a-z-]*)", message)
    if found:
        field = {"consent-file": "consent_text"}.get(found.group(1), found.group(1).replace("-", "_"))
        if field in CampaignCreate().fields:
            return field
    return "non_field_errors"


def _api_words(message: str) -> str:
    """A message of the command in the API's words: ``--cap`` -> ``cap``."""
    for field in CampaignCreate().fields:
        message = message.replace(f"--{field.replace('_', '-')}", field)
    return message.replace("--consent-file", "consent_text")


def invalid(message: str, field: str | None = None) -> exceptions.ValidationError:
    return exceptions.ValidationError({field or _field_of(message): [_api_words(message)]})


#: the one answer to ``owners`` from a user who is not a superuser, whatever the names
OWNERS_BY_INVITATION = ("only a superuser sets owners directly; invite co-owners once the campaign exists "
                        "(POST /api/campaigns/<name>/owner-invitations/): they become owners when they accept")


def further_owners(user, names: list[str]) -> list:
    """The accounts of ``names`` to make owners besides ``user`` (their own name is ignored). Only a
    superuser sets owners directly (an unknown name: ValidationError naming it, as ``create_campaign
    --owner``); for anyone else any other name is refused with the one message
    :data:`OWNERS_BY_INVITATION`, whether or not it has an account, so that user names cannot be
    probed (co-owners are invited: :mod:`api.owners`)."""
    names = [n for n in names if n != user.get_username()]
    if names and not user.is_superuser:
        raise invalid(OWNERS_BY_INVITATION, "owners")
    users = get_user_model().objects
    owners = []
    for username in names:
        account = users.filter(username=username).first()
        if account is None:
            raise invalid(f"unknown user {username!r}", "owners")
        owners.append(account)
    return owners


def create_options(d: dict, user) -> tuple[Dataset, list, dict]:
    """(dataset, further owners, kind options) of validated :class:`CampaignCreate` data sent by
    ``user``, checked as ``create_campaign`` checks them (its :meth:`check_options`, then the
    dataset, the owners (:func:`further_owners`), the atoms); ValidationError naming the field
    otherwise."""
    o = dict(d, images_dir="", consent_file="")
    try:
        CreateCampaign.check_options(o)
    except CommandError as exc:
        raise invalid(str(exc)) from None
    try:  # the consent text is given as text, not a file: the same check as the file's content
        engine.check_journey_options(consent_text=d["consent_text"])
    except CampaignSpecError as exc:
        raise invalid(str(exc), "consent_text") from None
    dataset = Dataset.objects.filter(name=d["dataset"]).first()
    if dataset is None:
        raise invalid(f"unknown dataset {d['dataset']!r}", "dataset")
    owners = further_owners(user, d["owners"])
    options = {k: d[k] for k in ("images", "captions_per_set", "pairs_per_image", "gold") if d[k] is not None}
    if d["systems"]:
        options["systems"] = [s.strip() for s in d["systems"] if s.strip()]
    if d["image_url"]:
        options["image_url"] = d["image_url"]
    if d["atoms"]:
        try:
            options["atoms"] = owner.read_atoms(atoms_text(d["atoms"].encode("utf-8"), "atoms"))
        except CampaignSpecError as exc:
            raise invalid(str(exc), "atoms") from None
        except csv.Error as exc:
            raise invalid(f"atoms: not a valid CSV file ({exc})", "atoms") from None
    return dataset, owners, options


def create(request, d: dict) -> Response:
    """Create the campaign of validated :class:`CampaignCreate` data (see :func:`create_options`)
    as ``create_campaign`` does, the requesting user its first owner; 201 with its detail and
    ``Location``, 400 for a refused option, 409 for a name taken."""
    dataset, owners, options = create_options(d, request.user)
    try:
        with transaction.atomic():
            campaign = CreateCampaign.create(dataset, d, [request.user, *owners], options)
    except (CampaignSpecError, images.ImageSourceError) as exc:
        raise invalid(str(exc)) from None
    except IntegrityError:  # the same name created by a concurrent request
        raise NameTaken(f"a campaign named {d['name']!r} exists already") from None
    url = campaign_url(request, campaign)
    return Response(detail_of(request, campaign), status=201, headers={"Location": url})


class NameTaken(exceptions.APIException):
    status_code = 409
    default_detail = "a campaign of this name exists already"
    default_code = "campaign_exists"


# --- state transitions -----------------------------------------------------------------------------------
class StateChange(serializers.Serializer):
    """A move of the campaign: draft -> live <-> paused -> finished (:data:`crowd.engine.TRANSITIONS`)."""

    state = serializers.ChoiceField(choices=[s for s, _ in Campaign.STATES])
    confirm = serializers.BooleanField(required=False, default=False,
                                       help_text="required (true) to finish: finishing is final, as the page's "
                                                 "confirmation says")


class StateConflict(exceptions.APIException):
    status_code = 409
    default_detail = "the campaign cannot move to this state"
    default_code = "state_conflict"


def change_state(request, campaign: Campaign, state: str, confirm: bool) -> Response:
    """Move ``campaign`` to ``state`` as the page's buttons do (:func:`crowd.engine.set_state`, an
    audit entry publish/pause/resume/finish); the same state again changes nothing. 200 with the
    campaign's detail; 400 for finishing without ``confirm``; 409 for a move the engine refuses
    (e.g. a finished campaign, or a kind that shows images without pictures)."""
    if state == Campaign.FINISHED and campaign.state != Campaign.FINISHED and not confirm:
        counts = engine.campaign_counts(campaign)
        raise invalid(
            f"finishing is final (a finished campaign cannot be published or resumed; "
            f"{counts['by_state'].get('accepted', 0)} tasks are held now, {counts['complete_items']} of "
            f"{counts['items']} items are complete): send confirm: true to finish", "confirm")
    before = campaign.state
    try:
        engine.set_state(campaign, state)
    except engine.EngineError as exc:
        raise StateConflict(str(exc)) from None
    if before != campaign.state:  # the verbs of the page (crowd.views.owner.campaign_state)
        verb = {"live": "resume" if before == Campaign.PAUSED else "publish", "paused": "pause",
                "finished": "finish"}[campaign.state]
        audit.record(campaign, request.user, verb, detail={"from": before, "to": campaign.state})
    return Response(detail_of(request, campaign))


# --- judgments export renderers ------------------------------------------------------------------------
class _TextRenderer(renderers.BaseRenderer):
    """Text made by the view (a str) as it is; anything else (an error) as JSON."""

    charset = "utf-8"

    def render(self, data, accepted_media_type=None, renderer_context=None):
        if isinstance(data, str):
            return data.encode("utf-8")
        return json.dumps(data, ensure_ascii=False).encode("utf-8")


class CSVRenderer(_TextRenderer):
    media_type = "text/csv"
    format = "csv"


class JSONLinesRenderer(_TextRenderer):
    media_type = "application/x-ndjson"
    format = "jsonl"


# --- the viewset ------------------------------------------------------------------------------------------
class CampaignViewSet(mixins.ListModelMixin, viewsets.GenericViewSet):
    """Rating campaigns (see the module docstring)."""

    permission_classes = [permissions.IsAuthenticated]
    lookup_field = "name"
    lookup_value_regex = NAME
    serializer_class = CampaignSummary

    def get_queryset(self):
        return visible_campaigns(self.request.user).select_related("dataset").order_by("-created_at", "pk")

    def perform_content_negotiation(self, request, force=False):
        """DRF's negotiation, with an unknown ``?format=`` a 400 naming the formats (DRF answers 404)."""
        try:
            return super().perform_content_negotiation(request, force)
        except Http404:
            formats = ", ".join(r.format for r in self.get_renderers())
            raise exceptions.ValidationError({"format": [f"unknown format; use one of {formats}"]}) from None

    def handle_exception(self, exc):
        """A campaign report refused at the cap on concurrent computations is 503 ``busy`` with
        ``Retry-After`` (:class:`api.reports.Busy`), as the report resources."""
        return super().handle_exception(Busy(exc) if isinstance(exc, limits.ComputationsBusy) else exc)

    def campaign(self, name) -> Campaign:
        """The campaign ``name`` if the user may see it (:func:`api.base.owned_campaign`), else 404."""
        return owned_campaign(self.request, name)

    @extend_schema(summary="Your campaigns", description="The campaigns you own (a superuser: all), newest first, "
                   "with progress and agreement as the page /campaigns/ shows them.")
    def list(self, request, *args, **kwargs):
        page = self.paginate_queryset(self.get_queryset())
        rows = []
        for row in campaign_list.campaign_rows(page):
            c = row.pop("campaign")
            rows.append({**heading_of(c), **row, "url": campaign_url(request, c)})
        return self.get_paginated_response(CampaignSummary(rows, many=True).data)

    @extend_schema(summary="Create a campaign", request=CampaignCreate,
                   description="The options of manage.py create_campaign (docs/campaigns.md); you become an owner.",
                   responses={201: CampaignDetail, 409: OpenApiResponse(ProblemSerializer, description="name taken")})
    def create(self, request, *args, **kwargs):
        def write(data):
            if Campaign.objects.filter(name=data["name"]).exists():
                raise NameTaken(f"a campaign named {data['name']!r} exists already")
            return create(request, data)

        return idempotent_write(request, CampaignCreate, write)

    @extend_schema(summary="A campaign", responses={200: CampaignDetail})
    def retrieve(self, request, name=None):
        return Response(detail_of(request, self.campaign(name)))

    @extend_schema(summary="Move a campaign to another state", request=StateChange,
                   description="Publish (live), pause, resume (live) or finish a campaign, as its page's buttons. "
                               "Finishing is final and needs confirm: true.",
                   responses={200: CampaignDetail, 409: OpenApiResponse(ProblemSerializer,
                                                                        description="the move is refused")})
    @action(detail=True, methods=["post"], url_path="state", url_name="state")
    def state(self, request, name=None):
        campaign = self.campaign(name)
        return idempotent_write(request, StateChange, lambda d: change_state(request, campaign, d["state"], d["confirm"]))

    @extend_schema(summary="Progress of a campaign", responses={200: CampaignProgress},
                   description="The JSON of /campaigns/<name>/status.json: live counts, nothing computed.")
    @action(detail=True, methods=["get"], url_path="progress", url_name="progress")
    def progress(self, request, name=None):
        return Response(progress_of(self.campaign(name)))

    @extend_schema(
        summary="The campaign report",
        description="The JSON of /campaigns/<name>/report.json: agreement, human ceiling, metric-human "
                    "correlations (analysis.campaigns.campaign_report, stored; 202 while computed), with live "
                    "progress and the worker table.",
        responses={200: OpenApiResponse(OpenApiTypes.OBJECT, description="the campaign report"), 202: STORED[202],
                   503: STORED[503]})
    @action(detail=True, methods=["get"], url_path="report", url_name="report",
            throttle_classes=[RateThrottle, ReportThrottle])  # a report request: the report rate limit too
    def report(self, request, name=None):
        campaign = self.campaign(name)
        row = request_report(Report.CAMPAIGN, *cached_reports.campaign_key(campaign), campaign=campaign)
        data = row.data if row.status == Report.DONE else None
        read = (data, None, None if data is not None else {"status": row.status}, row)

        def finish(stored):
            report = cached_reports.with_live_progress(stored, campaign)
            report["workers"] = campaign_views.worker_stats(campaign, report["progress"])
            return report

        return answer(request, read, "campaign report", finish)

    @extend_schema(
        summary="The campaign's judgments",
        description="Every submitted assignment in long format (one row per rated unit), as "
                    "/campaigns/<name>/judgments.csv|jsonl and manage.py export_campaign: JSON (an array of the "
                    "JSON Lines objects), ?format=csv (formula-safe cells) or ?format=jsonl.",
        parameters=[OpenApiParameter("format", OpenApiTypes.STR, OpenApiParameter.QUERY, required=False,
                                     enum=["json", "csv", "jsonl"], description="json (default), csv or jsonl")],
        responses={(200, "application/json"): OpenApiResponse(JudgmentRow(many=True), description="array of rows"),
                   (200, "text/csv"): OpenApiResponse(OpenApiTypes.STR, description="CSV"),
                   (200, "application/x-ndjson"): OpenApiResponse(OpenApiTypes.STR, description="JSON Lines")})
    @action(detail=True, methods=["get"], url_path="judgments", url_name="judgments",
            renderer_classes=[renderers.JSONRenderer, CSVRenderer, JSONLinesRenderer], pagination_class=None)
    def judgments(self, request, name=None):
        campaign = self.campaign(name)
        fmt = request.accepted_renderer.format
        if fmt in ("csv", "jsonl"):  # the page's file as it is (DRF would drop the type of an empty body)
            text = export.to_csv(campaign) if fmt == "csv" else export.to_jsonl(campaign)
            response = HttpResponse(text, content_type=f"{request.accepted_renderer.media_type}; charset=utf-8")
            response["Content-Disposition"] = f'attachment; filename="{campaign.name}-judgments.{fmt}"'
            return response
        return Response([{c: r[c] for c in export.COLUMNS} for r in export.rows(campaign)])

    @extend_schema(
        summary="Worker statistics of a campaign",
        description="The worker table of the campaign page (crowd.quality.worker_stats: tasks by state, counted "
                    "judgments, gold accuracy, median seconds, agreement with the others, speed flag, standing).",
        responses={200: OpenApiResponse(OpenApiTypes.OBJECT, description='{"campaign", "workers": [...]}')})
    @action(detail=True, methods=["get"], url_path="workers", url_name="workers")
    def workers(self, request, name=None):
        campaign = self.campaign(name)
        progress = engine.campaign_counts(campaign)
        return Response({"campaign": campaign.name, "workers": campaign_views.worker_stats(campaign, progress)})


def register(router) -> None:
    """Add the campaigns (:class:`CampaignViewSet`, under ``campaigns/``) to the API router (:mod:`api.urls`)."""
    router.register("campaigns", CampaignViewSet, basename="campaign")
