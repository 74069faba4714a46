"""Issue 15, the rater's flow (PostgreSQL; headless Chromium where a browser matters):

* accept once: after the first Accept the next task follows every submission by itself, done here
  with the keyboard only (digit keys choose, Enter accepts and submits), "Task n of N" counting up,
  the time left in words; the engine's records stay exact (one assignment per task, all counted);
* at 390 px the 1-5 scale is one row (same offsetTop) and the page does not scroll sideways;
* speed checks: a rater answering far under the campaign's floor is warned (and sees what happened
  and what happens next) and then blocked, by the real engine; an honest pace stays ok;
  ``speed_stats`` flags them for the owner page; a gold warning is explained too.
"""
import re
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait

from crowd import audit, engine, quality
from crowd.kinds import CampaignSpecError
from crowd.models import Assignment, Campaign, Dataset, HumanJudgment, Item, WorkerStatus
from crowd.views.rater import friendly_duration, progress

from .conftest import run_command, stale

TASK = re.compile(r"/rate/[-\w]+/task/(\d+)/$")


@pytest.fixture
def dataset(subset_dir):
    run_command("import_dataset", "flickr8k-expert", str(subset_dir), "--name", "sub")
    return Dataset.objects.get(name="sub")


def rating_campaign(dataset, name, image_base, **kw):
    """A live rating campaign (pictures from ``image_base``/<key>), no gold unless asked, k = 1."""
    kw.setdefault("gold_every", 0)
    kw.setdefault("k", 1)
    options = {"images": 2, "image_url": image_base + "/{key}", **kw.pop("options", {})}
    return engine.create_campaign(dataset, "rating", name=name, options=options, state=Campaign.LIVE, **kw)


def keys(driver, *sequence):
    ActionChains(driver).send_keys(*sequence).perform()


def wait(driver, timeout=10):
    return WebDriverWait(driver, timeout)


def scale_row(driver, field):
    """offsetTop of each button of the scale ``field``, and whether the page scrolls sideways."""
    return driver.execute_script(
        "return [Array.from(document.querySelectorAll('input[name=' + arguments[0] + ']'))"
        ".map(i => i.closest('label').offsetTop),"
        " document.documentElement.scrollWidth <= window.innerWidth]", field)


@pytest.mark.django_db(transaction=True)
def test_keyboard_only_flow_task_n_of_n_and_phone_layout(browser, live_server, dataset):
    campaign = rating_campaign(dataset, "flow", f"{live_server.url}/static/none", assignment_seconds=600)
    items = Item.objects.filter(campaign=campaign, is_gold=False).count()
    assert items >= 4
    worker = engine.invite_workers(1, campaign=campaign)[0]
    browser.get(f"{live_server.url}/rate/join/{worker.token}/?next=/rate/{campaign.name}/")
    wait(browser).until(lambda d: d.find_elements(By.ID, "preview-notice"))
    assert browser.find_element(By.ID, "task-progress").text == f"Task 1 of {items}"
    assert "Enter" in browser.find_element(By.ID, "key-hint").text
    # the keys work on the preview (to try them) and record nothing
    keys(browser, "3")
    assert browser.execute_script("return document.querySelector('input[name=relevance]:checked').value") == "3"
    assert not Assignment.objects.filter(campaign=campaign).exists()
    form = browser.find_element(By.ID, "accept-form")
    keys(browser, Keys.ENTER)  # Enter accepts: the one and only accept of this session
    wait(browser).until(stale(form))
    seen = []
    for n in range(1, 4):
        form = wait(browser).until(lambda d: d.find_element(By.ID, "task-form"))
        assert browser.find_element(By.ID, "task-progress").text == f"Task {n} of {items}"
        time_left = browser.find_element(By.ID, "time-left").text
        assert re.fullmatch(r"(10 min|9 min( \d{1,2} s)?) left", time_left), time_left
        assert not browser.find_elements(By.ID, "accept")
        current = Assignment.objects.get(campaign=campaign, worker=worker, state=Assignment.ACCEPTED)
        seen.append(current.item_id)
        if n == 2:  # a phone: the scale on one row, no sideways scrolling, then on with the keys
            browser.set_window_size(390, 844)
            browser.refresh()
            form = wait(browser).until(lambda d: d.find_element(By.ID, "task-form"))
            assert browser.execute_script("return window.innerWidth") <= 400
            for field in ("relevance", "thoroughness"):
                tops, no_scroll = scale_row(browser, field)
                assert len(tops) == 5 and len(set(tops)) == 1, tops
                assert no_scroll
        keys(browser, str(n + 1), "2", Keys.ENTER)  # relevance, thoroughness, submit
        wait(browser).until(stale(form))
        current.refresh_from_db()
        assert current.state == Assignment.SUBMITTED and current.counted
        assert current.answer == {"relevance": n + 1, "thoroughness": 2}
        messages = [li.text for li in browser.find_elements(By.CSS_SELECTOR, "ul.messages li")]
        assert messages == ["Thank you, your answer was saved."]
    # the 4th task is already there, accepted by the last submission: no Accept click at all
    wait(browser).until(lambda d: d.find_element(By.ID, "task-form"))
    assert browser.find_element(By.ID, "task-progress").text == f"Task 4 of {items}"
    tops, no_scroll = scale_row(browser, "relevance")
    assert len(set(tops)) == 1 and no_scroll
    mine = Assignment.objects.filter(campaign=campaign, worker=worker)
    assert mine.count() == 4 and mine.filter(state=Assignment.ACCEPTED).count() == 1
    assert len(set(seen)) == 3 and mine.filter(state=Assignment.SUBMITTED, counted=True).count() == 3
    assert HumanJudgment.objects.filter(campaign=campaign, rater=worker.rater_id).count() == 2 * 3
    # "Submit and stop" stores the answer and accepts nothing more
    keys(browser, "5", "5")
    form = browser.find_element(By.ID, "task-form")
    browser.find_element(By.ID, "submit-stop").click()
    wait(browser).until(stale(form))
    wait(browser).until(lambda d: d.find_elements(By.ID, "preview-notice"))
    assert browser.find_element(By.ID, "task-progress").text == f"Task 5 of {items}"
    assert not mine.filter(state=Assignment.ACCEPTED).exists() and mine.count() == 4
    assert browser.execute_script("return document.documentElement.scrollWidth <= window.innerWidth")


def test_friendly_duration():
    assert [friendly_duration(s) for s in (599, 600, 45, 60, 3720, 3600, 0, -5, 61.9)] == [
        "9 min 59 s", "10 min", "45 s", "1 min", "1 h 2 min", "1 h", "0 s", "0 s", "1 min 1 s"]


def submit(client, a, *, seconds=None, relevance="4", stop=False):
    """Answer assignment ``a`` through the rater page, ``seconds`` after its acceptance (None: now,
    at machine speed); the task the response went on to (or None) and the response."""
    if seconds is not None:
        Assignment.objects.filter(pk=a.pk).update(accepted_at=timezone.now() - timedelta(seconds=seconds))
    data = {"relevance": relevance, "thoroughness": "3", "item": a.item_id}
    if stop:
        data["then"] = "stop"
    r = client.post(f"/rate/{a.campaign.name}/task/{a.pk}/submit/", data)
    assert r.status_code == 302
    m = TASK.search(r["Location"])
    return (Assignment.objects.select_related("item", "campaign").get(pk=int(m.group(1))) if m else None), r


def joined(campaign):
    worker = engine.invite_workers(1, campaign=campaign)[0]
    client = Client()
    assert client.get(f"/rate/join/{worker.token}/").status_code == 302
    r = client.post(f"/rate/{campaign.name}/accept/")
    a = Assignment.objects.select_related("item", "campaign").get(pk=int(TASK.search(r["Location"]).group(1)))
    return worker, client, a


@pytest.mark.django_db
def test_speed_check_warns_then_blocks_a_too_fast_rater(dataset, settings):
    settings.CROWD_MIN_SECONDS_PER_TASK = quality.DEFAULT_MIN_SECONDS_PER_TASK  # the production default
    floor = quality.DEFAULT_MIN_SECONDS_PER_TASK
    campaign = rating_campaign(dataset, "speedy", "https://images.example.org", k=2, options={"images": 3})
    assert quality.min_seconds_per_task(campaign) == floor
    fast, client, a = joined(campaign)
    honest, client2, b = joined(campaign)
    states = []
    for i in range(2):  # two tasks at a human pace
        a, _ = submit(client, a, seconds=floor * 3)
        states.append(engine.worker_state(campaign, fast))
    for i in range(quality.SPEED_BLOCK_AT):  # then far too fast (machine speed, ~0.05 s; 0.2 s here)
        a, r = submit(client, a, seconds=0.2)
        states.append(engine.worker_state(campaign, fast))
        if states[-1] == WorkerStatus.WARNED and states[-2] == WorkerStatus.OK:
            # the warning: what happened and what happens next, on the next task's page
            page = client.get(r["Location"]).content.decode()
            warning = re.search(r'<div class="quality-warning"[^>]*id="quality-warning">(.*?)</div>', page, re.S)
            assert warning, page[:2000]
            text = warning.group(1)
            assert f"{quality.SPEED_WARN_AT} of your last {2 + quality.SPEED_WARN_AT} answers" in text
            assert f"less than {floor:g} seconds" in text and "blocked" in text and "no longer count" in text
            assert honest_page_has_no_warning(client2, b)
    ok, warned, blocked = WorkerStatus.OK, WorkerStatus.WARNED, WorkerStatus.BLOCKED
    assert states == [ok] * (2 + quality.SPEED_WARN_AT - 1) + [warned] * (
        quality.SPEED_BLOCK_AT - quality.SPEED_WARN_AT) + [blocked]
    assert a is None  # blocked: no next task
    status = WorkerStatus.objects.get(campaign=campaign, worker=fast)
    assert status.reason.startswith(f"speed: {quality.SPEED_BLOCK_AT} of the last")
    # the block released their counted work; the page says why there is no task
    assert not Assignment.objects.filter(campaign=campaign, worker=fast, counted=True).exists()
    assert not HumanJudgment.objects.filter(campaign=campaign, rater=fast.rater_id).exists()
    page = client.get(f"/rate/{campaign.name}/").content.decode()
    assert 'data-reason="blocked"' in page and "too fast" in page and "no longer count" in page
    # an owner unblocks them: the speed check starts afresh (the old fast answers no longer count)
    audit.override_worker(campaign, fast, "unblock", User.objects.create_user("owner"), "talked to them")
    r = client.post(f"/rate/{campaign.name}/accept/")
    a = Assignment.objects.select_related("item", "campaign").get(pk=int(TASK.search(r["Location"]).group(1)))
    for seconds in (0.2, floor * 3, 0.2):
        a, _ = submit(client, a, seconds=seconds)
        assert engine.worker_state(campaign, fast) == WorkerStatus.OK
    assert quality.speed_check(campaign, fast)["too_fast"] == 2
    # an honest pace stays ok, and the owner's figures tell them apart
    for i in range(quality.SPEED_BLOCK_AT + 1):
        b, _ = submit(client2, b, seconds=floor + 1.5)
    assert engine.worker_state(campaign, honest) == WorkerStatus.OK
    stats = quality.speed_stats(campaign)
    assert stats[fast.rater_id]["flag"] == "block" and stats[honest.rater_id]["flag"] == "ok"
    assert stats[fast.rater_id]["median_seconds"] < floor < stats[honest.rater_id]["median_seconds"]
    assert stats[honest.rater_id]["too_fast"] == 0
    assert stats[fast.rater_id]["too_fast"] == quality.SPEED_BLOCK_AT + 2
    rows = {r["worker"]: r for r in quality.worker_stats(campaign)}
    assert rows[fast.rater_id]["speed_flag"] == "block" and rows[honest.rater_id]["speed_flag"] == "ok"


def honest_page_has_no_warning(client, a):
    page = client.get(f"/rate/{a.campaign.name}/task/{a.pk}/").content.decode()
    return 'id="task-form"' in page and 'id="quality-warning"' not in page


@pytest.mark.django_db
def test_speed_option_per_campaign(dataset, settings):
    settings.CROWD_MIN_SECONDS_PER_TASK = quality.DEFAULT_MIN_SECONDS_PER_TASK
    off = rating_campaign(dataset, "no-speed", "https://images.example.org", options={"min_seconds_per_task": 0})
    assert quality.min_seconds_per_task(off) == 0
    worker, client, a = joined(off)
    for _ in range(quality.SPEED_BLOCK_AT + 1):
        a, _ = submit(client, a, seconds=0.1)
    assert engine.worker_state(off, worker) == WorkerStatus.OK
    slow = rating_campaign(dataset, "slow", "https://images.example.org", options={"min_seconds_per_task": "30"})
    assert quality.min_seconds_per_task(slow) == 30.0 and slow.options["min_seconds_per_task"] == 30.0
    worker, client, a = joined(slow)
    for _ in range(quality.SPEED_WARN_AT):
        a, _ = submit(client, a, seconds=20)  # under this campaign's floor
    assert engine.worker_state(slow, worker) == WorkerStatus.WARNED
    for bad in ("-1", "fast", float("nan"), 10_000, [2]):
        with pytest.raises(CampaignSpecError, match="min_seconds_per_task"):
            rating_campaign(dataset, "bad-speed", "https://images.example.org", options={"min_seconds_per_task": bad})
        assert not Campaign.objects.filter(name="bad-speed").exists()


@pytest.mark.django_db
def test_task_n_of_n_is_what_the_rater_gets_and_a_gold_warning_comes_before_a_block(dataset):
    campaign = rating_campaign(dataset, "gold", "https://images.example.org", gold_every=3, k=2,
                               options={"images": 3, "gold": 4})
    # an honest rater alone: N, said on the first task, is the number of tasks they then get
    worker, client, a = joined(campaign)
    n, total = progress(campaign, worker, a.item, a)
    assert n == 1
    shown = []
    while a is not None:
        page = client.get(f"/rate/{campaign.name}/task/{a.pk}/").content.decode()
        shown.append(re.search(r'id="task-progress"[^>]*>Task (\d+) of (\d+)<', page).groups())
        a, _ = submit(client, a, seconds=10, relevance="1")  # relevance 1: the gold answer
    assert len(shown) == total and [int(s[0]) for s in shown] == list(range(1, total + 1))
    assert all(int(s[1]) == total for s in shown)
    assert Assignment.objects.filter(campaign=campaign, worker=worker, item__is_gold=True).count() >= 3
    # another rater gets 2 of 3 check questions right: 67% < 80% warns (50% would block), and the
    # task page says what happened and what happens next
    other, client2, a = joined(campaign)
    golds = 0
    while engine.worker_state(campaign, other) == WorkerStatus.OK:
        assert a is not None
        golds += a.item.is_gold
        right = not a.item.is_gold or golds <= 2
        a, r = submit(client2, a, seconds=10, relevance="1" if right else "5")
    assert engine.worker_state(campaign, other) == WorkerStatus.WARNED and golds == 3
    page = client2.get(r["Location"]).content.decode()
    assert "You answered 2 of 3 check questions" in page and "fewer than 50%" in page and "blocked" in page


@pytest.mark.django_db
def test_a_task_held_when_the_campaign_finishes_is_not_served_again(dataset):
    """A rater who holds a task when the campaign finishes (its owner's Finish, or the last item
    completed by others) is told the campaign has finished: never sent back to a task page that can
    no longer take the answer (which sent the simulated raters round in a loop)."""
    campaign = rating_campaign(dataset, "held", "https://img.example.org")
    holder, holder_client, held = joined(campaign)
    other, other_client, first = joined(campaign)
    assert held.pk != first.pk
    assert holder_client.get(f"/rate/{campaign.name}/")["Location"].endswith(f"/task/{held.pk}/")
    engine.set_state(campaign, Campaign.FINISHED)
    page = holder_client.get(f"/rate/{campaign.name}/")
    assert page.status_code == 200
    assert 'data-reason="finished"' in page.content.decode()
    held.refresh_from_db()
    assert held.state == Assignment.ACCEPTED and held.answer is None  # nothing recorded for it
