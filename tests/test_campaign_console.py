"""Issue 15, the campaign console (owner side), on PostgreSQL through real HTTP requests and, for
what needs a browser, headless Chromium:

* invitation links are listed on the campaign page for good (not once), copyable, and revocable: a
  revoked link no longer joins and the session it opened no longer sees the campaign;
* Finish and revoking ask for a confirmation (a page without JavaScript, a dialog with it);
* owners unblock, block, count and uncount a worker's work, each kept in the audit trail;
* the per-worker table flags workers faster than the campaign's "too fast" threshold;
* the owner's preview of a task records nothing;
* the campaign list shows progress, stored agreement and state; the status endpoint the campaign
  page polls; the new-campaign form's gold check, image check, preview and kind-specific fields;
* a campaign closes itself at the submission that completes its last item;
* the owner pages fit a 390 px wide phone.
"""
import io
import json
import re

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils.html import escape
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

from analysis.models import Report
from crowd import engine
from crowd.models import (
    Assignment,
    AuditEntry,
    Campaign,
    CampaignRater,
    Dataset,
    HumanJudgment,
    Item,
    Worker,
    WorkerStatus,
)

from .conftest import run_command, stale

pytestmark = pytest.mark.django_db

TEMPLATE = "https://img.example/photos/{key}"
TASK = re.compile(r"/rate/[-\w]+/task/(\d+)/$")
ANSWER = {"relevance": "4", "thoroughness": "3"}


@pytest.fixture
def dataset(subset_dir):
    run_command("import_dataset", "flickr8k-expert", str(subset_dir), "--name", "sub")
    return Dataset.objects.get(name="sub")


@pytest.fixture
def alice():
    return User.objects.create_user("alice", password="pw")


def owner_client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def rating(dataset, owner, name="study", **kw):
    options = {"images": 2, "image_url": TEMPLATE, **kw.pop("options", {})}
    kw.setdefault("gold_every", 0)
    kw.setdefault("state", Campaign.LIVE)
    return engine.create_campaign(dataset, "rating", name=name, owners=[owner], options=options, **kw)


def links_on(page: str) -> list[str]:
    return re.findall(r'value="(http://testserver/rate/join/[^"]+)"', page)


def do_task(client, name) -> Assignment | None:
    """Accept and answer one task as the rater of ``client``; the assignment, or None if none."""
    r = client.post(f"/rate/{name}/accept/")
    m = TASK.search(r.get("Location", "")) if r.status_code == 302 else None
    if m is None:
        return None
    a = Assignment.objects.get(pk=int(m.group(1)))
    r = client.post(f"/rate/{name}/task/{a.pk}/submit/", {**ANSWER, "item": a.item_id})
    assert r.status_code == 302, r.content[:500]
    a.refresh_from_db()
    return a


# --- invitations ------------------------------------------------------------------------------------------
def test_links_stay_listed_and_a_revoked_link_stops_working(dataset, alice):
    campaign = rating(dataset, alice)
    owner = owner_client(alice)
    assert owner.post("/campaigns/study/invite/", {"n": "3", "label": "lab-"}).status_code == 302
    first = owner.get("/campaigns/study/").content.decode()
    second = owner.get("/campaigns/study/").content.decode()  # a reload: the links are still there
    links = links_on(first)
    assert len(links) == 3 and links_on(second) == links and first.count("/rate/join/") == 3
    assert first.count("invitation new-link") == 3 and second.count("invitation new-link") == 0  # highlighted once, listed always
    assert second.count('data-state="unused"') == 3
    tokens = [link.split("/rate/join/")[1].split("/")[0] for link in links]
    workers = [Worker.objects.get(token=t) for t in tokens]
    assert [w.label for w in workers] == ["lab-1", "lab-2", "lab-3"]
    assert AuditEntry.objects.get(campaign=campaign, action="invite").detail == {"links": 3}

    # link 1 is used: its holder takes a task and keeps one open
    rater = Client()
    assert rater.get(links[0].removeprefix("http://testserver")).status_code == 302
    assert do_task(rater, "study") is not None
    held = rater.post("/rate/study/accept/")
    assert held.status_code == 302
    page = owner.get("/campaigns/study/").content.decode()
    assert f"used by {workers[0].rater_id}" in page

    # revoking without the confirmation changes nothing: the answer is the confirmation page
    response = owner.post("/campaigns/study/invitations/", {"worker": workers[0].pk})
    assert response.status_code == 200 and b'id="confirm-form"' in response.content
    assert b'name="confirmed" value="yes"' in response.content
    assert CampaignRater.objects.get(campaign=campaign, worker=workers[0]).revoked_at is None
    assert rater.get("/rate/study/").status_code in (200, 302)
    response = owner.post("/campaigns/study/invitations/", {"worker": workers[0].pk, "confirmed": "yes",
                                                           "reason": "sent to the wrong person"})
    assert response.status_code == 302
    assert CampaignRater.objects.get(campaign=campaign, worker=workers[0]).revoked_at is not None
    # the link no longer joins, the session it opened no longer sees the campaign, the held task is returned
    assert Client().get(links[0].removeprefix("http://testserver")).status_code == 404
    assert rater.get("/rate/study/").status_code == 404
    assert rater.post("/rate/study/accept/").status_code == 404
    assert not Assignment.objects.filter(campaign=campaign, worker=workers[0], state=Assignment.ACCEPTED).exists()
    assert Assignment.objects.filter(campaign=campaign, worker=workers[0], state=Assignment.SUBMITTED).count() == 1
    entry = AuditEntry.objects.get(campaign=campaign, action="revoke")
    assert (entry.actor, entry.reason, entry.target) == ("alice", "sent to the wrong person", f"{workers[0].rater_id} (lab-1)")
    page = owner.get("/campaigns/study/").content.decode()
    assert len(links_on(page)) == 2 and 'data-state="revoked"' in page and "sent to the wrong person" in page
    # revoking twice, or a worker of no link of this campaign, changes nothing
    owner.post("/campaigns/study/invitations/", {"worker": workers[0].pk, "confirmed": "yes"})
    assert AuditEntry.objects.filter(action="revoke").count() == 1
    # the other links still join
    other = Client()
    assert other.get(links[1].removeprefix("http://testserver")).status_code == 302
    assert do_task(other, "study") is not None
    # another owner can neither list nor revoke
    bob = owner_client(User.objects.create_user("bob"))
    assert bob.get("/campaigns/study/invitations/").status_code == 404
    assert bob.post("/campaigns/study/invitations/", {"worker": workers[1].pk, "confirmed": "yes"}).status_code == 404
    assert CampaignRater.objects.get(campaign=campaign, worker=workers[1]).revoked_at is None


# --- Finish and the automatic close ------------------------------------------------------------------------
def test_finish_needs_a_confirmation_and_a_complete_campaign_closes_itself(dataset, alice):
    campaign = rating(dataset, alice, name="manual", options={"images": 1})
    owner = owner_client(alice)
    response = owner.post("/campaigns/manual/state/", {"state": "finished"})
    assert response.status_code == 200 and b"Finishing is final" in response.content
    campaign.refresh_from_db()
    assert campaign.state == Campaign.LIVE
    assert owner.post("/campaigns/manual/state/", {"state": "paused"}).status_code == 302  # reversible: no question
    assert owner.post("/campaigns/manual/state/", {"state": "finished", "confirmed": "yes"}).status_code == 302
    campaign.refresh_from_db()
    assert campaign.state == Campaign.FINISHED
    assert list(AuditEntry.objects.filter(campaign=campaign).order_by("at", "pk").values_list("action", flat=True)) == [
        "pause", "finish"]

    # k = 2 over the items of 2 images, two raters through the rater pages: the last answer closes it
    auto = rating(dataset, alice, name="auto", k=2, options={"min_seconds_per_task": 0})
    n_items = auto.items.filter(is_gold=False).count()
    assert n_items >= 2
    raters = []
    for worker in engine.invite_workers(2, campaign=auto):
        client = Client()
        client.get(f"/rate/join/{worker.token}/")
        raters.append(client)
    done = 0
    for client in raters:
        while True:
            auto.refresh_from_db()
            assert auto.state == Campaign.LIVE, f"finished after {done} of {2 * n_items} judgments"
            if do_task(client, "auto") is None:
                break
            done += 1
            if done == 2 * n_items:
                break
    assert done == 2 * n_items
    auto.refresh_from_db()
    assert auto.state == Campaign.FINISHED
    assert Assignment.objects.filter(campaign=auto, counted=True).count() == 2 * n_items
    entry = AuditEntry.objects.get(campaign=auto, action="auto-finish")
    assert entry.actor == "system" and entry.user is None and entry.detail == {"items": n_items, "k": 2}
    page = owner.get("/campaigns/auto/").content.decode()
    assert 'id="state">finished<' in page and "auto-finish" in page


# --- overrides, audit trail, speed flags ---------------------------------------------------------------------
def test_overrides_are_audited_and_fast_workers_are_flagged(dataset, alice):
    campaign = rating(dataset, alice, name="qc", k=1, options={"images": 3, "min_seconds_per_task": 30})
    worker = engine.invite_workers(1, label="fast-", campaign=campaign)[0]
    rater = Client()
    rater.get(f"/rate/join/{worker.token}/")
    answered = [do_task(rater, "qc"), do_task(rater, "qc")]
    assert all(a is not None and a.counted and a.work_seconds < 30 for a in answered)
    owner = owner_client(alice)
    page = owner.get("/campaigns/qc/").content.decode()
    row = re.search(rf'<tr data-worker="{re.escape(worker.rater_id)}">.*?</tr>', page, re.S).group(0)
    assert "too fast" in row and "flag-fast" in row and "30 s" in page

    def override(action, reason="checked by hand"):
        return owner.post("/campaigns/qc/workers/", {"worker": worker.rater_id, "action": action, "reason": reason})

    def status():
        return WorkerStatus.objects.filter(campaign=campaign, worker=worker).values_list("state", flat=True).first()

    judgments = HumanJudgment.objects.filter(campaign=campaign).count()
    assert judgments > 0
    # a reason is required; an unknown action or worker is refused; nothing changes
    override("block", reason=" ")
    override("promote")
    owner.post("/campaigns/qc/workers/", {"worker": "local:nobody", "action": "block", "reason": "x"})
    assert status() in (None, "ok", "warned") and not AuditEntry.objects.filter(campaign=campaign).exists()
    assert override("block", "copy-paste answers").status_code == 302
    assert status() == "blocked"
    assert Assignment.objects.filter(campaign=campaign, worker=worker, counted=True).count() == 0
    assert HumanJudgment.objects.filter(campaign=campaign).count() == 0
    assert rater.post("/rate/qc/accept/").status_code == 200  # "blocked": no task
    override("count")  # refused while blocked
    assert Assignment.objects.filter(campaign=campaign, worker=worker, counted=True).count() == 0
    override("unblock", "asked us, was honest")
    assert status() == "ok"
    override("count", "reviewed the answers")
    assert Assignment.objects.filter(campaign=campaign, worker=worker, counted=True).count() == 2
    assert HumanJudgment.objects.filter(campaign=campaign).count() == judgments
    override("uncount", "second thoughts")
    assert Assignment.objects.filter(campaign=campaign, worker=worker, counted=True).count() == 0
    entries = list(AuditEntry.objects.filter(campaign=campaign).order_by("at", "pk"))
    assert [(e.action, e.reason, e.actor) for e in entries] == [
        ("block", "copy-paste answers", "alice"), ("unblock", "asked us, was honest", "alice"),
        ("count", "reviewed the answers", "alice"), ("uncount", "second thoughts", "alice")]
    assert entries[0].detail["released"] == 2 and entries[2].detail == {"counted": 2}
    assert all(e.target == f"{worker.rater_id} (fast-1)" for e in entries)
    page = owner.get("/campaigns/qc/").content.decode()
    audit = re.search(r'<table id="audit-trail">.*?</table>', page, re.S).group(0)
    assert all(e.reason in audit for e in entries)
    assert owner.get("/campaigns/qc/workers/").status_code == 200
    # the admin lists the trail (read-only) and the memberships
    root = owner_client(User.objects.create_superuser("root", password="pw"))
    assert "copy-paste answers" in root.get("/admin/crowd/auditentry/").content.decode()
    assert root.get(f"/admin/crowd/auditentry/{entries[0].pk}/delete/").status_code == 403
    assert "fast-1" in root.get("/admin/crowd/campaignrater/").content.decode() or \
        worker.external_id in root.get("/admin/crowd/campaignrater/").content.decode()


# --- preview ------------------------------------------------------------------------------------------------
def test_the_owners_preview_records_nothing(dataset, alice):
    campaign = rating(dataset, alice, name="prev", gold_every=3, options={"gold": 2})
    tables = (Assignment, HumanJudgment, Worker, WorkerStatus, CampaignRater, AuditEntry)
    before = {m.__name__: m.objects.count() for m in tables}
    owner = owner_client(alice)
    first = campaign.items.filter(is_gold=False).order_by("position").first()
    gold = campaign.items.filter(is_gold=True).order_by("position").first()
    for url, item in (("/campaigns/prev/preview/", first), (f"/campaigns/prev/preview/?item={gold.position}", gold)):
        page = owner.get(url).content.decode()
        assert escape(item.payload["text"]) in page
        assert item.payload["image_url"] in page
        assert re.search(r'<form method="get" action="#" id="task-form" onsubmit="return false"', page)
        assert re.search(r'<button type="submit" id="submit" disabled', page)
        assert 'name="relevance"' in page and "/rate/" not in page
    assert owner.get("/campaigns/prev/preview/?item=x").status_code == 200
    assert {m.__name__: m.objects.count() for m in tables} == before
    assert Client().get("/campaigns/prev/preview/").status_code == 302  # owners only
    assert owner_client(User.objects.create_user("bob")).get("/campaigns/prev/preview/").status_code == 404


# --- list, status, form ---------------------------------------------------------------------------------------
def test_list_progress_agreement_status_and_the_new_campaign_form(dataset, alice):
    campaign = rating(dataset, alice, name="listed", k=1, options={"min_seconds_per_task": 0})
    draft = rating(dataset, alice, name="drafty", state=Campaign.DRAFT)
    worker = engine.invite_workers(1, campaign=campaign)[0]
    rater = Client()
    rater.get(f"/rate/join/{worker.token}/")
    do_task(rater, "listed")
    n_items = campaign.items.filter(is_gold=False).count()
    owner = owner_client(alice)
    status = owner.get("/campaigns/listed/status.json").json()
    assert status["state"] == "live" and status["judgments"] == 1 and status["needed"] == n_items
    assert status["complete_items"] == 1 and status["percent"] == round(100 / n_items, 1)
    reports = Report.objects.count()
    page = owner.get("/campaigns/").content.decode()
    row = re.search(r'<tr data-campaign="listed">.*?</tr>', page, re.S).group(0)
    assert f"1 / {n_items} items" in row and ">live<" in row and "no report yet" in row
    assert f'class="percent">{round(100 / n_items)}<' in row
    assert re.search(r'<tr data-campaign="drafty">.*?>draft<', page, re.S)
    # agreement is read from the stored report, never computed by the list
    Report.objects.create(kind=Report.CAMPAIGN, key="k" * 64, campaign=draft, status=Report.DONE,
                          payload=json.dumps({"agreement": {"relevance": {"alpha": 0.4321}, "thoroughness": {"alpha": None}}}))
    page = owner.get("/campaigns/").content.decode()
    row = re.search(r'<tr data-campaign="drafty">.*?</tr>', page, re.S).group(0)
    assert "relevance 0.43" in row and "thoroughness n/a" in row
    assert Report.objects.count() == reports + 1

    # the form: more gold items than real ones, a kind that shows images without pictures
    form = {"name": "new-one", "dataset": "sub", "kind": "rating", "k": 3, "assignment_minutes": 10, "reward": "0",
            "seed": 0, "images": 1, "image_url": TEMPLATE}
    response = owner.post("/campaigns/new/", {**form, "gold": 500})
    page = response.content.decode()
    assert response.status_code == 400 and re.search(r"500 gold items for \d+ real items", page)
    assert re.search(r'id="row-gold"><label[^>]*>[^<]*</label><ul class="errorlist', page)
    assert not Campaign.objects.filter(name="new-one").exists()
    # preview: a rendered task of these settings, nothing created
    counts = {m.__name__: m.objects.count() for m in (Campaign, Item, Assignment)}
    response = owner.post("/campaigns/new/", {**form, "gold": 1, "preview": "1"})
    page = response.content.decode()
    assert response.status_code == 200 and 'id="new-preview-notice"' in page and 'name="relevance"' in page
    assert re.search(r"(\d+) items and 1 gold items would be created", page)
    assert "https://img.example/photos/" in page
    assert {m.__name__: m.objects.count() for m in (Campaign, Item, Assignment)} == counts
    response = owner.post("/campaigns/new/", {**form, "gold": 1, "min_seconds_per_task": "2.5"})
    assert response.status_code == 302
    created = Campaign.objects.get(name="new-one")
    assert created.items.filter(is_gold=True).count() == 1 and created.options["min_seconds_per_task"] == 2.5
    # every group of fields is on the page with its heading (without JavaScript all are shown)
    page = owner.get("/campaigns/new/").content.decode()
    assert all(legend in page for legend in ("Every campaign", "Images", "Gold items", "Caption-set diversity",
                                             "Visual atoms"))


@pytest.mark.real_image_sources
def test_the_form_refuses_a_kind_that_shows_images_without_pictures(dataset, alice):
    assert not dataset.image_source
    owner = owner_client(alice)
    form = {"name": "blind", "dataset": "sub", "kind": "rating", "k": 3, "assignment_minutes": 10, "reward": "0",
            "seed": 0, "images": 1, "gold": 1}
    for extra in ({}, {"preview": "1"}):
        response = owner.post("/campaigns/new/", {**form, **extra})
        page = response.content.decode()
        assert response.status_code == 400 and "dataset &#x27;sub&#x27; has no image source" in page
        assert re.search(r'id="row-image_url"><label[^>]*>[^<]*</label><ul class="errorlist', page)
        assert "set_image_source sub" in page and 'id="new-preview-notice"' not in page
    assert not Campaign.objects.exists()
    # with a template it is created; a kind that shows no image needs none
    assert owner.post("/campaigns/new/", {**form, "image_url": TEMPLATE}).status_code == 302
    atoms = io.BytesIO(b"word,category,count\ndog,entity,120\n")
    atoms.name = "atoms.csv"
    assert owner.post("/campaigns/new/", {**form, "name": "atoms", "kind": "visual_atom", "atoms": atoms}).status_code == 302


# --- the browser: confirmations, copy, revoke, kind fields, live counts, phone width -------------------------------
def login(driver, live_server, username):
    driver.get(live_server.url + "/accounts/login/")
    driver.find_element(By.NAME, "username").send_keys(username)
    driver.find_element(By.NAME, "password").send_keys("pw")
    form = driver.find_element(By.CSS_SELECTOR, "main form")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    WebDriverWait(driver, 10).until(stale(form))


def fits(driver) -> bool:
    return driver.execute_script("return document.documentElement.scrollWidth <= window.innerWidth")


def test_console_in_chromium(browser, live_server, dataset, alice):
    campaign = rating(dataset, alice, name="browser-study", k=1, options={"min_seconds_per_task": 0})
    # a condition that finds an element just before a form post replaces the page asks again
    wait = WebDriverWait(browser, 15, ignored_exceptions=(StaleElementReferenceException,))
    login(browser, live_server, "alice")
    origin = live_server.url
    browser.get(f"{origin}/campaigns/browser-study/")
    browser.find_element(By.NAME, "n").clear()
    browser.find_element(By.NAME, "n").send_keys("2")
    browser.find_element(By.ID, "invite").click()
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "tr.invitation")) == 2)

    # copy: the clipboard gets the link (or, where the clipboard is refused, the link is selected)
    browser.execute_cdp_cmd("Browser.grantPermissions", {
        "origin": origin, "permissions": ["clipboardReadWrite", "clipboardSanitizedWrite"]})
    first = browser.find_elements(By.CSS_SELECTOR, "input.link")[0]
    link = first.get_attribute("value")
    button = browser.find_elements(By.CSS_SELECTOR, "button.copy")[0]
    assert button.is_displayed()
    button.click()
    wait.until(lambda d: button.get_attribute("data-copied"))
    if button.get_attribute("data-copied") == "copied":
        pasted = browser.execute_async_script(
            "var done = arguments[0]; navigator.clipboard.readText().then(done, function (e) { done('ERR ' + e); });")
        selected = browser.execute_script("return window.getSelection().toString() || "
                                          "document.activeElement.value.substring(document.activeElement.selectionStart,"
                                          " document.activeElement.selectionEnd)")
        assert link in (pasted, selected), (pasted, selected)
    else:
        assert browser.execute_script("var i = arguments[0]; return i.value.substring(i.selectionStart, i.selectionEnd)",
                                      first) == link

    # revoke: a dialog first; cancel changes nothing, confirm revokes
    worker = Worker.objects.get(token=link.split("/rate/join/")[1].split("/")[0])
    browser.find_elements(By.CSS_SELECTOR, "button.revoke")[0].click()
    dialog = browser.find_element(By.ID, "confirm-dialog")
    wait.until(lambda d: dialog.get_attribute("open") is not None)
    assert "Revoke the link of" in dialog.text
    browser.find_element(By.ID, "confirm-cancel").click()
    wait.until(lambda d: dialog.get_attribute("open") is None)
    assert CampaignRater.objects.get(campaign=campaign, worker=worker).revoked_at is None
    browser.find_elements(By.CSS_SELECTOR, "button.revoke")[0].click()
    wait.until(lambda d: dialog.get_attribute("open") is not None)
    browser.find_element(By.ID, "confirm-ok").click()
    wait.until(stale(dialog))
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, 'tr.invitation[data-state="revoked"]'))
    assert CampaignRater.objects.get(campaign=campaign, worker=worker).revoked_at is not None
    assert browser.find_elements(By.CSS_SELECTOR, "input.link")[0].get_attribute("value") != link

    # the page's counts refresh themselves when a rater answers
    browser.get(f"{origin}/campaigns/browser-study/")
    assert browser.find_element(By.ID, "p-judgments").text == "0"
    other = Worker.objects.get(pk=browser.find_element(By.CSS_SELECTOR, 'tr.invitation[data-state="unused"]')
                               .get_attribute("data-worker"))
    a = engine.accept(campaign, other)
    engine.submit(a.pk, other, ANSWER)
    wait.until(lambda d: d.find_element(By.ID, "p-judgments").text == "1")
    assert browser.find_element(By.ID, "state").text == "live"

    # Finish: a dialog; cancel keeps it live, confirm finishes it
    browser.find_element(By.ID, "to-finished").click()
    dialog = browser.find_element(By.ID, "confirm-dialog")
    wait.until(lambda d: dialog.get_attribute("open") is not None)
    assert "final" in dialog.text
    browser.find_element(By.ID, "confirm-cancel").click()
    campaign.refresh_from_db()
    assert campaign.state == Campaign.LIVE
    browser.find_element(By.ID, "to-finished").click()
    wait.until(lambda d: dialog.get_attribute("open") is not None)
    browser.find_element(By.ID, "confirm-ok").click()
    wait.until(lambda d: d.find_element(By.ID, "state").text == "finished")
    campaign.refresh_from_db()
    assert campaign.state == Campaign.FINISHED

    # the new-campaign form shows the chosen kind's fields only
    browser.get(f"{origin}/campaigns/new/")
    kind = Select(browser.find_element(By.ID, "id_kind"))

    def shown(field):
        return browser.find_element(By.ID, f"row-{field}").is_displayed()

    kind.select_by_value("visual_atom")
    assert shown("atoms") and not shown("systems") and not shown("gold") and not shown("image_url") and shown("k")
    kind.select_by_value("diversity")
    assert shown("systems") and shown("captions_per_set") and shown("gold") and shown("image_url")
    assert not shown("atoms")
    kind.select_by_value("rating")
    assert shown("gold") and shown("images") and not shown("systems") and not shown("atoms")

    # a 390 px phone: no sideways scrolling, the navigation in view
    browser.set_window_size(390, 844)
    for url in ("/campaigns/", "/campaigns/browser-study/", "/campaigns/new/", "/campaigns/browser-study/preview/",
                "/campaigns/browser-study/invitations/", "/campaigns/browser-study/workers/"):
        browser.get(origin + url)
        assert fits(browser), (url, browser.execute_script("return document.documentElement.scrollWidth"))
        nav = browser.find_element(By.CSS_SELECTOR, "header nav a[href='/campaigns/']")
        assert nav.is_displayed() and browser.execute_script(
            "var r = arguments[0].getBoundingClientRect(); return r.left >= 0 && r.right <= window.innerWidth", nav)
        browser.save_screenshot(f"/tmp/shots_h4/phone{url.replace('/', '_')}.png")
    browser.set_window_size(1400, 2200)
    browser.get(f"{origin}/campaigns/browser-study/")
    browser.save_screenshot("/tmp/shots_h4/desktop_detail.png")
