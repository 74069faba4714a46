"""How a Prolific participant's session can end, through real HTTP requests (Django's test client,
PostgreSQL) against the fake Prolific server (tests/fake_prolific/, a real HTTP server on the
loopback): declining consent, being screened out by the practice, failing too many attention
checks, a submission that Prolific marks RETURNED, TIMED-OUT or REJECTED; and who may start a
session at all (forged identities, a second concurrent session, the same participant later).

Each ending is checked for what the issue documents: the session's outcome, the completion code
that matches it (the study's codes), and which slots are held or freed (a released slot is open to
other participants again; released judgments are gone from the campaign)."""
import re
import secrets

import pytest
from django.test import Client
from django.urls import reverse

from crowd import engine, journey
from crowd.models import (
    Assignment,
    Campaign,
    Dataset,
    HumanJudgment,
    Item,
    ParticipantSession,
    PracticeAnswer,
    ProlificSubmission,
    Worker,
    WorkerStatus,
)
from crowd.prolific import study as studies
from crowd.prolific_client import ProlificAPI
from crowd.prolific.sync import sync_study
from tests.fake_prolific import fake_prolific  # noqa: F401
from tests.fake_prolific.server import new_id, now_iso

from .conftest import run_command, write_subset

pytestmark = pytest.mark.django_db

CONSENT = "You agree that your ratings are stored and published without your Prolific ID. You may stop at any time."


# --- setup shared with tests/test_prolific_journey.py ------------------------------------------------------
@pytest.fixture
def dataset(tmp_path):
    """The first 8 judged images of the bundled Flickr8k-Expert data (real rows)."""
    run_command("import_dataset", "flickr8k-expert", str(write_subset(tmp_path / "flickr8k-small", 8)), "--name", "small")
    return Dataset.objects.get(name="small")


def prolific_campaign(dataset, name, *, site_url="http://testserver", images=2, k=2, gold=1, gold_every=3,
                      bundle=3, consent=CONSENT, practice=0, practice_pass=1.0, attention_max_failures=1,
                      fields=None):
    """A rating campaign for Prolific with its study created and published on the fake server
    (published with ``confirmed=True``). ``fields``: Campaign fields set after creation (quality
    thresholds). Returns (campaign, study, api)."""
    campaign = engine.create_campaign(
        dataset, "rating", name=name, options={"images": images, "gold": gold}, k=k, gold_every=gold_every,
        provider=Campaign.PROLIFIC, bundle_size=bundle, session_minutes=30, consent_text=consent,
        practice=practice, practice_pass=practice_pass, attention_max_failures=attention_max_failures,
    )
    if fields:
        Campaign.objects.filter(pk=campaign.pk).update(**fields)
        campaign.refresh_from_db()
    api = ProlificAPI(campaign=campaign)
    study = studies.create_draft(campaign, api, reward=150, estimated_minutes=10, site_url=site_url)
    assert re.fullmatch(r"[0-9a-f]{24}", study.study_id), study.study_id
    studies.publish(study, api, confirmed=True)
    study.refresh_from_db()
    campaign.refresh_from_db()
    assert campaign.state == Campaign.LIVE, "publishing the study did not open the campaign"
    codes = study.completion_codes
    assert {"completed", "failed_attention", "no_consent", "screened_out"} <= set(codes), codes
    assert len(set(codes.values())) == len(codes), f"two outcomes share a code: {codes}"
    return campaign, study, api


def new_pid() -> str:
    return secrets.token_hex(12)  # Prolific ids are 24 hex digits


def start_url(campaign):
    return reverse("crowd:prolific-start", args=[campaign.name])


def params(sub, study, **override):
    q = {"PROLIFIC_PID": sub["participant_id"], "STUDY_ID": study.study_id, "SESSION_ID": sub["id"]}
    return q | override


def retake(fake, study, pid) -> dict:
    """Prolific lets a participant who returned a submission take the study again: a new ACTIVE
    submission of ``pid`` (``FakeProlific.start_submission`` allows one per participant, so the
    returned one is checked and the new one added to the fake's state here)."""
    with fake.lock:
        mine = [s for s in fake.submissions.values() if s["study_id"] == study.study_id and s["participant_id"] == pid]
        assert mine and all(s["status"] == "RETURNED" for s in mine)
        sub = dict(mine[0], id=new_id(), status="ACTIVE", started_at=now_iso(), completed_at=None,
                   is_complete=False, study_code=None, time_taken=None)
        fake.submissions[sub["id"]] = sub
        return dict(sub)


def arrive(fake, study, campaign, client=None, pid=None, sub=None):
    """A participant the fake started a submission for opens the study link. Returns
    (client, submission dict, response, session or None)."""
    client = client or Client()
    sub = sub or fake.start_submission(study.study_id, participant_id=pid or new_pid())
    r = client.get(start_url(campaign), params(sub, study))
    session = ParticipantSession.objects.filter(campaign=campaign, provider_ref=sub["id"]).first()
    return client, sub, r, session


def url(name, campaign, *args):
    return reverse(f"crowd:{name}", args=[campaign.name, *args])


def consent(client, campaign, agree=True):
    data = {"agree": "1", "version": str(campaign.consent_version)} if agree else {"decline": "1"}
    r = client.post(url("session-consent", campaign), data)
    assert r.status_code in (200, 302), r.content[:500]
    return r


def instructions(client, campaign):
    r = client.post(url("session-instructions", campaign))
    assert r.status_code in (200, 302), r.content[:500]
    return r


def practice(client, campaign, correct):
    """Answer every practice item: ``correct`` is a bool or one bool per item (rating gold: relevance 1)."""
    items = journey.practice_items(campaign)
    assert items, "the campaign has no practice items"
    plan = correct if isinstance(correct, (list, tuple)) else [correct] * len(items)
    for item, right in zip(items, plan):
        r = client.post(url("session-practice", campaign),
                        {"key": item["key"], "relevance": "1" if right else "5", "thoroughness": "2"})
        assert r.status_code in (200, 302), r.content[:500]
    return items


TASK_PATH = r"/session/{name}/task/(\d+)/"


def current_task(client, campaign):
    """The task the session page hands over to (following its redirects), or None."""
    r = client.get(url("session", campaign))
    pattern = re.compile(TASK_PATH.format(name=re.escape(campaign.name)))
    for _ in range(5):
        if r.status_code != 302:
            return None
        m = pattern.search(r["Location"])
        if m:
            return Assignment.objects.select_related("item").get(pk=int(m.group(1)))
        r = client.get(r["Location"])
    return None


def answer(client, campaign, a, *, gold_correct=True):
    """Submit ``a``: a gold item answered right (relevance 1) or wrong (5); a normal item 4/3."""
    relevance = ("1" if gold_correct else "5") if a.item.is_gold else "4"
    r = client.post(url("session-submit", campaign, a.pk),
                    {"relevance": relevance, "thoroughness": "3", "item": str(a.item_id)})
    assert r.status_code == 302, r.content[:500]
    a.refresh_from_db()
    assert a.state == Assignment.SUBMITTED
    return r


def judgments(campaign, worker):
    return HumanJudgment.objects.filter(campaign=campaign, rater=worker.rater_id).count()


def completion_url(code):
    from django.conf import settings
    return f"{settings.PROLIFIC_COMPLETE_URL}?cc={code}"


def ended(session, outcome, study):
    session.refresh_from_db()
    assert (session.stage, session.outcome) == (ParticipantSession.ENDED, outcome)
    assert session.ended_at is not None
    return session


# --- consent ----------------------------------------------------------------------------------------
def test_declining_consent_ends_with_the_no_consent_code_and_holds_nothing(dataset, fake_prolific):
    campaign, study, api = prolific_campaign(dataset, "pro-decline")
    client, sub, r, session = arrive(fake_prolific, study, campaign)
    assert r.status_code == 302 and r["Location"].endswith(url("session", campaign)), r.content[:300]
    assert session is not None and session.stage == ParticipantSession.CONSENT
    page = client.get(url("session", campaign))
    assert page.status_code == 200 and CONSENT in page.content.decode()
    assert not Assignment.objects.filter(campaign=campaign).exists()

    consent(client, campaign, agree=False)
    ended(session, ParticipantSession.NO_CONSENT, study)
    assert session.consent_version is None and session.consented_at is None
    code = study.completion_codes["no_consent"]
    assert session.completion_code == code
    done = client.get(url("session-done", campaign))
    assert done.status_code == 200
    assert completion_url(code).replace("&", "&amp;") in done.content.decode()
    assert completion_url(study.completion_codes["completed"]) not in done.content.decode()

    # nothing held, and the ended session cannot be talked back into tasks
    client.post(url("session-consent", campaign), {"agree": "1", "version": str(campaign.consent_version)})
    assert current_task(client, campaign) is None
    session.refresh_from_db()
    assert (session.outcome, session.consent_version) == (ParticipantSession.NO_CONSENT, None)
    assert not Assignment.objects.filter(campaign=campaign).exists()
    assert not Item.objects.filter(campaign=campaign, full=True).exists()


def test_consent_of_an_older_version_is_refused(dataset, fake_prolific):
    campaign, study, api = prolific_campaign(dataset, "pro-consent-version")
    client, sub, r, session = arrive(fake_prolific, study, campaign)
    Campaign.objects.filter(pk=campaign.pk).update(consent_version=2)
    r = client.post(url("session-consent", campaign), {"agree": "1", "version": "1"})
    assert r.status_code == 409
    session.refresh_from_db()
    assert (session.stage, session.consent_version) == (ParticipantSession.CONSENT, None)
    consent(client, Campaign.objects.get(pk=campaign.pk))
    session.refresh_from_db()
    assert session.consent_version == 2 and session.consented_at is not None
    assert session.stage == ParticipantSession.INSTRUCTIONS


# --- practice ---------------------------------------------------------------------------------------
def test_failing_practice_screens_out_with_no_slot_held_and_nothing_counted(dataset, fake_prolific):
    campaign, study, api = prolific_campaign(dataset, "pro-screen", practice=2, practice_pass=1.0)
    client, sub, r, session = arrive(fake_prolific, study, campaign)
    consent(client, campaign)
    instructions(client, campaign)
    session.refresh_from_db()
    assert session.stage == ParticipantSession.PRACTICE
    practice(client, campaign, [True, False])  # one of two right: under practice_pass 1.0

    ended(session, ParticipantSession.SCREENED_OUT, study)
    assert (session.practice_answered, session.practice_correct) == (2, 1)
    assert sorted(PracticeAnswer.objects.filter(session=session).values_list("correct", flat=True)) == [False, True]
    assert session.completion_code == study.completion_codes["screened_out"]
    done = client.get(url("session-done", campaign)).content.decode()
    assert completion_url(study.completion_codes["screened_out"]) in done
    # no slot held, nothing counted, the practice not remembered as passed
    assert not Assignment.objects.filter(campaign=campaign).exists()
    assert not HumanJudgment.objects.filter(campaign=campaign).exists()
    assert not Item.objects.filter(campaign=campaign, full=True).exists()
    assert not WorkerStatus.objects.filter(campaign=campaign, practice_passed_at__isnull=False).exists()
    assert current_task(client, campaign) is None
    # practice items are not items of the campaign: nobody is ever served them as tasks
    practice_keys = {p["key"] for p in journey.practice_items(campaign)}
    assert not Item.objects.filter(campaign=campaign, key__in=practice_keys).exists()


# --- attention checks -------------------------------------------------------------------------------
def test_too_many_failed_attention_checks_end_the_session_and_release_counted_work(dataset, fake_prolific):
    # k=1, three attention checks, one every 2nd task, one failure tolerated; the gold accuracy
    # thresholds switched off so that only the journey's attention rule acts
    campaign, study, api = prolific_campaign(
        dataset, "pro-attention", k=1, gold=3, gold_every=2, bundle=8, consent="", attention_max_failures=1,
        fields={"gold_min_answers": 1, "gold_block_below": 0.0, "gold_warn_below": 0.0})
    client, sub, r, session = arrive(fake_prolific, study, campaign)
    assert session.stage == ParticipantSession.INSTRUCTIONS  # no consent text: no consent page
    instructions(client, campaign)
    worker = session.worker

    served, golds, counted_before = [], 0, 0
    while True:
        a = current_task(client, campaign)
        if a is None:
            break
        served.append(a)
        if a.item.is_gold:
            golds += 1
            answer(client, campaign, a, gold_correct=golds == 1)  # the first check passed, then failed ones
        else:
            answer(client, campaign, a)
            counted_before = judgments(campaign, worker)
        assert len(served) <= 8
    assert [a.item.is_gold for a in served] == [True, False, True, False, True]
    assert counted_before == 2 * 2  # two counted tasks, two criteria each, before the last failure

    ended(session, ParticipantSession.FAILED_ATTENTION, study)
    assert session.attention_failures == 2 and session.tasks_done == 5
    assert session.completion_code == study.completion_codes["failed_attention"]
    status = WorkerStatus.objects.get(campaign=campaign, worker=worker)
    assert status.state == WorkerStatus.BLOCKED
    # the counted work is released: judgments gone, slots free, the answers kept for the record
    normal = [a for a in served if not a.item.is_gold]
    assert judgments(campaign, worker) == 0
    for a in normal:
        a.refresh_from_db()
        assert (a.state, a.counted, a.slot) == (Assignment.SUBMITTED, False, None) and a.answer
        assert not Assignment.objects.filter(item=a.item, slot__isnull=False).exists()
        assert not Item.objects.get(pk=a.item_id).full

    # another participant gets the freed items (k=1: they were full) and their judgments count
    client2, sub2, r2, session2 = arrive(fake_prolific, study, campaign)
    instructions(client2, campaign)
    first = current_task(client2, campaign)
    assert first.item.is_gold
    answer(client2, campaign, first)
    second = current_task(client2, campaign)
    assert second.item_id == normal[0].item_id  # the first open item by serving position again
    answer(client2, campaign, second)
    second.refresh_from_db()
    assert second.counted and second.slot == 0
    assert judgments(campaign, session2.worker) == 2


# --- Prolific says the submission ended: RETURNED, TIMED-OUT, REJECTED -----------------------------------
@pytest.mark.parametrize("status,outcome", [("RETURNED", ParticipantSession.RETURNED),
                                            ("TIMED-OUT", ParticipantSession.TIMED_OUT)])
def test_returned_or_timed_out_submission_frees_the_unfinished_task_and_ends_the_session(
        dataset, fake_prolific, status, outcome):
    campaign, study, api = prolific_campaign(dataset, f"pro-{status.lower()}", k=1, gold_every=0, consent="")
    client, sub, r, session = arrive(fake_prolific, study, campaign)
    instructions(client, campaign)
    done = current_task(client, campaign)
    answer(client, campaign, done)
    open_task = current_task(client, campaign)
    assert open_task.state == Assignment.ACCEPTED and open_task.slot == 0
    assert Item.objects.get(pk=open_task.item_id).full  # k = 1: the unfinished task holds the item

    fake_prolific.set_status(sub["id"], status)
    sync_study(study, api)
    record = ProlificSubmission.objects.get(submission_id=sub["id"])
    assert record.status == status and record.session_id == session.pk and record.released_at is not None
    ended(session, outcome, study)
    open_task.refresh_from_db()
    assert open_task.state in (Assignment.RETURNED, Assignment.EXPIRED) and open_task.slot is None
    assert not Item.objects.get(pk=open_task.item_id).full
    # the finished task stays counted (only a rejection takes counted work back)
    done.refresh_from_db()
    assert done.counted and judgments(campaign, session.worker) == 2

    # a late answer to the freed task is not counted; a second sync changes nothing
    client.post(url("session-submit", campaign, open_task.pk),
                {"relevance": "4", "thoroughness": "3", "item": str(open_task.item_id)})
    open_task.refresh_from_db()
    assert not open_task.counted and open_task.slot is None
    released_at = record.released_at
    sync_study(study, api)
    record.refresh_from_db()
    assert record.released_at == released_at
    assert judgments(campaign, session.worker) == 2

    # the freed item goes to the next participant
    client2, sub2, r2, session2 = arrive(fake_prolific, study, campaign)
    instructions(client2, campaign)
    assert current_task(client2, campaign).item_id == open_task.item_id


def test_rejected_submission_releases_the_counted_work(dataset, fake_prolific):
    campaign, study, api = prolific_campaign(dataset, "pro-rejected", k=1, gold_every=0, consent="", bundle=2)
    client, sub, r, session = arrive(fake_prolific, study, campaign)
    instructions(client, campaign)
    tasks = []
    while (a := current_task(client, campaign)) is not None:
        answer(client, campaign, a)
        tasks.append(a)
    assert len(tasks) == 2
    ended(session, ParticipantSession.COMPLETED, study)
    assert session.completion_code == study.completion_codes["completed"]
    assert judgments(campaign, session.worker) == 4
    fake_prolific.complete(sub["id"], session.completion_code)
    sync_study(study, api)
    assert judgments(campaign, session.worker) == 4  # completed: nothing released

    fake_prolific.set_status(sub["id"], "REJECTED")
    sync_study(study, api)
    record = ProlificSubmission.objects.get(submission_id=sub["id"])
    assert record.status == "REJECTED" and record.released_at is not None
    assert judgments(campaign, session.worker) == 0
    for a in tasks:
        a.refresh_from_db()
        assert not a.counted and a.slot is None
        assert not Item.objects.get(pk=a.item_id).full
    session.refresh_from_db()
    assert session.ended_at is not None


# --- who may start a session ------------------------------------------------------------------------
def test_forged_identities_are_refused_and_open_nothing(dataset, fake_prolific):
    campaign, study, api = prolific_campaign(dataset, "pro-forged")
    real = fake_prolific.start_submission(study.study_id, participant_id=new_pid())
    client = Client()
    cases = {
        # a session id Prolific does not know
        "unknown session": (params(real, study, SESSION_ID=secrets.token_hex(12)), 403),
        # a real session id, claimed by another participant id
        "someone else's session": (params(real, study, PROLIFIC_PID=new_pid()), 403),
        # malformed parameters
        "malformed id": (params(real, study, PROLIFIC_PID="not-a-prolific-id"), 400),
        "script in id": (params(real, study, SESSION_ID="<script>x</script>"), 400),
        # another study's id
        "foreign study": (params(real, study, STUDY_ID=secrets.token_hex(12)), 403),
    }
    for label, (q, status) in cases.items():
        r = client.get(start_url(campaign), q)
        assert r.status_code == status, (label, r.status_code, r.content[:300])
        assert "<script>x</script>" not in r.content.decode()
        assert journey.JOURNEY_SESSION_KEY not in client.session, label
    assert "Prolific does not know this session" in client.get(
        start_url(campaign), cases["unknown session"][0]).content.decode()
    assert not ParticipantSession.objects.filter(campaign=campaign).exists()
    assert not Assignment.objects.filter(campaign=campaign).exists()
    # the session pages need a session: nothing to see without one
    assert client.get(url("session", campaign)).status_code in (302, 400, 403, 404)
    assert not ParticipantSession.objects.exists()

    # the real participant with their real session gets in
    client, sub, r, session = arrive(fake_prolific, study, campaign, sub=real)
    assert r.status_code == 302 and session is not None
    assert session.worker.external_id == real["participant_id"] and session.study_ref == study.study_id


def test_a_second_concurrent_session_of_the_same_participant_is_refused_with_409(dataset, fake_prolific):
    campaign, study, api = prolific_campaign(dataset, "pro-concurrent")
    pid = new_pid()
    client, sub, r, session = arrive(fake_prolific, study, campaign, pid=pid)
    consent(client, campaign)
    # the same session opened again (a reload, another tab) is the same session, not a second one
    again = Client()
    r = again.get(start_url(campaign), params(sub, study))
    assert r.status_code == 302
    assert again.session[journey.JOURNEY_SESSION_KEY] == session.key
    session.refresh_from_db()
    assert session.stage == ParticipantSession.INSTRUCTIONS  # where it was: consent given once

    # on Prolific the participant returns that submission and takes the study again; our session
    # of the first one is still open (not synced yet): the second is refused
    fake_prolific.set_status(sub["id"], "RETURNED")
    other = retake(fake_prolific, study, pid)
    second = Client()
    r2 = second.get(start_url(campaign), params(other, study))
    assert r2.status_code == 409, r2.content[:300]
    assert "already have a session open" in r2.content.decode()
    assert journey.JOURNEY_SESSION_KEY not in second.session
    assert ParticipantSession.objects.filter(campaign=campaign).count() == 1
    assert not Assignment.objects.filter(campaign=campaign).exists()

    # once the first has ended (the sync sees it returned), the new submission opens a session:
    # the same participant is the same Worker
    sync_study(study, api)
    ended(session, ParticipantSession.RETURNED, study)
    r3 = second.get(start_url(campaign), params(other, study))
    assert r3.status_code == 302
    new = ParticipantSession.objects.get(campaign=campaign, provider_ref=other["id"])
    assert new.pk != session.pk and new.worker_id == session.worker_id and new.is_open


def test_the_same_participant_later_is_the_same_worker_and_keeps_their_passed_practice(dataset, fake_prolific):
    campaign, study, api = prolific_campaign(dataset, "pro-again", practice=2, practice_pass=1.0)
    pid = new_pid()
    client, sub, r, first = arrive(fake_prolific, study, campaign, pid=pid)
    consent(client, campaign)
    instructions(client, campaign)
    practice(client, campaign, True)
    first.refresh_from_db()
    assert first.stage == ParticipantSession.TASKS and journey.practice_passed(campaign, first.worker)
    fake_prolific.set_status(sub["id"], "RETURNED")
    sync_study(study, api)
    ended(first, ParticipantSession.RETURNED, study)

    # a later session in the same study: the same Worker, the practice remembered (no second practice)
    later = retake(fake_prolific, study, pid)
    client2, _, r2, second = arrive(fake_prolific, study, campaign, sub=later)
    assert r2.status_code == 302 and second is not None and second.pk != first.pk
    assert second.worker_id == first.worker_id
    consent(client2, campaign)
    instructions(client2, campaign)
    second.refresh_from_db()
    assert second.stage == ParticipantSession.TASKS
    assert PracticeAnswer.objects.filter(session=second).count() == 0

    # another campaign's study: still the same Worker row
    other, other_study, _ = prolific_campaign(dataset, "pro-again-2")
    client3, _, r3, third = arrive(fake_prolific, other_study, other, pid=pid)
    assert r3.status_code == 302 and third.worker_id == first.worker_id
    assert Worker.objects.filter(provider=Campaign.PROLIFIC, external_id=pid).count() == 1


def test_arrival_while_prolific_is_unreachable_answers_503_and_opens_nothing_until_retried(dataset, fake_prolific,
                                                                                              settings):
    campaign, study, api = prolific_campaign(dataset, "pro-unreachable")
    sub = fake_prolific.start_submission(study.study_id, participant_id=new_pid())
    # every attempt of the confirmation call fails (the first and each retry)
    fake_prolific.fail_next("GET", r"^submissions/", status=503, count=settings.PROLIFIC_MAX_RETRIES + 1)
    client = Client()
    r = client.get(start_url(campaign), params(sub, study))
    assert r.status_code == 503 and r["Retry-After"].isdigit()
    assert "Prolific cannot be reached" in r.content.decode()
    assert fake_prolific.pending_faults() == 0  # retried as many times as the settings allow
    assert not ParticipantSession.objects.exists() and journey.JOURNEY_SESSION_KEY not in client.session
    # the retry link is the same arrival, and works once Prolific answers
    r = client.get(start_url(campaign), params(sub, study))
    assert r.status_code == 302
    assert ParticipantSession.objects.filter(campaign=campaign, provider_ref=sub["id"]).count() == 1


# --- the bundle's own guarantees --------------------------------------------------------------------------
def test_a_repeated_submit_of_a_bundle_task_counts_once_and_does_not_advance_the_bundle(dataset, fake_prolific):
    campaign, study, api = prolific_campaign(dataset, "pro-double", k=1, gold_every=0, consent="", bundle=2)
    client, sub, r, session = arrive(fake_prolific, study, campaign)
    instructions(client, campaign)
    first = current_task(client, campaign)
    data = {"relevance": "4", "thoroughness": "3", "item": str(first.item_id), "submit_key": "k-double-1"}
    for _ in range(3):  # a double (triple) click, or the browser re-sending the form
        r = client.post(url("session-submit", campaign, first.pk), data)
        assert r.status_code == 302
    session.refresh_from_db()
    assert session.tasks_done == 1 and session.is_open
    assert judgments(campaign, session.worker) == 2
    second = current_task(client, campaign)
    assert second is not None and second.pk != first.pk and second.item_id != first.item_id
    assert client.get(url("session-task", campaign, second.pk)).content.decode().count("Task 2 of 2") >= 1
    answer(client, campaign, second)
    ended(session, ParticipantSession.COMPLETED, study)
    assert session.tasks_done == 2 and judgments(campaign, session.worker) == 4
    assert Assignment.objects.filter(session=session).count() == 2


def test_a_session_past_its_time_budget_ends_timed_out_frees_its_task_and_asks_for_a_return(dataset, fake_prolific):
    from datetime import timedelta

    from django.utils import timezone

    campaign, study, api = prolific_campaign(dataset, "pro-budget", k=1, gold_every=0, consent="")
    client, sub, r, session = arrive(fake_prolific, study, campaign)
    instructions(client, campaign)
    task = current_task(client, campaign)
    assert task.slot == 0 and Item.objects.get(pk=task.item_id).full
    # the time budget and the last task's own time are over
    past = timezone.now() - timedelta(seconds=campaign.assignment_seconds + 60)
    ParticipantSession.objects.filter(pk=session.pk).update(deadline=past)
    Assignment.objects.filter(pk=task.pk).update(deadline=past)
    assert journey.expire_sessions() == 1
    ended(session, ParticipantSession.TIMED_OUT, study)
    task.refresh_from_db()
    assert task.state in (Assignment.RETURNED, Assignment.EXPIRED) and task.slot is None
    assert not Item.objects.get(pk=task.item_id).full
    assert session.completion_code == ""  # Prolific has no code for it: the participant returns the study
    done = client.get(url("session-done", campaign)).content.decode()
    assert 'id="return-study"' in done and 'id="completion-link"' not in done
    assert journey.expire_sessions() == 0
