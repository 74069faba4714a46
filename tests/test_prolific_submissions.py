"""Prolific submissions against the fake Prolific server (tests/fake_prolific): the paginated sync,
work released for RETURNED / TIMED-OUT / REJECTED submissions, signed webhooks, review by rules,
the bonus ledger (paid exactly once even when the pay call times out) and the reconciliation."""
import json
import re
import time

import pytest
from django.contrib.auth.models import User
from django.core.management.base import CommandError
from django.urls import reverse

from crowd import engine, journey
from crowd.models import (Assignment, Campaign, Dataset, Item, ParticipantSession, ProlificBonus, ProlificCall,
                          ProlificEvent, ProlificStudy, ProlificSubmission)
from crowd.prolific import bonuses, reconcile, review
from crowd.prolific_client import ProlificAPI
from crowd.prolific.sync import apply_submission, sync_study
from crowd.prolific.webhooks import sign
from crowd.providers.prolific import worker_for
from crowd.tasks import sync_prolific
from tests.fake_prolific import fake_prolific  # noqa: F401
from tests.fake_prolific.server import new_id
from tests.fake_prolific.server import sign as server_sign

from .conftest import run_command, write_subset

pytestmark = pytest.mark.django_db

CODES = {"completed": "CDONE1", "failed_attention": "CFAIL1", "no_consent": "CNOCON", "screened_out": "CSCRN1"}
LONG = ("Your answers to the check questions in this study did not match the instructions we gave at the start, "
        "so we cannot approve this submission.")


@pytest.fixture
def dataset(tmp_path):
    run_command("import_dataset", "flickr8k-expert", str(write_subset(tmp_path / "sub", 6)), "--name", "plsub")
    return Dataset.objects.get(name="plsub")


@pytest.fixture
def owner():
    return User.objects.create_user("olive", password="pw-olive-123")


def make_study(fake, dataset, owner, *, gold=0, gold_every=0, bundle=2, name="pl", **journey_fields):
    """A live Prolific campaign whose study is ACTIVE on the fake server (every completion code goes
    to manual review). ``journey_fields``: ``consent_text``, ``practice``, ``practice_pass``."""
    options = {"gold": gold} if gold else {}
    campaign = engine.create_campaign(dataset, "rating", name=name, owners=[owner], k=1, state=Campaign.LIVE,
                                      provider=Campaign.PROLIFIC, gold_every=gold_every, bundle_size=bundle,
                                      options=options, attention_max_failures=1, **journey_fields)
    sid = new_id()
    fake.studies[sid] = {
        "id": sid, "status": "ACTIVE", "total_available_places": 50, "reward": 150, "places_taken": 0,
        "number_of_submissions": 0,
        "completion_codes": [{"code": code, "code_type": "COMPLETED", "actor": "participant",
                              "actions": [{"action": "MANUALLY_REVIEW"}]} for code in CODES.values()],
    }
    return ProlificStudy.objects.create(campaign=campaign, study_id=sid, status="ACTIVE", name="Rate captions",
                                        description="d", places=50, reward=150, estimated_minutes=5,
                                        completion_codes=CODES)


def arrive(fake, study, *, read_instructions=True):
    """A participant takes a place on Prolific and reaches us: (their session, submission id); past
    the instructions unless ``read_instructions`` is False (then at the consent page, if any)."""
    record = fake.start_submission(study.study_id)
    worker = worker_for(record["participant_id"])
    s = journey.open_session(study.campaign, worker, provider_ref=record["id"], study_ref=study.study_id)
    if read_instructions:
        s = journey.finish_instructions(s)
    return s, record["id"]


def work(session, n=None, *, wrong_gold=0, seconds=None):
    """Do ``n`` tasks (default: the whole bundle) of ``session``; the first ``wrong_gold`` gold
    items (attention checks) answered wrong."""
    done, wrong = 0, 0
    while (n is None or done < n) and session.is_open:
        a = journey.next_task(session)
        if a is None:
            break
        relevance = "4" if (not a.item.is_gold or wrong < wrong_gold) else "1"
        wrong += a.item.is_gold and relevance == "4"
        engine.submit(a.pk, session.worker, {"relevance": relevance, "thoroughness": "3"})
        if seconds is not None:
            Assignment.objects.filter(pk=a.pk).update(work_seconds=seconds)
        journey.after_submit(session, a)
        done += 1
    session.refresh_from_db()
    return session


def finish(fake, session, sid):
    """The participant lands on Prolific's completion URL with the code we gave."""
    assert session.completion_code, session.outcome
    fake.complete(sid, session.completion_code)


def api_for(study):
    return ProlificAPI(campaign=study.campaign)


def calls_to(fake, fragment):
    return [c for c in fake.calls if fragment in c[1]]


# --- sync -------------------------------------------------------------------------------------------
def test_sync_follows_every_page_and_links_each_submission_to_its_session(fake_prolific, dataset, owner):
    study = make_study(fake_prolific, dataset, owner)
    sessions = {}
    for _ in range(5):
        s, sid = arrive(fake_prolific, study)
        sessions[sid] = s
    r = sync_study(study, api_for(study))
    assert r["listed"] == 5 and r["created"] == 5 and r["errors"] == []
    pages = [e["query"].get("page", "1") for e in fake_prolific.log if e["path"] == "submissions/"]
    assert pages == ["1", "2", "3"]  # page size 2: three pages followed
    for sub in ProlificSubmission.objects.filter(study=study):
        assert sub.session_id == sessions[sub.submission_id].pk and sub.status == "ACTIVE"
    fake_prolific.set_status(next(iter(sessions)), "RETURNED")
    again = sync_study(study, api_for(study))
    assert again["created"] == 0 and again["changed"] == 1 and again["released"] == 1
    assert sync_prolific()[study.campaign.name] == "listed 5, new 0, changed 0, released 0, errors 0"  # the beat task
    study.refresh_from_db()
    assert study.last_synced_at is not None


def test_a_record_naming_another_participant_is_stored_but_not_linked(fake_prolific, dataset, owner):
    study = make_study(fake_prolific, dataset, owner)
    s, sid = arrive(fake_prolific, study)
    record = dict(fake_prolific.submissions[sid], participant_id=new_id())
    sub = apply_submission(study, record)
    assert sub.session is None
    s.refresh_from_db()
    assert s.is_open


# --- released work ----------------------------------------------------------------------------------
def test_returned_and_timed_out_free_unfinished_slots_but_keep_counted_work(fake_prolific, dataset, owner):
    study = make_study(fake_prolific, dataset, owner, bundle=3)
    returner, rid = arrive(fake_prolific, study)
    work(returner, 1)
    held = journey.next_task(returner)  # a second task taken, never finished
    sleeper, tid = arrive(fake_prolific, study)
    held2 = journey.next_task(sleeper)
    fake_prolific.set_status(rid, "RETURNED")
    fake_prolific.set_status(tid, "TIMED-OUT")
    r = sync_study(study, api_for(study))
    assert r["released"] == 2
    held.refresh_from_db(), held2.refresh_from_db(), returner.refresh_from_db(), sleeper.refresh_from_db()
    assert held.state == Assignment.RETURNED and held.slot is None
    assert held2.state == Assignment.RETURNED and held2.slot is None
    assert (returner.outcome, sleeper.outcome) == (ParticipantSession.RETURNED, ParticipantSession.TIMED_OUT)
    assert not Item.objects.get(pk=held.item_id).full and not Item.objects.get(pk=held2.item_id).full
    counted = Assignment.objects.filter(session=returner, state=Assignment.SUBMITTED)
    assert counted.count() == 1 and counted.get().counted  # finished work stays counted
    released_at = ProlificSubmission.objects.get(submission_id=rid).released_at
    assert released_at is not None
    sync_study(study, api_for(study))  # once only
    assert ProlificSubmission.objects.get(submission_id=rid).released_at == released_at


def test_a_rejected_submission_frees_its_counted_work(fake_prolific, dataset, owner):
    study = make_study(fake_prolific, dataset, owner, bundle=2)
    s, sid = arrive(fake_prolific, study)
    work(s)
    finish(fake_prolific, s, sid)
    sync_study(study, api_for(study))
    mine = Assignment.objects.filter(session=s)
    assert mine.filter(counted=True).count() == 2
    items = list(mine.values_list("item_id", flat=True))
    assert all(Item.objects.get(pk=i).full for i in items)
    sub = ProlificSubmission.objects.get(submission_id=sid)
    review.reject(sub, api_for(study), "LOW_EFFORT", LONG, user="olive")
    assert fake_prolific.submissions[sid]["status"] == "REJECTED"
    sub.refresh_from_db()
    assert sub.status == "REJECTED" and sub.review_action == "REJECT" and sub.released_at is not None
    assert mine.filter(counted=True).count() == 0
    assert not any(Item.objects.get(pk=i).full for i in items)  # served to others again


# --- webhooks ---------------------------------------------------------------------------------------
def _post_hook(client, payload, *, secret="whsec-test", ts=None, event_id="evt-1", signature=None):
    body = json.dumps(payload).encode()
    ts = str(int(time.time())) if ts is None else ts
    headers = {"X-Prolific-Request-Timestamp": ts, "X-Event-ID": event_id,
               "X-Prolific-Request-Signature": signature or sign(secret, ts, body)}
    return client.post(reverse("crowd:prolific-webhook"), data=body, content_type="application/json", headers=headers)


def test_webhook_checks_signature_and_timestamp_and_a_replay_is_a_no_op(fake_prolific, dataset, owner, client):
    study = make_study(fake_prolific, dataset, owner)
    s, sid = arrive(fake_prolific, study)
    work(s, 1)
    held = journey.next_task(s)
    fake_prolific.set_status(sid, "RETURNED")
    payload = {"event_type": "submission.status.change", "resource_id": sid, "status": "RETURNED"}
    assert _post_hook(client, payload, secret="not-the-secret").status_code == 401
    assert _post_hook(client, payload, ts=str(int(time.time()) - 3600)).status_code == 401  # stale
    assert client.get(reverse("crowd:prolific-webhook")).status_code == 405
    assert ProlificEvent.objects.count() == 0 and not ProlificSubmission.objects.exists()
    assert calls_to(fake_prolific, f"submissions/{sid}/") == []  # nothing fetched for refused deliveries
    ts = str(int(time.time()))
    r = _post_hook(client, payload, ts=ts)
    assert r.status_code == 200 and r.json()["result"] == "processed"
    held.refresh_from_db()
    assert held.state == Assignment.RETURNED
    sub = ProlificSubmission.objects.get(submission_id=sid)
    assert sub.status == "RETURNED" and sub.released_at is not None
    fetched = len(calls_to(fake_prolific, f"submissions/{sid}/"))
    assert fetched == 1
    replay = _post_hook(client, payload, ts=ts, event_id="evt-other")  # the same signed delivery, any event id
    assert replay.status_code == 200 and replay.json()["result"] == "duplicate"
    assert len(calls_to(fake_prolific, f"submissions/{sid}/")) == fetched
    assert ProlificEvent.objects.count() == 1


def test_a_signed_study_event_updates_the_study_status_read_from_the_api(fake_prolific, dataset, owner, client):
    study = make_study(fake_prolific, dataset, owner)
    fake_prolific.studies[study.study_id]["status"] = "PAUSED"
    # the body claims COMPLETED; the status stored is the one the API gives
    payload = {"event_type": "study.status.change", "resource_id": study.study_id, "status": "COMPLETED"}
    assert _post_hook(client, payload, signature=server_sign("whsec-tes", "1", b"")).status_code == 401
    r = _post_hook(client, payload, event_id="evt-study-1")
    assert r.status_code == 200 and r.json()["result"] == "processed"
    study.refresh_from_db()
    assert study.status == "PAUSED"
    other = dict(payload, resource_id=new_id())  # a study that is not ours: accepted, ignored
    assert _post_hook(client, other, event_id="evt-study-2").json()["result"] == "ignored"


# --- review -----------------------------------------------------------------------------------------
def test_a_99_character_rejection_message_is_refused_before_any_call(fake_prolific, dataset, owner):
    study = make_study(fake_prolific, dataset, owner)
    s, sid = arrive(fake_prolific, study)
    work(s)
    finish(fake_prolific, s, sid)
    sync_study(study, api_for(study))
    sub = ProlificSubmission.objects.get(submission_id=sid)
    before, logged = len(fake_prolific.calls), ProlificCall.objects.count()
    with pytest.raises(review.ReviewError, match="at least 100"):
        review.reject(sub, api_for(study), "LOW_EFFORT", "x" * 99)
    with pytest.raises(review.ReviewError, match="category"):
        review.reject(sub, api_for(study), "BECAUSE", LONG)
    assert len(fake_prolific.calls) == before and ProlificCall.objects.count() == logged
    sub.refresh_from_db()
    assert sub.status == "AWAITING REVIEW" and not sub.review_action


def test_bulk_review_by_rules_approves_good_work_and_rejects_wrong_gold_and_speed(fake_prolific, dataset, owner):
    study = make_study(fake_prolific, dataset, owner, gold=2, gold_every=2, bundle=3)
    good, g_id = arrive(fake_prolific, study)
    work(good, seconds=9.0)
    sloppy, s_id = arrive(fake_prolific, study)
    work(sloppy, wrong_gold=1, seconds=9.0)
    fast, f_id = arrive(fake_prolific, study)
    work(fast, seconds=0.4)
    unseen = fake_prolific.start_submission(study.study_id)  # never reached us
    for s, sid in ((good, g_id), (sloppy, s_id), (fast, f_id)):
        assert s.outcome == ParticipantSession.COMPLETED
        finish(fake_prolific, s, sid)
    fake_prolific.set_status(unseen["id"], "AWAITING REVIEW")
    sync_study(study, api_for(study))
    verdicts = {v.submission.submission_id: v for v in
                review.rule_verdicts(study, min_gold_accuracy=0.75, min_seconds=2)}
    assert verdicts[g_id].action == review.APPROVE
    assert verdicts[s_id].action == review.REJECT and verdicts[s_id].category == "FAILED_CHECK"
    assert verdicts[f_id].action == review.REJECT and verdicts[f_id].category == "TOO_QUICKLY"
    assert verdicts[unseen["id"]].action == review.SKIP
    assert all(len(v.message) >= 100 for v in verdicts.values() if v.action == review.REJECT)
    out = review.bulk_review(study, api_for(study), list(verdicts.values()), user="olive")
    assert out["approved"] == [g_id] and sorted(out["rejected"]) == sorted([s_id, f_id]) and out["failed"] == []
    bulk = [c for c in fake_prolific.calls if c[1] == "submissions/bulk-approve/"]
    assert bulk == [("POST", "submissions/bulk-approve/", {"submission_ids": [g_id]})]
    assert [fake_prolific.submissions[x]["status"] for x in (g_id, s_id, f_id, unseen["id"])] == \
        ["APPROVED", "REJECTED", "REJECTED", "AWAITING REVIEW"]
    # nothing left to review: a second run sends nothing
    n = len(fake_prolific.calls)
    second = review.bulk_review(study, api_for(study), review.rule_verdicts(study, min_gold_accuracy=0.75))
    assert second["approved"] == second["rejected"] == second["failed"] == []
    assert second["skipped"] == [[unseen["id"], "no session of ours for this submission"]]
    assert len(fake_prolific.calls) == n


# --- review by rules pays only for work (issue 31) ----------------------------------------------------
def money_calls(fake) -> list:
    """The calls to the fake that decide what participants are paid: approvals, rejections, return
    requests, screen-outs and bonus payments, as ``(method, path, body)``."""
    def decides(path):
        return (path == "submissions/bulk-approve/" or path.endswith("/request-return/")
                or path.endswith("/screen-out-submissions/") or path.endswith("/pay/")
                or (path.startswith("submissions/") and path.endswith("/transition/")))
    return [c for c in fake.calls if c[0] == "POST" and decides(c[1])]


def review_case(fake, dataset, owner):
    """The review case of issue 31: a study whose completion codes all go to manual review, and five
    submissions awaiting review. A declines consent, B fails the practice (one of two right), C's
    time budget runs out before any task; each goes back to Prolific with the code we gave (C was
    given none and submits without one, as E, who did one task of three, does too). D does the
    bundle (its attention check right, 9 seconds a task) and submits with the COMPLETED code.
    Returns (study, {letter: submission id}) after a sync."""
    from datetime import timedelta

    from django.utils import timezone

    study = make_study(fake, dataset, owner, gold=1, gold_every=3, bundle=3, consent_text="I agree to take part.",
                       practice=2, practice_pass=1.0)
    campaign, sessions, ids = study.campaign, {}, {}
    keys = [p["key"] for p in journey.practice_items(campaign)]

    def start(letter, practice=None):
        s, ids[letter] = arrive(fake, study, read_instructions=False)
        if practice is not None:
            s = journey.finish_instructions(journey.give_consent(s, campaign.consent_version))
            for key, right in zip(keys, practice):
                journey.answer_practice(s, key, {"relevance": "1" if right else "5", "thoroughness": "2"})
        sessions[letter] = s
        return s

    journey.decline_consent(start("A"))
    start("B", [True, False])
    c = start("C", [True, True])
    ParticipantSession.objects.filter(pk=c.pk).update(deadline=timezone.now() - timedelta(seconds=1))
    assert journey.next_task(c) is None
    work(start("D", [True, True]), seconds=9.0)
    work(start("E", [True, True]), 1)
    for s in sessions.values():
        s.refresh_from_db()
    assert [(sessions[k].outcome, sessions[k].tasks_done) for k in "ABCDE"] == [
        (ParticipantSession.NO_CONSENT, 0), (ParticipantSession.SCREENED_OUT, 0), (ParticipantSession.TIMED_OUT, 0),
        (ParticipantSession.COMPLETED, 3), ("", 1)]
    for k in "ABD":
        finish(fake, sessions[k], ids[k])
    for k in "CE":
        assert not sessions[k].completion_code
        fake.complete(ids[k], "NOCODE")
    sync_study(study, api_for(study))
    assert sorted(study.submissions.filter(status="AWAITING REVIEW").values_list("submission_id", flat=True)) \
        == sorted(ids.values())
    return study, ids


def expected_calls(study, ids) -> list:
    """What the review case may send, in order: D approved; A and C asked to return the study, B
    screened out with the fixed payment (a tenth of the 1.50 reward)."""
    return [("POST", "submissions/bulk-approve/", {"submission_ids": [ids["D"]]}),
            ("POST", f"submissions/{ids['A']}/request-return/", {"request_return_reasons": ["Withdrew consent."]}),
            ("POST", f"studies/{study.study_id}/screen-out-submissions/",
             {"submission_ids": [ids["B"]], "bonus_per_submission": 0.15, "increase_places": False}),
            ("POST", f"submissions/{ids['C']}/request-return/", {"request_return_reasons": ["Did not finish study."]})]


def test_review_command_lists_the_plan_and_pays_only_the_participant_who_did_the_bundle(fake_prolific, dataset, owner):
    study, ids = review_case(fake_prolific, dataset, owner)
    name, before = study.campaign.name, len(fake_prolific.calls)
    strict = ("--min-gold-accuracy", "0.75", "--max-attention-failures", "1", "--min-seconds", "3")  # as documented
    for extra in ((), ("--dry-run",), strict):
        out = run_command("prolific", "review", name, *extra)
        line = {k: next(x for x in out.splitlines() if sid in x) for k, sid in ids.items()}
        assert line["D"].startswith(f"APPROVE {ids['D']}") and "pays 1.50 GBP" in line["D"]
        assert line["B"].startswith(f"SCREEN_OUT {ids['B']}") and "pays 0.15 GBP" in line["B"]
        assert "screened out by the practice" in line["B"]
        assert line["A"].startswith(f"RETURN {ids['A']}") and "declined consent" in line["A"]
        assert line["C"].startswith(f"RETURN {ids['C']}") and "did no task" in line["C"]
        assert line["E"].startswith(f"SKIP {ids['E']}") and "left for a person" in line["E"]
        assert all("pays nothing" in line[k] for k in "ACE")
        assert "TOTAL 1.65 GBP to participants" in out and "PREVIEW (dry run)" in out
    assert len(fake_prolific.calls) == before  # the plan sent nothing
    with pytest.raises(CommandError, match="contradict"):
        run_command("prolific", "review", name, "--dry-run", "--yes")

    out = run_command("prolific", "review", name, *strict, "--yes")
    assert "TOTAL 1.65 GBP" in out
    assert "approved 1, rejected 0, return requested 2, screened out 1, skipped 1, failed 0" in out
    assert money_calls(fake_prolific) == expected_calls(study, ids)
    remote = {k: fake_prolific.submissions[sid] for k, sid in ids.items()}
    assert [remote[k]["status"] for k in "ABCDE"] == ["AWAITING REVIEW", "SCREENED OUT", "AWAITING REVIEW",
                                                      "APPROVED", "AWAITING REVIEW"]
    assert fake_prolific.return_requests == [ids["A"], ids["C"]] and fake_prolific.screen_outs == [(ids["B"], "0.15")]
    assert fake_prolific.pay_calls == []
    ours = {s.submission_id: (s.review_action, s.status) for s in study.submissions.all()}
    assert [ours[ids[k]] for k in "ABCDE"] == [("RETURN", "AWAITING REVIEW"), ("SCREEN_OUT", "SCREENED OUT"),
                                               ("RETURN", "AWAITING REVIEW"), ("APPROVE", "AWAITING REVIEW"),
                                               ("", "AWAITING REVIEW")]
    # a second review sends nothing: E stays for a person
    n = len(fake_prolific.calls)
    out = run_command("prolific", "review", name, "--yes")
    assert "approved 0, rejected 0, return requested 0, screened out 0, skipped 1, failed 0" in out
    assert len(fake_prolific.calls) == n
    # A returns the study as asked: the sync records it
    fake_prolific.set_status(ids["A"], "RETURNED")
    sync_study(study, api_for(study))
    assert study.submissions.get(submission_id=ids["A"]).status == "RETURNED"


def _confirm_fields(html: str) -> dict:
    form = html[html.index('id="review-confirm-form"'):]
    return dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', form[:form.index("</form>")]))


def test_owner_page_shows_the_plan_and_sends_only_the_plan_it_showed(fake_prolific, dataset, owner, client):
    study, ids = review_case(fake_prolific, dataset, owner)
    client.force_login(owner)
    url = reverse("crowd:campaign-prolific-action", args=[study.campaign.name, "review"])
    before = len(fake_prolific.calls)
    html = client.get(reverse("crowd:campaign-prolific", args=[study.campaign.name])).content.decode()
    assert 'id="review-confirm-form"' not in html  # no plan shown: nothing to confirm

    html = client.post(url, {"min_seconds": "3"}, follow=True).content.decode()
    plan = html[html.index('id="review-plan"'):]
    plan = plan[:plan.index("</pre>")]
    for k, action in zip("ABCDE", ("RETURN", "SCREEN_OUT", "RETURN", "APPROVE", "SKIP")):
        assert f"{action} {ids[k]}" in plan
    assert "TOTAL 1.65 GBP" in plan and re.search(r'id="review-total">1\.65 GBP<', html)
    assert len(fake_prolific.calls) == before  # showing the plan sent nothing
    fields = _confirm_fields(html)
    assert fields["min_seconds"] == "3" and len(fields["confirm"]) == 64

    # a plan other than the one shown is refused: another fingerprint, or other thresholds (D too fast)
    for changed in ({**fields, "confirm": "0" * 64}, {**fields, "min_seconds": "60"}):
        client.post(url, {"min_seconds": "3"})  # shown again
        html = client.post(url, changed, follow=True).content.decode()
        assert "the plan is not the one shown" in html and 'id="review-confirm-form"' not in html
    assert money_calls(fake_prolific) == []

    fields = _confirm_fields(client.post(url, {"min_seconds": "3"}, follow=True).content.decode())
    html = client.post(url, fields, follow=True).content.decode()
    assert "approved 1, rejected 0, return requested 2, screened out 1, skipped 1, failed 0" in html
    assert money_calls(fake_prolific) == expected_calls(study, ids)
    assert fake_prolific.pay_calls == [] and study.submissions.get(submission_id=ids["D"]).reviewed_by == "olive"
    n = len(fake_prolific.calls)  # the plan was used up: sending it again is refused
    assert "the plan is not the one shown" in client.post(url, fields, follow=True).content.decode()
    assert len(fake_prolific.calls) == n


def test_a_screened_out_session_is_paid_the_studys_own_fixed_screen_out_amount(fake_prolific, dataset, owner):
    from crowd.prolific.study import completion_codes_body

    study = make_study(fake_prolific, dataset, owner, gold=1, gold_every=3, bundle=3, practice=2, practice_pass=1.0)
    body = completion_codes_body(CODES, reward=150, places=50, screen_out_reward=20)  # 0.20, not the default 0.15
    study.request = {"completion_codes": body}
    study.save(update_fields=["request"])
    fake_prolific.studies[study.study_id]["completion_codes"] = body  # the fake checks the amount against it
    s, sid = arrive(fake_prolific, study)
    for item in journey.practice_items(study.campaign):
        journey.answer_practice(s, item["key"], {"relevance": "5", "thoroughness": "2"})
    assert s.outcome == ParticipantSession.SCREENED_OUT and s.completion_code == CODES["screened_out"]
    fake_prolific.complete(sid, "NOCODE")  # back on Prolific without the screen-out code
    sync_study(study, api_for(study))
    out = run_command("prolific", "review", study.campaign.name)
    assert f"SCREEN_OUT {sid}" in out and "pays 0.20 GBP" in out and "TOTAL 0.20 GBP" in out
    assert money_calls(fake_prolific) == []
    out = run_command("prolific", "review", study.campaign.name, "--yes")
    assert "screened out 1" in out and fake_prolific.screen_outs == [(sid, "0.20")]
    assert study.submissions.get(submission_id=sid).status == "SCREENED OUT"


# --- bonuses ----------------------------------------------------------------------------------------
def _completed(fake, study, n=2):
    pids = []
    for _ in range(n):
        s, sid = arrive(fake, study)
        work(s)
        finish(fake, s, sid)
        pids.append(s.worker.external_id)
    sync_study(study, api_for(study))
    return pids


def test_bonus_lines_are_checked_before_any_call(fake_prolific, dataset, owner):
    study = make_study(fake_prolific, dataset, owner)
    pid = _completed(fake_prolific, study, 1)[0]
    before = len(fake_prolific.calls)
    for text, why in [(f"{pid},150", "cap"), (f"{pid},1,50", "participant_id,amount"), (f"{pid},abc", "major units"),
                      (f"{new_id()},1.50", "no submission"), (f"{pid},0.00", "positive"),
                      (f"{pid},1.00\n{pid},2.00", "twice")]:
        with pytest.raises(bonuses.BonusError, match=why):
            bonuses.create_bonus(study, api_for(study), text)
    assert len(fake_prolific.calls) == before and not ProlificBonus.objects.exists()


def test_a_bonus_is_created_once_and_paid_exactly_once_when_the_pay_call_times_out(fake_prolific, dataset, owner):
    study = make_study(fake_prolific, dataset, owner)
    p1, p2 = _completed(fake_prolific, study, 2)
    text = f"participant_id,amount\n{p1},1.50\n{p2},0.75\n"
    bonus = bonuses.create_bonus(study, api_for(study), text, reason="careful work")
    again = bonuses.create_bonus(study, api_for(study), text)  # a double click: nothing new
    assert again.pk == bonus.pk and len(fake_prolific.bonuses) == 1
    assert fake_prolific.bonuses[bonus.bonus_id]["entries"] == [{"participant_id": p1, "amount": "1.50"},
                                                                {"participant_id": p2, "amount": "0.75"}]
    assert str(bonus.total) == "2.25" and bonus.state == ProlificBonus.CREATED
    fake_prolific.timeout_next("POST", r"^bulk-bonus-payments/.+/pay/$", apply=True)
    with pytest.raises(bonuses.BonusError, match="left PAYING"):
        bonuses.pay(bonus, api_for(study))
    bonus.refresh_from_db()
    assert bonus.state == ProlificBonus.PAYING and bonus.pay_sent_at is not None
    assert fake_prolific.pay_calls == [bonus.bonus_id]  # it went through, the answer was lost
    paid = bonuses.pay(bonus, api_for(study))  # the retry reads Prolific's state first
    assert paid.state == ProlificBonus.PAID
    bonuses.pay(paid, api_for(study))  # and a paid bonus is never paid again
    assert fake_prolific.pay_calls == [bonus.bonus_id]
    assert fake_prolific.bonuses[bonus.bonus_id]["times_paid"] == 1
    assert len(calls_to(fake_prolific, "/pay/")) == 1


def test_a_lost_pay_request_is_paid_on_the_retry_after_reading_the_state(fake_prolific, dataset, owner):
    study = make_study(fake_prolific, dataset, owner)
    (p1,) = _completed(fake_prolific, study, 1)
    bonus = bonuses.create_bonus(study, api_for(study), f"{p1},2.00")
    fake_prolific.timeout_next("POST", r"^bulk-bonus-payments/.+/pay/$", apply=False)
    with pytest.raises(bonuses.BonusError):
        bonuses.pay(bonus, api_for(study))
    assert fake_prolific.pay_calls == []
    assert bonuses.pay(bonus, api_for(study)).state == ProlificBonus.PAID
    assert fake_prolific.pay_calls == [bonus.bonus_id]
    reads = [c for c in fake_prolific.calls if c[0] == "GET" and c[1] == f"bulk-bonus-payments/{bonus.bonus_id}/"]
    assert len(reads) == 1  # the state was read before the second pay call


# --- reconciliation ---------------------------------------------------------------------------------
def test_reconciliation_is_clean_and_then_finds_planted_mismatches(fake_prolific, dataset, owner):
    study = make_study(fake_prolific, dataset, owner)
    s1, sid1 = arrive(fake_prolific, study)
    work(s1)
    finish(fake_prolific, s1, sid1)
    s2, sid2 = arrive(fake_prolific, study)
    work(s2)
    finish(fake_prolific, s2, sid2)
    report = reconcile.reconcile(study, api_for(study))
    assert report["ok"], reconcile.lines(report)
    fake_prolific.submissions[sid1]["study_code"] = "CFAIL1"  # Prolific recorded another code
    stranger = fake_prolific.start_submission(study.study_id)  # never reached us
    fake_prolific.set_status(stranger["id"], "AWAITING REVIEW")
    ghost = journey.open_session(study.campaign, worker_for(new_id()), provider_ref=new_id(), study_ref=study.study_id)
    report = reconcile.reconcile(study, api_for(study))
    assert not report["ok"]
    assert report["code_mismatches"] == [[sid1, "CFAIL1", "CDONE1"]]
    assert [row[0] for row in report["prolific_only"]] == [stranger["id"]]
    assert [row[0] for row in report["ours_only"]] == [ghost.provider_ref]
    assert report["status_mismatches"] == [] and report["approved_failed_attention"] == []
    assert any("code mismatches 1" in line for line in reconcile.lines(report))
    # approved although the session failed its attention checks
    ParticipantSession.objects.filter(pk=s2.pk).update(attention_failures=2)
    fake_prolific.submissions[sid2]["status"] = "APPROVED"
    report = reconcile.reconcile(study, api_for(study))
    assert report["approved_failed_attention"] == [[sid2, s2.worker.external_id, 2]]


# --- owner page and commands --------------------------------------------------------------------
def test_owner_page_is_for_owners_and_actions_need_post_with_one_line_errors(fake_prolific, dataset, owner, client):
    study = make_study(fake_prolific, dataset, owner)
    s, sid = arrive(fake_prolific, study)
    url = reverse("crowd:campaign-prolific", args=[study.campaign.name])
    client.force_login(User.objects.create_user("mallory", password="pw-mallory-123"))
    assert client.get(url).status_code == 404
    assert client.post(reverse("crowd:campaign-prolific-action", args=[study.campaign.name, "sync"])).status_code == 404
    client.force_login(owner)
    assert client.get(reverse("crowd:campaign-prolific-action", args=[study.campaign.name, "sync"])).status_code == 405
    r = client.post(reverse("crowd:campaign-prolific-action", args=[study.campaign.name, "sync"]), follow=True)
    assert r.status_code == 200 and "listed 1" in r.content.decode()
    assert sid in r.content.decode()
    n = len(fake_prolific.calls)
    r = client.post(reverse("crowd:campaign-prolific-action", args=[study.campaign.name, "reject"]),
                    {"submission": sid, "category": "LOW_EFFORT", "message": "too short"}, follow=True)
    assert "reject: a rejection message must have at least 100 characters" in r.content.decode()
    assert len(fake_prolific.calls) == n
    work(s)
    finish(fake_prolific, s, sid)

    def act(name, data=None):
        url = reverse("crowd:campaign-prolific-action", args=[study.campaign.name, name])
        return client.post(url, data or {}, follow=True).content.decode()

    assert "listed 1" in act("sync")
    assert "created (1 participants, total 0.80 GBP)" in act("bonus", {"csv": f"{s.worker.external_id},0.80"})
    bonus = ProlificBonus.objects.get()
    assert f"bonus {bonus.bonus_id}: paid" in act("pay", {"bonus": bonus.pk})
    assert "pay: no such bonus in this study&#x27;s ledger" in act("pay", {"bonus": "abc"})
    assert "OK" in act("reconcile")
    assert fake_prolific.pay_calls == [bonus.bonus_id]


def test_review_command_previews_unless_told_yes(fake_prolific, dataset, owner):
    study = make_study(fake_prolific, dataset, owner)
    s, sid = arrive(fake_prolific, study)
    work(s)
    finish(fake_prolific, s, sid)
    run_command("prolific", "sync", study.campaign.name)
    out = run_command("prolific", "review", study.campaign.name, "--min-seconds", "0.1")
    assert "PREVIEW" in out and fake_prolific.submissions[sid]["status"] == "AWAITING REVIEW"
    with pytest.raises(CommandError, match="at least 100 characters"):
        run_command("prolific", "reject", study.campaign.name, sid, "--category", "OTHER", "--message", "no")
    out = run_command("prolific", "review", study.campaign.name, "--yes")
    assert "approved 1, rejected 0" in out and fake_prolific.submissions[sid]["status"] == "APPROVED"
    with pytest.raises(CommandError, match="https"):
        run_command("prolific", "hooks", study.campaign.name, "--subscribe", "http://x/prolific-hooks/", "--workspace", "w")
    out = run_command("prolific", "hooks", study.campaign.name, "--subscribe",
                      "https://eval.example.org/prolific-hooks/", "--workspace", "ws1")
    assert "webhook secret configured: yes" in out
    assert sorted(h["event_type"] for h in fake_prolific.hooks.values()) == ["study.status.change",
                                                                             "submission.status.change"]


# --- the fake server itself -------------------------------------------------------------------------
def test_the_fake_refuses_what_prolific_refuses_and_pays_again_on_a_second_pay_call(fake_prolific, dataset, owner):
    from crowd.prolific_client import ProlificError

    study = make_study(fake_prolific, dataset, owner)
    s, sid = arrive(fake_prolific, study)
    api = api_for(study)
    with pytest.raises(ProlificError, match="AWAITING REVIEW|cannot be transitioned"):
        api.transition_submission(sid, "APPROVE")  # still ACTIVE
    work(s)
    finish(fake_prolific, s, sid)
    with pytest.raises(ProlificError, match="at least 100"):
        api.transition_submission(sid, "REJECT", message="x" * 99, rejection_category="OTHER")
    with pytest.raises(ProlificError, match="rejection_category"):
        api.transition_submission(sid, "REJECT", message=LONG, rejection_category="RUDE")
    for text in (f"{s.worker.external_id},150", f"{s.worker.external_id},1,5", f"{new_id()},1.00"):
        with pytest.raises(ProlificError):
            api.create_bonus(study.study_id, text)
    assert api.transition_submission(sid, "APPROVE")["status"] == "APPROVED"
    assert api.transition_submission(sid, "APPROVE")["status"] == "APPROVED"  # idempotent
    bid = api.create_bonus(study.study_id, f"{s.worker.external_id},1.50")["id"]
    api.pay_bonus(bid)
    api.pay_bonus(bid)  # not idempotent: this is what the ledger prevents
    assert fake_prolific.pay_calls == [bid, bid] and api.get_bonus(bid)["times_paid"] == 2
