"""Rater pages: join by invitation, preview, accept, do, submit or return a task.

A rater is a :class:`crowd.models.Worker`, found from the session (an invitation link puts it
there) or from the logged-in Django user. A worker rates only the campaigns it is a rater of
(:class:`crowd.models.CampaignRater`: an invitation link is bound to its campaign): ``/rate/``
lists only those, and every page of another campaign answers 404 exactly as a campaign that does
not exist. Being logged in (owner, staff, superuser) makes nobody a rater
(:func:`crowd.engine.worker_for_user`). Raters only ever see their own assignments: another
rater's assignment id answers 404 exactly as a missing one does, and changes nothing.

The flow (docs/campaigns.md, "The rater's flow"): the rater accepts once, on the first preview;
after that every submission (and every returned task) is followed by the next task, accepted by
the same request through :func:`crowd.engine.accept` (so the engine's guarantees hold unchanged),
until there is none or the rater chooses "Submit and stop". Each task page says "Task n of N"
(:func:`progress_bounded`, in constant time: "N+" when more is open than it looks ahead), the time left in words (:func:`friendly_duration`) and, to a warned rater, what
the quality checks found and what happens next (:func:`crowd.quality.rater_warning`).
"""
from __future__ import annotations

import random
import secrets

from django.contrib import messages
from django.db.models import Count, Q
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from crowd import engine
from crowd.kinds import AnswerError, get_kind
from crowd.models import Assignment, Campaign, Item, Worker
from crowd.providers import get_provider
from crowd.quality import rater_warning
from crowd.ratelimit import rater_limited

LOCAL = get_provider(Campaign.LOCAL)


def friendly_duration(seconds) -> str:
    """A duration for people: ``599`` -> ``"9 min 59 s"``, ``45`` -> ``"45 s"``, ``3720`` ->
    ``"1 h 2 min"``, ``0`` (or less) -> ``"0 s"``. ``seconds`` is a number of seconds; fractions are
    dropped. The task page's script (templates/crowd/tasks/_script.html) counts down the same way."""
    s = max(0, int(seconds))
    h, rest = divmod(s, 3600)
    m, sec = divmod(rest, 60)
    if h:
        return f"{h} h {m} min" if m else f"{h} h"
    if m:
        return f"{m} min {sec} s" if sec else f"{m} min"
    return f"{sec} s"


#: how far ahead "Task n of N" counts the items still open to a rater: at most this many open items
#: (and gold items) are read, so a task page costs the same at 50 items as at 50,000; beyond it the
#: page says "Task n of N+" (N a lower bound)
PROGRESS_LOOKAHEAD = 100


def progress(campaign: Campaign, worker: Worker, item: Item, current: Assignment | None = None) -> tuple[int, int]:
    """(n, N) for "Task n of N" of ``worker`` in ``campaign``, ``item`` being the task on screen
    (their accepted assignment ``current``, or the previewed item when ``current`` is None); see
    :func:`progress_bounded`, of which this is the first two values."""
    return progress_bounded(campaign, worker, item, current)[:2]


def progress_bounded(campaign: Campaign, worker: Worker, item: Item,
                     current: Assignment | None = None) -> tuple[int, int, bool]:
    """(n, N, more) for "Task n of N" of ``worker`` in ``campaign``, ``item`` being the task on screen
    (their accepted assignment ``current``, or the previewed item when ``current`` is None).

    Constant time in the campaign's size: the open items and the unseen gold items are counted only
    up to :data:`PROGRESS_LOOKAHEAD` (or the per-worker cap, or the gold checks still due, when
    smaller), each a ``COUNT`` over a ``LIMIT``-ed index scan; the worker's own counts read their own
    rows. ``more`` is True when a count reached that bound: N is then a lower bound ("N+"), since
    the rater has more open items than the page looked at.

    n = the worker's submitted tasks in the campaign (check questions included) + 1, the task on
    screen. N = the most tasks the worker can do in the campaign, counting those done: n + the
    normal items still open to them (never given to them, with a free slot, within the per-worker
    cap) + the check questions (gold items) still to come: at most the gold items they were never
    given, and with gold served one task in ``gold_every`` only as many as the rule of
    :func:`crowd.engine.gold_checks_required` serves over those items. Other raters take items at
    the same time, so N can go down from one task to the next; it is never below n."""
    mine = Assignment.objects.filter(campaign=campaign, worker=worker, verified=True)
    # the worker's own counts in one statement (each is a filtered count over ``mine``)
    counts = mine.aggregate(
        done=Count("pk", filter=Q(state__in=Assignment.DONE_STATES)),
        normal_taken=Count("pk", filter=Q(item__is_gold=False, state__in=(engine.ACTIVE, *Assignment.DONE_STATES))),
        normal_kept=Count("pk", filter=Q(item__is_gold=False) & ~Q(state=Assignment.RETURNED)),
        gold_graded=Count("pk", filter=Q(item__is_gold=True, gold_correct__isnull=False)),
    )
    n = counts["done"] + 1
    previewed = current is None  # the item on screen is not among ``mine`` yet
    on_screen_normal = 1 if previewed and not item.is_gold else 0
    normal_taken = counts["normal_taken"] + on_screen_normal
    bound = PROGRESS_LOOKAHEAD
    if campaign.per_worker_cap is not None:
        bound = min(bound, max(0, campaign.per_worker_cap - normal_taken))
    # open items up to ``bound`` (+ the previewed one, still open): COUNT over a LIMIT-ed scan of the
    # partial index of open items (item_open_position) in serving order, less the items this worker
    # was given (a hashed NOT IN of their own rows). ``full`` is kept by the engine under the item's
    # row lock and is stale only in the safe direction (crowd.engine._open_items re-checks the slots
    # when claiming), so this is the count of items with a free slot, read without a subquery per item.
    given = Assignment.objects.filter(campaign=campaign, worker=worker).values("item_id")
    open_items = (Item.objects.filter(campaign=campaign, is_gold=False, full=False).exclude(pk__in=given)
                  .order_by("position"))
    looked = open_items[:bound + on_screen_normal].count() if bound else 0
    open_normal = max(0, looked - on_screen_normal)
    more = open_normal >= PROGRESS_LOOKAHEAD
    gold_more = 0
    if campaign.provider == Campaign.LOCAL and campaign.gold_every:
        on_screen_gold = 1 if previewed and item.is_gold else 0
        gold_given = counts["gold_graded"] + (1 if item.is_gold else 0)
        if campaign.gold_every == 1:
            needed = PROGRESS_LOOKAHEAD
        else:
            # gold is due while graded <= normal // (gold_every - 1): over every normal task they can
            # still reach, normal_end // (gold_every - 1) + 1 graded checks in all
            normal_end = counts["normal_kept"] + open_normal + on_screen_normal
            needed = min(PROGRESS_LOOKAHEAD, max(normal_end // (campaign.gold_every - 1) + 1,
                                                 engine.gold_checks_required(campaign)) - gold_given)
        if needed > 0:
            unseen = (Item.objects.filter(campaign=campaign, is_gold=True).exclude(pk__in=mine.values("item_id"))
                      .order_by("position")[:needed + on_screen_gold].count() - on_screen_gold)
            gold_more = max(0, min(unseen, needed))
            more = more or (campaign.gold_every == 1 and gold_more >= PROGRESS_LOOKAHEAD)
    return n, max(n, n + open_normal + gold_more), more


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
    from crowd import journey  # a campaign with a journey (bundle, consent, practice): its session pages

    if journey.uses_journey(campaign):
        return _to_journey(request, campaign, worker)
    current = engine.active_assignment(campaign, worker)
    if current and campaign.state != Campaign.FINISHED:  # a finished campaign takes no more answers
        return redirect("crowd:task", name=campaign.name, pk=current.pk)
    reason = engine.unavailable_reason(campaign, worker)
    item = None if reason else engine.preview(campaign, worker)
    if item is None:
        reason = reason or "done"
        message = engine.REASONS[reason]
        if reason == "blocked":
            message += (" This happens when answers come too fast to have read the task, or check questions "
                        "are answered against the instructions; a blocked rater's answers no longer count. "
                        "If you think this is a mistake, write to the campaign's owner.")
        return render(request, "crowd/rater/none.html", {
            "campaign": campaign, "reason": reason, "message": message,
        })
    spec = get_kind(campaign.kind)
    order = spec.presentation_order(item.payload, random.Random(0))
    n, total, more = progress_bounded(campaign, worker, item)
    return render(request, "crowd/rater/task.html", {
        "campaign": campaign, "spec": spec, "payload": item.payload, "preview": True,
        "task": spec.context(item.payload, order), "kind_template": spec.template,
        "task_number": n, "task_total": total, "task_total_more": more, "warning": rater_warning(campaign, worker),
    })


def _to_journey(request, campaign, worker):
    """Hand a local rater over to the participant journey (crowd.views.journey): resume the session
    this browser holds, else the rater's open session in the campaign, else the last one if it ended
    for good (screened out, failed attention checks: its completion page), else open a new one
    (:func:`crowd.journey.open_session`); keep its key in the browser session; go to its stage page."""
    from crowd import journey
    from crowd.models import ParticipantSession

    session = journey.session_for(str(request.session.get(journey.JOURNEY_SESSION_KEY) or ""), campaign)
    if session is None or session.worker_id != worker.pk or not session.is_open:
        mine = ParticipantSession.objects.filter(campaign=campaign, worker=worker)
        session = (mine.filter(ended_at__isnull=True).first()
                   or mine.filter(outcome__in=(ParticipantSession.SCREENED_OUT, ParticipantSession.FAILED_ATTENTION))
                   .order_by("-ended_at").first())
    if session is None:
        try:
            session = journey.open_session(campaign, worker, user_agent=request.META.get("HTTP_USER_AGENT", "")[:300])
        except engine.NoTask as exc:
            return render(request, "crowd/rater/none.html", {"campaign": campaign, "reason": exc.code,
                                                             "message": str(exc)})
        except engine.EngineError as exc:
            return render(request, "crowd/rater/error.html", {"campaign": campaign, "message": str(exc),
                                                              "code": exc.code}, status=exc.status)
    request.session[journey.JOURNEY_SESSION_KEY] = session.key
    return redirect("crowd:session", name=campaign.name)


@rater_limited
@require_POST
def accept(request, name):
    worker, denied = _need_worker(request)
    if denied:
        return denied
    campaign = _live_campaign(name, worker)
    from crowd import journey

    if journey.uses_journey(campaign):  # tasks only inside a session (consent, practice first)
        return redirect("crowd:next", name=campaign.name)
    try:
        assignment = engine.accept(campaign, worker)
    except engine.NoTask as exc:
        return render(request, "crowd/rater/none.html", {"campaign": campaign, "reason": exc.code, "message": str(exc)})
    except engine.EngineError as exc:
        return render(request, "crowd/rater/error.html", {"campaign": campaign, "message": str(exc)}, status=exc.status)
    return redirect("crowd:task", name=campaign.name, pk=assignment.pk)


def _own_scope(name, worker) -> Q:
    """The assignments a rater may open at a task URL of campaign ``name``: theirs, in that
    campaign, which they are (still) a rater of, and not served in a participant session (those
    are answered on the session's own pages, ``crowd.views.journey``, which keep the bundle's
    count and attention checks: here they are "no such task")."""
    return Q(campaign__name=name, worker=worker, campaign__in=engine.rater_campaigns(worker), session__isnull=True)


def _own_assignment(request, name, pk):
    worker, denied = _need_worker(request)
    if denied:
        return None, None, denied
    # Another rater's task is "no such task", exactly like a missing one: no existence oracle.
    assignment = Assignment.objects.select_related("campaign", "item").filter(_own_scope(name, worker), pk=pk).first()
    if assignment is None:
        raise Http404("no such task")
    assignment.worker = worker  # the same row (filtered on it): the task page needs no query for it
    return worker, assignment, None


def _render_task(request, assignment, errors=None, data=None, status=200):
    spec = get_kind(assignment.campaign.kind)
    seconds_left = max(0, int((assignment.deadline - timezone.now()).total_seconds()))
    n, total, more = progress_bounded(assignment.campaign, assignment.worker, assignment.item, assignment)
    return render(request, "crowd/rater/task.html", {
        "campaign": assignment.campaign, "spec": spec, "assignment": assignment, "payload": assignment.item.payload,
        "task": spec.context(assignment.item.payload, assignment.order), "kind_template": spec.template,
        "errors": errors or {}, "data": data or {}, "submit_key": secrets.token_hex(16),
        "seconds_left": seconds_left, "time_left": friendly_duration(seconds_left),
        "task_number": n, "task_total": total, "task_total_more": more,
        "warning": rater_warning(assignment.campaign, assignment.worker),
    }, status=status)


def _serve_next(request, campaign, worker, *, fresh: bool = False):
    """After a submission or a return: accept the rater's next task at once (the rater accepted the
    campaign on its first preview) with :func:`crowd.engine.accept`, and show it; when there is none
    (or the engine refuses) the campaign page says why. ``fresh``: ``campaign`` was read by the
    submission's own transaction (:func:`crowd.engine.submit` locks the assignment with its campaign
    and marks it finished when it completed it), so it is not read again."""
    if not fresh:
        campaign = Campaign.objects.get(pk=campaign.pk)  # fresh: the submission may have finished it
    try:
        nxt = engine.accept(campaign, worker)
    except engine.EngineError:
        return redirect("crowd:next", name=campaign.name)
    return redirect("crowd:task", name=campaign.name, pk=nxt.pk)


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
    worker, denied = _need_worker(request)
    if denied:
        return denied
    try:  # one lookup: the engine locks the assignment within the scope _own_assignment checks
        result = engine.submit(
            pk, worker, request.POST, submit_key=request.POST.get("submit_key", ""),
            item_id=request.POST.get("item"), scope=_own_scope(name, worker),
        )
    except AnswerError as exc:
        _, assignment, _ = _own_assignment(request, name, pk)
        return _render_task(request, assignment, errors=exc.errors, data=request.POST, status=400)
    except engine.EngineError as exc:
        if exc.code in ("unknown", "forbidden"):
            raise Http404("no such task") from None  # as _own_assignment: no existence oracle
        _, assignment, _ = _own_assignment(request, name, pk)
        return render(request, "crowd/rater/error.html", {
            "campaign": assignment.campaign, "message": str(exc), "code": exc.code,
        }, status=exc.status)
    assignment = result.assignment
    if result.late and not result.counted:
        messages.warning(request, "Your answer arrived after the time limit; it was kept and flagged for the owner.")
    elif result.created:
        messages.success(request, "Thank you, your answer was saved.")
    if request.POST.get("then") == "stop":  # "Submit and stop": the campaign page, nothing accepted
        return redirect("crowd:next", name=name)
    return _serve_next(request, assignment.campaign, worker, fresh=True)


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
    return _serve_next(request, assignment.campaign, worker)
