"""The participant journey (crowd.journey) on PostgreSQL with real Flickr8k-Expert data: consent
(versioned), practice (screening), bundles of N tasks, attention checks, time budgets, sessions
released by the provider, and the engine's per-task guarantees across many sessions."""
import math
import threading
from datetime import timedelta

import pytest
from django.core.management.base import CommandError
from django.db import connection
from django.utils import timezone

from crowd import engine, journey
from crowd.kinds import AnswerError, CampaignSpecError
from crowd.models import (
    Assignment,
    Campaign,
    Caption,
    Dataset,
    HumanJudgment,
    Item,
    ParticipantSession,
    PracticeAnswer,
    ProlificStudy,
    Worker,
    WorkerStatus,
)

from .conftest import run_command

pytestmark = pytest.mark.django_db
S = ParticipantSession


@pytest.fixture
def dataset(subset_dir):
    run_command("import_dataset", "flickr8k-expert", str(subset_dir), "--name", "sub")
    return Dataset.objects.get(name="sub")


def make(dataset, name="journey", kind="rating", images=3, gold=None, **kw):
    kw.setdefault("state", Campaign.LIVE)
    kw.setdefault("gold_every", 0)
    options = {"images": images}
    if gold is not None:
        options["gold"] = gold
    return engine.create_campaign(dataset, kind, name=name, options=options, **kw)


_n = iter(range(1, 10**6))


def prolific_worker():
    return Worker.objects.create(provider=Campaign.PROLIFIC, external_id=f"{next(_n):024x}")


def local_worker(campaign):
    return engine.invite_workers(1, campaign=campaign)[0]


def to_tasks(campaign, worker, **kw):
    s = journey.open_session(campaign, worker, **kw)
    if s.stage == S.CONSENT:
        journey.give_consent(s, campaign.consent_version)
    journey.finish_instructions(s)
    assert s.stage == S.TASKS
    return s


def do_task(session, gold_right=True):
    """Take the session's next task and answer it (gold: right or wrong); the assignment or None."""
    a = journey.next_task(session)
    if a is None:
        return None
    if a.item.is_gold:
        data = {"relevance": "1" if gold_right else "5", "thoroughness": "1"}
    else:
        data = {"relevance": "4", "thoroughness": "3"}
    engine.submit(a.pk, session.worker, data)
    journey.after_submit(session, a)
    a.refresh_from_db()
    return a


def answer_practice(session, item, right):
    return journey.answer_practice(session, item["key"], {"relevance": "1" if right else "5", "thoroughness": "2"})


def slots_held(campaign, worker):
    return Assignment.objects.filter(campaign=campaign, worker=worker, slot__isnull=False).count()


# --- consent ------------------------------------------------------------------------------------------
def test_consent_is_versioned_and_a_stale_version_is_refused(dataset):
    c = make(dataset, consent_text="I agree to rate captions.")
    s = journey.open_session(c, local_worker(c))
    assert (s.stage, s.tasks_target, s.deadline) == (S.CONSENT, 0, None)
    Campaign.objects.filter(pk=c.pk).update(consent_text="New text.", consent_version=2)
    with pytest.raises(engine.Conflict) as exc:
        journey.give_consent(s, 1)  # read version 1; the text changed meanwhile
    assert exc.value.code == "consent-changed"
    s.refresh_from_db()
    assert (s.stage, s.consent_version, s.consented_at) == (S.CONSENT, None, None)
    with pytest.raises(engine.EngineError) as exc:
        journey.next_task(s)
    assert exc.value.code == "wrong-stage"
    journey.give_consent(s, "2")
    assert (s.stage, s.consent_version) == (S.INSTRUCTIONS, 2) and s.consented_at is not None
    at = s.consented_at
    journey.give_consent(s, 2)  # double click: nothing changes
    s.refresh_from_db()
    assert (s.stage, s.consent_version, s.consented_at) == (S.INSTRUCTIONS, 2, at)
    with pytest.raises(engine.EngineError) as exc:
        journey.give_consent(s, 1)
    assert exc.value.code == "wrong-stage"
    with pytest.raises(engine.EngineError):
        journey.decline_consent(s)  # agreed already
    assert journey.participants(c)[0]["consent_version"] == 2


def test_declining_consent_ends_no_consent_and_holds_nothing(dataset):
    c = make(dataset, consent_text="Consent.", bundle_size=3)
    w = local_worker(c)
    s = journey.open_session(c, w)
    journey.decline_consent(s)
    assert (s.stage, s.outcome, s.completion_code) == (S.ENDED, S.NO_CONSENT, "") and s.ended_at is not None
    assert journey.decline_consent(s).outcome == S.NO_CONSENT  # idempotent
    assert not Assignment.objects.filter(campaign=c, worker=w).exists()
    with pytest.raises(engine.EngineError) as exc:
        journey.next_task(s)
    assert exc.value.code == "wrong-stage"
    with pytest.raises(engine.EngineError):
        journey.give_consent(s, 1)  # too late to agree
    assert not Item.objects.filter(campaign=c, full=True).exists()


# --- practice -------------------------------------------------------------------------------------------
def test_practice_items_are_extra_gold_items_kept_out_of_the_tasks(dataset):
    plain = make(dataset, name="plain", gold=4)
    c = make(dataset, name="practised", gold=4, practice=3)
    items = journey.practice_items(c)
    assert len(items) == 3 and all(it["gold"] == {"relevance": 1} for it in items)
    assert all(it["payload"]["image_url"].startswith("http://127.0.0.1:9/") for it in items)  # pictures filled
    assert Item.objects.filter(campaign=c, is_gold=True).count() == 4  # the attention checks stay
    assert not Item.objects.filter(campaign=c, key__in=[it["key"] for it in items]).exists()
    assert (Item.objects.filter(campaign=c, is_gold=False).count()
            == Item.objects.filter(campaign=plain, is_gold=False).count())
    assert journey.uses_journey(c) and not journey.uses_journey(plain)
    with pytest.raises(CampaignSpecError, match="no gold"):
        make(dataset, name="desc", kind="description", practice=2)
    with pytest.raises(CampaignSpecError, match="practice items"):
        engine.create_campaign(dataset, "visual_atom", name="atoms", practice=40,
                               options={"atoms": [["dog", "entity"], ["red", "attribute"]]})
    assert not Campaign.objects.filter(name__in=["desc", "atoms"]).exists()


def test_failing_practice_screens_out_with_nothing_counted_and_no_slot_held(dataset):
    c = make(dataset, gold=4, practice=3, practice_pass=0.66, bundle_size=4, gold_every=3)
    w = local_worker(c)
    s = journey.open_session(c, w)
    journey.finish_instructions(s)
    assert s.stage == S.PRACTICE
    first = journey.next_practice(s)
    assert (first["number"], first["total"]) == (1, 3) and "order" in first
    with pytest.raises(AnswerError):
        journey.answer_practice(s, first["key"], {"relevance": "9"})
    assert not PracticeAnswer.objects.filter(session=s).exists()  # nothing stored
    with pytest.raises(engine.EngineError) as exc:
        journey.answer_practice(s, "gold-1", {"relevance": "1", "thoroughness": "1"})  # a task's gold, not practice
    assert exc.value.code == "unknown"
    fb = answer_practice(s, first, right=False)
    assert (fb.correct, fb.finished, fb.passed, fb.expected) == (False, False, None, {"relevance": 1})
    assert "expected" in fb.message
    again = answer_practice(s, first, right=True)  # a repeat: the stored grading, nothing changes
    assert (again.correct, PracticeAnswer.objects.filter(session=s).count()) == (False, 1)
    answer_practice(s, journey.next_practice(s), right=True)
    fb = answer_practice(s, journey.next_practice(s), right=False)
    assert (fb.finished, fb.passed) == (True, False)
    assert (s.outcome, s.stage, s.practice_correct, s.practice_answered) == (S.SCREENED_OUT, S.ENDED, 1, 3)
    assert journey.next_practice(s) is None
    assert not journey.practice_passed(c, w)
    assert not Assignment.objects.filter(campaign=c, worker=w).exists()
    assert slots_held(c, w) == 0 and not HumanJudgment.objects.filter(campaign=c).exists()
    assert journey.participants(c)[0]["practice"] == "1/3"


def test_passing_practice_is_remembered_so_a_second_session_skips_it(dataset):
    c = make(dataset, gold=4, practice=2, practice_pass=0.5, bundle_size=2)
    w = local_worker(c)
    s = journey.open_session(c, w)
    journey.finish_instructions(s)
    answer_practice(s, journey.next_practice(s), right=False)
    fb = answer_practice(s, journey.next_practice(s), right=True)
    assert (fb.finished, fb.passed, fb.session.stage) == (True, True, S.TASKS)
    assert journey.practice_passed(c, w)
    passed_at = WorkerStatus.objects.get(campaign=c, worker=w).practice_passed_at
    do_task(s), do_task(s)
    assert s.outcome == S.COMPLETED
    second = journey.open_session(c, w)
    assert second.pk != s.pk
    journey.finish_instructions(second)
    assert second.stage == S.TASKS  # no practice again
    assert WorkerStatus.objects.get(campaign=c, worker=w).practice_passed_at == passed_at
    other = journey.open_session(c, local_worker(c))  # remembered per worker, not for everybody
    assert journey.finish_instructions(other).stage == S.PRACTICE


# --- bundles ---------------------------------------------------------------------------------------------
def test_a_bundle_of_n_gives_exactly_n_tasks_with_attention_checks_then_completes(dataset):
    c = make(dataset, images=4, gold=4, gold_every=3, bundle_size=5, session_minutes=30)
    w = local_worker(c)
    s = to_tasks(c, w)
    assert s.tasks_target == 5 and s.deadline is not None
    served = []
    for n in range(1, 6):
        assert journey.progress(s) == (n, 5)
        a = journey.next_task(s)
        assert journey.next_task(s).pk == a.pk  # a double click gets the same task
        served.append(a)
        do_task(s)
        journey.after_submit(s, a)  # twice: idempotent
    assert (s.outcome, s.stage, s.tasks_done, s.attention_failures) == (S.COMPLETED, S.ENDED, 5, 0)
    assert journey.progress(s) == (5, 5)
    mine = Assignment.objects.filter(campaign=c, worker=w)
    assert mine.count() == 5 and set(mine.values_list("session_id", flat=True)) == {s.pk}
    # the gold rule: G n n G, then the 3rd check the worker still needs before the bundle ends
    assert [a.item.is_gold for a in served] == [True, False, False, True, True]
    plan = journey.bundle_plan(c)
    assert (plan["gold"], plan["normal"], plan["counted"]) == (3, 2, 2)
    assert mine.filter(counted=True).count() == 2  # the bundle's judgments count
    assert HumanJudgment.objects.filter(campaign=c, rater=w.rater_id).count() == 2 * 2
    with pytest.raises(engine.EngineError):
        journey.next_task(s)
    row = journey.participants(c)[0]
    assert row["tasks_done"] == 5 and [t["gold"] for t in row["tasks"]] == [True, False, False, True, True]
    assert all(t["seconds"] is not None and t["state"] == "submitted" for t in row["tasks"])


def test_too_many_failed_attention_checks_end_the_session_block_and_release_counted_work(dataset):
    c = make(dataset, images=4, gold=6, gold_every=2, attention_max_failures=1)
    other = local_worker(c)
    so = to_tasks(c, other)
    for _ in range(6):
        do_task(so)
    others_rows = HumanJudgment.objects.filter(campaign=c, rater=other.rater_id).count()
    assert others_rows > 0
    w = local_worker(c)
    s = to_tasks(c, w)
    for _ in range(6):  # G n G n G n: three checks passed, the three normal tasks count
        do_task(s)
    assert Assignment.objects.filter(campaign=c, worker=w, counted=True).count() == 3
    assert HumanJudgment.objects.filter(campaign=c, rater=w.rater_id).count() == 6
    assert do_task(s, gold_right=False).item.is_gold
    assert (s.attention_failures, s.is_open) == (1, True)  # one failure is tolerated
    do_task(s)
    a = do_task(s, gold_right=False)
    assert a.item.is_gold and a.gold_correct is False
    assert (s.outcome, s.attention_failures) == (S.FAILED_ATTENTION, 2)
    status = WorkerStatus.objects.get(campaign=c, worker=w)
    assert status.state == WorkerStatus.BLOCKED and f"session {s.pk}" in status.reason
    assert not Assignment.objects.filter(campaign=c, worker=w, counted=True).exists()
    assert slots_held(c, w) == 0
    assert not HumanJudgment.objects.filter(campaign=c, rater=w.rater_id).exists()
    assert HumanJudgment.objects.filter(campaign=c, rater=other.rater_id).count() == others_rows
    with pytest.raises(engine.NoTask) as exc:
        journey.open_session(c, w)
    assert exc.value.code == "blocked"


# --- ending ----------------------------------------------------------------------------------------------
def test_release_session_returns_unfinished_work_or_also_releases_counted_work(dataset):
    c = make(dataset, images=4, bundle_size=3)
    w = local_worker(c)
    first = to_tasks(c, w)
    for _ in range(3):
        do_task(first)
    assert first.outcome == S.COMPLETED
    first_rows = sorted(HumanJudgment.objects.filter(campaign=c, rater=w.rater_id).values_list("pk", "created_at"))
    assert len(first_rows) == 3 * 2
    second = to_tasks(c, w)
    do_task(second), do_task(second)
    held = journey.next_task(second)
    assert held.slot is not None
    second_items = list(Assignment.objects.filter(session=second).values_list("item_id", flat=True))
    assert journey.release_session(second, outcome=S.REJECTED, counted=True) == {"returned": 1, "released": 2}
    assert (second.outcome, second.stage) == (S.REJECTED, S.ENDED)
    held.refresh_from_db()
    assert (held.state, held.slot) == (Assignment.RETURNED, None)
    assert not Assignment.objects.filter(session=second, counted=True).exists()
    assert not Assignment.objects.filter(item_id__in=second_items, slot__isnull=False).exists()
    # the first session's judgments are untouched: same rows, same ids and times
    assert sorted(HumanJudgment.objects.filter(campaign=c, rater=w.rater_id).values_list("pk", "created_at")) == first_rows
    assert Assignment.objects.filter(session=first, counted=True).count() == 3
    assert journey.release_session(second, outcome=S.REJECTED, counted=True) == {"returned": 0, "released": 0}
    # a returned (or timed-out) submission: only the unfinished task goes back
    third = to_tasks(c, w)
    done = do_task(third)
    journey.next_task(third)
    assert journey.release_session(third, outcome=S.RETURNED, counted=False) == {"returned": 1, "released": 0}
    assert third.outcome == S.RETURNED
    done.refresh_from_db()
    assert done.counted and done.slot is not None
    assert slots_held(c, w) == 3 + 1
    # an ended session keeps its outcome; rejecting it later still releases its counted work
    assert journey.release_session(first, outcome=S.REJECTED, counted=True)["released"] == 3
    first.refresh_from_db()
    assert first.outcome == S.COMPLETED
    assert HumanJudgment.objects.filter(campaign=c, rater=w.rater_id).count() == 2  # the third session's


@pytest.mark.parametrize("kind", ["rating", "description", "forced_choice"])
def test_releasing_some_assignments_keeps_the_workers_other_recorded_work(dataset, kind):
    c = make(dataset, name=f"rel-{kind}".replace("_", "-"), kind=kind, images=4)
    w = local_worker(c)
    done = []
    for _ in range(3):
        a = engine.accept(c, w)
        if kind == "rating":
            data = {"relevance": "4", "thoroughness": "3"}
        elif kind == "forced_choice":
            data = {"choice": "1"}
        else:
            data = {"description": f"a brown dog runs across the green grass number {a.pk}"}
        engine.submit(a.pk, w, data)
        done.append(a.pk)
    hj = sorted(HumanJudgment.objects.filter(campaign=c).values_list("pk", "caption_id", "score"))
    from crowd.models import PairwiseJudgment

    pj = sorted(PairwiseJudgment.objects.filter(campaign=c).values_list("pk", "caption_b_id", "choice"))
    caps = sorted(Caption.objects.filter(key__startswith="assignment-").values_list("pk", "key")) if kind == "description" else []
    assert hj or pj or kind == "description"
    assert engine.release_assignments(c, w, [done[0], "junk", 10**9]) == 1
    assert engine.release_assignments(c, w, [done[0]]) == 0  # idempotent
    released = Assignment.objects.get(pk=done[0])
    assert (released.counted, released.slot) == (False, None) and released.answer is not None
    assert Assignment.objects.filter(pk__in=done[1:], counted=True, slot__isnull=False).count() == 2
    if kind == "rating":
        after = sorted(HumanJudgment.objects.filter(campaign=c).values_list("pk", "caption_id", "score"))
        assert len(after) == len(hj) - 2 and set(after) < set(hj)
        assert released.item.payload["caption"] not in {r[1] for r in after}
    if kind == "forced_choice":
        after = sorted(PairwiseJudgment.objects.filter(campaign=c).values_list("pk", "caption_b_id", "choice"))
        assert len(after) == len(pj) - 1 and set(after) < set(pj)
    if kind == "description":
        after = sorted(Caption.objects.filter(key__startswith="assignment-").values_list("pk", "key"))
        assert len(after) == len(caps) - 1 and set(after) < set(caps)


def test_a_second_concurrent_session_is_refused_and_a_reload_is_the_same_session(dataset):
    c = make(dataset, provider=Campaign.PROLIFIC, bundle_size=2)
    w = prolific_worker()
    s = journey.open_session(c, w, provider_ref="SESSION1", study_ref="a" * 24, user_agent="x" * 400)
    assert (s.provider, s.verified, len(s.user_agent)) == (Campaign.PROLIFIC, True, 300)
    assert journey.open_session(c, w, provider_ref="SESSION1").pk == s.pk
    with pytest.raises(engine.Conflict) as exc:
        journey.open_session(c, w, provider_ref="SESSION2")
    assert exc.value.code == "concurrent-session" and exc.value.status == 409
    with pytest.raises(engine.Conflict) as exc:
        journey.open_session(c, prolific_worker(), provider_ref="SESSION1")
    assert exc.value.code == "foreign-session"
    assert journey.session_for(s.key, c).pk == s.pk
    assert journey.session_for(s.key, make(dataset, name="elsewhere")) is None
    assert journey.session_for("nope", c) is None and journey.session_for(None, c) is None
    journey.end_session(s, S.RETURNED)
    assert journey.open_session(c, w, provider_ref="SESSION1").pk == s.pk  # an ended one too
    assert journey.open_session(c, w, provider_ref="SESSION2").pk != s.pk  # the first has ended
    # a local rater resuming without a provider ref gets their open session back
    lc = make(dataset, name="local-bundle", bundle_size=2)
    lw = local_worker(lc)
    assert journey.open_session(lc, lw).pk == journey.open_session(lc, lw).pk
    Campaign.objects.filter(pk=lc.pk).update(state=Campaign.PAUSED)
    with pytest.raises(engine.NoTask) as exc:
        journey.open_session(lc, local_worker(lc))
    assert exc.value.code == "paused"


@pytest.mark.django_db(transaction=True)
def test_concurrent_arrivals_open_one_session_and_a_double_click_gets_one_task(dataset):
    c = make(dataset, provider=Campaign.PROLIFIC, bundle_size=3)
    w = prolific_worker()
    results, barrier = [], threading.Barrier(6)

    def arrive(ref):
        try:
            barrier.wait()
            results.append(journey.open_session(c, w, provider_ref=ref).pk)
        except engine.Conflict as exc:
            results.append(exc.code)
        finally:
            connection.close()

    threads = [threading.Thread(target=arrive, args=(f"SESSION{i % 3}",)) for i in range(6)]
    [t.start() for t in threads], [t.join() for t in threads]
    opened = {r for r in results if isinstance(r, int)}
    assert len(opened) == 1 and S.objects.filter(campaign=c, worker=w).count() == 1
    assert set(results) - opened <= {"concurrent-session"}
    s = S.objects.get(pk=opened.pop())
    journey.finish_instructions(s)
    tasks, barrier = [], threading.Barrier(4)

    def click():
        try:
            barrier.wait()
            tasks.append(journey.next_task(S.objects.get(pk=s.pk)).pk)
        finally:
            connection.close()

    threads = [threading.Thread(target=click) for _ in range(4)]
    [t.start() for t in threads], [t.join() for t in threads]
    assert len(tasks) == 4 and len(set(tasks)) == 1
    assert Assignment.objects.filter(campaign=c, worker=w).count() == 1


def test_the_time_budget_ends_the_session_and_frees_its_task(dataset):
    c = make(dataset, images=4, bundle_size=5, session_minutes=20)
    w = local_worker(c)
    s = to_tasks(c, w)
    assert abs((s.deadline - s.started_at) - timedelta(minutes=20)) < timedelta(seconds=1)
    do_task(s)
    S.objects.filter(pk=s.pk).update(deadline=timezone.now() - timedelta(seconds=1))
    assert journey.next_task(s) is None
    assert (s.outcome, s.tasks_done) == (S.COMPLETED, 1)  # work was done: completed, not timed out
    idle = to_tasks(c, local_worker(c))
    S.objects.filter(pk=idle.pk).update(deadline=timezone.now() - timedelta(seconds=1))
    assert journey.next_task(idle) is None and idle.outcome == S.TIMED_OUT
    # the periodic expiry: past the deadline plus one task's time, an open session ends, its task returns
    late_w = local_worker(c)
    late = to_tasks(c, late_w)
    held = journey.next_task(late)
    recent = to_tasks(c, local_worker(c))
    now = timezone.now()
    S.objects.filter(pk=late.pk).update(deadline=now - timedelta(seconds=c.assignment_seconds + 5))
    S.objects.filter(pk=recent.pk).update(deadline=now - timedelta(seconds=5))
    assert journey.expire_sessions() == 1
    late.refresh_from_db(), recent.refresh_from_db()
    assert (late.outcome, late.is_open, recent.is_open) == (S.TIMED_OUT, False, True)
    held.refresh_from_db()
    assert (held.state, held.slot) == (Assignment.RETURNED, None) and slots_held(c, late_w) == 0
    assert journey.expire_sessions() == 0
    from crowd.tasks import expire_sessions

    S.objects.filter(pk=recent.pk).update(deadline=now - timedelta(seconds=c.assignment_seconds + 5))
    assert expire_sessions() == 1


# --- Prolific and the gold rule ----------------------------------------------------------------------------
def test_prolific_campaigns_get_the_gold_rule_and_mturk_keeps_none(dataset):
    c = make(dataset, name="pro", provider=Campaign.PROLIFIC, gold=4, gold_every=3, bundle_size=10)
    mt = make(dataset, name="mt", provider=Campaign.MTURK, gold=4, gold_every=3)
    assert engine.SERVED_PROVIDERS == (Campaign.LOCAL, Campaign.PROLIFIC)
    assert (engine.gold_checks_required(c), engine.gold_checks_required(mt)) == (3, 0)
    assert journey.uses_journey(c)
    ProlificStudy.objects.create(
        campaign=c, name="Rate captions", description="d", places=10, reward=150, estimated_minutes=10,
        completion_codes={"completed": "C0MPLETE", "no_consent": "N0CONSENT", "failed_attention": "FA1LED"})
    w = prolific_worker()
    s = to_tasks(c, w, provider_ref="SUB1")
    first = do_task(s)
    assert first.item.is_gold and first.gold_correct
    second = do_task(s)
    assert not second.item.is_gold and second.awaiting_gold and not second.counted  # waits for the checks
    while s.is_open:
        do_task(s)
    assert (s.tasks_done, s.outcome, s.completion_code) == (10, S.COMPLETED, "C0MPLETE")
    declined = journey.open_session(c, prolific_worker(), provider_ref="SUB2")
    Campaign.objects.filter(pk=c.pk).update(consent_text="Consent.")
    declined.stage = S.CONSENT
    declined.save(update_fields=["stage"])
    assert journey.decline_consent(declined).completion_code == "N0CONSENT"
    mine = Assignment.objects.filter(session=s)
    assert mine.filter(item__is_gold=True).count() == 4
    assert mine.filter(item__is_gold=False, counted=True).count() == 6 and not mine.filter(awaiting_gold=True).exists()


def test_places_needed_follows_items_k_the_bundle_and_the_gold_rule(dataset):
    c = make(dataset, images=6, gold=6, gold_every=10, k=2, bundle_size=10)
    n_items = Item.objects.filter(campaign=c, is_gold=False).count()
    assert n_items > 10
    plan = journey.bundle_plan(c)
    assert plan == {"tasks": 10, "gold": 3, "normal": 7, "counted": 7}  # G, 7 tasks, then the 2 checks still due
    assert journey.places_needed(c) == math.ceil(n_items * 2 / 7)
    # a real session serves exactly that
    s = to_tasks(c, local_worker(c))
    while s.is_open:
        do_task(s)
    assert Assignment.objects.filter(session=s, item__is_gold=True).count() == 3
    assert Assignment.objects.filter(session=s, counted=True).count() == 7
    no_gold = make(dataset, name="nogold", images=6, gold_every=0, k=3, bundle_size=10)
    assert journey.places_needed(no_gold) == math.ceil(Item.objects.filter(campaign=no_gold, is_gold=False).count() * 3 / 10)
    open_ended = make(dataset, name="open", images=6, gold_every=0, k=3)
    assert journey.places_needed(open_ended) == 3  # everyone can do every item: k people
    capped = make(dataset, name="capped", images=6, gold_every=0, k=3, per_worker_cap=4)
    assert journey.places_needed(capped) == math.ceil(Item.objects.filter(campaign=capped, is_gold=False).count() * 3 / 4)
    tiny = make(dataset, name="tiny", images=2, gold=4, gold_every=3, bundle_size=3)
    with pytest.raises(ValueError, match="attention checks"):
        journey.places_needed(tiny)


def test_the_engine_guarantees_hold_across_many_sessions(dataset):
    c = make(dataset, images=1, gold=3, gold_every=4, k=2, bundle_size=6)
    n_items = Item.objects.filter(campaign=c, is_gold=False).count()
    workers, outcomes = [], []
    for _ in range(journey.places_needed(c) + 3):
        w = local_worker(c)
        workers.append(w)
        try:
            s = to_tasks(c, w)
        except engine.NoTask as exc:  # the campaign finished itself once complete
            outcomes.append(exc.code)
            continue
        while s.is_open:
            do_task(s)
        outcomes.append(s.outcome)
    assert outcomes.count(S.COMPLETED) >= journey.places_needed(c) - 1
    counted = Assignment.objects.filter(campaign=c, counted=True, item__is_gold=False)
    assert counted.count() == n_items * 2
    for item in Item.objects.filter(campaign=c, is_gold=False):
        rows = Assignment.objects.filter(item=item, counted=True)
        assert rows.count() == 2 and rows.values("worker").distinct().count() == 2
    pairs = list(Assignment.objects.filter(campaign=c).values_list("item_id", "worker_id"))
    assert len(pairs) == len(set(pairs))  # never one worker twice on an item
    assert HumanJudgment.objects.filter(campaign=c).count() == n_items * 2 * 2
    assert not Assignment.objects.filter(campaign=c, state=Assignment.ACCEPTED).exists()
    c.refresh_from_db()
    assert c.state == Campaign.FINISHED


# --- creating journey campaigns -----------------------------------------------------------------------------
def test_journey_settings_out_of_range_are_refused_with_nothing_written(dataset):
    for bad in ({"practice_pass": 0}, {"practice_pass": 1.5}, {"practice_pass": float("nan")},
                {"practice_pass": "most"}, {"bundle_size": 1001}, {"bundle_size": -1}, {"bundle_size": 2.5},
                {"session_minutes": 1441}, {"attention_max_failures": -1}, {"consent_text": "x" * 20001},
                {"consent_text": "a\x00b"}, {"practice": 101}):
        with pytest.raises(CampaignSpecError):
            make(dataset, name="bad", **bad)
    assert not Campaign.objects.filter(name="bad").exists()
    ok = make(dataset, name="edge", practice_pass=1, bundle_size=1000, session_minutes=1440, consent_text="x" * 20000)
    assert (ok.practice_pass, ok.bundle_size, ok.session_minutes, len(ok.consent_text)) == (1.0, 1000, 1440, 20000)


def test_create_campaign_command_makes_a_prolific_journey_campaign(dataset, tmp_path):
    consent = tmp_path / "consent.txt"
    consent.write_text("Sie stimmen zu: Bilder bewerten.\r\nThank you.\n", encoding="utf-8")
    out = run_command("create_campaign", "rating", "--dataset", "sub", "--name", "pro", "--images", "3",
                      "--provider", "prolific", "--bundle", "10", "--session-minutes", "30",
                      "--consent-file", str(consent), "--practice", "4", "--practice-pass", "0.75",
                      "--attention-max-failures", "1")
    c = Campaign.objects.get(name="pro")
    assert (c.provider, c.bundle_size, c.session_minutes, c.practice_pass, c.attention_max_failures) == (
        Campaign.PROLIFIC, 10, 30, 0.75, 1)
    assert c.consent_text == "Sie stimmen zu: Bilder bewerten.\nThank you."
    assert len(journey.practice_items(c)) == 4 and "4 practice items" in out
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes("Zustimmung: Gr\xfc\xdfe".encode("latin-1"))
    huge = tmp_path / "huge.txt"
    huge.write_text("a" * 20001)
    for args, message in (
        (["--consent-file", str(latin1)], "not UTF-8"),
        (["--consent-file", str(huge)], "20,000"),
        (["--consent-file", str(tmp_path / "missing.txt")], "cannot read"),
        (["--practice-pass", "0"], "--practice-pass"),
        (["--bundle", "5000"], "--bundle"),
        (["--session-minutes", "2000"], "--session-minutes"),
        (["--attention-max-failures", "-2"], "--attention-max-failures"),
    ):
        with pytest.raises(CommandError, match=message) as exc:
            run_command("create_campaign", "rating", "--dataset", "sub", "--name", "bad", "--images", "3", *args)
        assert "\n" not in str(exc.value)
    with pytest.raises(CommandError, match="no gold"):
        run_command("create_campaign", "description", "--dataset", "sub", "--name", "bad", "--practice", "2")
    assert not Campaign.objects.filter(name="bad").exists()
