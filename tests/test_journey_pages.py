"""Issue 17, the participant journey's pages (crowd.views.journey), PostgreSQL; Prolific's side is the
fake Prolific server on loopback (tests/fake_prolific):

* a local rater is handed over from /rate/<campaign>/ to the journey: consent (versioned; declining
  ends the session with no_consent; agreeing to an outdated version is 409), instructions, practice
  with feedback (right/wrong and the expected answer; failing ends the session screened out),
  the bundle ("Task 2 of 3", the time budget in words), an invalid answer (400), a repeated submit
  (nothing new), the completion page (a thank-you, no code);
* a participant only reaches their own session: another participant's task and another
  campaign's session key answer 404;
* Prolific arrival: malformed or missing parameters 400, another study 403, a session Prolific does
  not know 403, Prolific unreachable 503 with Retry-After, a second concurrent session 409, a
  reload the same session, the completion page redirects to Prolific with the outcome's code (and
  no code: "return the study");
* the owner's participants page (owners only, 404 for others; CSV);
* one headless Chromium journey of a local rater: consent -> instructions -> practice -> bundle ->
  completion page, with screenshots at 1400 and 390 px when H2_SHOTS is set.
"""
import os
import re

import pytest
from django.contrib.auth.models import User
from django.test import Client
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from crowd import engine, journey
from crowd.models import Assignment, Campaign, Dataset, ParticipantSession, ProlificStudy, Worker
from tests.fake_prolific import fake_prolific  # noqa: F401

from .conftest import run_command, stale, write_subset

pytestmark = pytest.mark.django_db

STUDY = "a1" * 12  # a Prolific study id (24 hex)
CODES = {"completed": "C0MPL3TE", "failed_attention": "ATTN0FAIL", "no_consent": "N0C0NSENT",
         "screened_out": "SCR33N0UT"}
CONSENT = "You agree that your ratings are used for research.\n\nYou can stop at any time."
TASK = re.compile(r"/session/[-\w]+/task/(\d+)/$")


@pytest.fixture
def dataset(tmp_path):
    """A small Flickr8k-Expert subset (8 judged images): enough for 3 items and the practice."""
    run_command("import_dataset", "flickr8k-expert", str(write_subset(tmp_path / "subset", 8)), "--name", "sub")
    return Dataset.objects.get(name="sub")


def campaign_of(dataset, name, *, provider=Campaign.LOCAL, bundle=3, consent=CONSENT, practice=0, **kw):
    """A live rating campaign (k=1, no gold among the tasks) with a journey."""
    kw.setdefault("practice_pass", 0.5)
    return engine.create_campaign(
        dataset, "rating", name=name, k=1, gold_every=0, state=Campaign.LIVE, provider=provider,
        options={"images": 3, "gold": 0}, bundle_size=bundle, consent_text=consent, practice=practice, **kw)


def rater(campaign) -> tuple[Client, object]:
    """A local rater of ``campaign`` logged in through their invitation link."""
    worker = engine.invite_workers(1, campaign=campaign)[0]
    client = Client()
    assert client.get(f"/rate/join/{worker.token}/").status_code == 302
    return client, worker


def start(client, campaign):
    """/rate/<campaign>/ hands over to the journey: the stage page."""
    response = client.get(f"/rate/{campaign.name}/")
    assert response.status_code == 302 and response.url == f"/session/{campaign.name}/"
    return client.get(response.url)


def agree(client, campaign, version=None):
    return client.post(f"/session/{campaign.name}/consent/",
                       {"agree": "1", "version": version or campaign.consent_version})


def to_tasks(client, campaign):
    """Consent (if any) and instructions: the first task's URL."""
    if campaign.consent_text:
        assert agree(client, campaign).status_code == 302
    response = client.post(f"/session/{campaign.name}/instructions/")
    assert response.status_code == 302
    response = client.get(response.url)
    assert response.status_code == 302 and TASK.search(response.url), response
    return response.url


def answer(client, url, relevance=3, thoroughness=4, key=None):
    page = client.get(url)
    assert page.status_code == 200
    pk = TASK.search(url).group(1)
    a = Assignment.objects.get(pk=pk)
    return client.post(url + "submit/", {"item": a.item_id, "submit_key": key or f"k{pk}",
                                         "relevance": relevance, "thoroughness": thoroughness})


# --- local raters ------------------------------------------------------------------------------
def test_local_rater_is_handed_to_consent_with_its_version(dataset):
    campaign = campaign_of(dataset, "j-consent")
    client, worker = rater(campaign)
    page = start(client, campaign)
    assert page.status_code == 200
    text = page.content.decode()
    assert "You agree that your ratings are used for research." in text
    assert 'name="version" value="1"' in text and 'aria-current="step">Consent' in text
    session = ParticipantSession.objects.get(campaign=campaign, worker=worker)
    assert session.stage == ParticipantSession.CONSENT and session.provider == Campaign.LOCAL
    # the old accept button cannot skip the consent: no task outside the session
    assert client.post(f"/rate/{campaign.name}/accept/").url == f"/rate/{campaign.name}/"
    assert not Assignment.objects.filter(campaign=campaign).exists()
    # a second visit resumes the same session, no second one
    start(client, campaign)
    assert ParticipantSession.objects.filter(campaign=campaign, worker=worker).count() == 1


def test_declining_consent_ends_the_session_with_no_consent_and_a_thank_you(dataset):
    campaign = campaign_of(dataset, "j-decline")
    client, worker = rater(campaign)
    start(client, campaign)
    response = client.post(f"/session/{campaign.name}/consent/", {"decline": "1"})
    assert response.status_code == 302 and response.url == f"/session/{campaign.name}/done/"
    session = ParticipantSession.objects.get(campaign=campaign, worker=worker)
    assert session.outcome == ParticipantSession.NO_CONSENT and not session.is_open
    assert session.consent_version is None
    done = client.get(response.url)
    assert done.status_code == 200 and 'data-outcome="no_consent"' in done.content.decode()
    assert "You chose not to take part" in done.content.decode() and 'id="local-thanks"' in done.content.decode()
    assert not done.has_header("Refresh")
    assert not Assignment.objects.filter(campaign=campaign).exists()


def test_agreeing_to_an_outdated_consent_version_is_refused_with_the_new_text(dataset):
    campaign = campaign_of(dataset, "j-version")
    client, worker = rater(campaign)
    start(client, campaign)
    Campaign.objects.filter(pk=campaign.pk).update(consent_text="New text.", consent_version=2)
    response = agree(client, campaign, version=1)
    assert response.status_code == 409
    assert "New text." in response.content.decode() and 'value="2"' in response.content.decode()
    assert ParticipantSession.objects.get(worker=worker).stage == ParticipantSession.CONSENT
    garbled = client.post(f"/session/{campaign.name}/consent/", {"agree": "1", "version": "two"})
    assert garbled.status_code == 400
    assert agree(client, campaign, version=2).status_code == 302
    session = ParticipantSession.objects.get(worker=worker)
    assert session.consent_version == 2 and session.stage == ParticipantSession.INSTRUCTIONS


def test_bundle_pages_say_task_n_of_n_and_time_left_and_end_on_the_thank_you_page(dataset):
    campaign = campaign_of(dataset, "j-bundle", session_minutes=30)
    client, worker = rater(campaign)
    start(client, campaign)
    url = to_tasks(client, campaign)
    page = client.get(url).content.decode()
    assert "Task 1 of 3" in page
    assert re.search(r'id="time-left" data-seconds="\d+"[^>]*>(30 min|29 min( \d{1,2} s)?) left<', page), page
    response = answer(client, url, 2, 3)
    assert response.status_code == 302 and TASK.search(response.url) and response.url != url
    second = client.get(response.url).content.decode()
    assert "Task 2 of 3" in second and 'aria-valuenow="2"' in second
    # a repeated submit of the first task (same key) records nothing new and leads on to task 2
    first = TASK.search(url).group(1)
    again = client.post(url + "submit/", {"item": Assignment.objects.get(pk=first).item_id, "submit_key": f"k{first}",
                                          "relevance": 2, "thoroughness": 3})
    assert again.status_code == 302 and again.url == response.url
    assert Assignment.objects.filter(session__worker=worker, state=Assignment.SUBMITTED).count() == 1
    # an invalid answer is shown again with its errors, nothing stored
    pk = TASK.search(response.url).group(1)
    bad = client.post(response.url + "submit/", {"item": Assignment.objects.get(pk=pk).item_id,
                                                 "submit_key": "x", "relevance": "9"})
    assert bad.status_code == 400 and 'id="form-errors"' in bad.content.decode()
    assert Assignment.objects.get(pk=pk).state == Assignment.ACCEPTED
    url = answer(client, response.url).url
    assert "Task 3 of 3" in client.get(url).content.decode()
    done = answer(client, url)
    assert done.status_code == 302 and done.url == f"/session/{campaign.name}/done/"
    page = client.get(done.url).content.decode()
    assert 'data-outcome="completed"' in page and "Thank you!" in page and "You did 3 tasks." in page
    session = ParticipantSession.objects.get(worker=worker)
    assert session.outcome == ParticipantSession.COMPLETED and session.tasks_done == 3
    assert Assignment.objects.filter(session=session, state=Assignment.SUBMITTED, counted=True).count() == 3
    # an ended session's task page leads to the completion page
    assert client.get(url).url == f"/session/{campaign.name}/done/"


def test_practice_shows_feedback_with_the_expected_answer_and_failing_screens_out(dataset):
    campaign = campaign_of(dataset, "j-practice", consent="", practice=2, practice_pass=1.0)
    client, worker = rater(campaign)
    start(client, campaign)
    response = client.post(f"/session/{campaign.name}/instructions/")
    page = client.get(response.url).content.decode()
    assert "Practice 1 of 2" in page and 'name="key"' in page
    items = journey.practice_items(campaign)
    first = re.search(r'name="key" value="([^"]+)"', page).group(1)
    assert first == items[0]["key"]
    # an invalid practice answer: 400, nothing graded
    bad = client.post(f"/session/{campaign.name}/practice/", {"key": first, "relevance": "", "thoroughness": "1"})
    assert bad.status_code == 400 and 'id="form-errors"' in bad.content.decode()
    wrong = client.post(f"/session/{campaign.name}/practice/", {"key": first, "relevance": "5", "thoroughness": "5"})
    text = wrong.content.decode()
    assert wrong.status_code == 200 and 'data-correct="false"' in text and "Not quite." in text
    assert "The expected answer: <strong>Relevance: 1</strong>" in text
    unknown = client.post(f"/session/{campaign.name}/practice/", {"key": "nope", "relevance": "1", "thoroughness": "1"})
    assert unknown.status_code == 400
    page = client.get(f"/session/{campaign.name}/").content.decode()
    assert "Practice 2 of 2" in page
    last = client.post(f"/session/{campaign.name}/practice/",
                       {"key": items[1]["key"], "relevance": "1", "thoroughness": "5"}).content.decode()
    assert 'data-correct="true"' in last and 'data-passed="false"' in last and "1 of 2" in last
    session = ParticipantSession.objects.get(worker=worker)
    assert session.outcome == ParticipantSession.SCREENED_OUT
    done = client.get(f"/session/{campaign.name}/done/").content.decode()
    assert "Not enough of your practice answers matched" in done
    assert not Assignment.objects.filter(campaign=campaign).exists()
    # coming back to the campaign shows the same ended session, not a new practice
    assert start(client, campaign).status_code == 302
    assert ParticipantSession.objects.filter(worker=worker, campaign=campaign).count() == 1


def test_a_participant_reaches_only_their_own_session_and_tasks(dataset):
    campaign = campaign_of(dataset, "j-own", consent="")
    other_campaign = campaign_of(dataset, "j-other", consent="")
    alice, _ = rater(campaign)
    bob, _ = rater(campaign)
    start(alice, campaign)
    start(bob, campaign)
    alice_task = to_tasks(alice, campaign)
    bob_task = to_tasks(bob, campaign)
    pk = TASK.search(alice_task).group(1)
    assert bob.get(f"/session/{campaign.name}/task/{pk}/").status_code == 404
    submit = bob.post(f"/session/{campaign.name}/task/{pk}/submit/",
                      {"item": Assignment.objects.get(pk=pk).item_id, "relevance": 1, "thoroughness": 1})
    assert submit.status_code == 404
    assert Assignment.objects.get(pk=pk).state == Assignment.ACCEPTED
    # alice's key does not open another campaign's pages; no key opens nothing
    assert alice.get(f"/session/{other_campaign.name}/").status_code == 404
    assert alice.get(f"/session/{other_campaign.name}/task/{pk}/").status_code == 404
    assert Client().get(f"/session/{campaign.name}/").status_code == 404
    assert Client().get(bob_task).status_code == 404
    # a session's task is answered on the session's pages only: the plain rater URLs do not know it
    apk = Assignment.objects.get(pk=pk)
    assert alice.get(f"/rate/{campaign.name}/task/{pk}/").status_code == 404
    assert alice.post(f"/rate/{campaign.name}/task/{pk}/submit/",
                      {"item": apk.item_id, "relevance": 1, "thoroughness": 1}).status_code == 404
    assert alice.post(f"/rate/{campaign.name}/task/{pk}/return/").status_code == 404
    assert Assignment.objects.get(pk=pk).state == Assignment.ACCEPTED


# --- Prolific ------------------------------------------------------------------------------------
def prolific_campaign(dataset, name, fake, **kw):
    """A live Prolific campaign with its study, active on the fake Prolific."""
    campaign = campaign_of(dataset, name, provider=Campaign.PROLIFIC, **kw)
    ProlificStudy.objects.create(campaign=campaign, study_id=STUDY, status="ACTIVE", name=name, description="d",
                                 places=10, reward=150, estimated_minutes=5, completion_codes=CODES)
    fake.studies[STUDY] = {"id": STUDY, "status": "ACTIVE", "total_available_places": 10, "reward": 150,
                           "completion_codes": [{"code": c, "code_type": t.upper(), "actor": "researcher",
                                                 "actions": [{"action": "MANUALLY_REVIEW"}]} for t, c in CODES.items()],
                           "places_taken": 0, "number_of_submissions": 0}
    return campaign


def arrive(client, campaign, pid, study, session_id):
    return client.get(f"/prolific/{campaign.name}/", {"PROLIFIC_PID": pid, "STUDY_ID": study,
                                                      "SESSION_ID": session_id})


def test_prolific_arrival_refuses_malformed_foreign_and_unknown_sessions(dataset, fake_prolific):
    campaign = prolific_campaign(dataset, "p-refuse", fake_prolific)
    pid = "b2" * 12
    sub = fake_prolific.start_submission(STUDY, participant_id=pid)
    client = Client()
    missing = client.get(f"/prolific/{campaign.name}/")
    assert missing.status_code == 400 and 'data-code="no-params"' in missing.content.decode()
    forged = arrive(client, campaign, "<script>", STUDY, sub["id"])
    assert forged.status_code == 400 and 'data-code="bad-params"' in forged.content.decode()
    assert "<script>" not in forged.content.decode()
    assert arrive(client, campaign, pid, STUDY, "x" * 65).status_code == 400
    foreign = arrive(client, campaign, pid, "c3" * 12, sub["id"])
    assert foreign.status_code == 403 and 'data-code="foreign-study"' in foreign.content.decode()
    unknown = arrive(client, campaign, pid, STUDY, "d4" * 12)
    assert unknown.status_code == 403 and "Prolific does not know this session" in unknown.content.decode()
    someone_else = arrive(client, campaign, "e5" * 12, STUDY, sub["id"])  # a real SESSION_ID, another PID
    assert someone_else.status_code == 403
    assert Client().get(f"/prolific/no-such-campaign/", {"PROLIFIC_PID": pid}).status_code == 404
    assert not ParticipantSession.objects.filter(campaign=campaign).exists()
    # claims Prolific did not confirm leave nothing behind, not even a worker row
    assert not Worker.objects.filter(provider=Campaign.PROLIFIC).exists()


def test_participants_behind_one_address_are_rate_limited_each_on_their_own(dataset, fake_prolific, settings):
    """The rate limit counts a confirmed participant by their session, not by the address they
    share with others (a lab, a proxy): one participant over the limit gets 429, another from the
    same address goes on."""
    from crowd import ratelimit

    settings.RATER_RATE_LIMIT = "6/h"  # counters are keyed by the participant sessions' fresh random keys
    campaign = prolific_campaign(dataset, "p-limit", fake_prolific, bundle=2)
    first, second = Client(REMOTE_ADDR="198.51.100.9"), Client(REMOTE_ADDR="198.51.100.9")
    for client, pid in ((first, "b2" * 12), (second, "c3" * 12)):
        sub = fake_prolific.start_submission(STUDY, participant_id=pid)
        assert arrive(client, campaign, pid, STUDY, sub["id"]).status_code == 302
    assert ratelimit.client_key(first.get(f"/session/{campaign.name}/").wsgi_request).startswith("participant:")
    statuses = [first.get(f"/session/{campaign.name}/").status_code for _ in range(6)]
    assert statuses[-1] == 429 and 429 not in statuses[:3]
    assert second.get(f"/session/{campaign.name}/").status_code == 200


def test_prolific_unreachable_is_a_503_with_retry_after_and_a_retry_link(dataset, fake_prolific):
    campaign = prolific_campaign(dataset, "p-down", fake_prolific)
    pid = "b2" * 12
    sub = fake_prolific.start_submission(STUDY, participant_id=pid)
    fake_prolific.fail_next("GET", r"^submissions/", status=503, count=20)
    response = arrive(Client(), campaign, pid, STUDY, sub["id"])
    assert response.status_code == 503 and response["Retry-After"].isdigit()
    assert 'id="retry"' in response.content.decode() and f"SESSION_ID={sub['id']}" in response.content.decode()
    assert not ParticipantSession.objects.filter(campaign=campaign).exists()


def test_prolific_session_reload_second_session_and_completion_redirect_with_the_code(dataset, fake_prolific):
    campaign = prolific_campaign(dataset, "p-flow", fake_prolific, bundle=2)
    pid = "b2" * 12
    sub = fake_prolific.start_submission(STUDY, participant_id=pid)
    client = Client()
    response = arrive(client, campaign, pid, STUDY, sub["id"])
    assert response.status_code == 302 and response.url == f"/session/{campaign.name}/"
    session = ParticipantSession.objects.get(campaign=campaign)
    assert session.provider_ref == sub["id"] and session.study_ref == STUDY and session.worker.external_id == pid
    # the same link again (a reload) is the same session
    assert arrive(client, campaign, pid, STUDY, sub["id"]).status_code == 302
    assert ParticipantSession.objects.filter(campaign=campaign).count() == 1
    # a second session of the same participant while the first is open: 409, a page that says so
    second = dict(fake_prolific.submissions[sub["id"]], id="f6" * 12)
    fake_prolific.submissions[second["id"]] = second
    conflict = arrive(Client(), campaign, pid, STUDY, second["id"])
    assert conflict.status_code == 409 and "You already have a session open" in conflict.content.decode()
    # the bundle of 2, then the completion page sends the participant back to Prolific with the code
    url = to_tasks(client, campaign)
    assert "Task 1 of 2" in client.get(url).content.decode()
    url = answer(client, url).url
    assert "Task 2 of 2" in client.get(url).content.decode()
    done = answer(client, url)
    assert done.url == f"/session/{campaign.name}/done/"
    page = client.get(done.url)
    expected = f"https://app.prolific.com/submissions/complete?cc={CODES['completed']}"
    assert page["Refresh"] == f"3; url={expected}"
    text = page.content.decode()
    assert f'<meta http-equiv="refresh" content="3; url={expected}">' in text
    assert f'id="completion-link" href="{expected}"' in text and CODES["completed"] in text


def test_prolific_outcome_without_a_code_asks_to_return_the_study(dataset, fake_prolific):
    campaign = prolific_campaign(dataset, "p-nocode", fake_prolific)
    pid = "b2" * 12
    sub = fake_prolific.start_submission(STUDY, participant_id=pid)
    client = Client()
    arrive(client, campaign, pid, STUDY, sub["id"])
    session = ParticipantSession.objects.get(campaign=campaign)
    journey.end_session(session, ParticipantSession.NO_TASK)
    page = client.get(f"/session/{campaign.name}/done/")
    assert page.status_code == 200 and not page.has_header("Refresh")
    text = page.content.decode()
    assert 'id="return-study"' in text and "Return submission" in text and "http-equiv" not in text
    # declining consent gives the no-consent code
    pid2 = "c3" * 12
    sub2 = fake_prolific.start_submission(STUDY, participant_id=pid2)
    other = Client()
    arrive(other, campaign, pid2, STUDY, sub2["id"])
    other.post(f"/session/{campaign.name}/consent/", {"decline": "1"})
    assert CODES["no_consent"] in other.get(f"/session/{campaign.name}/done/")["Refresh"]


# --- owners ------------------------------------------------------------------------------------
def test_participants_page_is_for_owners_with_rows_tasks_and_counts(dataset):
    campaign = campaign_of(dataset, "j-owner", consent="", bundle=2)
    owner = User.objects.create_user("owner", password="pw")
    campaign.owners.add(owner)
    stranger_user = User.objects.create_user("stranger", password="pw")
    client, worker = rater(campaign)
    start(client, campaign)
    url = to_tasks(client, campaign)
    answer(client, url)
    second, _ = rater(campaign)
    start(second, campaign)
    stranger = Client()
    stranger.force_login(stranger_user)
    assert stranger.get(f"/campaigns/{campaign.name}/participants/").status_code == 404
    assert Client().get(f"/campaigns/{campaign.name}/participants/").status_code == 302  # to the login page
    me = Client()
    me.force_login(owner)
    page = me.get(f"/campaigns/{campaign.name}/participants/")
    assert page.status_code == 200
    text = page.content.decode()
    assert "<strong>2</strong> sessions" in text and 'data-outcome="in progress">in progress 2' in text
    assert worker.rater_id in text and "2 tasks: time and presentation order (# = order served)" in text
    console = me.get(f"/campaigns/{campaign.name}/workers/").content.decode()
    assert f'id="participants-link" href="/campaigns/{campaign.name}/participants/"' in console
    csv_page = me.get(f"/campaigns/{campaign.name}/participants/?format=csv")
    assert csv_page["Content-Type"].startswith("text/csv")
    lines = csv_page.content.decode().splitlines()
    assert lines[0].startswith("rater_id,provider_ref,outcome") and len(lines) == 3


# --- the browser -----------------------------------------------------------------------------------
def shoot(driver, name):
    """Screenshots for the page review (H2_SHOTS=dir): at 1400 px and at 390 px width."""
    directory = os.environ.get("H2_SHOTS")
    if not directory:
        return
    os.makedirs(directory, exist_ok=True)
    for width in (1400, 390):
        driver.set_window_size(width, 1000)
        height = driver.execute_script("return document.documentElement.scrollHeight")
        driver.set_window_size(width, max(600, min(height + 120, 4000)))
        driver.save_screenshot(os.path.join(directory, f"{name}-{width}.png"))
        assert driver.execute_script("return document.documentElement.scrollWidth <= window.innerWidth"), name
    driver.set_window_size(1400, 2200)


@pytest.mark.django_db(transaction=True)
def test_browser_local_rater_journey_consent_instructions_practice_bundle_completion(browser, live_server, dataset):
    campaign = campaign_of(dataset, "j-browser", practice=1, practice_pass=1.0, bundle=2, session_minutes=20)
    worker = engine.invite_workers(1, campaign=campaign)[0]
    wait = WebDriverWait(browser, 10)
    browser.get(f"{live_server.url}/rate/join/{worker.token}/?next=/rate/{campaign.name}/")
    wait.until(lambda d: d.find_elements(By.ID, "consent-text"))
    shoot(browser, "consent")
    button = browser.find_element(By.ID, "agree")
    button.click()
    wait.until(stale(button))
    wait.until(lambda d: d.find_elements(By.ID, "instructions-text"))
    shoot(browser, "instructions")
    button = browser.find_element(By.ID, "continue")
    button.click()
    wait.until(stale(button))
    wait.until(lambda d: d.find_elements(By.ID, "practice-progress"))
    assert browser.find_element(By.ID, "practice-progress").text == "Practice 1 of 1"
    shoot(browser, "practice")
    browser.find_element(By.CSS_SELECTOR, "input[name=relevance][value='1']").click()
    browser.find_element(By.CSS_SELECTOR, "input[name=thoroughness][value='2']").click()
    button = browser.find_element(By.ID, "submit")
    button.click()
    wait.until(stale(button))
    assert browser.find_element(By.ID, "practice-result").get_attribute("data-passed") == "true"
    assert browser.find_element(By.ID, "feedback").get_attribute("data-correct") == "true"
    shoot(browser, "feedback")
    link = browser.find_element(By.ID, "continue")
    link.click()
    wait.until(stale(link))
    for n in (1, 2):
        wait.until(lambda d: d.find_elements(By.ID, "task-form"))
        assert browser.find_element(By.ID, "task-progress").text == f"Task {n} of 2"
        assert re.fullmatch(r"(20 min|19 min( \d{1,2} s)?) left", browser.find_element(By.ID, "time-left").text)
        if n == 1:
            shoot(browser, "task")
        browser.find_element(By.CSS_SELECTOR, f"input[name=relevance][value='{n + 2}']").click()
        browser.find_element(By.CSS_SELECTOR, "input[name=thoroughness][value='3']").click()
        button = browser.find_element(By.ID, "submit")
        button.click()
        wait.until(stale(button))
    wait.until(lambda d: d.find_elements(By.ID, "outcome"))
    assert browser.find_element(By.ID, "outcome").get_attribute("data-outcome") == "completed"
    assert browser.find_element(By.ID, "done-title").text == "Thank you!"
    assert browser.find_elements(By.ID, "local-thanks")
    shoot(browser, "done")
    session = ParticipantSession.objects.get(campaign=campaign, worker=worker)
    assert session.outcome == ParticipantSession.COMPLETED and session.practice_correct == 1
    assert session.consent_version == 1 and session.tasks_done == 2
    answers = list(Assignment.objects.filter(session=session).order_by("submitted_at").values_list("answer", flat=True))
    assert answers == [{"relevance": 3, "thoroughness": 3}, {"relevance": 4, "thoroughness": 3}]
    # the owner's page of participants, in the same browser (logged in as an owner)
    owner = User.objects.create_user("owner", password="pw")
    campaign.owners.add(owner)
    client = Client()
    client.force_login(owner)
    browser.add_cookie({"name": "sessionid", "value": client.cookies["sessionid"].value, "path": "/"})
    browser.get(f"{live_server.url}/campaigns/{campaign.name}/participants/")
    rows = wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "tr.participant"))
    assert len(rows) == 1 and "completed 1" in browser.find_element(By.ID, "outcome-counts").text
    browser.find_element(By.CSS_SELECTOR, "tr.tasks-row summary").click()
    assert len(browser.find_elements(By.CSS_SELECTOR, "table.tasks tbody tr")) == 2
    shoot(browser, "participants")
