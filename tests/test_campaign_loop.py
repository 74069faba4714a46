"""Issue 35, the campaign loop as a first-time owner meets it (two raters working while the console
stays open), on PostgreSQL through real HTTP requests and headless Chromium:

* every export row (judgments CSV/JSONL, aggregate CSV, the API's judgments) names what was rated:
  the image key, the system and the caption text, checked against the dataset's own rows;
* the console left open shows a second rater's submissions, the answers awaiting gold checks with
  why, a block with its reason and the invitation links in use, without a reload; its status
  endpoint costs the same number of queries whatever the number of raters;
* "Publish results" asks first (a dialog with JavaScript, a confirmation page without) and "Make
  private again" undoes it, both in the audit trail;
* the picture-upload page is linked from the dataset and campaign pages; the campaign form's
  refusal is summarised at its top with links to the fields;
* "Task n of N" reads the same number of rows at 2 and at 40 images ("N+" past the look-ahead).
"""
import csv
import io
import json
import re

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from crowd import audit, engine
from crowd.models import Assignment, AuditEntry, Campaign, Caption, Dataset, Item, System, Worker
from crowd.views import rater as rater_views

from .conftest import run_command, stale

pytestmark = pytest.mark.django_db

TEMPLATE = "https://img.example/photos/{key}"
ANSWER = {"relevance": "4", "thoroughness": "3"}
GOLD_RIGHT = {"relevance": "1", "thoroughness": "1"}  # rating gold items: an unrelated caption, relevance 1


@pytest.fixture
def dataset(subset_dir):
    run_command("import_dataset", "flickr8k-expert", str(subset_dir), "--name", "sub")
    return Dataset.objects.get(name="sub")


@pytest.fixture
def alice():
    return User.objects.create_user("alice", password="pw", is_staff=True)


def owner_client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def rating(dataset, owner, name="loop", **kw):
    options = {"images": 2, "image_url": TEMPLATE, "min_seconds_per_task": 0, **kw.pop("options", {})}
    kw.setdefault("gold_every", 0)
    kw.setdefault("state", Campaign.LIVE)
    return engine.create_campaign(dataset, "rating", name=name, owners=[owner], options=options, **kw)


def work(campaign, worker, n, gold=GOLD_RIGHT, answer=ANSWER) -> list[Assignment]:
    """``worker`` takes and answers ``n`` tasks through the engine (gold items with ``gold``)."""
    done = []
    for _ in range(n):
        a = engine.accept(campaign, worker)
        engine.submit(a.pk, worker, gold if a.item.is_gold else answer)
        a.refresh_from_db()
        done.append(a)
    return done


def what_was_rated(item: Item) -> dict:
    """The image key, system name and caption text of a rating item, from the dataset's tables."""
    if item.payload.get("caption") is None:  # a gold item: a caption of another image, no system
        return {"image_key": item.payload["image_key"], "system": None, "caption": item.payload["text"]}
    caption = Caption.objects.select_related("image", "system").get(pk=item.payload["caption"])
    return {"image_key": caption.image.key, "system": caption.system.name, "caption": caption.text}


# --- exports ------------------------------------------------------------------------------------------------
def test_every_export_row_names_its_image_system_and_caption(dataset, alice):
    campaign = rating(dataset, alice, k=2)
    raters = engine.invite_workers(2, campaign=campaign)
    for w in raters:
        work(campaign, w, 3)
    owner = owner_client(alice)
    items = {it.key: it for it in campaign.items.all()}

    text = owner.get("/campaigns/loop/judgments.csv").content.decode()
    rows = list(csv.DictReader(io.StringIO(text)))
    header = next(csv.reader(io.StringIO(text)))
    # the older columns first and unchanged, the three new ones after them
    assert header[:19] == ["campaign", "kind", "item", "unit", "criterion", "worker", "value", "assignment", "state",
                           "counted", "late", "gold", "gold_correct", "accepted_at", "submitted_at", "work_seconds",
                           "order", "seed", "template_version"]
    assert header[19:] == ["image_key", "system", "caption"]
    assert len(rows) == 2 * 3 * 2  # 2 raters x 3 tasks x 2 criteria
    for row in rows:
        expected = what_was_rated(items[row["item"]])
        assert row["image_key"] == expected["image_key"]
        assert row["system"] == (expected["system"] or "")
        assert row["caption"].lstrip("'") == expected["caption"]
    assert any(r["system"] for r in rows)

    jsonl = [json.loads(line) for line in owner.get("/campaigns/loop/judgments.jsonl").content.decode().splitlines()]
    api = owner.get("/api/campaigns/loop/judgments/").json()
    assert jsonl == api and len(api) == len(rows)
    for row in api:
        assert {k: row[k] for k in ("image_key", "system", "caption")} == what_was_rated(items[row["item"]])

    aggregate = list(csv.DictReader(io.StringIO(owner.get("/campaigns/loop/aggregate.csv").content.decode())))
    assert aggregate and list(aggregate[0])[:4] == ["unit", "criterion", "value", "method"]
    for row in aggregate:
        expected = what_was_rated(items[row["unit"]])
        assert (row["image_key"], row["system"]) == (expected["image_key"], expected["system"] or "")
        assert row["caption"].lstrip("'") == expected["caption"]


def test_forced_choice_and_diversity_rows_name_both_captions_and_the_set(dataset, alice):
    fc = engine.create_campaign(dataset, "forced_choice", name="fc", owners=[alice], state=Campaign.LIVE,
                                gold_every=0, options={"images": 3, "image_url": TEMPLATE, "min_seconds_per_task": 0})
    w = engine.invite_workers(1, campaign=fc)[0]
    a = engine.accept(fc, w)
    engine.submit(a.pk, w, {"choice": "1"})
    row = owner_client(alice).get("/api/campaigns/fc/judgments/").json()[0]
    b, c = (Caption.objects.select_related("system", "image").get(pk=a.item.payload[s][0]) for s in ("b", "c"))
    assert row["image_key"] == b.image.key == c.image.key
    assert row["caption"] == [b.text, c.text] and row["system"] == [b.system.name, c.system.name]

    div = engine.create_campaign(dataset, "diversity", name="div", owners=[alice], state=Campaign.LIVE, gold_every=0,
                                 options={"images": 2, "image_url": TEMPLATE, "min_seconds_per_task": 0})
    w = engine.invite_workers(1, campaign=div)[0]
    a = engine.accept(div, w)
    sets = a.item.payload["sets"]
    engine.submit(a.pk, w, {f"set_{i}": "0.5" for i in range(len(sets))})
    rows = owner_client(alice).get("/api/campaigns/div/judgments/").json()
    assert len(rows) == len(sets)
    names = dict(System.objects.filter(dataset=dataset).values_list("pk", "name"))
    for row in rows:
        s = next(s for s in sets if row["unit"] == f"{a.item.key}/{s['name']}")
        assert row["system"] == names[s["system"]] and row["caption"] == [t for _, t in s["captions"]]


# --- the console: live raters, status endpoint, upload link, form summary --------------------------------------
def test_status_endpoint_is_owner_only_and_costs_the_same_for_more_raters(dataset, alice):
    campaign = rating(dataset, alice, gold_every=3, options={"gold": 3})
    campaign.gold_min_answers = 2
    campaign.save(update_fields=["gold_min_answers"])
    first, second, third, fourth = engine.invite_workers(4, campaign=campaign)
    work(campaign, first, 2)  # a gold check then a normal answer: it awaits a second gold check
    owner = owner_client(alice)
    with CaptureQueriesContext(connection) as one_rater:
        status = owner.get("/campaigns/loop/status.json").json()
    assert status["gold_required"] == 2 and status["awaiting_gold"] == 1 and status["judgments"] == 0
    (row,) = status["raters"]
    assert (row["worker"], row["submitted"], row["awaiting_gold"], row["counted"], row["gold_needed"]) == (
        first.rater_id, 2, 1, 0, 1)
    assert row["reason"] == "1 answer waits for 1 more gold check (1 of 2 passed) before it counts"
    assert {i["worker"]: i["state"] for i in status["invitations"]} == {
        first.pk: "used", second.pk: "unused", third.pk: "unused", fourth.pk: "unused"}
    for w in (second, third, fourth):
        work(campaign, w, 4)  # gold, two items, gold: passed, their two answers count
    with CaptureQueriesContext(connection) as four_raters:
        status = owner.get("/campaigns/loop/status.json").json()
    assert len(status["raters"]) == 4 and len(four_raters.captured_queries) == len(one_rater.captured_queries)
    passed = next(r for r in status["raters"] if r["worker"] == second.rater_id)
    assert (passed["gold_needed"], passed["awaiting_gold"], passed["counted"], passed["reason"]) == (0, 0, 2, "")
    # someone else: 404, as every owner page
    bob = User.objects.create_user("bob", password="pw")
    assert owner_client(bob).get("/campaigns/loop/status.json").status_code == 404
    assert Client().get("/campaigns/loop/status.json").status_code == 302
    # without JavaScript the page shows the same numbers on reload
    page = owner.get("/campaigns/loop/").content.decode()
    assert re.search(r'id="p-awaiting">1<', page) and 'id="raters-live"' in page
    assert f'data-worker="{first.rater_id}"' in page and "waits for 1 more gold check" in page


def test_upload_links_and_the_form_summary(dataset, alice):
    rating(dataset, alice)
    staff = owner_client(alice)
    assert 'id="image-upload-link" href="/datasets/sub/image-upload/"' in staff.get("/datasets/sub/").content.decode()
    assert 'id="image-upload-link" href="/datasets/sub/image-upload/"' in staff.get("/campaigns/loop/").content.decode()
    assert staff.get("/datasets/sub/image-upload/").status_code == 200
    bob = User.objects.create_user("bob", password="pw")  # not staff: the upload page is not theirs, no link
    assert "image-upload-link" not in owner_client(bob).get("/datasets/sub/").content.decode()

    form = {"name": "new-one", "dataset": "sub", "kind": "rating", "k": 0, "assignment_minutes": 10, "reward": "0",
            "seed": 0, "images": 1, "image_url": "ftp://nowhere/{key}"}
    response = staff.post("/campaigns/new/", form)
    page = response.content.decode()
    assert response.status_code == 400
    summary = re.search(r'<div class="notice" id="form-errors" role="alert".*?</div>', page, re.S).group(0)
    assert "The campaign was not created: 2 problems to fix." in summary
    assert '<a href="#row-k">' in summary and '<a href="#row-image_url">' in summary
    assert 'id="row-k"' in page and 'id="row-image_url"' in page
    assert not Campaign.objects.filter(name="new-one").exists()


def login(driver, live_server, username):
    driver.get(live_server.url + "/accounts/login/")
    driver.find_element(By.NAME, "username").send_keys(username)
    driver.find_element(By.NAME, "password").send_keys("pw")
    form = driver.find_element(By.CSS_SELECTOR, "main form")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    WebDriverWait(driver, 10).until(stale(form))


def live_row(driver, worker: Worker) -> dict:
    """The "Raters now" row of ``worker`` as the page shows it now ({} if there is none)."""
    for tr in driver.find_elements(By.CSS_SELECTOR, "#raters-live-body tr"):
        if tr.get_attribute("data-worker") == worker.rater_id:
            cells = {c: tr.find_element(By.CLASS_NAME, c).text for c in ("r-submitted", "r-awaiting", "r-counted",
                                                                         "r-status")}
            return cells | {"status": tr.get_attribute("data-status")}
    return {}


def test_console_left_open_shows_the_second_rater_and_the_gold_gate_without_a_reload(
        browser, live_server, dataset, alice, tmp_path):
    campaign = rating(dataset, alice, gold_every=3, options={"gold": 3})
    first, second = engine.invite_workers(2, label="lab-", campaign=campaign)
    work(campaign, first, 1)  # the first rater has begun before the owner opens the console
    wait = WebDriverWait(browser, 30, ignored_exceptions=(StaleElementReferenceException,))
    login(browser, live_server, "alice")
    browser.get(f"{live_server.url}/campaigns/loop/")
    browser.execute_script("window.__stayed = 'same page';")  # gone if the page reloads
    assert browser.find_element(By.ID, "p-judgments").text == "0"
    assert browser.find_element(By.ID, "gold-gate").is_displayed()
    assert live_row(browser, second) == {}
    second_link = browser.find_element(By.CSS_SELECTOR, f'tr.invitation[data-worker="{second.pk}"]')
    assert second_link.get_attribute("data-state") == "unused"

    # the second rater answers a gold check and two items: kept, awaiting the two more checks
    work(campaign, second, 3)
    assert Assignment.objects.filter(campaign=campaign, worker=second, awaiting_gold=True).count() == 2
    wait.until(lambda d: live_row(d, second).get("r-submitted") == "3")
    row = live_row(browser, second)
    assert (row["r-awaiting"], row["r-counted"], row["status"]) == ("2", "0", "ok")
    assert "2 answers wait for 2 more gold checks (1 of 3 passed) before they count" in row["r-status"]
    assert browser.find_element(By.ID, "p-awaiting").text == str(
        Assignment.objects.filter(campaign=campaign, awaiting_gold=True).count())
    assert browser.find_element(By.ID, "p-judgments").text == "0"  # nothing counted yet, and the page says why
    assert second_link.get_attribute("data-state") == "used"
    assert f"used by {second.rater_id}" in second_link.find_element(By.CLASS_NAME, "inv-state").text
    browser.save_screenshot(str(tmp_path / "console-awaiting-gold.png"))

    # they pass the checks: their waiting answers count, live
    while engine.gold_checks_required(campaign) > Assignment.objects.filter(
            campaign=campaign, worker=second, gold_correct__isnull=False).count():
        work(campaign, second, 1)
    counted = Assignment.objects.filter(campaign=campaign, worker=second, counted=True).count()
    assert counted >= 2
    wait.until(lambda d: live_row(d, second).get("r-counted") == str(counted))
    assert live_row(browser, second)["r-awaiting"] == "0"
    wait.until(lambda d: d.find_element(By.ID, "p-judgments").text == str(
        Assignment.objects.filter(campaign=campaign, counted=True).count()))

    # the owner of a second console blocks the first rater: the open page shows it and why
    audit.override_worker(campaign, first, "block", alice, "answers pasted from another campaign")
    wait.until(lambda d: live_row(d, first).get("status") == "blocked")
    assert "answers pasted from another campaign" in live_row(browser, first)["r-status"]
    assert browser.execute_script("return window.__stayed") == "same page"


def test_publishing_asks_first_and_can_be_undone(browser, live_server, dataset, alice):
    campaign = rating(dataset, alice)
    wait = WebDriverWait(browser, 15, ignored_exceptions=(StaleElementReferenceException,))
    login(browser, live_server, "alice")
    browser.get(f"{live_server.url}/campaigns/loop/")
    publish = browser.find_element(By.ID, "publish-results")
    publish.click()
    dialog = browser.find_element(By.ID, "confirm-dialog")
    wait.until(lambda d: dialog.get_attribute("open") is not None)
    assert "Anyone will see" in dialog.text and "private again" in dialog.text
    browser.find_element(By.ID, "confirm-cancel").click()
    wait.until(lambda d: dialog.get_attribute("open") is None)
    campaign.refresh_from_db()
    assert campaign.results_published_at is None and not AuditEntry.objects.filter(campaign=campaign).exists()

    publish.click()
    wait.until(lambda d: dialog.get_attribute("open") is not None)
    browser.find_element(By.ID, "confirm-ok").click()
    wait.until(lambda d: d.find_elements(By.ID, "results-published"))
    campaign.refresh_from_db()
    assert campaign.results_published_at is not None

    browser.find_element(By.ID, "unpublish-results").click()  # reversible: no question asked
    wait.until(lambda d: d.find_elements(By.ID, "publish-results"))
    campaign.refresh_from_db()
    assert campaign.results_published_at is None
    assert "private again" in browser.find_element(By.CSS_SELECTOR, "main").text
    entries = list(AuditEntry.objects.filter(campaign=campaign).order_by("pk").values_list("action", "actor"))
    assert entries == [("publish-results", "alice"), ("unpublish-results", "alice")]
    assert "unpublish-results" in browser.find_element(By.ID, "audit").find_element(By.XPATH, "following::table[1]").text

    # without JavaScript: the POST asks with a page; its form publishes; unpublishing twice writes one entry
    owner = owner_client(alice)
    page = owner.post("/campaigns/loop/publish-results/").content.decode()
    assert 'id="confirm-form"' in page and 'name="confirmed" value="yes"' in page
    campaign.refresh_from_db()
    assert campaign.results_published_at is None
    assert owner.post("/campaigns/loop/publish-results/", {"confirmed": "yes"}).status_code == 302
    for _ in range(2):
        assert owner.post("/campaigns/loop/unpublish-results/").status_code == 302
    assert AuditEntry.objects.filter(campaign=campaign, action="unpublish-results").count() == 2
    assert owner_client(User.objects.create_user("bob", password="pw")).post(
        "/campaigns/loop/unpublish-results/").status_code == 404


# --- the rater's task page: "Task n of N" in constant time ----------------------------------------------------
def task_page_queries(campaign) -> tuple[list[str], str]:
    """The SQL of one task page of a new rater of ``campaign`` (after the accept), and its progress text."""
    worker = engine.invite_workers(1, campaign=campaign)[0]
    client = Client()
    client.get(f"/rate/join/{worker.token}/")
    a = engine.accept(campaign, worker)
    with CaptureQueriesContext(connection) as queries:
        page = client.get(f"/rate/{campaign.name}/task/{a.pk}/").content.decode()
    text = re.search(r'id="task-progress"[^>]*>([^<]*)<', page).group(1)
    return [q["sql"] for q in queries.captured_queries], text


def test_task_n_of_n_reads_a_bounded_number_of_items(dataset, alice):
    small = rating(dataset, alice, name="small")
    large = rating(dataset, alice, name="large", options={"images": 40})
    n_large = large.items.filter(is_gold=False).count()
    assert n_large > rater_views.PROGRESS_LOOKAHEAD + 1
    small_sql, small_text = task_page_queries(small)
    large_sql, large_text = task_page_queries(large)
    assert len(small_sql) == len(large_sql)
    assert small_text == f"Task 1 of {small.items.filter(is_gold=False).count()}"
    # past the look-ahead: a lower bound, said as such, never more than what the rater can do
    assert large_text == f"Task 1 of {1 + rater_views.PROGRESS_LOOKAHEAD}+"
    counting = [q for q in large_sql if "COUNT(*)" in q.upper() and '"crowd_item"' in q]
    assert counting and all(re.search(r"LIMIT \d+", q) for q in counting)
