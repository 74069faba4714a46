"""The pages MTurk workers see inside MTurk's frame (ExternalQuestion HITs).

MTurk loads ``/mturk/<campaign>/item/<item>/`` and appends ``assignmentId``, ``hitId``,
``turkSubmitTo`` and ``workerId``. In preview ``assignmentId`` is ``ASSIGNMENT_ID_NOT_AVAILABLE``
and the task is shown disabled. Once accepted, the answer is posted here first (validated and stored
through the engine, so nothing is lost if MTurk is slow), then a forward page posts it to
``turkSubmitTo + "/mturk/externalSubmit"`` with the assignmentId.

A third-party frame gets no cookies, so these pages use neither the session nor the CSRF cookie: a
signed token (Django signing, bound to the assignment, the worker and turkSubmitTo) identifies the
assignment on submit. The URL parameters are only a *claim* of identity (anyone can type them,
:class:`crowd.providers.mturk.MTurkProvider`): the assignment opened for them holds no slot and
counts nowhere until the collector finds it in MTurk's records with the answer carrying a second
signed token, ``ce_token``, that this page forwards to MTurk (:mod:`crowd.mturk.tokens`). A visit
never expires anyone else's assignment; a visit that would make a claim beyond the bounds of
:mod:`crowd.providers.claims` (per client address, per HIT, one per AssignmentId) is answered 429
(or 409) and stores nothing (:meth:`MTurkProvider.open_claim`). The pages may be framed by MTurk
only (``Content-Security-Policy: frame-ancestors`` from ``settings.MTURK_FRAME_ANCESTORS``);
``turkSubmitTo`` must be one of ``settings.MTURK_SUBMIT_ORIGINS``.
"""
from __future__ import annotations

import json
import random
import secrets

from django.conf import settings
from django.core import signing
from django.http import Http404
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.clickjacking import xframe_options_exempt
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from crowd import engine
from crowd.kinds import AnswerError, get_kind
from crowd.models import Assignment, Campaign, Item
from crowd.mturk import tokens
from crowd.providers import ClaimRefused, claims, get_provider
from crowd.ratelimit import client_address, rater_limited

SALT = "crowd.mturk.task"
KEEP_OUT = {"token", "csrfmiddlewaretoken", "assignmentId", tokens.FIELD}
MTURK = get_provider(Campaign.MTURK)


def framed(response):
    """Allow MTurk (and only MTurk) to frame the response."""
    response["Content-Security-Policy"] = "frame-ancestors " + " ".join(settings.MTURK_FRAME_ANCESTORS)
    return response


def _page(request, template, context, status=200):
    return framed(render(request, template, context, status=status))


def _unavailable(request, campaign, message, reason="error", status=200, return_hint=True):
    return _page(request, "crowd/mturk/unavailable.html", {
        "campaign": campaign, "message": message, "reason": reason, "return_hint": return_hint,
    }, status)


def _campaign_item(name, item_pk):
    campaign = get_object_or_404(Campaign, name=name, provider=Campaign.MTURK)
    item = Item.objects.filter(pk=item_pk, campaign=campaign).first()
    if item is None or campaign.state == Campaign.DRAFT:
        raise Http404("no such task")
    return campaign, item


def _render_form(request, campaign, item, *, assignment=None, token="", errors=None, data=None, status=200):
    spec = get_kind(campaign.kind)
    order = assignment.order if assignment else spec.presentation_order(item.payload, random.Random(0))
    seconds = max(0, int((assignment.deadline - timezone.now()).total_seconds())) if assignment else 0
    return _page(request, "crowd/mturk/task.html", {
        "campaign": campaign, "item": item, "payload": item.payload, "preview": assignment is None,
        "task": spec.context(item.payload, order), "kind_template": spec.template, "token": token,
        "action": reverse("crowd:mturk-submit", args=[campaign.name, item.pk]), "errors": errors or {},
        "data": data or {}, "submit_key": secrets.token_hex(16), "seconds_left": seconds,
    }, status)


def _forward(request, assignment, submit_to, fields, late=False):
    return _page(request, "crowd/mturk/forward.html", {
        "campaign": assignment.campaign, "assignment_id": assignment.provider_ref, "late": late,
        "submit_url": submit_to.rstrip("/") + "/mturk/externalSubmit", "fields": fields,
    })


@xframe_options_exempt
@rater_limited  # per client address: these pages carry no session
@require_GET
def task(request, name, item_pk):
    """Preview, or open the worker's assignment of the item (created on first visit)."""
    campaign, item = _campaign_item(name, item_pk)
    try:  # a claim: recorded (within its bounds), never counted until MTurk confirms it; it evicts nobody
        source = claims.source_of(client_address(request))
        claim, assignment = MTURK.open_claim(request, campaign, item, source=source)
    except ClaimRefused as exc:
        response = _unavailable(request, campaign, str(exc), exc.code, exc.status)
        if exc.retry_after:
            response["Retry-After"] = str(exc.retry_after)
        return response
    except engine.NoTask as exc:
        return _unavailable(request, campaign, str(exc), exc.code)
    except engine.EngineError as exc:
        return _unavailable(request, campaign, str(exc), exc.code, exc.status)
    if claim is None:  # a preview
        if campaign.state != Campaign.LIVE:
            return _unavailable(request, campaign, engine.REASONS.get(campaign.state, "Not available."), campaign.state,
                                return_hint=False)
        return _render_form(request, campaign, item)
    worker, submit_to = claim.worker, claim.get("turkSubmitTo")
    if assignment.state in Assignment.DONE_STATES:  # submitted here; MTurk may not have it yet
        fields = _answer_fields(assignment)
        return _forward(request, assignment, submit_to, fields, assignment.late)
    if assignment.state != Assignment.ACCEPTED:
        return _unavailable(request, campaign, f"This assignment is {assignment.state}.", assignment.state, 409)
    token = signing.dumps({"a": assignment.pk, "w": worker.pk, "t": submit_to}, salt=SALT)
    return _render_form(request, campaign, item, assignment=assignment, token=token)


def _answer_fields(assignment) -> list[tuple[str, str]]:
    """What is sent to MTurk with the submission: the answer (item order) and the screen order."""
    return [("ce_answer", json.dumps(assignment.answer, sort_keys=True)), ("order", json.dumps(assignment.order, sort_keys=True)),
            ("item", str(assignment.item_id)), (tokens.FIELD, tokens.issue(assignment))]


@csrf_exempt  # a third-party frame has no CSRF cookie; the signed token authorises the request
@xframe_options_exempt
@rater_limited
@require_POST
def submit(request, name, item_pk):
    """Store the answer (engine), then forward it to MTurk's externalSubmit."""
    campaign, item = _campaign_item(name, item_pk)
    try:
        claims = signing.loads(request.POST.get("token", ""), salt=SALT, max_age=campaign.assignment_seconds + 86400)
        assignment = Assignment.objects.select_related("worker", "campaign").get(pk=claims["a"], item=item)
        if assignment.worker_id != claims["w"]:
            raise ValueError
    except (signing.BadSignature, Assignment.DoesNotExist, KeyError, TypeError, ValueError):
        return _unavailable(request, campaign, "This form is not valid for this task (reload the HIT).", "bad-token", 403,
                            return_hint=False)
    try:
        result = engine.submit(assignment.pk, assignment.worker, request.POST,
                               submit_key=request.POST.get("submit_key", ""), item_id=request.POST.get("item"))
    except AnswerError as exc:
        assignment.refresh_from_db()
        return _render_form(request, campaign, item, assignment=assignment, token=request.POST["token"],
                            errors=exc.errors, data=request.POST, status=400)
    except engine.EngineError as exc:
        return _unavailable(request, campaign, str(exc), exc.code, exc.status, return_hint=False)
    fields = [(k, v) for k, v in request.POST.items() if k not in KEEP_OUT] + [
        ("order", json.dumps(result.assignment.order, sort_keys=True)), (tokens.FIELD, tokens.issue(result.assignment))]
    return _forward(request, result.assignment, claims["t"], fields, result.late)
