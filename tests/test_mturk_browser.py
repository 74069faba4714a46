"""An MTurk campaign end to end in real headless Chromium, through the in-memory fake MTurk
(tests/fake_mturk.py) and a small HTTP server that plays MTurk's worker site: it frames our
ExternalQuestion page the way MTurk does (an <iframe> on another site, so no cookies) and receives
the externalSubmit POST. Publish, preview, accept, answer (keyboard and mouse), an invalid answer,
the forward to MTurk, a lost externalSubmit re-sent when the HIT is reopened, collection,
reconciliation and review; and the framing / turkSubmitTo restrictions."""
import html
import re
import threading
import xml.etree.ElementTree as ET
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, parse_qsl, urlencode, urlsplit

import pytest
import requests
from django.test import override_settings
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import WebDriverWait

from crowd import engine
from crowd.models import (
    Assignment,
    Campaign,
    Dataset,
    HumanJudgment,
    MTurkHIT,
    MTurkSync,
    PairwiseJudgment,
)
from crowd.mturk import publish as pub
from crowd.mturk import review
from crowd.mturk.client import MTurkAPI
from crowd.mturk.collect import collect
from crowd.mturk.questions import EXTERNAL_NS, PREVIEW_ASSIGNMENT, parse_answers

from . import fake_mturk
from .conftest import run_command, write_subset, stale

pytestmark = pytest.mark.django_db(transaction=True)
PUBLIC_URL = "https://captions.example.org"


# --- the fake MTurk worker site ---------------------------------------------------------------------
class WorkerSite:
    """MTurk's worker side on http://localhost:<port> (bound to 127.0.0.1): ``/hit`` frames the
    HIT's ExternalQuestion page, ``/mturk/externalSubmit`` hands the posted form to the FakeMTurk."""

    def __init__(self, fake, task_origin):
        self.fake, self.task_origin = fake, task_origin
        self.submissions = []   # every externalSubmit POST that was accepted: dict of its fields
        self.refused = []       # (fields, why) of POSTs the fake refused or dropped
        self.drop_next = False  # simulate a lost externalSubmit (MTurk unreachable): nothing recorded
        site = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, status, body):
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                url = urlsplit(self.path)
                if url.path != "/hit":
                    return self._send(404, "<p>not found</p>")
                q = {k: v[-1] for k, v in parse_qs(url.query).items()}
                status, body = site.hit_page(q)
                self._send(status, body)

            def do_POST(self):
                url = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length).decode()
                if url.path != "/mturk/externalSubmit":
                    return self._send(404, "<p>not found</p>")
                if not self.headers.get("Content-Type", "").startswith("application/x-www-form-urlencoded"):
                    return self._send(400, "<p id='mturk-error'>not a form</p>")
                fields = dict(parse_qsl(raw, keep_blank_values=True))
                if site.drop_next:
                    site.drop_next = False
                    site.refused.append((fields, "dropped"))
                    return self._send(503, "<p id='mturk-unavailable'>Service unavailable</p>")
                try:
                    aid = site.fake.external_submit(fields)
                except ValueError as exc:
                    site.refused.append((fields, str(exc)))
                    return self._send(400, f"<p id='mturk-error'>{html.escape(str(exc))}</p>")
                site.submissions.append(fields)
                self._send(200, f"<!DOCTYPE html><title>MTurk</title>"
                                f"<p id='mturk-done' data-assignment='{html.escape(aid)}'>HIT submitted</p>")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.origin = f"http://localhost:{self.port}"  # another site than the live server (127.0.0.1)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def task_src(self, q):
        """Our ExternalQuestion page for the HIT, with the parameters MTurk appends."""
        question = ET.fromstring(self.fake.hits[q["hitId"]]["Question"])
        external = question.find(f"{{{EXTERNAL_NS}}}ExternalURL").text
        assert external.startswith(PUBLIC_URL + "/")
        params = {"assignmentId": q.get("assignmentId") or PREVIEW_ASSIGNMENT, "hitId": q["hitId"]}
        if params["assignmentId"] != PREVIEW_ASSIGNMENT:
            params |= {"workerId": q["workerId"], "turkSubmitTo": self.origin}
        # the live server stands in for the public https address the HIT names
        return self.task_origin + urlsplit(external).path + "?" + urlencode(params)

    def hit_page(self, q):
        hit = self.fake.hits.get(q.get("hitId", ""))
        if hit is None:
            return 404, "<p id='mturk-error'>no such HIT</p>"
        aid = q.get("assignmentId") or PREVIEW_ASSIGNMENT
        if aid != PREVIEW_ASSIGNMENT:
            a = self.fake.assignments.get(aid)
            if a is None or a["HITId"] != hit["HITId"] or a["WorkerId"] != q.get("workerId"):
                return 403, "<p id='mturk-error'>not your assignment</p>"
        src = html.escape(self.task_src(q), quote=True)
        return 200, (
            "<!DOCTYPE html><html><head><meta charset='utf-8'><title>Fake MTurk</title></head><body>"
            f"<h1 id='hit-title'>HIT {html.escape(hit['HITId'])}</h1>"
            "<script>window.taskLoads = 0;</script>"
            f"<iframe id='task' name='task' src='{src}' style='width:100%;height:1500px;border:0' "
            "onload='window.taskLoads += 1'></iframe></body></html>"
        )

    def hit_url(self, hit_id, assignment_id=PREVIEW_ASSIGNMENT, worker_id="", origin=None):
        params = {"hitId": hit_id, "assignmentId": assignment_id}
        if worker_id:
            params["workerId"] = worker_id
        return (origin or self.origin) + "/hit?" + urlencode(params)


@pytest.fixture
def fake():
    fake_mturk.FAKES.clear()
    with override_settings(MTURK_CLIENT_FACTORY="tests.fake_mturk.fake_client"):
        yield fake_mturk.fake_client("sandbox")
    fake_mturk.FAKES.clear()


@pytest.fixture
def turk(fake, live_server):
    site = WorkerSite(fake, live_server.url)
    site.thread.start()
    try:
        # override_settings changes the process-wide settings: the live server thread sees them too
        with override_settings(MTURK_FRAME_ANCESTORS=[site.origin], MTURK_SUBMIT_ORIGINS=[site.origin]):
            yield site
    finally:
        site.server.shutdown()
        site.server.server_close()


@pytest.fixture
def dataset(tmp_path):
    run_command("import_dataset", "flickr8k-expert", str(write_subset(tmp_path / "flickr8k-small", 8)), "--name", "small")
    return Dataset.objects.get(name="small")


def published(dataset, fake, kind, *, name, k, options):
    """An MTurk campaign of ``kind`` published through the fake MTurk (one HIT per item)."""
    campaign = engine.create_campaign(dataset, kind, name=name, options=options, k=k, reward="0.05",
                                      provider=Campaign.MTURK, gold_every=0)
    config = pub.config_for(campaign)
    config.public_url = PUBLIC_URL  # publishing requires https; the iframe uses the live server instead
    config.save()
    report = pub.publish_batch(campaign, MTurkAPI.for_campaign(campaign))
    n = campaign.items.count()
    assert n >= 1 and report.created == n and not report.failed, report.lines()
    assert len(fake.hits) == n
    campaign.refresh_from_db()
    assert campaign.state == Campaign.LIVE
    for hit in fake.hits.values():
        assert hit["MaxAssignments"] == k and "<ExternalURL>" + PUBLIC_URL + "/mturk/" + name in hit["Question"]
    return campaign


# --- browser helpers ------------------------------------------------------------------------------------
def wait(driver, timeout=10):
    return WebDriverWait(driver, timeout)


def keys(driver, *sequence):
    ActionChains(driver).send_keys(*sequence).perform()


def open_hit(driver, turk, hit_id, assignment_id=PREVIEW_ASSIGNMENT, worker_id=""):
    """Open the fake MTurk's HIT page, switch into the task frame, wait for our form."""
    driver.switch_to.default_content()
    driver.get(turk.hit_url(hit_id, assignment_id, worker_id))
    wait(driver).until(lambda d: d.execute_script("return window.taskLoads") >= 1)
    assert driver.find_element(By.ID, "hit-title").text == f"HIT {hit_id}"
    wait(driver).until(EC.frame_to_be_available_and_switch_to_it("task"))
    wait(driver).until(lambda d: d.find_elements(By.ID, "task-form"))
    # really a framed page of another site: our origin inside, the parent unreachable from here
    assert driver.execute_script("return window.top !== window.self")
    assert driver.execute_script("return location.origin") == turk.task_origin
    assert driver.execute_script("try { return window.top.location.href; } catch (e) { return 'cross-origin'; }") == "cross-origin"
    assert driver.execute_script("return document.cookie") == ""


def checked(driver, name):
    return [r.get_attribute("value") for r in driver.find_elements(By.CSS_SELECTOR, f'input[name="{name}"]') if r.is_selected()]


def click_label(driver, name, value):
    radio = driver.find_element(By.CSS_SELECTOR, f'#task-form input[name="{name}"][value="{value}"]')
    label = radio.find_element(By.XPATH, "./ancestor::label")
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", label)
    label.click()
    assert radio.is_selected()


def response_status(driver):
    return driver.execute_script("return performance.getEntriesByType('navigation')[0].responseStatus")


def submitted_to_mturk(driver, turk, aid, n_before):
    """After Submit: the frame ends on the fake MTurk's page for ``aid``; returns the posted fields."""
    done = wait(driver).until(lambda d: d.find_elements(By.ID, "mturk-done"))[0]
    assert done.get_attribute("data-assignment") == aid
    assert driver.execute_script("return location.href") == turk.origin + "/mturk/externalSubmit"
    assert len(turk.submissions) == n_before + 1
    fields = turk.submissions[-1]
    assert fields["assignmentId"] == aid
    assert "token" not in fields  # our signed token stays with us
    return fields


def accepted(fake, hit_id, workers):
    return {w: fake.accept(hit_id, w) for w in workers}


# --- rating: preview, three workers, an invalid answer, collect, review --------------------------------
def test_rating_campaign_through_mturk_frame(browser, live_server, fake, turk, dataset):
    campaign = published(dataset, fake, "rating", name="mt-rating", k=3, options={"images": 1, "gold": 0})
    hit = MTurkHIT.objects.filter(batch__campaign=campaign).select_related("item").order_by("pk").first()
    path = f"/mturk/{campaign.name}/item/{hit.item_id}/"

    # Preview (not accepted yet): shown in MTurk's frame, disabled, nothing stored
    open_hit(browser, turk, hit.hit_id)
    notice = browser.find_element(By.ID, "preview-notice")
    assert notice.is_displayed() and "accept the HIT" in notice.text
    assert not browser.find_element(By.ID, "submit").is_enabled()
    radios = browser.find_elements(By.CSS_SELECTOR, "#task-form input[type=radio]")
    assert len(radios) == 10 and not any(r.is_enabled() for r in radios)
    assert browser.find_element(By.ID, "caption").text == hit.item.payload["text"]
    browser.find_element(By.ID, "caption").click()
    keys(browser, "4", "2")  # no keyboard answers on a preview
    assert checked(browser, "relevance") == [] and checked(browser, "thoroughness") == []
    assert not Assignment.objects.filter(campaign=campaign).exists()

    workers = ["AWORKERONE01", "AWORKERTWO02", "AWORKERTHREE3"]
    aids = accepted(fake, hit.hit_id, workers)
    with pytest.raises(ValueError, match="no assignment left"):  # MaxAssignments = k = 3
        fake.accept(hit.hit_id, "AWORKERFOUR4")
    expected = {}

    # Worker 1: keyboard. 4 answers relevance, focus moves on, 2 answers thoroughness, Enter submits
    w = workers[0]
    open_hit(browser, turk, hit.hit_id, aids[w], w)
    assert not browser.find_elements(By.ID, "preview-notice")
    assert browser.find_element(By.ID, "submit").is_enabled()
    # the time left in words (issue 15: "9 min 59 s left", not "Time left: 599 s")
    assert re.fullmatch(r"(10 min|9 min( \d{1,2} s)?) left", browser.find_element(By.ID, "time-left").text)
    local = Assignment.objects.get(campaign=campaign, provider_ref=aids[w])
    assert (local.state, local.worker.external_id, local.item_id) == (Assignment.ACCEPTED, w, hit.item_id)
    browser.find_element(By.ID, "caption").click()  # focus the framed document
    keys(browser, "4")
    assert checked(browser, "relevance") == ["4"] and checked(browser, "thoroughness") == []
    keys(browser, "2")
    assert checked(browser, "thoroughness") == ["2"]
    keys(browser, Keys.ENTER)
    fields = submitted_to_mturk(browser, turk, aids[w], 0)
    assert (fields["relevance"], fields["thoroughness"], fields["item"]) == ("4", "2", str(hit.item_id))
    assert fake.assignments[aids[w]]["AssignmentStatus"] == "Submitted"
    assert parse_answers(fake.assignments[aids[w]]["Answer"])["relevance"] == "4"
    expected[aids[w]] = {"relevance": 4, "thoroughness": 2}

    # Worker 2: an invalid answer first (a field left empty): error in the frame, nothing stored anywhere
    w = workers[1]
    open_hit(browser, turk, hit.hit_id, aids[w], w)
    browser.execute_script("document.querySelectorAll('#task-form input[required]').forEach(e => e.removeAttribute('required'))")
    click_label(browser, "relevance", "3")
    form = browser.find_element(By.ID, "task-form")
    browser.find_element(By.ID, "submit").click()
    wait(browser).until(stale(form))
    error = wait(browser).until(lambda d: d.find_element(By.ID, "form-errors"))
    assert "thoroughness" in error.text and error.get_attribute("role") == "alert"
    assert response_status(browser) == 400
    assert browser.execute_script("return location.origin") == turk.task_origin  # still our page, in the frame
    assert checked(browser, "relevance") == ["3"]  # what was chosen is kept
    local = Assignment.objects.get(campaign=campaign, provider_ref=aids[w])
    assert (local.state, local.answer, local.submitted_at) == (Assignment.ACCEPTED, None, None)
    assert HumanJudgment.objects.filter(campaign=campaign).count() == 0  # nothing counts before MTurk confirms it
    assert len(turk.submissions) == 1 and not turk.refused
    assert fake.assignments[aids[w]]["AssignmentStatus"] == "Accepted"
    # ...corrected with the mouse on the error page, then submitted
    click_label(browser, "thoroughness", "5")
    click_label(browser, "relevance", "1")  # changing one's mind
    browser.find_element(By.ID, "submit").click()
    fields = submitted_to_mturk(browser, turk, aids[w], 1)
    assert (fields["relevance"], fields["thoroughness"]) == ("1", "5")
    expected[aids[w]] = {"relevance": 1, "thoroughness": 5}

    # Worker 3: mouse
    w = workers[2]
    open_hit(browser, turk, hit.hit_id, aids[w], w)
    click_label(browser, "relevance", "5")
    click_label(browser, "thoroughness", "3")
    browser.find_element(By.ID, "submit").click()
    fields = submitted_to_mturk(browser, turk, aids[w], 2)
    assert (fields["relevance"], fields["thoroughness"]) == ("5", "3")
    expected[aids[w]] = {"relevance": 5, "thoroughness": 3}
    assert not turk.refused

    # What we stored ourselves before forwarding: the answers, as claims (URL parameters) not yet counted
    for aid, answer in expected.items():
        a = Assignment.objects.get(campaign=campaign, provider_ref=aid)
        assert (a.state, a.answer, a.counted, a.late, a.verified) == (Assignment.SUBMITTED, answer, False, False, False)
        assert fake.assignments[aid]["AssignmentStatus"] == "Submitted"
        assert "ce_token" in parse_answers(fake.assignments[aid]["Answer"])  # our signed token went to MTurk
    assert set(Assignment.objects.filter(campaign=campaign).values_list("slot", flat=True)) == {None}
    assert not HumanJudgment.objects.filter(campaign=campaign).exists()

    # Collect: MTurk holds the same three submissions, with our tokens: the claims are confirmed and count
    report = collect(campaign, MTurkAPI.for_campaign(campaign))
    assert report.ok, report.lines()
    assert report.recorded == [] and report.unchanged == 3 and report.mturk_assignments == 3
    assert sorted(report.confirmed) == sorted(expected) and report.unconfirmed == []
    assert report.hits == campaign.items.count() and report.extra == [] and report.status_changes == []
    assert sorted(Assignment.objects.filter(campaign=campaign).values_list("slot", flat=True)) == [0, 1, 2]
    judgments = HumanJudgment.objects.filter(campaign=campaign)
    assert judgments.count() == 2 * len(expected)
    assert {(j.rater, j.criterion, j.score) for j in judgments} == {
        (Assignment.objects.get(provider_ref=aid).worker.rater_id, c, float(v))
        for aid, answer in expected.items() for c, v in answer.items()
    }
    assert {j.caption_id for j in judgments} == {hit.item.payload["caption"]}
    assert MTurkSync.objects.filter(campaign=campaign, ok=True).count() == 1

    # Review: approve all three on MTurk
    decisions = review.plan_review(campaign)
    assert sorted(d.assignment.provider_ref for d in decisions) == sorted(aids.values())
    assert {d.action for d in decisions} == {review.APPROVE}
    out = review.apply_review(campaign, MTurkAPI.for_campaign(campaign), decisions)
    assert out.done == {"approved": 3} and not out.failed
    assert {fake.assignments[aid]["AssignmentStatus"] for aid in aids.values()} == {"Approved"}
    assert set(Assignment.objects.filter(campaign=campaign).values_list("state", "provider_status")) == {
        (Assignment.APPROVED, "Approved")}
    assert review.plan_review(campaign) == []
    again = collect(campaign, MTurkAPI.for_campaign(campaign))
    assert again.ok and again.unchanged == 3 and again.recorded == [] and again.status_changes == []


# --- forced choice: keyboard, a lost externalSubmit re-sent when the HIT is reopened -----------------
def test_forced_choice_lost_external_submit_is_resent(browser, live_server, fake, turk, dataset):
    campaign = published(dataset, fake, "forced_choice", name="mt-choice", k=2, options={"images": 2, "gold": 0})
    hit = MTurkHIT.objects.filter(batch__campaign=campaign).select_related("item").order_by("pk").first()
    aids = accepted(fake, hit.hit_id, ["AWORKERCHOICE1", "AWORKERCHOICE2"])
    (w1, a1), (w2, a2) = aids.items()

    # Worker 1 answers C with the keyboard; MTurk is unreachable when the forward page posts
    open_hit(browser, turk, hit.hit_id, a1, w1)
    assert browser.find_element(By.ID, "sentence-a").text == hit.item.payload["a"][1]
    turk.drop_next = True
    browser.find_element(By.ID, "sentence-a").click()
    keys(browser, "c")
    assert checked(browser, "choice") == ["2"]
    keys(browser, Keys.ENTER)
    wait(browser).until(lambda d: d.find_elements(By.ID, "mturk-unavailable"))
    assert turk.submissions == [] and [why for _, why in turk.refused] == ["dropped"]
    local = Assignment.objects.get(campaign=campaign, provider_ref=a1)
    side = local.order["sides"][1]  # the caption shown as C
    assert (local.state, local.answer) == (Assignment.SUBMITTED, {"choice": side, "position": 2})
    assert fake.assignments[a1]["AssignmentStatus"] == "Accepted"  # MTurk does not have it
    assert PairwiseJudgment.objects.filter(campaign=campaign).count() == 0  # a claim: counts once MTurk confirms it

    # Reopening the HIT re-sends the stored answer (no form to fill again)
    browser.switch_to.default_content()
    browser.get(turk.hit_url(hit.hit_id, a1, w1))
    wait(browser).until(EC.frame_to_be_available_and_switch_to_it("task"))
    fields = submitted_to_mturk(browser, turk, a1, 0)
    assert "ce_answer" in fields and fields["item"] == str(hit.item_id)
    assert fake.assignments[a1]["AssignmentStatus"] == "Submitted"
    assert "ce_token" in fields and PairwiseJudgment.objects.filter(campaign=campaign).count() == 0

    # Worker 2 picks B with the mouse
    open_hit(browser, turk, hit.hit_id, a2, w2)
    click_label(browser, "choice", "1")
    browser.find_element(By.ID, "submit").click()
    fields = submitted_to_mturk(browser, turk, a2, 1)
    assert fields["choice"] == "1"
    side2 = Assignment.objects.get(provider_ref=a2).order["sides"][0]

    report = collect(campaign, MTurkAPI.for_campaign(campaign))
    assert report.ok, report.lines()
    assert report.recorded == [] and report.unchanged == 2 and report.mturk_assignments == 2
    assert sorted(report.confirmed) == sorted([a1, a2])
    assert PairwiseJudgment.objects.filter(campaign=campaign).count() == 2  # each counted once, re-send included
    assert sorted(PairwiseJudgment.objects.filter(campaign=campaign).values_list("choice", flat=True)) == sorted([side, side2])
    out = review.apply_review(campaign, MTurkAPI.for_campaign(campaign), review.plan_review(campaign))
    assert out.done == {"approved": 2} and not out.failed
    assert {fake.assignments[a]["AssignmentStatus"] for a in (a1, a2)} == {"Approved"}


# --- framing and turkSubmitTo restrictions ----------------------------------------------------------------
def test_only_mturk_may_frame_and_receive_answers(browser, live_server, fake, turk, dataset):
    campaign = published(dataset, fake, "rating", name="mt-frame", k=1, options={"images": 1, "gold": 0})
    hit = MTurkHIT.objects.filter(batch__campaign=campaign).order_by("pk").first()
    url = f"{live_server.url}/mturk/{campaign.name}/item/{hit.item_id}/"
    aid = fake.accept(hit.hit_id, "AWORKERFRAME1")

    preview = requests.get(url, params={"assignmentId": PREVIEW_ASSIGNMENT, "hitId": hit.hit_id}, timeout=10)
    assert preview.status_code == 200
    assert preview.headers["Content-Security-Policy"] == f"frame-ancestors {turk.origin}"
    assert "X-Frame-Options" not in preview.headers and "Set-Cookie" not in preview.headers

    # turkSubmitTo that is not MTurk: refused before anything is stored
    params = {"assignmentId": aid, "hitId": hit.hit_id, "workerId": "AWORKERFRAME1"}
    for bad in ("https://evil.example.org", f"http://127.0.0.1:{turk.port}"):
        page = requests.get(url, params=params | {"turkSubmitTo": bad}, timeout=10)
        assert page.status_code == 400
        assert 'data-reason="bad-origin"' in page.text and "must be opened from Mechanical Turk" in page.text
        assert page.headers["Content-Security-Policy"] == f"frame-ancestors {turk.origin}"
    assert not Assignment.objects.filter(campaign=campaign).exists()
    ok = requests.get(url, params=params | {"turkSubmitTo": turk.origin}, timeout=10)
    assert ok.status_code == 200 and ok.headers["Content-Security-Policy"] == f"frame-ancestors {turk.origin}"
    assert 'name="token"' in ok.text and "Set-Cookie" not in ok.headers

    # In the browser: framed by the MTurk origin the page shows; framed by another origin it is blocked
    open_hit(browser, turk, hit.hit_id)
    assert browser.find_element(By.ID, "preview-notice").is_displayed()
    browser.switch_to.default_content()
    browser.get(turk.hit_url(hit.hit_id, origin=f"http://127.0.0.1:{turk.port}"))  # same page, not an allowed ancestor
    wait(browser).until(lambda d: d.execute_script("return window.taskLoads") >= 1)
    browser.switch_to.frame("task")
    assert not browser.find_elements(By.ID, "task-form") and not browser.find_elements(By.ID, "preview-notice")
    assert browser.execute_script("return location.href").startswith("chrome-error://")  # Chromium's blocked-frame page
    assert not Assignment.objects.filter(campaign=campaign).exclude(provider_ref=aid).exists()
