"""The participant journey: one visit of one participant to one campaign, for the providers
whose tasks we serve (local raters and Prolific participants; an MTurk HIT stays one item, chosen
by the worker on MTurk, so MTurk campaigns have no sessions).

A visit is a :class:`~crowd.models.ParticipantSession`, a *bundle*::

    consent (versioned) -> instructions -> practice (optional) -> N tasks -> ended (one outcome)

* **Consent**: the campaign's ``consent_text`` at its ``consent_version``; agreeing stores the
  version agreed to (:func:`give_consent`; a stale version is refused, the text changed while the
  participant read it); declining ends the session ``no_consent`` (:func:`decline_consent`).
* **Practice**: items with known answers (``Campaign.options["practice"]``, built by
  :func:`crowd.engine.create_campaign`), graded with feedback (:func:`answer_practice`); a share of
  at least ``campaign.practice_pass`` right passes, and passing is remembered per campaign
  (``WorkerStatus.practice_passed_at``: a later session skips practice); failing ends the session
  ``screened_out``. Practice answers are never judgments: nothing is counted, no slot is held.
* **Tasks**: served by the assignment engine (:func:`crowd.engine.accept` with ``session``), so
  the per-task guarantees are the engine's (k counted judgments per item, never two by one worker,
  nothing lost, idempotent submits). Attention checks are the kind's gold items, placed by the
  engine's gold rule; more than ``campaign.attention_max_failures`` wrong ones end the session
  ``failed_attention``, block the worker and release their counted work (:func:`after_submit`).
  The session ends ``completed`` after ``tasks_target`` tasks, or when the time budget
  (``session_minutes``) is over or no task is left.
* **Completion**: the provider turns the outcome into what happens next (Prolific: a completion
  code, ``Provider.completion_code``); :func:`release_session` applies what the provider later says
  (returned, timed out, rejected).

Every state change runs in one transaction under the session's row lock (``SELECT ... FOR
UPDATE``), so double clicks and concurrent requests are idempotent: a repeated request finds the
work done and changes nothing. The database allows one open session per (campaign, worker), so a
second concurrent session is refused (:func:`open_session`).
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass
from datetime import timedelta

from django.core.exceptions import ObjectDoesNotExist
from django.db import IntegrityError, transaction
from django.utils import timezone

from . import engine
from .kinds import AnswerError, get_kind
from .models import Assignment, Campaign, Item, ParticipantSession, PracticeAnswer, WorkerStatus

#: ``request.session`` key holding the :attr:`ParticipantSession.key` of the browser's session
JOURNEY_SESSION_KEY = "crowd_participant_session"

S = ParticipantSession


# --- helpers ----------------------------------------------------------------------------------------
def _locked(session: ParticipantSession) -> ParticipantSession:
    """The session's row, locked until the end of the current transaction, with its campaign and
    worker (read fresh: the caller's copy may be stale)."""
    return (ParticipantSession.objects.select_for_update(of=("self",)).select_related("campaign", "worker")
            .get(pk=session.pk))


def _sync(target: ParticipantSession, source: ParticipantSession) -> ParticipantSession:
    """Copy ``source``'s field values into the caller's object ``target`` (so it is not stale);
    returns ``source``."""
    if target is not source:
        for f in ParticipantSession._meta.concrete_fields:
            setattr(target, f.attname, getattr(source, f.attname))
    return source


def _wrong_stage(session: ParticipantSession, wanted: str) -> engine.EngineError:
    return engine.EngineError(f"this session is at the {session.stage} stage, not {wanted}", "wrong-stage")


# --- which campaigns ------------------------------------------------------------------------------------
def uses_journey(campaign: Campaign) -> bool:
    """Whether participants of ``campaign`` go through sessions: it has a bundle, a consent text or
    practice items, or its participants come from Prolific (who always arrive in a session)."""
    return bool(campaign.bundle_size or campaign.consent_text or practice_items(campaign)
                or campaign.provider == Campaign.PROLIFIC)


def practice_items(campaign: Campaign) -> list[dict]:
    """The campaign's practice items, ``[{"key", "payload", "gold"}]`` in serving order
    (``campaign.options["practice"]``; empty when it has none or the option is malformed)."""
    items = (campaign.options or {}).get("practice") or []
    if not isinstance(items, list):
        return []
    return [it for it in items if isinstance(it, dict) and {"key", "payload", "gold"} <= it.keys()]


def practice_passed(campaign: Campaign, worker) -> bool:
    """Whether ``worker`` has passed ``campaign``'s practice (in any session): remembered per
    campaign in ``WorkerStatus.practice_passed_at``."""
    return WorkerStatus.objects.filter(campaign=campaign, worker=worker, practice_passed_at__isnull=False).exists()


# --- opening --------------------------------------------------------------------------------------------
def open_session(campaign: Campaign, worker, *, provider_ref: str = "", study_ref: str = "",
                 user_agent: str = "") -> ParticipantSession:
    """Open a session of ``worker`` (whose identity the caller has verified: a local login or
    invitation, or a provider session confirmed by the provider's API) in ``campaign``.

    * The same ``provider_ref`` (e.g. Prolific's ``SESSION_ID``) as one of this worker's sessions,
      open or ended, returns that session unchanged (a reload is idempotent); the same ref of
      another worker raises Conflict ``foreign-session``.
    * A campaign that is not live raises ``engine.NoTask(engine.REASONS[state], state)`` (also
      ``expired``); a blocked worker raises NoTask ``blocked``.
    * Another open session of this worker in this campaign raises Conflict ``concurrent-session``
      -- except for a session without provider ref (local raters, identified by our own login or
      invitation) asked again without one: that is the same person resuming, and gets it back.
    * A new session starts at the consent stage if the campaign has a consent text, else at the
      instructions; ``tasks_target`` is the campaign's bundle size, ``deadline`` now + its
      ``session_minutes`` (None for 0).

    ``provider_ref``/``study_ref`` at most 100 characters, ``user_agent`` is cut to 300.
    """
    provider_ref, study_ref = str(provider_ref or ""), str(study_ref or "")
    if len(provider_ref) > 100 or len(study_ref) > 100:
        raise engine.EngineError("the provider's session or study id is too long", "bad-params")
    if provider_ref:
        existing = ParticipantSession.objects.filter(campaign=campaign, provider_ref=provider_ref).first()
        if existing is not None:
            if existing.worker_id != worker.pk:
                raise engine.Conflict("this session belongs to another participant", "foreign-session")
            return existing
    campaign = Campaign.objects.get(pk=campaign.pk)  # fresh state
    if campaign.state != Campaign.LIVE:
        raise engine.NoTask(engine.REASONS[campaign.state], campaign.state)
    if campaign.is_expired:
        raise engine.NoTask(engine.REASONS["expired"], "expired")
    if engine.worker_state(campaign, worker) == WorkerStatus.BLOCKED:
        raise engine.NoTask(engine.REASONS["blocked"], "blocked")
    now = timezone.now()
    try:
        with transaction.atomic():
            current = (ParticipantSession.objects.select_for_update()
                       .filter(campaign=campaign, worker=worker, ended_at__isnull=True).first())
            if current is not None:
                if not provider_ref and not current.provider_ref:
                    return current
                raise engine.Conflict(
                    "you already have a session of this study open (in another tab or browser); finish or "
                    "return it first", "concurrent-session")
            return ParticipantSession.objects.create(
                campaign=campaign, worker=worker, provider=campaign.provider, provider_ref=provider_ref,
                study_ref=study_ref, stage=S.CONSENT if campaign.consent_text else S.INSTRUCTIONS,
                tasks_target=campaign.bundle_size, started_at=now,
                deadline=now + timedelta(minutes=campaign.session_minutes) if campaign.session_minutes else None,
                verified=True, verified_at=now, user_agent=str(user_agent or "")[:300],
            )
    except IntegrityError:  # a concurrent request opened one first
        if provider_ref:
            existing = ParticipantSession.objects.filter(campaign=campaign, provider_ref=provider_ref).first()
            if existing is not None and existing.worker_id == worker.pk:
                return existing
        current = ParticipantSession.objects.filter(campaign=campaign, worker=worker, ended_at__isnull=True).first()
        if current is not None and not provider_ref and not current.provider_ref:
            return current
        raise engine.Conflict("you already have a session of this study open (in another tab or browser)",
                              "concurrent-session") from None


def session_for(request_session_key, campaign: Campaign) -> ParticipantSession | None:
    """The session named by ``request_session_key`` (``request.session[JOURNEY_SESSION_KEY]``) if
    it is a session of ``campaign``; None otherwise (unknown key, another campaign's, not text)."""
    if not isinstance(request_session_key, str) or not 0 < len(request_session_key) <= 40:
        return None
    return (ParticipantSession.objects.select_related("campaign", "worker")
            .filter(key=request_session_key, campaign=campaign).first())


# --- consent and instructions ------------------------------------------------------------------------------
def give_consent(session: ParticipantSession, version) -> ParticipantSession:
    """The participant agrees to the consent text at ``version``: the version and time are stored
    and the session moves on to the instructions. Raises Conflict ``consent-changed`` when
    ``version`` is not the campaign's current ``consent_version`` (the text changed: show it
    again), EngineError ``wrong-stage`` for a session past consent that agreed to another version
    or that has ended. Repeating an accepted agreement (double click) changes nothing."""
    try:
        version = int(version)
    except (TypeError, ValueError):
        raise engine.EngineError("the consent version must be a whole number", "bad-version") from None
    with transaction.atomic():
        s = _locked(session)
        if s.consent_version is not None and s.consent_version == version:
            return _sync(session, s)  # agreed already
        if s.stage != S.CONSENT:
            raise _wrong_stage(s, S.CONSENT)
        if version != s.campaign.consent_version:
            raise engine.Conflict("the consent text has changed since you read it; please read it again",
                                  "consent-changed")
        s.consent_version, s.consented_at, s.stage = version, timezone.now(), S.INSTRUCTIONS
        s.save(update_fields=["consent_version", "consented_at", "stage"])
    return _sync(session, s)


def decline_consent(session: ParticipantSession) -> ParticipantSession:
    """The participant declines the consent: the session ends ``no_consent`` (nothing was served,
    nothing is held). Idempotent on an ended session; EngineError ``wrong-stage`` once the
    participant has agreed."""
    with transaction.atomic():
        s = _locked(session)
        if not s.is_open:
            return _sync(session, s)
        if s.stage != S.CONSENT:
            raise _wrong_stage(s, S.CONSENT)
        return end_session(session, S.NO_CONSENT, "declined the consent")


def finish_instructions(session: ParticipantSession) -> ParticipantSession:
    """The participant has read the instructions: on to the practice if the campaign has practice
    items and the worker has not passed them yet, else to the tasks. Idempotent past the
    instructions; EngineError ``wrong-stage`` before consent."""
    with transaction.atomic():
        s = _locked(session)
        if s.stage == S.CONSENT:
            raise _wrong_stage(s, S.INSTRUCTIONS)
        if s.stage != S.INSTRUCTIONS:
            return _sync(session, s)
        practice = practice_items(s.campaign) and not practice_passed(s.campaign, s.worker)
        s.stage = S.PRACTICE if practice else S.TASKS
        s.save(update_fields=["stage"])
    return _sync(session, s)


# --- practice -------------------------------------------------------------------------------------------
def practice_order(session: ParticipantSession, key: str) -> dict:
    """The presentation order of practice item ``key`` in ``session`` (kind-specific, like an
    assignment's ``order``): fixed per session and item, so the page shown and the answer graded
    agree. KeyError for a key that is not a practice item of the campaign."""
    item = {it["key"]: it for it in practice_items(session.campaign)}[key]
    rng = random.Random(f"{session.key}:{key}")
    return get_kind(session.campaign.kind).presentation_order(item["payload"], rng)


def next_practice(session: ParticipantSession) -> dict | None:
    """The next unanswered practice item of ``session`` (in the campaign's order) as
    ``{"key", "payload", "gold", "order", "number", "total"}`` (``order``: :func:`practice_order`;
    ``number`` 1-based of ``total``), or None when the session is not at the practice stage or all
    are answered."""
    if session.stage != S.PRACTICE:
        return None
    items = practice_items(session.campaign)
    done = set(PracticeAnswer.objects.filter(session=session).values_list("key", flat=True))
    for n, item in enumerate(items, start=1):
        if item["key"] not in done:
            return {**item, "order": practice_order(session, item["key"]), "number": n, "total": len(items)}
    return None


@dataclass
class PracticeFeedback:
    """The grading of one practice answer: ``correct``, the ``expected`` answer (the item's gold),
    a ``message`` for the participant; ``finished`` once every practice item is answered, then
    ``passed`` (else None); ``session`` as it is now (at the tasks stage if passed, ended
    ``screened_out`` if failed)."""

    key: str
    correct: bool
    expected: dict
    message: str
    finished: bool
    passed: bool | None
    session: ParticipantSession


def _feedback(s: ParticipantSession, key: str, correct: bool, gold: dict, n_items: int) -> PracticeFeedback:
    finished = s.practice_answered >= n_items
    passed = None
    if finished:
        passed = s.practice_answered > 0 and s.practice_correct / s.practice_answered >= s.campaign.practice_pass
    expected = ", ".join(f"{k} {v}" for k, v in gold.items())
    message = ("Correct: that is the expected answer." if correct
               else f"Not quite: the expected answer was {expected}. Please read the instructions again.")
    if finished:
        message += (f" You answered {s.practice_correct} of {s.practice_answered} practice items as expected: "
                    + ("you can start the tasks." if passed else "that is not enough to take part, thank you."))
    return PracticeFeedback(key, correct, gold, message, finished, passed, s)


def answer_practice(session: ParticipantSession, key: str, data) -> PracticeFeedback:
    """Grade the participant's answer (form ``data``, the kind's fields) to practice item ``key``.

    The answer is validated by the kind (``clean``; :class:`crowd.kinds.AnswerError` with nothing
    stored), graded against the item's known answer (``check_gold``) and stored once
    (:class:`~crowd.models.PracticeAnswer`): the same key again returns the stored grading and
    changes nothing. After the last item: a share right of at least ``campaign.practice_pass``
    passes (the session moves to the tasks, ``WorkerStatus.practice_passed_at`` is set), otherwise
    the session ends ``screened_out`` (no task was served: nothing counted, no slot held).
    EngineError ``unknown`` for a key that is not a practice item, ``wrong-stage`` outside the
    practice stage."""
    key = str(key or "")
    with transaction.atomic():
        s = _locked(session)
        items = practice_items(s.campaign)
        by_key = {it["key"]: it for it in items}
        stored = PracticeAnswer.objects.filter(session=s, key=key).first()
        if stored is not None:  # a repeat: the stored grading
            _sync(session, s)
            return _feedback(session, key, stored.correct, by_key.get(key, {}).get("gold") or {}, len(items))
        if s.stage != S.PRACTICE:
            raise _wrong_stage(s, S.PRACTICE)
        if key not in by_key:
            raise engine.EngineError("no such practice item", "unknown")
        item = by_key[key]
        spec = get_kind(s.campaign.kind)
        answer = spec.clean(item["payload"], practice_order(s, key), data)  # AnswerError: nothing stored
        correct = bool(spec.check_gold(answer, item["gold"]))
        PracticeAnswer.objects.create(session=s, key=key, answer=answer, correct=correct)
        answers = PracticeAnswer.objects.filter(session=s, key__in=list(by_key))
        s.practice_answered = answers.count()
        s.practice_correct = answers.filter(correct=True).count()
        s.save(update_fields=["practice_answered", "practice_correct"])
        feedback = _feedback(s, key, correct, item["gold"], len(items))
        if feedback.finished and feedback.passed:
            s.stage = S.TASKS
            s.save(update_fields=["stage"])
            status, _ = WorkerStatus.objects.select_for_update().get_or_create(
                campaign=s.campaign, worker=s.worker, defaults={"state": WorkerStatus.OK})
            if status.practice_passed_at is None:
                status.practice_passed_at = timezone.now()
                status.save(update_fields=["practice_passed_at", "updated_at"])
        elif feedback.finished:
            end_session(s, S.SCREENED_OUT, "did not pass the practice")
    _sync(session, s)
    feedback.session = session
    return feedback


# --- tasks ----------------------------------------------------------------------------------------------
def _session_task(s: ParticipantSession) -> Assignment | None:
    return (Assignment.objects.filter(session=s, state=Assignment.ACCEPTED, deadline__gt=timezone.now())
            .select_related("item").first())


def next_task(session: ParticipantSession) -> Assignment | None:
    """The task to show now in ``session`` (stage ``tasks``; else EngineError ``wrong-stage``):
    its accepted, not overdue task if it has one; else None after ending the session when the
    bundle is done (``completed``), the time budget is over (``completed`` if a task was done,
    else ``timed_out``) or the engine has no task for the worker (``completed`` if a task was
    done, else ``no_task``; ``failed_attention`` when the campaign's quality checks have blocked
    the worker); else a new task from :func:`crowd.engine.accept` (stored with the session).
    Serialised per session by its row lock: a double click gets the same task."""
    with transaction.atomic():
        s = _locked(session)
        _sync(session, s)
        if s.stage != S.TASKS:
            raise _wrong_stage(s, S.TASKS)
        current = _session_task(s)
        if current is not None:
            return current
        if s.tasks_target and s.tasks_done >= s.tasks_target:
            end_session(session, S.COMPLETED)
            return None
        if s.deadline is not None and s.deadline <= timezone.now():
            end_session(session, S.COMPLETED if s.tasks_done else S.TIMED_OUT, "time budget over")
            return None
        try:
            a = engine.accept(s.campaign, s.worker, session=s)
        except engine.NoTask as exc:
            if exc.code == "blocked":  # the campaign's quality checks blocked the worker
                end_session(session, S.FAILED_ATTENTION, str(exc))
            else:
                end_session(session, S.COMPLETED if s.tasks_done else S.NO_TASK, str(exc))
            return None
        if a.session_id is None:  # accepted before the session started: it belongs to it now
            Assignment.objects.filter(pk=a.pk, session__isnull=True).update(session=s)
            a.session_id = s.pk
        return a


def after_submit(session: ParticipantSession, assignment: Assignment | None = None) -> ParticipantSession:
    """Bring ``session`` up to date after a submission (``assignment``, the task just submitted;
    informative only: everything is recounted, so calling it twice changes nothing).

    ``tasks_done`` becomes the number of the session's tasks in a done state (submitted, approved,
    rejected; attention checks included), ``attention_failures`` the number of its attention checks
    (gold items) answered wrong. More failures than ``campaign.attention_max_failures`` end the
    session ``failed_attention``, block the worker in the campaign (``WorkerStatus`` blocked, the
    reason naming the session) and release their counted work
    (:func:`crowd.engine.release_counted_work`: judgment rows removed, slots freed). Otherwise a
    reached ``tasks_target`` ends it ``completed``. A worker the campaign's own quality checks have
    blocked meanwhile (gold accuracy, speed: :func:`crowd.engine.update_worker_status`, which
    released their counted work) ends ``failed_attention`` too. An ended session is recounted but
    keeps its outcome."""
    with transaction.atomic():
        s = _locked(session)
        mine = Assignment.objects.filter(session=s)
        s.tasks_done = mine.filter(state__in=Assignment.DONE_STATES).count()
        s.attention_failures = mine.filter(item__is_gold=True, gold_correct=False).count()
        s.save(update_fields=["tasks_done", "attention_failures"])
        _sync(session, s)
        if not s.is_open:
            return session
        if s.attention_failures > s.campaign.attention_max_failures:
            status, _ = WorkerStatus.objects.select_for_update().get_or_create(
                campaign=s.campaign, worker=s.worker, defaults={"state": WorkerStatus.OK})
            status.state = WorkerStatus.BLOCKED
            status.reason = (f"failed {s.attention_failures} attention checks in session {s.pk} "
                             f"(at most {s.campaign.attention_max_failures} allowed)")
            status.save(update_fields=["state", "reason", "updated_at"])
            engine.release_counted_work(s.campaign, s.worker)
            return end_session(session, S.FAILED_ATTENTION, "too many failed attention checks")
        if engine.worker_state(s.campaign, s.worker) == WorkerStatus.BLOCKED:
            return end_session(session, S.FAILED_ATTENTION, "blocked by the campaign's quality checks")
        if s.tasks_target and s.tasks_done >= s.tasks_target:
            return end_session(session, S.COMPLETED)
    return session


# --- ending ---------------------------------------------------------------------------------------------
def _return_open_tasks(s: ParticipantSession, reason: str) -> int:
    """Return the session's accepted tasks (their slots go back to the pool); how many."""
    n = 0
    for pk in Assignment.objects.filter(session=s, state=Assignment.ACCEPTED).values_list("pk", flat=True):
        try:
            engine.return_assignment(pk, s.worker, reason or "session ended")
            n += 1
        except engine.Conflict:  # submitted or expired meanwhile
            pass
    return n


def _completion_code(s: ParticipantSession) -> str:
    """What the campaign's provider gives the participant for this outcome ("" for none)."""
    from .providers import get_provider  # lazily: providers import the engine

    try:
        provider = get_provider(s.campaign.provider)
    except ValueError:
        return ""
    code = getattr(provider, "completion_code", None)
    if code is None:
        return ""
    try:
        return str(code(s) or "")[:40]
    except ObjectDoesNotExist:  # e.g. a Prolific campaign without its study yet: no code to give
        return ""


def end_session(session: ParticipantSession, outcome: str, reason: str = "") -> ParticipantSession:
    """End ``session`` with ``outcome`` (one of ``ParticipantSession.OUTCOMES``): its accepted task,
    if any, is returned (:func:`crowd.engine.return_assignment`, with ``reason``) so its slot
    frees; the stage becomes ``ended`` and the completion code is the provider's for the outcome
    (``Provider.completion_code(session)``, e.g. Prolific's; "" for local raters). Idempotent: an
    ended session is returned unchanged. ValueError for an unknown outcome."""
    if outcome not in dict(S.OUTCOMES):
        raise ValueError(f"unknown session outcome {outcome!r}")
    with transaction.atomic():
        s = _locked(session)
        if not s.is_open:
            return _sync(session, s)
        _return_open_tasks(s, reason)
        s.outcome, s.stage, s.ended_at = outcome, S.ENDED, timezone.now()
        s.completion_code = _completion_code(s)
        s.save(update_fields=["outcome", "stage", "ended_at", "completion_code"])
    return _sync(session, s)


def release_session(session: ParticipantSession, *, outcome: str, counted: bool) -> dict:
    """Apply what the provider says about a session after the fact: the participant returned it or
    it timed out (``counted=False``: the unfinished work goes back to the pool), or the submission
    was rejected (``counted=True``: the session's counted work too, via
    :func:`crowd.engine.release_assignments`; the worker's other sessions keep theirs). Ends the
    session with ``outcome`` if it is open (an ended one keeps its outcome). Idempotent: a repeat
    releases nothing more. Returns ``{"returned": tasks returned, "released": counted tasks
    released}``."""
    if outcome not in dict(S.OUTCOMES):
        raise ValueError(f"unknown session outcome {outcome!r}")
    with transaction.atomic():
        s = _locked(session)
        returned = _return_open_tasks(s, f"the provider says {outcome}")
        released = 0
        if counted:
            ids = list(Assignment.objects.filter(session=s).values_list("pk", flat=True))
            released = engine.release_assignments(s.campaign, s.worker, ids)
        if s.is_open:
            end_session(s, outcome, f"the provider says {outcome}")
    _sync(session, s)
    return {"returned": returned, "released": released}


def expire_sessions(now=None) -> int:
    """End ``timed_out`` every open session whose time budget is over: its deadline plus the
    campaign's ``assignment_seconds`` (the last task started in time may still be finished) has
    passed. Run by the periodic Celery task ``crowd.expire_sessions``. Returns how many ended."""
    now = now or timezone.now()
    n = 0
    for s in (ParticipantSession.objects.filter(ended_at__isnull=True, deadline__isnull=False, deadline__lt=now)
              .select_related("campaign")):
        if s.deadline + timedelta(seconds=s.campaign.assignment_seconds) > now:
            continue
        with transaction.atomic():
            locked = _locked(s)
            if locked.is_open:
                end_session(locked, S.TIMED_OUT, "time budget over")
                n += 1
    return n


# --- what pages show ------------------------------------------------------------------------------------
def progress(session: ParticipantSession) -> tuple[int, int]:
    """``(n, N)`` for "task n of N": n = min(tasks_done + 1, N); N = ``tasks_target``, or for an
    open-ended session the engine's estimate (tasks done + the normal items still open to the
    worker, within the per-worker cap)."""
    total = session.tasks_target
    if not total:
        campaign, worker = session.campaign, session.worker
        open_normal = engine._open_items(campaign, worker).count()
        if campaign.per_worker_cap is not None:
            taken = Assignment.objects.filter(campaign=campaign, worker=worker, item__is_gold=False, verified=True,
                                              state__in=(Assignment.ACCEPTED, *Assignment.DONE_STATES)).count()
            open_normal = max(0, min(open_normal, campaign.per_worker_cap - taken))
        total = max(session.tasks_done + open_normal, session.tasks_done + 1)
    return min(session.tasks_done + 1, total), total


def bundle_plan(campaign: Campaign, tasks: int | None = None) -> dict:
    """What one fresh participant's session of ``tasks`` tasks (default the bundle size; 0: as many
    as the campaign gives them) consists of under the engine's gold rule
    (:func:`crowd.engine.gold_checks_required`, :func:`crowd.engine.accept` with a session),
    assuming every item is open to them: ``{"tasks", "gold", "normal", "counted"}``; ``counted``
    is ``normal`` when they answer the gold checks they get right and reach the required number,
    else 0 (their answers wait for gold checks that never come)."""
    n_items = Item.objects.filter(campaign=campaign, is_gold=False).count()
    n_gold = Item.objects.filter(campaign=campaign, is_gold=True).count()
    required = engine.gold_checks_required(campaign)
    target = campaign.bundle_size if tasks is None else tasks
    max_normal = n_items if campaign.per_worker_cap is None else min(n_items, campaign.per_worker_cap)
    every = campaign.gold_every if campaign.provider in engine.SERVED_PROVIDERS else 0
    graded = normal = 0
    while True:
        done = graded + normal
        if target and done >= target:
            break
        due = every == 1 or (every >= 2 and graded <= normal // (every - 1))
        left = target - done if target else None
        forced = required > graded and (normal >= max_normal or (left is not None and left <= required - graded))
        if graded < n_gold and (due or forced):
            graded += 1
        elif normal < max_normal:
            normal += 1
        else:
            break
    return {"tasks": graded + normal, "gold": graded, "normal": normal,
            "counted": normal if graded >= required else 0}


def places_needed(campaign: Campaign) -> int:
    """How many participant sessions (Prolific places) ``campaign`` needs so that every item gets its
    k counted judgments: ``ceil(items x k / counted per session)``, a session's counted tasks being
    the normal tasks of its bundle after the attention checks the gold rule places among them
    (:func:`bundle_plan`), and never more than ``items x k`` (each session counts at least one),
    nor fewer than k (nobody judges an item twice). 0 for a campaign without items; a bundle too
    small to pass the required gold checks counts nothing, and then ``ValueError`` says so."""
    n_items = Item.objects.filter(campaign=campaign, is_gold=False).count()
    if not n_items:
        return 0
    needed = n_items * campaign.judgments_per_item
    per_session = bundle_plan(campaign)["counted"]
    if per_session <= 0:
        raise ValueError(
            f"a bundle of {campaign.bundle_size} tasks cannot count anything: it must leave room for "
            f"{engine.gold_checks_required(campaign)} attention checks and at least one task")
    return max(math.ceil(needed / per_session), campaign.judgments_per_item)


def participants(campaign: Campaign) -> list[dict]:
    """One row per session of ``campaign`` (oldest first) for the owner's participants page:
    ``rater_id``, ``provider_ref``, ``outcome``, ``stage``, ``consent_version``, ``consented_at``,
    ``practice`` ("right/answered", "" without practice), ``tasks_done``, ``tasks_target``,
    ``attention_failures``, ``started_at``, ``ended_at``, ``completion_code`` and ``tasks``: the
    session's tasks in the order served, ``{"key", "gold", "gold_correct", "seconds" (work time),
    "order" (the presentation order shown), "counted", "state"}``."""
    sessions = list(ParticipantSession.objects.filter(campaign=campaign).select_related("worker")
                    .order_by("started_at", "pk"))
    tasks = {}
    for a in (Assignment.objects.filter(session__campaign=campaign).select_related("item")
              .order_by("accepted_at", "pk")):
        tasks.setdefault(a.session_id, []).append({
            "key": a.item.key, "gold": a.item.is_gold, "gold_correct": a.gold_correct, "seconds": a.work_seconds,
            "order": a.order, "counted": a.counted, "state": a.state,
        })
    return [{
        "rater_id": s.worker.rater_id, "provider_ref": s.provider_ref, "outcome": s.outcome, "stage": s.stage,
        "consent_version": s.consent_version, "consented_at": s.consented_at,
        "practice": f"{s.practice_correct}/{s.practice_answered}" if s.practice_answered else "",
        "tasks_done": s.tasks_done, "tasks_target": s.tasks_target, "attention_failures": s.attention_failures,
        "started_at": s.started_at, "ended_at": s.ended_at, "completion_code": s.completion_code,
        "tasks": tasks.get(s.pk, []),
    } for s in sessions]


__all__ = [
    "JOURNEY_SESSION_KEY", "PracticeFeedback", "AnswerError", "uses_journey", "open_session", "session_for",
    "give_consent", "decline_consent", "finish_instructions", "practice_items", "practice_passed", "practice_order",
    "next_practice", "answer_practice", "next_task", "after_submit", "end_session", "release_session",
    "expire_sessions", "progress", "bundle_plan", "places_needed", "participants",
]
