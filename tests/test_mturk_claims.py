"""Forged MTurk claims as load (issue 31): claims from unverified task-page visits are bounded,
deduplicated, released at once when MTurk refuses them, and checked in batches within
``MTURK_VERIFY_RATE`` -- through real HTTP requests against the running site (``live_server``)
and the in-memory fake MTurk (tests/fake_mturk.py), which knows only the assignments workers really
accepted there and answers GetAssignment as MTurk documents it.

Before: every visit with typed ``assignmentId`` / ``workerId`` stored a Worker and an Assignment, and
the periodic task asked GetAssignment about every pending claim every two minutes for about 70
minutes (one address at the rate limit kept about 8,400 claims pending)."""
import html
import re
from datetime import timedelta

import httpx
import pytest
from django.db.models import F
from django.test import override_settings

from crowd import engine
from crowd.models import Assignment, HumanJudgment, MTurkCall, MTurkHIT, Worker
from crowd.tasks import verify_claims

from . import fake_mturk
from .conftest import write_subset
from .test_verified_identities import published_campaign

pytestmark = pytest.mark.django_db(transaction=True)
SUBMIT_TO = "https://workersandbox.mturk.com"
ATTACKER, REAL = "203.0.113.7", "198.51.100.20"  # client addresses, through one trusted proxy
GOOD = {"relevance": "4", "thoroughness": "3"}


@pytest.fixture
def fake(settings):
    """The fake MTurk, whose GetAssignment calls (what MTurk would see) are recorded in ``fake.asked``;
    the site trusts one proxy, so that ``X-Forwarded-For`` names each client's address."""
    settings.RATELIMIT_TRUSTED_PROXIES = 1
    fake_mturk.FAKES.clear()
    with override_settings(MTURK_CLIENT_FACTORY="tests.fake_mturk.fake_client"):
        fake = fake_mturk.fake_client("sandbox")
        fake.asked, get_assignment = [], fake.get_assignment

        def counted(AssignmentId):
            fake.asked.append(AssignmentId)
            return get_assignment(AssignmentId=AssignmentId)

        fake.get_assignment = counted
        yield fake


@pytest.fixture
def campaign(tmp_path, fake):
    """A published MTurk rating campaign (k = 3, no gold) on a 6-image subset."""
    c = published_campaign(write_subset(tmp_path / "sub", 6), images=2, gold=0)
    assert c.items.count() >= 2
    return c


def hits(campaign):
    return list(MTurkHIT.objects.filter(batch__campaign=campaign).select_related("item").order_by("pk"))


def visit(web, hit, aid, worker_id):
    """GET the task page with MTurk's parameters (real, or typed by an attacker)."""
    return web.get(f"/mturk/{hit.item.campaign.name}/item/{hit.item_id}/",
                   params={"assignmentId": aid, "hitId": hit.hit_id, "workerId": worker_id, "turkSubmitTo": SUBMIT_TO})


def hidden(page) -> dict:
    """The hidden fields of a page's form (the task form's token; the forward page's answer fields)."""
    return {html.unescape(n): html.unescape(v)
            for n, v in re.findall(r'<input type="hidden" name="([^"]*)" value="([^"]*)"', page.text)}


def answer(web, hit, page) -> dict:
    """POST the answer with the page's token; returns the fields our forward page posts to MTurk."""
    done = web.post(f"/mturk/{hit.item.campaign.name}/item/{hit.item_id}/submit/",
                    data={"token": hidden(page)["token"], "item": hit.item_id, **GOOD})
    assert done.status_code == 200, done.text[:300]
    return hidden(done)


def client(live_server, address):
    """An HTTP client of the running site whose requests come from ``address`` (through the proxy)."""
    return httpx.Client(base_url=live_server.url, headers={"X-Forwarded-For": address}, timeout=30)


def a_minute_later():
    """Move the call log a minute back: the window of ``MTURK_VERIFY_RATE`` has passed."""
    MTurkCall.objects.update(at=F("at") - timedelta(seconds=61))


def test_forged_visits_from_one_address_are_capped_and_checked_in_bounded_batches(live_server, fake, campaign,
                                                                                   settings):
    settings.PROVIDER_CLAIMS_PER_ADDRESS, settings.PROVIDER_CLAIMS_PER_HIT, settings.MTURK_VERIFY_RATE = 5, 3, "3/m"
    hit_a, hit_b = hits(campaign)[:2]
    workers = Worker.objects.count()
    with client(live_server, ATTACKER) as web:
        pages = [visit(web, hit_a, f"FORGEDA{n:05d}", f"AFORGEDA{n:05d}") for n in range(5)]
        pages += [visit(web, hit_b, f"FORGEDB{n:05d}", f"AFORGEDB{n:05d}") for n in range(5)]
        statuses = [p.status_code for p in pages]
        # 3 on HIT a (then the HIT's cap), 2 more on HIT b (then the address's cap); nothing stored beyond
        assert statuses == [200] * 3 + [429] * 2 + [200] * 2 + [429] * 3, statuses
        assert {p.headers["Retry-After"] for p in pages if p.status_code == 429} == {"120"}
        assert "Too many unconfirmed visits of this task" in pages[3].text
        assert "Too many unconfirmed assignments were opened from your network" in pages[-1].text
        claims = Assignment.objects.filter(campaign=campaign, verified=False)
        assert claims.count() == 5 and Worker.objects.count() == workers + 5
        for page, hit in zip(pages[:3] + pages[5:7], [hit_a] * 3 + [hit_b] * 2):  # forged answers, stored
            answer(web, hit, page)
    assert set(claims.values_list("state", "counted")) == {(Assignment.SUBMITTED, False)}

    # a real worker from another address: accepts on MTurk, answers on our page, MTurk gets the forward
    real = fake.accept(hit_b.hit_id, "AREALWORKER01")
    with client(live_server, REAL) as web:
        page = visit(web, hit_b, real, "AREALWORKER01")
        assert page.status_code == 200
        fake.external_submit({"assignmentId": real, **answer(web, hit_b, page)})

    # the first run asks about 3 claims (the rate), the oldest answers first: MTurk refuses them, released at once
    assert verify_claims.apply().get() == {"confirmed": 0, "released": 0}
    assert fake.asked == ["FORGEDA00000", "FORGEDA00001", "FORGEDA00002"]
    assert engine.pending_claims(campaign).count() == 3
    refused = claims.filter(claim_released_at__isnull=False)
    assert sorted(refused.values_list("return_reason", flat=True)) == [
        f"refused by MTurk: Assignment FORGEDA0000{n} does not exist." for n in range(3)]
    assert verify_claims.apply().get() == {"confirmed": 0, "released": 0} and len(fake.asked) == 3  # rate used up
    a_minute_later()
    assert verify_claims.apply().get() == {"confirmed": 1, "released": 0}
    assert fake.asked[3:] == ["FORGEDB00000", "FORGEDB00001", real]  # each claim asked about once
    mine = Assignment.objects.get(provider_ref=real)
    assert (mine.verified, mine.counted, mine.slot) == (True, True, 0)
    assert HumanJudgment.objects.filter(campaign=campaign, rater="mturk:AREALWORKER01").count() == 2
    assert not engine.pending_claims(campaign).exists()
    a_minute_later()
    assert verify_claims.apply().get() == {"confirmed": 0, "released": 0} and len(fake.asked) == 6
    # refused claims still count against the address for the hour: it opens nothing new
    with client(live_server, ATTACKER) as web:
        assert visit(web, hit_b, "FORGEDC00001", "AFORGEDC00001").status_code == 429
    assert Worker.objects.count() == workers + 5 + 1


def test_claims_mturk_refuses_are_released_at_once_and_real_ones_asked_again_later(live_server, fake, campaign):
    hit = hits(campaign)[0]
    with client(live_server, ATTACKER) as web:
        assert visit(web, hit, "INVENTED00001", "AFORGER00001").status_code == 200  # opened, never answered
        answered = visit(web, hit, "INVENTED00002", "AFORGER00002")
        answer(web, hit, answered)
    real = fake.accept(hit.hit_id, "AREALWORKER02")
    with client(live_server, REAL) as worker:
        page = visit(worker, hit, real, "AREALWORKER02")  # working on it: not submitted yet
        assert page.status_code == 200

        assert verify_claims.apply().get() == {"confirmed": 0, "released": 0}
        assert sorted(fake.asked) == sorted(["INVENTED00001", "INVENTED00002", real])
        lurker, forged, mine = (Assignment.objects.get(provider_ref=r) for r in ("INVENTED00001", "INVENTED00002", real))
        # MTurk says no: released now, not after the assignment's deadline plus an hour
        assert (lurker.state, lurker.verified, lurker.claim_released_at is not None) == (Assignment.EXPIRED, False, True)
        assert lurker.return_reason == "refused by MTurk: Assignment INVENTED00001 does not exist."
        assert (forged.state, forged.claim_released_at is not None, forged.counted) == (Assignment.SUBMITTED, True, False)
        # MTurk knows the real one (accepted, not submitted): kept, asked again later, not at every run
        assert (mine.state, mine.claim_released_at, mine.claim_checks) == (Assignment.ACCEPTED, None, 1)
        assert mine.claim_known_at is not None and mine.claim_next_check > mine.claim_known_at
        a_minute_later()
        assert verify_claims.apply().get() == {"confirmed": 0, "released": 0} and len(fake.asked) == 3
        # a refused claim opens nothing any more
        again = visit(worker, hit, "INVENTED00001", "AFORGER00001")
        assert again.status_code == 409 and "expired" in again.text

        # the worker submits: the claim is due at once and confirmed at the next run
        fake.external_submit({"assignmentId": real, **answer(worker, hit, page)})
    assert verify_claims.apply().get() == {"confirmed": 1, "released": 0}
    assert fake.asked[3:] == [real]
    mine.refresh_from_db()
    assert (mine.verified, mine.counted) == (True, True)
    assert not engine.pending_claims(campaign).exists()


def test_visits_with_one_assignment_id_are_one_claim(live_server, fake, campaign):
    hit, other = hits(campaign)[:2]
    with client(live_server, ATTACKER) as web:
        first = [visit(web, hit, "DUPLICATE0001", "ADUPLICATE00") for _ in range(3)]
        assert [p.status_code for p in first] == [200] * 3
        others = [visit(web, hit, "DUPLICATE0001", f"ADUPLICATE{n:02d}") for n in range(1, 9)]
        assert {p.status_code for p in others} == {409}
        assert "already claimed" in others[0].text
        assert visit(web, other, "DUPLICATE0001", "ADUPLICATE00").status_code == 409  # nor on another HIT
    assert Assignment.objects.filter(provider_ref="DUPLICATE0001").count() == 1
    assert list(Worker.objects.filter(external_id__startswith="ADUPLICATE").values_list("external_id", flat=True)) == [
        "ADUPLICATE00"]
    verify_claims.apply().get()
    assert fake.asked == ["DUPLICATE0001"]
