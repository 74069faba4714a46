"""The rater pages in real headless Chromium, for each of the five task kinds: invitation link,
preview, accept with the mouse, answer with the keyboard (or the mouse), submit, and what the
database then holds; invalid answers, returning a task, a phone-size window, a paused campaign.
Since issue 15 a rater accepts once: each submission (or return) is followed by the next task,
already accepted (tests/test_rater_flow.py tests that flow with the keyboard only)."""
import pytest
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import WebDriverWait

from crowd import engine
from crowd.kinds.description import system_name
from crowd.models import (
    Assignment,
    Campaign,
    Caption,
    Dataset,
    HumanJudgment,
    PairwiseJudgment,
)

from .conftest import run_command, stale

pytestmark = pytest.mark.django_db(transaction=True)

OPTIONS = {
    "rating": {"images": 2},
    "forced_choice": {"images": 3},
    "diversity": {"images": 3},
    "description": {"images": 2},
    "visual_atom": {"atoms": [["dog", "entity"], ["running", "action"], ["red", "attribute"]]},
}
SUCCESS = "Thank you, your answer was saved."


@pytest.fixture
def dataset(subset_dir):
    run_command("import_dataset", "flickr8k-expert", str(subset_dir), "--name", "sub")
    return Dataset.objects.get(name="sub")


# --- helpers ----------------------------------------------------------------------------------------
def wait(driver, timeout=10):
    return WebDriverWait(driver, timeout)


def start(driver, live_server, dataset, kind, *, options=None, state=Campaign.LIVE):
    """A live campaign of ``kind`` (k=1, no gold served) and an invited worker whose browser has
    opened the invitation link. Returns (campaign, worker)."""
    campaign = engine.create_campaign(
        dataset, kind, name=f"c-{kind.replace('_', '-')}", options=options or OPTIONS[kind],
        state=state, gold_every=0, k=1,
    )
    worker = engine.invite_workers(1, campaign=campaign)[0]
    driver.get(f"{live_server.url}/rate/join/{worker.token}/?next=/rate/{campaign.name}/")
    return campaign, worker


def accept_with_mouse(driver, campaign, worker) -> Assignment:
    """On the preview: the inputs can be tried (nothing is recorded); click Accept, wait for the
    task form."""
    wait(driver).until(lambda d: d.find_elements(By.ID, "preview-notice"))
    assert driver.find_element(By.CSS_SELECTOR, ".task").get_attribute("data-kind") == campaign.kind
    fields = driver.find_elements(By.CSS_SELECTOR, "#accept-form fieldset input, #accept-form fieldset textarea")
    assert fields and all(f.is_enabled() for f in fields)
    assert not driver.find_elements(By.ID, "task-form")
    assert not Assignment.objects.filter(campaign=campaign, worker=worker, state=Assignment.ACCEPTED).exists()
    driver.find_element(By.ID, "accept").click()
    wait(driver).until(lambda d: d.find_elements(By.ID, "task-form"))
    assert not driver.find_elements(By.ID, "preview-notice")
    return Assignment.objects.select_related("item").get(campaign=campaign, worker=worker, state=Assignment.ACCEPTED)


def keys(driver, *sequence):
    """Type into whatever has the focus, like a person at the keyboard."""
    ActionChains(driver).send_keys(*sequence).perform()


def active_id(driver):
    return driver.execute_script("return document.activeElement && document.activeElement.id")


def tab_to(driver, element_id, limit=15):
    """Press Tab until the element ``element_id`` has the focus."""
    for _ in range(limit):
        if active_id(driver) == element_id:
            return
        keys(driver, Keys.TAB)
    assert active_id(driver) == element_id, f"Tab never reached #{element_id}"


def click_label(driver, name, value):
    """Click (with the mouse) the label wrapping the radio ``name=value``."""
    radio = driver.find_element(By.CSS_SELECTOR, f'#task-form input[name="{name}"][value="{value}"]')
    label = radio.find_element(By.XPATH, "./ancestor::label")
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", label)
    label.click()
    assert radio.is_selected()


def checked(driver, name):
    return [r.get_attribute("value") for r in driver.find_elements(By.CSS_SELECTOR, f'input[name="{name}"]') if r.is_selected()]


def after_submit(driver, old_form, message=SUCCESS):
    """Wait for the page after a submission (the next task, already accepted, or the no-task
    page); return it as "task" or the no-task reason, having checked the success message."""
    wait(driver).until(stale(old_form))
    wait(driver).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#task-form, #reason"))
    assert not driver.find_elements(By.ID, "preview-notice")  # no extra Accept click per task
    assert [li.text for li in driver.find_elements(By.CSS_SELECTOR, "ul.messages li")] == [message]
    reason = driver.find_elements(By.ID, "reason")
    return reason[0].get_attribute("data-reason") if reason else "task"


def next_task(campaign, worker, previous) -> Assignment:
    """The task the last submission (or return) accepted: another item than ``previous``."""
    b = Assignment.objects.select_related("item").get(campaign=campaign, worker=worker, state=Assignment.ACCEPTED)
    assert b.item_id != previous.item_id
    return b


def response_status(driver):
    return driver.execute_script("return performance.getEntriesByType('navigation')[0].responseStatus")


def no_horizontal_scroll(driver):
    return driver.execute_script("return document.documentElement.scrollWidth <= window.innerWidth + 1")


def assert_submitted(assignment) -> Assignment:
    assignment.refresh_from_db()
    assert assignment.state == Assignment.SUBMITTED and assignment.counted and not assignment.late
    assert assignment.submitted_at is not None and assignment.slot == 0
    return assignment


# --- answering each kind with the keyboard ----------------------------------------------------------------
def fill_rating_keyboard(driver, a):
    keys(driver, "4")  # the first key answers relevance, focus moves on to thoroughness
    assert checked(driver, "relevance") == ["4"] and checked(driver, "thoroughness") == []
    keys(driver, "2")
    assert checked(driver, "relevance") == ["4"] and checked(driver, "thoroughness") == ["2"]
    keys(driver, Keys.ENTER)

    def check(a, campaign, worker):
        assert a.answer == {"relevance": 4, "thoroughness": 2}
        rows = HumanJudgment.objects.filter(campaign=campaign)
        assert {(j.criterion, j.score, j.caption_id, j.rater) for j in rows} == {
            ("relevance", 4.0, a.item.payload["caption"], worker.rater_id),
            ("thoroughness", 2.0, a.item.payload["caption"], worker.rater_id),
        }
    return check


def fill_forced_choice_keyboard(driver, a):
    keys(driver, "c")  # the option labelled C on screen, whichever caption that is
    assert checked(driver, "choice") == ["2"]
    keys(driver, "1")  # changing one's mind: 1 = the option labelled B
    assert checked(driver, "choice") == ["1"]
    keys(driver, "2")
    assert checked(driver, "choice") == ["2"]
    keys(driver, Keys.ENTER)

    def check(a, campaign, worker):
        side = a.order["sides"][1]  # screen position 2 (C) shows this side of the item
        assert a.answer == {"choice": side, "position": 2}
        (pj,) = PairwiseJudgment.objects.filter(campaign=campaign)
        assert (pj.choice, pj.rater, pj.reference_id) == (side, worker.rater_id, a.item.payload["a"][0])
    return check


def fill_visual_atom_keyboard(driver, a):
    keys(driver, "y")
    assert checked(driver, "visual") == ["yes"]
    keys(driver, "n")
    assert checked(driver, "visual") == ["no"]
    keys(driver, Keys.ENTER)

    def check(a, campaign, worker):
        assert a.answer == {"visual": False}
    return check


TYPED = ["0.25", "0.75", "0.5", "0.1"]


def fill_diversity_keyboard(driver, a):
    n = len(a.order["sets"])
    assert n == len(a.item.payload["sets"]) >= 2
    typed = TYPED[:n]
    for pos, value in enumerate(typed):
        tab_to(driver, f"set_{pos}")  # the sliders are skipped: Tab goes from number box to number box
        keys(driver, value)
        slider = driver.find_element(By.CSS_SELECTOR, f'input[type=range][data-for="set_{pos}"]')
        assert float(slider.get_attribute("value")) == float(value)  # the slider follows the box
    keys(driver, Keys.ENTER)

    def check(a, campaign, worker):
        scores = a.answer["scores"]
        for pos, value in enumerate(typed):
            assert scores[a.order["sets"][pos]] == float(value)
        sets = a.item.payload["sets"]
        rows = {(j.system_id, j.score) for j in HumanJudgment.objects.filter(campaign=campaign, criterion="diversity")}
        assert rows == {(s["system"], v) for s, v in zip(sets, scores)}
    return check


DESCRIPTION = "A brown dog runs  across the green grass\nwith a ball in its mouth."


def fill_description_keyboard(driver, a):
    tab_to(driver, "description")
    first, second = DESCRIPTION.split("\n")
    keys(driver, first, Keys.ENTER, second)  # Enter alone starts a new line, it does not submit
    assert driver.find_elements(By.ID, "task-form")
    ActionChains(driver).key_down(Keys.CONTROL).send_keys(Keys.ENTER).key_up(Keys.CONTROL).perform()

    def check(a, campaign, worker):
        text = " ".join(DESCRIPTION.split())
        assert a.answer == {"text": text}
        (caption,) = Caption.objects.filter(system__name=system_name(campaign), system__dataset=campaign.dataset)
        assert (caption.text, caption.key, caption.image_id) == (text, f"assignment-{a.pk}", a.item.payload["image"])
    return check


KEYBOARD = {
    "rating": fill_rating_keyboard,
    "forced_choice": fill_forced_choice_keyboard,
    "visual_atom": fill_visual_atom_keyboard,
    "diversity": fill_diversity_keyboard,
    "description": fill_description_keyboard,
}


@pytest.mark.parametrize("kind", list(KEYBOARD))
def test_answer_with_the_keyboard(browser, live_server, dataset, kind):
    options = {"atoms": [["dog", "entity"]]} if kind == "visual_atom" else None  # one item: then no task is left
    campaign, worker = start(browser, live_server, dataset, kind, options=options)
    if kind in ("rating", "forced_choice", "visual_atom"):
        wait(browser).until(lambda d: d.find_elements(By.ID, "preview-notice"))
        keys(browser, "1", "b", "y")  # the shortcut keys work on a preview, to try them; nothing is recorded
        assert browser.execute_script("return document.querySelectorAll('input:checked').length") >= 1
        assert not Assignment.objects.filter(campaign=campaign).exists()
    a = accept_with_mouse(browser, campaign, worker)
    assert browser.execute_script("return document.querySelectorAll('input:checked').length") == 0
    form = browser.find_element(By.ID, "task-form")
    check = KEYBOARD[kind](browser, a)
    landed = after_submit(browser, form)
    # one visual-atom item: its last judgment completes the campaign, which then finishes itself
    assert landed == ("finished" if kind == "visual_atom" else "task")
    if landed == "finished":
        assert "finished" in browser.find_element(By.ID, "reason").text
        campaign.refresh_from_db()
        assert campaign.state == Campaign.FINISHED
    else:
        next_task(campaign, worker, a)
    a = assert_submitted(a)
    check(a, campaign, worker)
    assert Assignment.objects.filter(campaign=campaign).count() == (1 if landed == "finished" else 2)


# --- answering with the mouse ----------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["rating", "forced_choice", "visual_atom"])
def test_answer_with_the_mouse(browser, live_server, dataset, kind):
    campaign, worker = start(browser, live_server, dataset, kind)
    a = accept_with_mouse(browser, campaign, worker)
    if kind == "rating":
        click_label(browser, "relevance", "5")
        click_label(browser, "thoroughness", "3")
        click_label(browser, "relevance", "2")  # changing one's mind
        expected = {"relevance": 2, "thoroughness": 3}
    elif kind == "forced_choice":
        click_label(browser, "choice", "1")
        expected = {"choice": a.order["sides"][0], "position": 1}
    else:
        click_label(browser, "visual", "yes")
        expected = {"visual": True}
    form = browser.find_element(By.ID, "task-form")
    browser.find_element(By.ID, "submit").click()
    assert after_submit(browser, form) == "task"
    a = assert_submitted(a)
    assert a.answer == expected
    if kind == "rating":
        assert dict(HumanJudgment.objects.filter(campaign=campaign).values_list("criterion", "score")) == {
            "relevance": 2.0, "thoroughness": 3.0,
        }
    # The next task is a different item, accepted by the submission and shown the same way.
    next_task(campaign, worker, a)


# --- invalid answers -------------------------------------------------------------------------------------
# Each case: make a bad answer the browser would let through (HTML5 constraint removed where there
# is one), return the field the server must name and a check that the typed value was kept; then
# ``fix_*`` corrects it on the error page and submits, and returns the answer expected in item order.
def bad_diversity(driver):
    driver.execute_script("document.getElementById('set_0').removeAttribute('max')")
    driver.find_element(By.ID, "set_0").send_keys("1.7")
    for box in driver.find_elements(By.CSS_SELECTOR, "#task-form input[type=number]")[1:]:
        box.send_keys("0.5")
    return "set_0", lambda d: d.find_element(By.ID, "set_0").get_attribute("value") == "1.7"


def fix_diversity(driver, a):
    box = driver.find_element(By.ID, "set_0")
    box.clear()
    box.send_keys("0.9", Keys.ENTER)
    scores = [0.5] * len(a.order["sets"])
    scores[a.order["sets"][0]] = 0.9
    return {"scores": scores}


def bad_description(driver):
    driver.execute_script("document.getElementById('description').removeAttribute('required')")
    driver.find_element(By.ID, "description").send_keys("Nice dog")
    return "description", lambda d: d.find_element(By.ID, "description").get_attribute("value") == "Nice dog"


def fix_description(driver, a):
    box = driver.find_element(By.ID, "description")
    box.send_keys(" sleeping on a red sofa")
    driver.find_element(By.ID, "submit").click()
    return {"text": "Nice dog sleeping on a red sofa"}


def bad_rating(driver):
    driver.execute_script("document.querySelectorAll('#task-form input[required]').forEach(e => e.removeAttribute('required'))")
    click_label(driver, "relevance", "3")  # thoroughness left unanswered
    return "thoroughness", lambda d: True


def fix_rating(driver, a):
    click_label(driver, "relevance", "3")
    click_label(driver, "thoroughness", "4")
    driver.find_element(By.ID, "submit").click()
    return {"relevance": 3, "thoroughness": 4}


@pytest.mark.parametrize("kind,bad,fix", [
    ("diversity", bad_diversity, fix_diversity),
    ("description", bad_description, fix_description),
    ("rating", bad_rating, fix_rating),
])
def test_invalid_answer_shows_error_and_stores_nothing(browser, live_server, dataset, kind, bad, fix):
    campaign, worker = start(browser, live_server, dataset, kind)
    a = accept_with_mouse(browser, campaign, worker)
    field, kept = bad(browser)
    form = browser.find_element(By.ID, "task-form")
    browser.find_element(By.ID, "submit").click()
    wait(browser).until(stale(form))
    error = wait(browser).until(lambda d: d.find_element(By.ID, "form-errors"))
    assert response_status(browser) == 400
    assert field in error.text and error.get_attribute("role") == "alert"
    assert kept(browser)  # what was typed is still there to correct
    assert browser.find_element(By.ID, "submit").is_enabled()
    assert not browser.find_elements(By.CSS_SELECTOR, "ul.messages li")
    a.refresh_from_db()
    assert (a.state, a.answer, a.submitted_at, a.counted, a.slot) == (Assignment.ACCEPTED, None, None, False, 0)
    assert not HumanJudgment.objects.filter(campaign=campaign).exists()
    assert not Caption.objects.filter(system__name=system_name(campaign)).exists()
    # Corrected on the error page, the answer is stored.
    form = browser.find_element(By.ID, "task-form")
    expected = fix(browser, a)
    assert after_submit(browser, form) == "task"
    assert assert_submitted(a).answer == expected


# --- returning a task --------------------------------------------------------------------------------------
def test_return_task_with_a_reason(browser, live_server, dataset):
    campaign, worker = start(browser, live_server, dataset, "forced_choice")
    a = accept_with_mouse(browser, campaign, worker)
    assert not browser.find_element(By.ID, "return-reason").is_displayed()
    browser.find_element(By.CSS_SELECTOR, "#return-box summary").click()
    reason_box = wait(browser).until(EC.visibility_of_element_located((By.ID, "return-reason")))
    reason_box.click()
    reason = "Both B and C are about 2 other dogs, I can't choose 1"
    keys(browser, reason)  # the shortcut keys (b, c, 1, 2) must not leave the text box
    assert reason_box.get_attribute("value") == reason
    assert checked(browser, "choice") == []
    form = browser.find_element(By.ID, "return-form")
    browser.find_element(By.ID, "return").click()
    assert after_submit(browser, form, "The task was returned.") == "task"
    a.refresh_from_db()
    assert (a.state, a.return_reason, a.slot, a.answer) == (Assignment.RETURNED, reason, None, None)
    assert not PairwiseJudgment.objects.filter(campaign=campaign).exists()
    # The returned item is not offered again: the next task, served at once, is another one.
    next_task(campaign, worker, a)


# --- a phone-size window ------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["rating", "diversity"])
def test_phone_size_window(browser, live_server, dataset, kind):
    browser.set_window_size(390, 844)
    campaign, worker = start(browser, live_server, dataset, kind)
    wait(browser).until(lambda d: d.find_elements(By.ID, "preview-notice"))
    assert browser.execute_script("return window.innerWidth") <= 400
    assert no_horizontal_scroll(browser)
    a = accept_with_mouse(browser, campaign, worker)
    assert no_horizontal_scroll(browser)
    browser.find_element(By.CSS_SELECTOR, "#return-box summary").click()
    wait(browser).until(EC.visibility_of_element_located((By.ID, "return-reason")))
    assert no_horizontal_scroll(browser)
    if kind == "rating":
        click_label(browser, "relevance", "1")
        click_label(browser, "thoroughness", "5")
    else:
        for box in browser.find_elements(By.CSS_SELECTOR, "#task-form input[type=number]"):
            browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", box)
            box.click()
            box.send_keys("0.3")
    submit = browser.find_element(By.ID, "submit")
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", submit)
    assert submit.is_displayed() and submit.size["width"] >= 44 and submit.size["height"] >= 30
    rect = browser.execute_script("const r = arguments[0].getBoundingClientRect(); return [r.left, r.right]", submit)
    assert 0 <= rect[0] and rect[1] <= browser.execute_script("return window.innerWidth")
    wait(browser).until(EC.element_to_be_clickable(submit)).click()
    assert after_submit(browser, submit) == "task"
    assert no_horizontal_scroll(browser)
    a = assert_submitted(a)
    if kind == "rating":
        assert a.answer == {"relevance": 1, "thoroughness": 5}
    else:
        assert a.answer["scores"] == [0.3] * len(a.order["sets"])


# --- no task ---------------------------------------------------------------------------------------------
def test_paused_campaign_says_so(browser, live_server, dataset):
    campaign = engine.create_campaign(dataset, "rating", name="paused", options=OPTIONS["rating"],
                                      state=Campaign.LIVE, gold_every=0, k=1)
    engine.set_state(campaign, Campaign.PAUSED)
    worker = engine.invite_workers(1, campaign=campaign)[0]
    browser.get(f"{live_server.url}/rate/join/{worker.token}/?next=/rate/{campaign.name}/")
    reason = wait(browser).until(lambda d: d.find_element(By.ID, "reason"))
    assert reason.get_attribute("data-reason") == "paused"
    assert "paused" in reason.text and "come back later" in reason.text
    assert not browser.find_elements(By.ID, "accept")
    assert not Assignment.objects.filter(campaign=campaign).exists()
