"""Claimed versus verified identities (issue 21, items 1 and 2), through real HTTP requests (Django's
test client) against the in-memory fake MTurk (tests/fake_mturk.py), which knows only the
assignments workers really accepted there.

An MTurk ``workerId`` / ``assignmentId`` in the task page's URL is a claim: the work is stored but
counts nowhere -- no slot, no judgment, no gold grade, no block, no eviction, not in the export --
until MTurk's own records (ListAssignmentsForHIT in ``mturk collect``, GetAssignment in the periodic
``crowd.verify_claims`` task) show that assignment for that worker and HIT with the signed token our
page issued in its answer. Unconfirmed claims are released after their deadline plus
``PROVIDER_CLAIM_GRACE_SECONDS``.
"""
from datetime import timedelta

import pytest
from django.test import Client, override_settings
from django.utils import timezone

from crowd import engine, export
from crowd.models import Assignment, Campaign, Dataset, HumanJudgment, Item, MTurkCall, MTurkHIT, WorkerStatus
from crowd.mturk import publish as pub
from crowd.mturk import review
from crowd.mturk.client import MTurkAPI
from crowd.mturk.collect import collect, worker_for
from crowd.mturk.questions import parse_answers
from crowd.providers import ClaimRefused, LocalProvider, MTurkProvider, get_provider
from crowd.quality import gold_accuracy

from . import fake_mturk
from .conftest import run_command

pytestmark = pytest.mark.django_db
SUBMIT_TO = "https://workersandbox.mturk.com"
GOOD = {"relevance": "4", "thoroughness": "3"}
WRONG_GOLD = {"relevance": "5", "thoroughness": "5"}  # gold items expect relevance 1


@pytest.fixture
def fake():
    fake_mturk.FAKES.clear()
    with override_settings(MTURK_CLIENT_FACTORY="tests.fake_mturk.fake_client"):
        yield fake_mturk.fake_client("sandbox")


def published_campaign(data_dir, *, images: int = 4, gold: int = 3) -> Campaign:
    """A rating campaign "mt" (k = 3, $0.05) of ``images`` images and ``gold`` gold items over the
    Flickr8k-Expert files in ``data_dir``, every item published as a HIT on the fake MTurk: live."""
    run_command("import_dataset", "flickr8k-expert", str(data_dir), "--name", "sub")
    c = engine.create_campaign(Dataset.objects.get(name="sub"), "rating", name="mt", k=3,
                               options={"images": images, "gold": gold}, reward="0.05", provider=Campaign.MTURK,
                               gold_every=0)
    config = pub.config_for(c)
    config.public_url = "https://captions.example.org"
    config.save()
    report = pub.publish_batch(c, MTurkAPI.for_campaign(c))
    assert report.created == c.items.count() and not report.failed
    c.refresh_from_db()
    assert c.state == Campaign.LIVE
    return c


@pytest.fixture
def campaign(subset_dir, fake):
    """A published MTurk rating campaign: k = 3, three gold HITs, blocks after 3 gold answers."""
    c = published_campaign(subset_dir)
    assert c.gold_min_answers == 3
    return c


def hits(campaign, gold=False):
    return list(MTurkHIT.objects.filter(batch__campaign=campaign, item__is_gold=gold).select_related("item").order_by("pk"))


def url(hit):
    return f"/mturk/{hit.item.campaign.name}/item/{hit.item_id}/"


def open_task(client, hit, aid, worker_id, hit_id=None):
    """GET the task page with MTurk's parameters (real or typed by an attacker)."""
    return client.get(url(hit), {"assignmentId": aid, "hitId": hit_id or hit.hit_id, "workerId": worker_id,
                                 "turkSubmitTo": SUBMIT_TO})


def submit(client, hit, page, answer):
    """POST the answer with the page's token; returns the fields our forward page posts to MTurk."""
    done = client.post(url(hit) + "submit/", {"token": page.context["token"], **answer, "item": hit.item_id})
    assert done.status_code == 200, done.content[:300]
    return dict(done.context["fields"])


def real_work(fake, client, hit, worker_id, answer=GOOD):
    """A real worker: accepts the HIT on MTurk, answers on our page, MTurk receives the forward."""
    aid = fake.accept(hit.hit_id, worker_id)
    page = open_task(client, hit, aid, worker_id)
    assert page.status_code == 200
    fields = submit(client, hit, page, answer)
    fake.external_submit({"assignmentId": aid, **fields})
    return aid


def forged_work(client, hit, worker_id, aid, answer=GOOD):
    """An attacker: ids typed into the URL (no cookies), then the answer posted."""
    page = open_task(Client(), hit, aid, worker_id)
    assert page.status_code == 200 and page.context["token"]  # the page still works: nothing is refused up front
    return submit(client, hit, page, answer)


def counted(campaign):
    return Assignment.objects.filter(campaign=campaign, counted=True)


# --- reproduction 1: forged parameters ------------------------------------------------------------
def test_forged_claims_are_stored_but_never_count_nor_fill_an_item(fake, campaign):
    hit = hits(campaign)[0]
    client = Client()
    for n in range(3):
        forged_work(client, hit, f"AFORGED{n}", f"FAKE{n}")
    claims = Assignment.objects.filter(campaign=campaign, item=hit.item)
    assert claims.count() == 3  # stored, never lost
    assert {(a.state, a.verified, a.counted, a.slot) for a in claims} == {("submitted", False, False, None)}
    assert {a.answer["relevance"] for a in claims} == {4}
    hit.item.refresh_from_db()
    assert not hit.item.full and not HumanJudgment.objects.filter(campaign=campaign).exists()
    assert engine.campaign_counts(campaign)["judgments"] == 0 and engine.campaign_counts(campaign)["complete_items"] == 0
    assert list(export.rows(campaign)) == []  # not in the export (nor in reports: no judgment rows)

    # MTurk has never heard of these assignments: the collector leaves them provisional
    report = collect(campaign, MTurkAPI.for_campaign(campaign))
    assert report.confirmed == [] and report.extra == [] and report.ok
    assert sorted(r[0] for r in report.unconfirmed) == ["FAKE0", "FAKE1", "FAKE2"]
    assert not counted(campaign).exists()

    # the three real slots are still there for real workers, who fill them once MTurk confirms
    aids = [real_work(fake, client, hit, w) for w in ("AREALONE01", "AREALTWO02", "AREALTHREE3")]
    with pytest.raises(ValueError, match="no assignment left"):  # MTurk's own limit: MaxAssignments = k
        fake.accept(hit.hit_id, "AREALFOUR04")
    assert not counted(campaign).exists()
    report = collect(campaign, MTurkAPI.for_campaign(campaign))
    assert sorted(report.confirmed) == sorted(aids) and report.ok, report.lines()
    assert sorted(counted(campaign).values_list("provider_ref", flat=True)) == sorted(aids)
    assert HumanJudgment.objects.filter(campaign=campaign).count() == 3 * 2
    assert {r["assignment"] for r in export.rows(campaign)} == set(counted(campaign).values_list("pk", flat=True))
    hit.item.refresh_from_db()
    assert hit.item.full


def test_forged_wrong_gold_answers_never_grade_nor_block_a_real_worker(fake, campaign):
    client = Client()
    victim = "AINNOCENT01"
    golds = hits(campaign, gold=True)
    for n, hit in enumerate(golds):
        forged_work(client, hit, victim, f"FORGEDGOLD{n}", WRONG_GOLD)
    claims = Assignment.objects.filter(campaign=campaign, worker__external_id=victim)
    assert claims.count() == 3 and set(claims.values_list("gold_correct", flat=True)) == {None}
    assert gold_accuracy(campaign, claims[0].worker) == (0, 0)
    assert not WorkerStatus.objects.filter(worker__external_id=victim, state=WorkerStatus.BLOCKED).exists()

    collect(campaign, MTurkAPI.for_campaign(campaign))
    from crowd.tasks import verify_claims

    assert verify_claims.apply().get() == {"confirmed": 0, "released": 0}
    assert not WorkerStatus.objects.filter(worker__external_id=victim, state=WorkerStatus.BLOCKED).exists()
    out = review.block_workers(campaign, MTurkAPI.for_campaign(campaign))
    assert fake.blocks == [] and out.done == {} and review.plan_review(campaign) == []
    # the forged claims do not keep the real worker from the gold HITs: their real work is recorded
    aid = real_work(fake, client, golds[0], victim, {"relevance": "1", "thoroughness": "2"})
    collect(campaign, MTurkAPI.for_campaign(campaign))
    real = Assignment.objects.get(provider_ref=aid)
    assert (real.verified, real.gold_correct) == (True, True)
    assert gold_accuracy(campaign, real.worker) == (1, 1)


# --- reproduction 2: a page visit never evicts ----------------------------------------------------
def test_forged_visits_evict_nobody_and_the_real_submission_counts_once_confirmed(fake, campaign):
    hit = hits(campaign)[1]
    client = Client()
    aid = fake.accept(hit.hit_id, "AHOLDER001")
    page = open_task(client, hit, aid, "AHOLDER001")
    assert page.status_code == 200
    for n in range(3):
        assert open_task(Client(), hit, f"INVENTED{n}", f"AINVENTED{n}").status_code == 200
    assert Assignment.objects.filter(item=hit.item).count() == 4
    holder = Assignment.objects.get(provider_ref=aid)
    assert holder.state == Assignment.ACCEPTED and holder.return_reason == ""
    assert not Assignment.objects.filter(campaign=campaign, state=Assignment.EXPIRED).exists()

    fields = submit(client, hit, page, GOOD)
    fake.external_submit({"assignmentId": aid, **fields})
    holder.refresh_from_db()
    assert (holder.state, holder.late, holder.counted) == (Assignment.SUBMITTED, False, False)  # not yet confirmed
    out = run_command("mturk", "collect", campaign.name)
    assert "claims confirmed now 1, unconfirmed 0" in out  # the invented visits submitted nothing
    holder.refresh_from_db()
    assert (holder.verified, holder.counted, holder.slot, holder.late) == (True, True, 0, False)
    assert holder.verified_at is not None
    assert HumanJudgment.objects.filter(campaign=campaign, rater="mturk:AHOLDER001").count() == 2
    # the invented holders hold nothing: two real workers still fill the item
    for w in ("AREALTWO02", "AREALTHREE3"):
        real_work(fake, client, hit, w)
    collect(campaign, MTurkAPI.for_campaign(campaign))
    assert counted(campaign).filter(item=hit.item).count() == 3
    assert set(Assignment.objects.filter(provider_ref__startswith="INVENTED").values_list("verified", "slot")) == {(False, None)}


def test_periodic_task_confirms_with_get_assignment(fake, campaign):
    from crowd.tasks import verify_claims

    hit = hits(campaign)[2]
    client = Client()
    aid = real_work(fake, client, hit, "APERIODIC01")
    forged_work(client, hit, "APERIODIC01", "NOTREAL01")  # the same worker id, a typed AssignmentId
    assert verify_claims.apply().get() == {"confirmed": 1, "released": 0}
    a = Assignment.objects.get(provider_ref=aid)
    assert (a.verified, a.counted) == (True, True)
    assert Assignment.objects.get(provider_ref="NOTREAL01").verified is False
    calls = MTurkCall.objects.filter(operation="get_assignment")
    assert sorted(c.params["AssignmentId"] for c in calls) == sorted([aid, "NOTREAL01"])
    assert calls.get(params__AssignmentId="NOTREAL01").ok is False
    assert verify_claims.apply().get() == {"confirmed": 0, "released": 0}  # nothing confirmed twice
    assert HumanJudgment.objects.filter(campaign=campaign).count() == 2


def test_an_answer_without_our_token_is_not_confirmed(fake, campaign):
    hit = hits(campaign)[0]
    client = Client()
    a1 = fake.accept(hit.hit_id, "ATOKENLESS1")
    fields = submit(client, hit, open_task(client, hit, a1, "ATOKENLESS1"), GOOD)
    fake.external_submit({"assignmentId": a1, **{k: v for k, v in fields.items() if k != "ce_token"}})
    a2 = fake.accept(hit.hit_id, "ATOKENSWAP2")
    fields2 = submit(client, hit, open_task(client, hit, a2, "ATOKENSWAP2"), GOOD)
    assert parse_answers(fake.assignments[a1]["Answer"]).get("ce_token") is None
    fake.external_submit({"assignmentId": a2, **fields2, "ce_token": fields["ce_token"]})  # another assignment's token
    report = collect(campaign, MTurkAPI.for_campaign(campaign))
    assert sorted(r[0] for r in report.unconfirmed) == sorted([a1, a2]) and report.confirmed == []
    assert "token" in report.unconfirmed[0][1]
    assert not counted(campaign).exists()


# --- release after the assignment duration plus the grace period -----------------------------------
def test_unconfirmed_claims_are_released_after_duration_plus_grace(fake, campaign, settings):
    hit = hits(campaign)[0]
    client = Client()
    assert open_task(client, hit, "NEVERSUBMIT", "ALURKER0001").status_code == 200
    forged_work(client, hit, "AFORGER0001", "SUBMITTEDFAKE")
    aid = real_work(fake, client, hit, "AREALONE01")
    grace = settings.PROVIDER_CLAIM_GRACE_SECONDS
    assert grace == 3600
    deadline = Assignment.objects.get(provider_ref="NEVERSUBMIT").deadline
    assert deadline - Assignment.objects.get(provider_ref="NEVERSUBMIT").accepted_at == timedelta(
        seconds=campaign.assignment_seconds)
    assert engine.release_unconfirmed(now=deadline + timedelta(seconds=grace - 5)) == 0
    assert engine.pending_claims(campaign).count() == 3
    later = deadline + timedelta(seconds=grace + 5)
    assert engine.release_unconfirmed(now=later) == 3
    lurker, fake_sub, real = (Assignment.objects.get(provider_ref=r) for r in ("NEVERSUBMIT", "SUBMITTEDFAKE", aid))
    assert (lurker.state, lurker.claim_released_at, lurker.return_reason) == (
        Assignment.EXPIRED, later, "claim never confirmed by the provider")
    assert (fake_sub.state, fake_sub.answer["relevance"], fake_sub.counted) == (Assignment.SUBMITTED, 4, False)  # kept
    assert not engine.pending_claims(campaign).exists()
    # MTurk's own record still confirms the real worker's released claim later: nothing is lost
    report = collect(campaign, MTurkAPI.for_campaign(campaign))
    assert report.confirmed == [aid]
    real.refresh_from_db()
    assert (real.verified, real.counted, real.claim_released_at) == (True, True, None)
    assert counted(campaign).count() == 1


# --- blocks only after confirmed wrong gold -----------------------------------------------------
def test_block_only_after_confirmed_wrong_gold(fake, campaign):
    client = Client()
    worker = "ACARELESS01"
    aids = [real_work(fake, client, h, worker, WRONG_GOLD) for h in hits(campaign, gold=True)]
    before = Assignment.objects.filter(provider_ref__in=aids)
    assert set(before.values_list("gold_correct", flat=True)) == {None}
    assert not WorkerStatus.objects.filter(worker__external_id=worker, state=WorkerStatus.BLOCKED).exists()
    assert review.block_workers(campaign, MTurkAPI.for_campaign(campaign)).done == {} and fake.blocks == []

    report = collect(campaign, MTurkAPI.for_campaign(campaign))
    assert sorted(report.confirmed) == sorted(aids)
    status = WorkerStatus.objects.get(worker__external_id=worker, campaign=campaign)
    assert (status.state, status.reason) == (WorkerStatus.BLOCKED, "gold accuracy 0/3 = 0% < 50%")
    out = review.block_workers(campaign, MTurkAPI.for_campaign(campaign))
    assert out.done == {"blocked": 1} and fake.blocks == [worker]
    plan = review.plan_review(campaign)
    assert sorted(d.assignment.provider_ref for d in plan) == sorted(aids) and {d.action for d in plan} == {review.REJECT}


# --- the provider interface -----------------------------------------------------------------------
def test_provider_interface_claims(fake, campaign, rf):
    mturk, local = get_provider(Campaign.MTURK), get_provider(Campaign.LOCAL)
    assert isinstance(mturk, MTurkProvider) and isinstance(local, LocalProvider)
    hit = hits(campaign)[0]
    request = rf.get(url(hit), {"assignmentId": "A1", "hitId": hit.hit_id, "workerId": "ACLAIMED01",
                                "turkSubmitTo": SUBMIT_TO})
    claim = mturk.claim_from_request(request, campaign, hit.item)
    assert (claim.worker.external_id, claim.provider_ref, claim.verified, claim.get("hitId")) == (
        "ACLAIMED01", "A1", False, hit.hit_id)
    assert mturk.worker_for_request(request) is None  # never a verified identity
    other = Item.objects.filter(campaign=campaign).exclude(pk=hit.item_id).first()
    with pytest.raises(ClaimRefused) as exc:
        mturk.claim_from_request(request, campaign, other)
    assert exc.value.code == "foreign-hit"
    assert mturk.claim_from_request(rf.get(url(hit), {"assignmentId": "ASSIGNMENT_ID_NOT_AVAILABLE"})) is None
    # a claimed page visit never reaches a slot; only the engine's confirmation does
    a = engine.accept_item(campaign, claim.worker, hit.item, provider_ref="A1", verified=False)
    assert (a.verified, a.slot) == (False, None)
    assert engine.accept_item(campaign, claim.worker, hit.item, provider_ref="A1", verified=False).pk == a.pk
    engine.confirm_claim(a.pk, at=timezone.now())
    a.refresh_from_db()
    assert (a.verified, a.slot) == (True, 0)
    other_worker = worker_for("AOTHERWORKER1")
    with pytest.raises(engine.Conflict):  # the AssignmentId is now confirmed as this worker's
        engine.accept_item(campaign, other_worker, hit.item, provider_ref="A1", verified=False)
