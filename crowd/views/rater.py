"""Rater pages: join by invitation, preview, accept, do, submit or return a task.

A rater is a :class:`crowd.models.Worker`, found from the session (an invitation link puts it
there) or from the logged-in Django user. A worker rates only the campaigns it is a rater of
(:class:`crowd.models.CampaignRater`: an invitation link is bound to its campaign): ``/rate/``
lists only those, and every page of another campaign answers 404 exactly as a campaign that does
not exist. Being logged in (owner, staff, superuser) makes nobody a rater
(:func:`crowd.engine.worker_for_user`). Raters only ever see their own assignments: another
rater's assignment id answers 404 exactly as a missing one does, and changes nothing.
"""
from __future__ import annotations

import random
import secrets

from django.contrib import messages
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from crowd import engine
from crowd.kinds import AnswerError, get_kind
from crowd.models import Assignment, Campaign, Worker
from crowd.providers import get_provider
from crowd.ratelimit import rater_limited

LOCAL = get_provider(Campaign.LOCAL)


def current_worker(request) -> Worker | None:
    """The rater making this request (local pool: invitation session or logged-in user)."""
    return LOCAL.worker_for_request(request)


def _need_worker(request):
    worker = current_worker(request)
    if worker is None:
        return None, render(request, "crowd/rater/no_worker.html", status=403)
    return worker, None


@rater_limited
@require_GET
def join(request, token):
    """An invitation link: remember the worker in this browser session and go to the campaigns."""
    worker = get_object_or_404(Worker, token=token, provider=Campaign.LOCAL)
    LOCAL.login(request, worker)
    target = request.GET.get("next", "")
    if not target.startswith("/rate/"):
        target = reverse("crowd:rater-home")
    return redirect(target)


@rater_limited
@require_GET
def home(request):
    worker, denied = _need_worker(request)
    if denied:
        return denied
    campaigns = engine.rater_campaigns(worker).filter(state=Campaign.LIVE).order_by("title")
    return render(request, "crowd/rater/home.html", {"worker": worker, "campaigns": campaigns})


def _live_campaign(name, worker):
    """The local campaign ``name`` if ``worker`` is one of its raters and it has started; else 404,
    the same answer as for a campaign that does not exist (MTurk workers use /mturk/)."""
    campaign = engine.rater_campaigns(worker).filter(name=name).first()
    if campaign is None or campaign.state == Campaign.DRAFT:
        raise Http404("no such campaign")
    return campaign


@rater_limited
@require_GET
def next_task(request, name):
    """Continue an accepted task, or preview the next one with an Accept button, or say why not."""
    worker, denied = _need_worker(request)
    if denied:
        return denied
    campaign = _live_campaign(name, worker)
    current = engine.active_assignment(campaign, worker)
    if current:
        return redirect("crowd:task", name=campaign.name, pk=current.pk)
    reason = engine.unavailable_reason(campaign, worker)
    item = None if reason else engine.preview(campaign, worker)
    if item is None:
        reason = reason or "done"
        return render(request, "crowd/rater/none.html", {
            "campaign": campaign, "reason": reason, "message": engine.REASONS[reason],
        })
    spec = get_kind(campaign.kind)
    order = spec.presentation_order(item.payload, random.Random(0))
    return render(request, "crowd/rater/task.html", {
        "campaign": campaign, "spec": spec, "payload": item.payload, "preview": True,
        "task": spec.context(item.payload, order), "kind_template": spec.template,
    })


@rater_limited
@require_POST
def accept(request, name):
    worker, denied = _need_worker(request)
    if denied:
        return denied
    campaign = _live_campaign(name, worker)
    try:
        assignment = engine.accept(campaign, worker)
    except engine.NoTask as exc:
        return render(request, "crowd/rater/none.html", {"campaign": campaign, "reason": exc.code, "message": str(exc)})
    except engine.EngineError as exc:
        return render(request, "crowd/rater/error.html", {"campaign": campaign, "message": str(exc)}, status=exc.status)
    return redirect("crowd:task", name=campaign.name, pk=assignment.pk)


def _own_assignment(request, name, pk):
    worker, denied = _need_worker(request)
    if denied:
        return None, None, denied
    # Another rater's task is "no such task", exactly like a missing one: no existence oracle.
    assignment = Assignment.objects.select_related("campaign", "item").filter(
        pk=pk, campaign__name=name, worker=worker, campaign__in=engine.rater_campaigns(worker)).first()
    if assignment is None:
        raise Http404("no such task")
    return worker, assignment, None


def _render_task(request, assignment, errors=None, data=None, status=200):
    spec = get_kind(assignment.campaign.kind)
    return render(request, "crowd/rater/task.html", {
        "campaign": assignment.campaign, "spec": spec, "assignment": assignment, "payload": assignment.item.payload,
        "task": spec.context(assignment.item.payload, assignment.order), "kind_template": spec.template,
        "errors": errors or {}, "data": data or {}, "submit_key": secrets.token_hex(16),
        "seconds_left": max(0, int((assignment.deadline - timezone.now()).total_seconds())),
    }, status=status)


@rater_limited
@require_GET
def task(request, name, pk):
    worker, assignment, denied = _own_assignment(request, name, pk)
    if denied:
        return denied
    if assignment.state != Assignment.ACCEPTED:
        return render(request, "crowd/rater/error.html", {
            "campaign": assignment.campaign, "message": f"This task is {assignment.state}.",
        }, status=409)
    return _render_task(request, assignment)


@rater_limited
@require_POST
def submit(request, name, pk):
    worker, assignment, denied = _own_assignment(request, name, pk)
    if denied:
        return denied
    try:
        result = engine.submit(
            assignment.pk, worker, request.POST, submit_key=request.POST.get("submit_key", ""),
            item_id=request.POST.get("item"),
        )
    except AnswerError as exc:
        assignment.refresh_from_db()
        return _render_task(request, assignment, errors=exc.errors, data=request.POST, status=400)
    except engine.EngineError as exc:
        return render(request, "crowd/rater/error.html", {
            "campaign": assignment.campaign, "message": str(exc), "code": exc.code,
        }, status=exc.status)
    if result.late and not result.counted:
        messages.warning(request, "Your answer arrived after the time limit; it was kept and flagged for the owner.")
    elif result.created:
        messages.success(request, "Thank you, your answer was saved.")
    return redirect("crowd:next", name=name)


@rater_limited
@require_POST
def return_task(request, name, pk):
    worker, assignment, denied = _own_assignment(request, name, pk)
    if denied:
        return denied
    try:
        engine.return_assignment(assignment.pk, worker, request.POST.get("reason", ""))
    except engine.EngineError as exc:
        return render(request, "crowd/rater/error.html", {"campaign": assignment.campaign, "message": str(exc)},
                      status=exc.status)
    messages.info(request, "The task was returned.")
    return redirect("crowd:next", name=name)
