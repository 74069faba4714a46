"""A Prolific study end to end in real headless Chromium, against the fake Prolific server
(tests/fake_prolific/, a real HTTP server on the loopback; no network, no account).

A rating campaign over the bundled Flickr8k-Expert data (a bundle of 3 tasks with one attention
check, a consent text, two practice items that must both be right) gets its study created and
published on the fake Prolific. Two participants the fake started submissions for open the study
link as Prolific builds it (the three identity placeholders filled in): A fails the practice and is
sent back to Prolific with the screened-out code; B consents, passes the practice, does the bundle
(the attention check answered as instructed) and lands on the completion URL with the COMPLETED
code. Then Prolific records B's code, our sync marks the submissions, the review rules approve B in
bulk, and a bonus for B is paid exactly once although the pay call times out and is retried."""
import re
from urllib.parse import parse_qs, urlsplit

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from crowd import journey
from crowd.models import (
    Assignment,
    HumanJudgment,
    Item,
    ParticipantSession,
    PracticeAnswer,
    ProlificBonus,
    ProlificCall,
    ProlificSubmission,
    WorkerStatus,
)
from crowd.prolific import bonuses, review
from crowd.prolific.sync import sync_study
from tests.fake_prolific import fake_prolific  # noqa: F401

from .conftest import stale
from .test_prolific_outcomes import CONSENT, dataset, new_pid, prolific_campaign, start_url  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)
PLACEHOLDERS = {"{{%PROLIFIC_PID%}}": "PROLIFIC_PID", "{{%STUDY_ID%}}": "STUDY_ID", "{{%SESSION_ID%}}": "SESSION_ID"}


def wait(driver, timeout=10):
    return WebDriverWait(driver, timeout)


def study_link(fake, study, sub) -> str:
    """The study link Prolific sends the participant of submission ``sub`` to: the study's
    ``external_study_url`` with its identity placeholders filled in."""
    url = fake.studies[study.study_id]["external_study_url"]
    values = {"PROLIFIC_PID": sub["participant_id"], "STUDY_ID": study.study_id, "SESSION_ID": sub["id"]}
    for placeholder, name in PLACEHOLDERS.items():
        assert url.count(placeholder) == 1, (placeholder, url)
        url = url.replace(placeholder, values[name])
    return url


def click(driver, element_id):
    """Click the button or link ``element_id`` and wait for the next page."""
    element = wait(driver).until(lambda d: d.find_element(By.ID, element_id))
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", element)
    element.click()
    wait(driver).until(stale(element))


def click_label(driver, name, value):
    radio = driver.find_element(By.CSS_SELECTOR, f'#task-form input[name="{name}"][value="{value}"]')
    label = radio.find_element(By.XPATH, "./ancestor::label")
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", label)
    label.click()
    assert radio.is_selected()


def answer_form(driver, relevance, thoroughness):
    """Choose the two ratings of the rating form with the mouse and submit it."""
    wait(driver).until(lambda d: d.find_elements(By.ID, "task-form"))
    click_label(driver, "relevance", relevance)
    click_label(driver, "thoroughness", thoroughness)
    click(driver, "submit")


def stage(driver):
    current = driver.find_elements(By.CSS_SELECTOR, "#steps li[aria-current=step]")
    return current[0].get_attribute("data-stage") if current else None


def consent_and_read(driver, live_server, link):
    """Open the study link in a fresh browser (no cookies), agree to the consent, read the
    instructions; the browser is then on the first practice item."""
    driver.delete_all_cookies()
    driver.get(link)
    wait(driver).until(lambda d: d.find_elements(By.ID, "consent-text"))
    assert driver.current_url == live_server.url + "/session/pro-journey/"
    assert CONSENT in driver.find_element(By.ID, "consent-text").text and stage(driver) == "consent"
    click(driver, "agree")
    wait(driver).until(lambda d: d.find_elements(By.ID, "instructions-text"))
    assert stage(driver) == "instructions"
    assert "3 tasks" in driver.find_element(By.ID, "session-facts").text
    click(driver, "continue")
    wait(driver).until(lambda d: d.find_elements(By.ID, "practice-progress"))
    assert stage(driver) == "practice"


def practise(driver, answers):
    """Answer the practice items (relevance values, one per item; the expected one is 1), checking
    the feedback after each; returns the last feedback's ``practice-result`` data-passed."""
    for n, relevance in enumerate(answers, 1):
        progress = driver.find_element(By.ID, "practice-progress")
        assert progress.text == f"Practice {n} of {len(answers)}"
        answer_form(driver, relevance, "2")
        feedback = wait(driver).until(lambda d: d.find_element(By.ID, "feedback"))
        assert feedback.get_attribute("data-correct") == ("true" if relevance == "1" else "false")
        assert "Relevance: 1" in driver.find_element(By.ID, "expected").text
        result = driver.find_elements(By.ID, "practice-result")
        if n < len(answers):
            assert not result
            click(driver, "continue")
            wait(driver).until(lambda d: d.find_elements(By.ID, "practice-progress"))
    return result[0].get_attribute("data-passed")


def lands_on_completion_url(driver, code, *, click_link=False):
    """The completion page shows ``code`` and its link to Prolific's completion URL with
    ``?cc=code``; the browser gets there by the link (``click_link``) or automatically after a few
    seconds."""
    wait(driver).until(lambda d: d.find_elements(By.ID, "completion-link"))
    target = f"{settings.PROLIFIC_COMPLETE_URL}?cc={code}"
    assert driver.find_element(By.ID, "completion-code").text == code
    assert driver.find_element(By.ID, "completion-link").get_attribute("href") == target
    if click_link:
        driver.find_element(By.ID, "completion-link").click()
    wait(driver, 15).until(lambda d: d.current_url == target)
    return parse_qs(urlsplit(driver.current_url).query)["cc"][0]  # what Prolific reads


def test_a_prolific_study_from_arrival_to_a_bonus_paid_once(browser, live_server, fake_prolific, dataset, settings,
                                                              monkeypatch):
    from crowd.views import journey as journey_pages

    monkeypatch.setattr(journey_pages, "REDIRECT_SECONDS", 1)  # the completion page's automatic redirect
    # Prolific's completion URL: a page of our live server stands in (the browser cannot reach
    # Prolific); only its final address matters
    settings.PROLIFIC_COMPLETE_URL = live_server.url + "/prolific-complete/"
    campaign, study, api = prolific_campaign(
        dataset, "pro-journey", site_url=live_server.url, images=2, k=2, gold=1, gold_every=3, bundle=3,
        consent=CONSENT, practice=2, practice_pass=1.0)
    codes = study.completion_codes
    remote = fake_prolific.studies[study.study_id]
    assert remote["status"] == "ACTIVE" and remote["reward"] == 150
    assert {c["code"] for c in remote["completion_codes"]} == set(codes.values())
    # places: items x k judgments, 2 counted per bundle of 3 (one task is the attention check)
    n_items = Item.objects.filter(campaign=campaign, is_gold=False).count()
    assert n_items >= 4 and remote["total_available_places"] == study.places == n_items  # x k=2, / 2 per bundle

    sub_a = fake_prolific.start_submission(study.study_id, participant_id=new_pid())
    sub_b = fake_prolific.start_submission(study.study_id, participant_id=new_pid())
    link_a, link_b = study_link(fake_prolific, study, sub_a), study_link(fake_prolific, study, sub_b)
    assert link_a.startswith(live_server.url + start_url(campaign) + "?")

    # --- participant A consents, gets the first practice item wrong: screened out ---------------------
    consent_and_read(browser, live_server, link_a)
    assert practise(browser, ["5", "1"]) == "false"
    session_a = ParticipantSession.objects.get(campaign=campaign, provider_ref=sub_a["id"])
    assert session_a.outcome == ParticipantSession.SCREENED_OUT and session_a.consent_version == 1
    click(browser, "continue")
    assert browser.find_element(By.ID, "outcome").get_attribute("data-outcome") == ParticipantSession.SCREENED_OUT
    code_a = lands_on_completion_url(browser, codes["screened_out"], click_link=True)
    assert not Assignment.objects.filter(campaign=campaign).exists()

    # --- participant B: consent, practice passed, the bundle with its attention check ----------------
    consent_and_read(browser, live_server, link_b)
    assert practise(browser, ["1", "1"]) == "true"
    click(browser, "continue")
    session_b = ParticipantSession.objects.get(campaign=campaign, provider_ref=sub_b["id"])
    worker_b = session_b.worker
    assert worker_b.external_id == sub_b["participant_id"] and worker_b != session_a.worker
    assert WorkerStatus.objects.get(campaign=campaign, worker=worker_b).practice_passed_at is not None
    served = []
    for n in (1, 2, 3):
        wait(browser).until(lambda d: d.find_elements(By.ID, "task-progress"))
        assert browser.find_element(By.ID, "task-progress").text == f"Task {n} of 3"
        assert re.fullmatch(r"\d+ min( \d{1,2} s)? left|\d{1,2} s left", browser.find_element(By.ID, "time-left").text)
        a = Assignment.objects.select_related("item").get(session=session_b, state=Assignment.ACCEPTED)
        assert browser.current_url == f"{live_server.url}/session/{campaign.name}/task/{a.pk}/"
        assert browser.find_element(By.ID, "caption").text == a.item.payload["text"]
        served.append(a)
        # the attention check (a caption of another image): relevance 1, as the instructions ask
        answer_form(browser, "1" if a.item.is_gold else "4", "1" if a.item.is_gold else "3")
    assert [a.item.is_gold for a in served] == [True, False, False]  # one attention check, first
    assert browser.find_element(By.ID, "outcome").get_attribute("data-outcome") == ParticipantSession.COMPLETED
    assert browser.find_element(By.ID, "tasks-done").text == "You did 3 tasks."
    code_b = lands_on_completion_url(browser, codes["completed"])

    session_b.refresh_from_db()
    assert (session_b.outcome, session_b.tasks_done, session_b.attention_failures) == (ParticipantSession.COMPLETED, 3, 0)
    assert session_b.completion_code == codes["completed"] and session_b.consent_version == 1
    assert sorted(PracticeAnswer.objects.filter(session=session_b).values_list("correct", flat=True)) == [True, True]
    for a in served:
        a.refresh_from_db()
        assert a.state == Assignment.SUBMITTED and a.work_seconds > 0 and a.order is not None
        assert a.counted == (not a.item.is_gold) and a.gold_correct == (True if a.item.is_gold else None)
    assert HumanJudgment.objects.filter(campaign=campaign, rater=worker_b.rater_id).count() == 2 * 2

    # the owner sees both participants: outcome, practice, code, and B's tasks with time and order
    owner = User.objects.create_user("owner-journey")
    campaign.owners.add(owner)
    client = Client()
    client.force_login(owner)
    page = client.get(reverse("crowd:campaign-participants", args=[campaign.name]))
    assert page.status_code == 200
    rows = {r["provider_ref"]: r for r in journey.participants(campaign)}
    assert (rows[sub_a["id"]]["outcome"], rows[sub_a["id"]]["practice"], rows[sub_a["id"]]["tasks"]) == (
        ParticipantSession.SCREENED_OUT, "1/2", [])
    tasks_b = rows[sub_b["id"]]["tasks"]
    assert [t["key"] for t in tasks_b] == [a.item.key for a in served]
    assert all(t["seconds"] > 0 and t["order"] == a.order for t, a in zip(tasks_b, served))
    html = page.content.decode()
    for code in (codes["screened_out"], codes["completed"]):
        assert code in html
    assert html.count('class="participant"') == 2 and "passed" in html

    # --- Prolific records the codes; the sync marks our records -------------------------------------
    fake_prolific.complete(sub_b["id"], code_b)
    fake_prolific.complete(sub_a["id"], code_a)
    sync_study(study, api)
    record_b = ProlificSubmission.objects.get(submission_id=sub_b["id"])
    assert (record_b.status, record_b.study_code, record_b.session_id) == ("AWAITING REVIEW", codes["completed"], session_b.pk)
    record_a = ProlificSubmission.objects.get(submission_id=sub_a["id"])
    assert record_a.session_id == session_a.pk and record_a.study_code == codes["screened_out"]

    # --- bulk approval by the rules approves B --------------------------------------------------------
    verdicts = review.rule_verdicts(study, min_gold_accuracy=1.0, min_seconds=0)
    assert [(v.submission.submission_id, v.action) for v in verdicts] == [(sub_b["id"], "APPROVE")]
    result = review.bulk_review(study, api, verdicts)
    assert result["approved"] == [sub_b["id"]] and not result["rejected"] and not result["failed"]
    sync_study(study, api)
    record_b.refresh_from_db()
    assert fake_prolific.submissions[sub_b["id"]]["status"] == "APPROVED"
    assert (record_b.status, record_b.review_action) == ("APPROVED", "APPROVE")

    # --- a bonus for B, paid exactly once although the pay call times out and is retried -------------
    bonus = bonuses.create_bonus(study, api, f"{sub_b['participant_id']},0.50", reason="journey bonus")
    assert bonus.state == ProlificBonus.CREATED and bonus.bonus_id in fake_prolific.bonuses
    assert bonuses.create_bonus(study, api, f"{sub_b['participant_id']},0.50").pk == bonus.pk  # a double click
    assert len(fake_prolific.bonuses) == 1
    fake_prolific.timeout_next("POST", r"bulk-bonus-payments/.+/pay/", apply=True)
    with pytest.raises(bonuses.BonusError, match="no answer"):
        bonuses.pay(bonus, api)
    bonus.refresh_from_db()
    assert bonus.state == ProlificBonus.PAYING
    assert fake_prolific.pay_calls == [bonus.bonus_id]  # Prolific did pay; we do not know it yet
    bonus = bonuses.pay(bonus, api)  # the retry reads Prolific's state first
    assert bonus.state == ProlificBonus.PAID
    bonuses.pay(bonus, api)  # and a third attempt is a no-op
    assert fake_prolific.pay_calls == [bonus.bonus_id]
    assert len([c for c in fake_prolific.calls if c[0] == "POST" and c[1].endswith("/pay/")]) == 1  # sent once

    # every call was logged, and the token is in none of the records
    calls = list(ProlificCall.objects.values_list("method", "path", "body", "error"))
    assert len(calls) >= 10 and any(path.endswith("/pay/") for _, path, _, _ in calls)
    assert not any(fake_prolific.token in str(row) for row in calls)
