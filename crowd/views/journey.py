"""The participant journey's pages (issue 17): arrival, consent, instructions, practice, the bundle
of tasks, the completion page -- for local raters and Prolific participants -- and the owner's
page of participant sessions.

Who is behind a request: the :class:`~crowd.models.ParticipantSession` whose secret ``key`` this
browser session holds (``request.session[journey.JOURNEY_SESSION_KEY]``, set on arrival from
Prolific by :func:`prolific_start`, or by :func:`crowd.views.rater.next_task` for a local rater).
A participant only ever reaches their own session: a key of another campaign, no key, or a task
that is not one of their session's answers 404, exactly as a page that does not exist.

Arrival from Prolific (``/prolific/<campaign>/?PROLIFIC_PID=..&STUDY_ID=..&SESSION_ID=..``): the
URL parameters are a claim (anyone can type them). Malformed ones answer 400, a study that is not
this campaign's 403 (:meth:`ProlificProvider.claim_from_request`); the claim is then confirmed with
Prolific's own records (``GET /submissions/{SESSION_ID}/``, :meth:`ProlificProvider.confirm_session`):
unknown or mismatched answers 403, Prolific unreachable 503 with ``Retry-After`` and a retry link.
Only then is a session opened (:func:`crowd.journey.open_session`; a reload with the same
``SESSION_ID`` is the same session; a second concurrent session of the participant 409).

The stage page (``session``) shows where the participant is: consent, instructions, practice (one
item at a time in the kind's own form, each answer followed by feedback: right or wrong and the
expected answer), the current task of the bundle ("Task n of N", :func:`crowd.journey.progress`,
with the time budget left in words), or the completion page. Submits go through
:func:`crowd.engine.submit` with the page's submit key (a repeated submit records nothing new),
then :func:`crowd.journey.after_submit` and :func:`crowd.journey.next_task`, so the engine's
per-task guarantees hold unchanged. The completion page says how the session ended; for Prolific
it sends the participant to :meth:`ProlificProvider.completion_url` (a link, a ``Refresh`` header
and a ``<meta http-equiv="refresh">`` after 3 s), or, for outcomes without a code, asks them to
return the study on Prolific.
"""
from __future__ import annotations

import csv
import io
import secrets
from collections import Counter

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from crowd import engine
from crowd.kinds import AnswerError, get_kind
from crowd.models import Assignment, Campaign, ParticipantSession
from crowd.ratelimit import rater_limited
from crowd.views.owner import owned_campaign
from crowd.views.rater import friendly_duration
from captioneval.utils import csvsafe

#: the completion page's automatic redirect to Prolific, in seconds
REDIRECT_SECONDS = 3
#: Retry-After (seconds) when Prolific cannot be reached on arrival
RETRY_AFTER_SECONDS = 30

#: how a session ended, in the participant's words (the completion page)
OUTCOME_WORDS = {
    ParticipantSession.COMPLETED: "You have finished all your tasks. Thank you for your help!",
    ParticipantSession.NO_CONSENT: "You chose not to take part. Nothing was recorded as work.",
    ParticipantSession.SCREENED_OUT: "Not enough of your practice answers matched the expected ones, so the "
                                     "rating tasks are not for you this time. Thank you for trying.",
    ParticipantSession.FAILED_ATTENTION: "Too many attention checks were answered against the instructions, "
                                         "so this session has ended.",
    ParticipantSession.RETURNED: "This session was returned on Prolific, so it has ended.",
    ParticipantSession.TIMED_OUT: "The time for this session ran out before a task was finished.",
    ParticipantSession.REJECTED: "This session was rejected, so it has ended.",
    ParticipantSession.NO_TASK: "There are no tasks left for you in this study right now. Thank you!",
}

#: the stages in the order a participant meets them (the step list at the top of the pages)
STEPS = [(ParticipantSession.CONSENT, "Consent"), (ParticipantSession.INSTRUCTIONS, "Instructions"),
         (ParticipantSession.PRACTICE, "Practice"), (ParticipantSession.TASKS, "Tasks"),
         (ParticipantSession.ENDED, "Done")]


def _journey():
    """crowd.journey, imported when first needed (it imports the engine and the providers)."""
    from crowd import journey

    return journey


# --- small helpers ---------------------------------------------------------------------------------
def notice(request, *, title: str, message: str, status: int, code: str = "", campaign=None,
           retry_url: str = "", hint: str = "") -> HttpResponse:
    """A refusal or explanation as a page of its own: ``title`` (the heading), ``message`` (one
    sentence), HTTP ``status``, ``code`` (machine-readable, in ``data-code``), an optional
    ``retry_url`` (a "Try again" link) and ``hint`` (what to do next)."""
    return render(request, "crowd/journey/notice.html", {
        "title": title, "message": message, "code": code, "campaign": campaign, "retry_url": retry_url,
        "hint": hint,
    }, status=status)


def steps(session: ParticipantSession) -> list[dict]:
    """The journey's steps for the step list: ``{"stage", "label", "state"}`` with state ``done``,
    ``current`` or ``todo``; consent and practice are left out when the campaign has none."""
    campaign = session.campaign
    shown = [(s, label) for s, label in STEPS
             if not (s == ParticipantSession.CONSENT and not campaign.consent_text)
             and not (s == ParticipantSession.PRACTICE and not _journey().practice_items(campaign))]
    stages = [s for s, _ in shown]
    here = stages.index(session.stage) if session.stage in stages else 0
    return [{"stage": s, "label": label, "state": "done" if i < here else "current" if i == here else "todo"}
            for i, (s, label) in enumerate(shown)]


def _context(session: ParticipantSession, **extra) -> dict:
    return {"session": session, "campaign": session.campaign, "steps": steps(session), **extra}


def _participant(request, name) -> ParticipantSession:
    """The session this browser holds for campaign ``name``; Http404 when there is none (no key,
    a key of another campaign, an unknown key)."""
    journey = _journey()
    campaign = Campaign.objects.filter(name=name).first()
    key = request.session.get(journey.JOURNEY_SESSION_KEY, "")
    if campaign is None or not isinstance(key, str) or not key:
        raise Http404("no such session")
    session = journey.session_for(key, campaign)
    if session is None:
        raise Http404("no such session")
    return session


def _session_assignment(session: ParticipantSession, pk: int) -> Assignment:
    """The task ``pk`` of ``session``; Http404 for any other (another participant's, another session's)."""
    assignment = (Assignment.objects.select_related("campaign", "item", "worker")
                  .filter(pk=pk, session=session, worker_id=session.worker_id).first())
    if assignment is None:
        raise Http404("no such task")
    return assignment


def _to_stage(session: ParticipantSession):
    return redirect("crowd:session", name=session.campaign.name)


def _done(session: ParticipantSession):
    return redirect("crowd:session-done", name=session.campaign.name)


def practice_order(session: ParticipantSession, item: dict) -> dict:
    """The presentation order of practice ``item`` (``{"key", "payload", "gold"}``) in ``session``:
    the order :func:`crowd.journey.answer_practice` grades with (:func:`crowd.journey.practice_order`,
    fixed per session and item), unless ``item`` carries it already."""
    return item.get("order") or _journey().practice_order(session, item["key"])


def expected_words(kind: str, payload: dict, order: dict, gold: dict | None) -> str:
    """A practice item's expected answer ``gold`` in the words of its screen (``order``: the
    presentation order shown), e.g. ``"B: a dog runs"`` (forced choice), ``"Relevance: 4"``
    (rating), ``"Yes"`` (visual atoms), ``"Set 2: at most 0.30"`` (diversity); other kinds:
    ``"field: value"`` pairs. Empty for no gold."""
    if not gold:
        return ""
    try:
        if kind == "forced_choice":
            pos = list(order["sides"]).index(gold["choice"])
            return f"{'BC'[pos]}: {payload[gold['choice']][1]}"
        if kind == "rating":
            return "; ".join(f"{k.capitalize()}: {v}" for k, v in gold.items())
        if kind == "visual_atom":
            return "Yes" if gold.get("visual") in (True, "yes", 1) else "No"
        if kind == "diversity":
            pos = list(order["sets"]).index(gold["set"])
            return f"Set {pos + 1}: a diversity of at most {float(gold['max']):.2f}"
    except (KeyError, ValueError, TypeError, IndexError):
        pass
    return "; ".join(f"{k}: {v}" for k, v in gold.items())


# --- arrival -------------------------------------------------------------------------------------
@rater_limited
@require_GET
def prolific_start(request, name):
    """A Prolific participant arrives (GET ``PROLIFIC_PID``, ``STUDY_ID``, ``SESSION_ID``): check
    the parameters, confirm the submission with Prolific, open (or resume) the session, keep its key
    in a fresh browser session and go to the stage page. Refusals are pages: 400 malformed or
    missing parameters, 403 another study or a session Prolific does not know, 404 no such
    Prolific campaign, 409 a second concurrent session, 503 Prolific unreachable (``Retry-After``)."""
    from crowd.providers import ClaimRefused, get_provider

    journey = _journey()
    campaign = (Campaign.objects.filter(name=name, provider=Campaign.PROLIFIC).exclude(state=Campaign.DRAFT)
                .first())
    if campaign is None:
        raise Http404("no such study")
    provider = get_provider(Campaign.PROLIFIC)
    try:
        claim = provider.claim_from_request(request, campaign)
    except ClaimRefused as exc:
        title = "This link is not valid" if exc.status == 400 else "This link belongs to another study"
        return notice(request, title=title, message=str(exc), status=exc.status, code=exc.code, campaign=campaign,
                      hint="Please open the study again from your Prolific dashboard.")
    if claim is None:
        return notice(request, title="Please start from Prolific", status=400, code="no-params", campaign=campaign,
                      message="This page needs the PROLIFIC_PID, STUDY_ID and SESSION_ID that Prolific adds to the "
                              "study link.",
                      hint="Please open the study from your Prolific dashboard.")
    from crowd.prolific_client import ProlificUnavailable

    try:
        known = provider.confirm_session(campaign, claim)
    except ProlificUnavailable:
        response = notice(request, title="Prolific cannot be reached right now", status=503,
                          code="prolific-unavailable", campaign=campaign, retry_url=request.get_full_path(),
                          message="We could not check your Prolific session. Nothing is lost: please try again "
                                  f"in {RETRY_AFTER_SECONDS} seconds.")
        response["Retry-After"] = str(RETRY_AFTER_SECONDS)
        return response
    if not known:
        return notice(request, title="Prolific does not know this session", status=403, code="unknown-session",
                      campaign=campaign,
                      message="Prolific has no active submission with this SESSION_ID for this participant and study.",
                      hint="Please open the study again from your Prolific dashboard.")
    try:
        from crowd.providers.prolific import worker_for

        session = journey.open_session(  # the worker row is written only now that Prolific confirmed the claim
            campaign, worker_for(claim.worker.external_id), provider_ref=claim.provider_ref, study_ref=claim.get("STUDY_ID"),
            user_agent=request.META.get("HTTP_USER_AGENT", "")[:300])
    except engine.Conflict as exc:
        if exc.code == "concurrent-session":
            return notice(request, title="You already have a session open in this study", status=409,
                          code=exc.code, campaign=campaign,
                          message="Only one session per participant can be open at a time, and you have another one "
                                  "in progress.",
                          hint="Please go back to the browser tab of that session and finish it there, or return "
                               "this submission on Prolific.")
        return notice(request, title="That did not work", message=str(exc), status=exc.status, code=exc.code,
                      campaign=campaign)
    except engine.NoTask as exc:
        return notice(request, title="No tasks right now", message=str(exc), status=200, code=exc.code,
                      campaign=campaign,
                      hint="Please return this study on Prolific (open the study there and choose to return it) "
                           "so that your place can go to someone else.")
    except engine.EngineError as exc:
        return notice(request, title="That did not work", message=str(exc), status=exc.status, code=exc.code,
                      campaign=campaign)
    request.session.cycle_key()  # a new browser session for the participant (against fixation)
    request.session[journey.JOURNEY_SESSION_KEY] = session.key
    return redirect("crowd:session", name=campaign.name)


# --- the stage page --------------------------------------------------------------------------------
@rater_limited
@require_GET
def session_page(request, name):
    """Where the participant is: the consent, instructions or practice page; in the task stage a
    redirect to the current task (accepted now if needed, :func:`crowd.journey.next_task`); once
    ended, a redirect to the completion page."""
    journey = _journey()
    session = _participant(request, name)
    if session.stage == ParticipantSession.CONSENT:
        return render(request, "crowd/journey/consent.html", _context(session))
    if session.stage == ParticipantSession.INSTRUCTIONS:
        return render(request, "crowd/journey/instructions.html", _context(session))
    if session.stage == ParticipantSession.PRACTICE:
        return _render_practice(request, session)
    if session.stage == ParticipantSession.TASKS:
        return _next(session, request)
    return _done(session)


def _next(session: ParticipantSession, request=None):
    """The session's current task (accepting the next one if needed), or the completion page; an
    engine refusal other than a stage change is a page with its status (never a redirect loop)."""
    try:
        assignment = _journey().next_task(session)
    except engine.EngineError as exc:
        session.refresh_from_db()
        if session.stage != ParticipantSession.TASKS:
            return _to_stage(session)
        return notice(request, title="No task can be served right now", message=str(exc), status=exc.status,
                      code=exc.code, campaign=session.campaign,
                      retry_url=reverse("crowd:session", kwargs={"name": session.campaign.name}))
    if assignment is None:
        return _done(session)
    return redirect("crowd:session-task", name=session.campaign.name, pk=assignment.pk)


@rater_limited
@require_POST
def consent(request, name):
    """POST ``agree=1`` with ``version`` (the consent version shown), or ``decline=1``. Agreeing to a
    version that is no longer the campaign's answers 409 with the new text; declining ends the
    session (outcome no_consent) and shows the completion page."""
    journey = _journey()
    session = _participant(request, name)
    if session.stage != ParticipantSession.CONSENT:
        return _to_stage(session)
    if request.POST.get("decline"):
        journey.decline_consent(session)
        return _done(session)
    if not request.POST.get("agree"):
        return render(request, "crowd/journey/consent.html", _context(
            session, error="Please choose: I agree, or I do not agree."), status=400)
    try:
        version = int(request.POST.get("version", ""))
    except ValueError:
        return render(request, "crowd/journey/consent.html", _context(
            session, error="The consent version is missing; please read the text and agree again."), status=400)
    try:
        journey.give_consent(session, version)
    except engine.Conflict as exc:
        session.campaign.refresh_from_db()
        return render(request, "crowd/journey/consent.html", _context(
            session, error="The consent text has changed since you opened this page; please read the new text "
                           "below and agree again if you wish.", code=exc.code), status=409)
    return _to_stage(session)


@rater_limited
@require_POST
def instructions(request, name):
    """POST: the participant has read the instructions; on to practice or the tasks."""
    session = _participant(request, name)
    if session.stage == ParticipantSession.INSTRUCTIONS:
        _journey().finish_instructions(session)
    return _to_stage(session)


def _render_practice(request, session, *, item=None, errors=None, data=None, status=200):
    journey = _journey()
    items = journey.practice_items(session.campaign)
    item = item or journey.next_practice(session)
    if item is None:  # every item answered: the journey decides (passed: tasks; failed: ended)
        session.refresh_from_db()
        return _to_stage(session) if session.stage != ParticipantSession.PRACTICE else _done(session)
    spec = get_kind(session.campaign.kind)
    order = practice_order(session, item)
    keys = [i["key"] for i in items]
    number = item.get("number") or (keys.index(item["key"]) + 1 if item["key"] in keys else 1)
    return render(request, "crowd/journey/practice.html", _context(
        session, spec=spec, item=item, payload=item["payload"], task=spec.context(item["payload"], order),
        kind_template=spec.template, errors=errors or {}, data=data or {}, practice_number=number, preview=True,
        practice_total=len(items), pass_percent=round(100 * session.campaign.practice_pass)), status=status)


@rater_limited
@require_POST
def practice(request, name):
    """POST ``key`` (the practice item) and the kind's fields: grade the answer
    (:func:`crowd.journey.answer_practice`) and show the feedback page -- right or wrong, the
    expected answer, and after the last item whether the practice was passed. An invalid answer is
    shown again with its errors (400, nothing stored); an unknown key answers 400."""
    journey = _journey()
    session = _participant(request, name)
    key = request.POST.get("key", "")
    items = {i["key"]: i for i in journey.practice_items(session.campaign)}
    if session.stage != ParticipantSession.PRACTICE and not session.practice_answers.filter(key=key).exists():
        return _to_stage(session)
    item = items.get(key)
    if item is None:
        return notice(request, title="Unknown practice item", status=400, code="bad-practice-key",
                      campaign=session.campaign, message="This practice item does not exist.",
                      retry_url=reverse("crowd:session", kwargs={"name": session.campaign.name}))
    try:
        feedback = journey.answer_practice(session, key, request.POST)
    except AnswerError as exc:
        return _render_practice(request, session, item=item, errors=exc.errors, data=request.POST, status=400)
    except engine.EngineError as exc:
        return notice(request, title="That did not work", message=str(exc), status=exc.status, code=exc.code,
                      campaign=session.campaign)
    session = feedback.session
    order = practice_order(session, item)
    return render(request, "crowd/journey/feedback.html", _context(
        session, feedback=feedback,
        expected=expected_words(session.campaign.kind, item["payload"], order, feedback.expected or item.get("gold")),
        pass_percent=round(100 * session.campaign.practice_pass)))


# --- the bundle's tasks ------------------------------------------------------------------------------
def _render_task(request, session, assignment, errors=None, data=None, status=200):
    journey = _journey()
    spec = get_kind(assignment.campaign.kind)
    now = timezone.now()
    task_left = (assignment.deadline - now).total_seconds()
    budget_left = (session.deadline - now).total_seconds() if session.deadline else None
    seconds_left = max(0, int(task_left if budget_left is None else budget_left))  # the session's budget first
    n, total = journey.progress(session)
    return render(request, "crowd/journey/task.html", _context(
        session, spec=spec, assignment=assignment, payload=assignment.item.payload,
        task=spec.context(assignment.item.payload, assignment.order), kind_template=spec.template,
        errors=errors or {}, data=data or {}, submit_key=secrets.token_hex(16),
        seconds_left=seconds_left, time_left=friendly_duration(seconds_left),
        budget=budget_left is not None, task_number=n, task_total=total,
        percent=round(100 * n / total) if total else 0), status=status)


@rater_limited
@require_GET
def session_task(request, name, pk):
    """The task ``pk`` of the participant's session ("Task n of N", the time left in words). A task
    already answered or given back leads on to the stage page; another participant's task 404s."""
    session = _participant(request, name)
    assignment = _session_assignment(session, pk)
    if assignment.state != Assignment.ACCEPTED:
        return _to_stage(session) if session.is_open else _done(session)
    if not session.is_open:
        return _done(session)
    return _render_task(request, session, assignment)


@rater_limited
@require_POST
def session_submit(request, name, pk):
    """POST the answer to task ``pk`` (with ``submit_key`` and ``item``): :func:`crowd.engine.submit`
    (a repeat with the same key records nothing new), :func:`crowd.journey.after_submit`, then the
    next task of the bundle or the completion page. An invalid answer is shown again with its
    errors (400); an engine refusal is a page with its status (409 for a task given back...)."""
    journey = _journey()
    from django.db.models import Q

    session = _participant(request, name)
    try:  # one lookup: the engine locks the task within what _session_assignment checks
        result = engine.submit(pk, session.worker, request.POST, submit_key=request.POST.get("submit_key", ""),
                               item_id=request.POST.get("item"), scope=Q(session=session, worker_id=session.worker_id))
    except AnswerError as exc:
        assignment = _session_assignment(session, pk)
        return _render_task(request, session, assignment, errors=exc.errors, data=request.POST, status=400)
    except engine.EngineError as exc:
        if exc.code in ("unknown", "forbidden"):  # not a task of this session: as _session_assignment
            raise Http404("no such task") from None
        session.refresh_from_db()
        if not session.is_open:
            return _done(session)
        return notice(request, title="That did not work", message=str(exc), status=exc.status, code=exc.code,
                      campaign=session.campaign,
                      retry_url=reverse("crowd:session", kwargs={"name": session.campaign.name}))
    session = journey.after_submit(session, result.assignment)
    if not session.is_open:
        return _done(session)
    return _next(session, request)


# --- the end -------------------------------------------------------------------------------------
@rater_limited
@require_GET
def session_done(request, name):
    """The completion page: the outcome in words; for Prolific the completion URL with the outcome's
    code (a prominent link, and an automatic redirect after :data:`REDIRECT_SECONDS`), or, without a
    code, how to return the study; for local raters a thank-you. An open session goes back to its
    stage page."""
    from crowd.providers import get_provider

    session = _participant(request, name)
    if session.is_open:
        return _to_stage(session)
    prolific = session.provider == Campaign.PROLIFIC
    url = None
    if prolific:
        url = get_provider(Campaign.PROLIFIC).completion_url(session)
    response = render(request, "crowd/journey/done.html", _context(
        session, outcome_words=OUTCOME_WORDS.get(session.outcome, "This session has ended."), prolific=prolific,
        completion_url=url, redirect_seconds=REDIRECT_SECONDS))
    if url:
        response["Refresh"] = f"{REDIRECT_SECONDS}; url={url}"
    return response


# --- the owner's page ------------------------------------------------------------------------------
PARTICIPANT_COLUMNS = ["rater_id", "provider_ref", "outcome", "stage", "consent_version", "consented_at", "practice",
                       "tasks_done", "tasks_target", "attention_failures", "started_at", "ended_at",
                       "completion_code"]


@login_required
@require_GET
def campaign_participants(request, name):
    """Owners only (404 for anyone else): one row per participant session
    (:func:`crowd.journey.participants`) with each task's time and presentation order, the outcome
    counts at the top; ``?format=csv`` downloads the rows (one line per session, tasks as
    ``key:seconds`` in presentation order)."""
    campaign = owned_campaign(request, name)
    rows = _journey().participants(campaign)
    if request.GET.get("format") == "csv":
        buf = io.StringIO()
        writer = csvsafe.writer(buf)
        writer.writerow([*PARTICIPANT_COLUMNS, "tasks"])
        for row in rows:
            tasks = " ".join(f"{t['key']}:{'' if t['seconds'] is None else round(t['seconds'], 1)}"
                             for t in row.get("tasks", []))
            writer.writerow([_cell(row.get(c)) for c in PARTICIPANT_COLUMNS] + [tasks])
        response = HttpResponse(buf.getvalue(), content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="{campaign.name}-participants.csv"'
        return response
    counts = Counter(row.get("outcome") or "in progress" for row in rows)
    return render(request, "crowd/owner/participants.html", {
        "campaign": campaign, "rows": rows, "counts": sorted(counts.items()), "total": len(rows),
    })


def _cell(value) -> str:
    if value is None:
        return ""
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return str(value)


__all__ = ["prolific_start", "session_page", "consent", "instructions", "practice", "session_task", "session_submit",
           "session_done", "campaign_participants", "expected_words", "practice_order", "steps", "notice",
           "OUTCOME_WORDS"]
