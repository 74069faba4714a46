"""The owner's Prolific page (study life: create with a dry run, cost, publish only after the cost
and a typed confirmation, pause, resume, stop, add places) against the fake Prolific API, the
webhook events it lists (this study's only), and the new-campaign form's provider and
participant-journey fields."""
import re

import pytest
from django.contrib.auth.models import User
from django.contrib.messages import get_messages
from django.test import Client

from crowd import engine
from crowd.models import Campaign, Dataset, ProlificCall, ProlificEvent, ProlificStudy
from crowd.views import prolific as prolific_views
from tests.fake_prolific import fake_prolific  # noqa: F401

from .conftest import run_command, write_subset

pytestmark = pytest.mark.django_db
SITE = "https://eval.example.org"


@pytest.fixture
def site(tmp_path):
    run_command("import_dataset", "flickr8k-expert", str(write_subset(tmp_path / "sub", 6)), "--name", "h8sub")
    dataset = Dataset.objects.get(name="h8sub")
    alice = User.objects.create_user("alice", password="pw")
    bob = User.objects.create_user("bob", password="pw")
    campaign = engine.create_campaign(dataset, "rating", name="pro", title="Pro study", owners=[alice], k=2,
                                      provider=Campaign.PROLIFIC, bundle_size=3, session_minutes=20, gold_every=0,
                                      options={"images": 4, "gold": 0})
    other = engine.create_campaign(dataset, "rating", name="bobs", title="Bob's study", owners=[bob], k=2,
                                   provider=Campaign.PROLIFIC, gold_every=0, options={"images": 2, "gold": 0})
    a, b = Client(), Client()
    a.force_login(alice)
    b.force_login(bob)
    return {"dataset": dataset, "campaign": campaign, "other": other, "alice": a, "bob": b}


def act(client, action, data=None, name="pro"):
    """POST an action and follow the redirect to the page (which shows and so consumes the messages)."""
    return client.post(f"/campaigns/{name}/prolific/{action}/", data or {}, follow=True)


def errors(response) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


def page(client, name="pro") -> str:
    r = client.get(f"/campaigns/{name}/prolific/")
    assert r.status_code == 200
    return r.content.decode()


CREATE = {"reward": "150", "minutes": "12", "site_url": SITE, "devices": ["desktop", "tablet"]}


def test_dry_run_shows_the_body_and_stores_nothing_then_create_makes_the_draft(site, fake_prolific):
    alice = site["alice"]
    html = page(alice)
    assert 'id="create-form"' in html and 'value="http://testserver"' in html  # the site URL defaults to this origin
    r = act(alice, "create", {**CREATE, "dry_run": "1",
                              "filters": '[{"filter_id": "approval_rate", "selected_range": {"lower": 95}}]'})
    assert r.redirect_chain == [("/campaigns/pro/prolific/", 302)] and errors(r) == []
    html = r.content.decode()
    assert "DRY RUN: nothing was sent and no study stored" in html
    assert "&quot;total_available_places&quot;" in html and "approval_rate" in html and "tablet" in html
    assert fake_prolific.calls == [] and not ProlificStudy.objects.exists()
    assert ProlificCall.objects.filter(ok=True, dry_run=False).count() == 0

    r = act(alice, "create", CREATE)
    assert errors(r) == []
    study = ProlificStudy.objects.get(campaign=site["campaign"])
    assert study.study_id in fake_prolific.studies and study.status == "UNPUBLISHED"
    assert study.reward == 150 and study.device_compatibility == ["desktop", "tablet"]
    html = page(alice)
    assert study.study_id in html and 'id="codes"' in html
    for outcome, code in study.completion_codes.items():
        assert outcome in html and code in html
    assert "FIXED_SCREEN_OUT_PAYMENT" in html and "MANUALLY_REVIEW" in html
    assert "https://eval.example.org/prolific/pro/?PROLIFIC_PID=" in html
    # a second create is refused in one line, nothing sent
    n = len(fake_prolific.calls)
    r = act(alice, "create", CREATE)
    assert any("already has Prolific study" in m for m in errors(r)) and len(fake_prolific.calls) == n


@pytest.mark.parametrize("bad, message", [
    ({"reward": "0"}, "the reward"), ({"minutes": "x"}, "the estimated minutes"),
    ({"site_url": "ftp://x"}, "site's http(s) root"), ({"devices": ["watch"]}, "devices must be"),
    ({"filters": "[{"}, "not valid JSON"), ({"filters": '[{"selected_values": ["1"]}]'}, "filter_id"),
])
def test_a_bad_create_form_is_refused_in_one_line_and_sends_nothing(site, fake_prolific, bad, message):
    r = act(site["alice"], "create", {**CREATE, **bad})
    msgs = errors(r)
    assert len(msgs) == 1 and message in msgs[0] and "\n" not in msgs[0]
    assert fake_prolific.calls == [] and not ProlificStudy.objects.exists()


def test_publish_needs_the_cost_shown_and_the_typed_name_then_the_study_is_active_and_the_campaign_live(
        site, fake_prolific):
    alice, campaign = site["alice"], site["campaign"]
    act(alice, "create", CREATE)
    study = ProlificStudy.objects.get(campaign=campaign)
    html = page(alice)
    assert 'id="publish-needs-cost"' in html and 'id="publish-form"' not in html
    # without the cost shown: refused even with the right name
    r = act(alice, "publish", {"confirm": "pro"})
    assert any("show the cost first" in m for m in errors(r))
    assert fake_prolific.studies[study.study_id]["status"] == "UNPUBLISHED"
    # the cost
    r = act(alice, "cost")
    assert errors(r) == []
    html = r.content.decode()
    total = re.search(r'id="publish-total">([\d.]+) GBP<', html)
    assert total and "total " + total.group(1) in html and 'id="publish-form"' in html
    assert ("GET", f"studies/{study.study_id}/cost/") in [c[:2] for c in fake_prolific.calls]
    # a wrong or missing name: refused
    for confirm in ("", "pr0", "bobs"):
        r = act(alice, "publish", {"confirm": confirm})
        assert any("type the campaign name (pro)" in m for m in errors(r))
    assert fake_prolific.studies[study.study_id]["status"] == "UNPUBLISHED"
    assert Campaign.objects.get(pk=campaign.pk).state == Campaign.DRAFT
    # raising the places changes the cost: it must be shown again
    act(alice, "add-places", {"n": "1"})
    r = act(alice, "publish", {"confirm": "pro"})
    assert any("show the cost first" in m for m in errors(r))
    act(alice, "cost")
    r = act(alice, "publish", {"confirm": "pro"})
    assert errors(r) == []
    assert fake_prolific.studies[study.study_id]["status"] == "ACTIVE"
    study.refresh_from_db()
    assert study.status == "ACTIVE" and study.published_by == "alice"
    assert Campaign.objects.get(pk=campaign.pk).state == Campaign.LIVE
    html = page(alice)
    assert 'id="publish-form"' not in html and 'id="pause-btn"' in html
    # publishing twice is refused
    act(alice, "cost")
    r = act(alice, "publish", {"confirm": "pro"})
    assert any("already published" in m for m in errors(r))


def test_pause_resume_stop_and_add_places_reach_the_fake(site, fake_prolific):
    alice, campaign = site["alice"], site["campaign"]
    act(alice, "create", CREATE)
    act(alice, "cost")
    act(alice, "publish", {"confirm": "pro"})
    study = ProlificStudy.objects.get(campaign=campaign)
    remote = fake_prolific.studies[study.study_id]
    places = study.places
    r = act(alice, "add-places", {"n": "3"})
    assert errors(r) == [] and "added 3 places" in r.content.decode()
    assert remote["total_available_places"] == places + 3
    r = act(alice, "add-places", {"n": "-2"})
    assert any("whole number" in m for m in errors(r)) and remote["total_available_places"] == places + 3
    fake_prolific.start_submission(study.study_id)
    assert errors(act(alice, "pause")) == [] and remote["status"] == "PAUSED"
    html = page(alice)
    assert 'id="resume-btn"' in html and "(1 taken" not in html  # nothing synced yet: taken unknown
    assert errors(act(alice, "sync")) == []
    assert f"{places + 3} places (1 taken, {places + 2} left, as last synced)" in page(alice)
    assert errors(act(alice, "resume")) == [] and remote["status"] == "ACTIVE"
    assert errors(act(alice, "stop")) == [] and remote["status"] in ("AWAITING REVIEW", "COMPLETED")
    study.refresh_from_db()
    assert study.status == remote["status"]
    transitions = [c[2] for c in fake_prolific.calls if c[0] == "POST" and c[1].endswith("/transition/")]
    assert [t["action"] for t in transitions] == ["PUBLISH", "PAUSE", "START", "STOP"]


def test_another_owner_gets_404_on_the_page_and_every_action_and_nothing_reaches_prolific(site, fake_prolific):
    act(site["alice"], "create", CREATE)
    study = ProlificStudy.objects.get(campaign=site["campaign"])
    n = len(fake_prolific.calls)
    bob = site["bob"]
    assert bob.get("/campaigns/pro/prolific/").status_code == 404
    for action in prolific_views.ACTIONS:
        r = act(bob, action, {**CREATE, "confirm": "pro", "n": "5", "submission": "x", "csv": "a,1"})
        assert r.status_code == 404, action
    assert len(fake_prolific.calls) == n
    study.refresh_from_db()
    assert study.status == "UNPUBLISHED" and study.places == fake_prolific.studies[study.study_id]["total_available_places"]


def test_the_page_lists_only_the_webhook_events_of_this_campaigns_study_and_submissions(site, fake_prolific):
    alice = site["alice"]
    act(alice, "create", CREATE)
    study = ProlificStudy.objects.get(campaign=site["campaign"])
    theirs = ProlificStudy.objects.create(campaign=site["other"], study_id="b" * 24, status="ACTIVE", name="b",
                                          description="d", places=2, reward=100, estimated_minutes=5)
    mine_sub = study.submissions.create(submission_id="c" * 24, participant_id="d" * 24, status="ACTIVE")
    theirs.submissions.create(submission_id="e" * 24, participant_id="f" * 24, status="ACTIVE")
    for i, rid in enumerate([study.study_id, mine_sub.submission_id, theirs.study_id, "e" * 24, ""]):
        ProlificEvent.objects.create(event_key=f"k{i}", event_type=f"type-{i}", resource_id=rid, payload={})
    html = page(alice)
    events = html[html.index('id="events"'):]
    assert "type-0" in events and "type-1" in events
    assert "type-2" not in events and "type-3" not in events and "type-4" not in events
    assert "b" * 24 not in html and "e" * 24 not in html


def test_the_page_without_a_study_lists_no_event(site, fake_prolific):
    ProlificEvent.objects.create(event_key="k", event_type="study.status.change", resource_id="a" * 24, payload={})
    html = page(site["alice"])
    assert "study.status.change" not in html and 'id="create-form"' in html


# -- the new-campaign form ------------------------------------------------------------------------------
def form_data(site, **kw):
    return {"name": "journeyed", "title": "", "dataset": site["dataset"].name, "kind": "rating", "k": "2",
            "assignment_minutes": "10", "reward": "0", "provider": "prolific", "seed": "0", "images": "4",
            "gold": "1", "bundle_size": "3", "session_minutes": "25", "consent_text": "I agree to take part.",
            "practice": "1", "practice_pass": "0.75", "attention_max_failures": "2", **kw}


def test_the_new_campaign_form_offers_the_providers_and_the_journey_fields(site):
    html = site["alice"].get("/campaigns/new/").content.decode()
    for value in ("local", "prolific", "mturk"):
        assert f'<option value="{value}"' in html
    for field in ("bundle_size", "session_minutes", "consent_text", "practice", "practice_pass",
                  "attention_max_failures"):
        assert f'name="{field}"' in html


def test_the_new_campaign_form_creates_a_prolific_campaign_with_a_bundle_and_consent(site):
    r = site["alice"].post("/campaigns/new/", form_data(site))
    assert r.status_code == 302, r.content.decode()[:3000]
    c = Campaign.objects.get(name="journeyed")
    assert c.provider == Campaign.PROLIFIC and c.bundle_size == 3 and c.session_minutes == 25
    assert c.consent_text == "I agree to take part." and c.practice_pass == 0.75 and c.attention_max_failures == 2
    assert len(c.options["practice"]) == 1
    assert site["alice"].get("/campaigns/journeyed/prolific/").status_code == 200


def test_practice_items_for_a_kind_without_gold_are_refused_next_to_the_practice_field(site):
    r = site["alice"].post("/campaigns/new/", form_data(site, kind="description", gold=""))
    assert r.status_code == 400
    html = r.content.decode()
    row = html[html.index('id="row-practice"'):]
    assert "no practice items either" in row[:row.index("</div>")]
    assert not Campaign.objects.filter(name="journeyed").exists()


@pytest.mark.parametrize("field, value, message", [
    ("practice_pass", "1.5", "practice pass mark"), ("practice_pass", "0", "practice pass mark"),
    ("bundle_size", "-1", "bundle size"), ("session_minutes", "2000", "session minutes"),
    ("attention_max_failures", "1001", "attention max failures"),
])
def test_the_new_campaign_form_refuses_a_bad_journey_value_next_to_its_field(site, field, value, message):
    r = site["alice"].post("/campaigns/new/", form_data(site, **{field: value}))
    assert r.status_code == 400
    html = r.content.decode()
    row = html[html.index(f'id="row-{field}"'):]
    row = row[:row.index("</div>")]
    assert "errorlist" in row and message in row
    assert not Campaign.objects.filter(name="journeyed").exists()


# -- in Chromium: both pages fit a phone and a wide screen ------------------------------------------------
def fits(driver) -> bool:
    return driver.execute_script("return document.documentElement.scrollWidth <= window.innerWidth")


def shoot(driver, name, width):
    """Resize to ``width`` px; save a screenshot under $SHOTS_DIR when it is set (for looking at)."""
    import os
    driver.set_window_size(width, 2200)
    if os.environ.get("SHOTS_DIR"):
        driver.save_screenshot(os.path.join(os.environ["SHOTS_DIR"], f"{name}-{width}.png"))


def test_the_prolific_page_and_the_new_campaign_form_fit_a_phone_and_a_wide_screen(site, fake_prolific, browser,
                                                                                   live_server):
    from selenium.webdriver.common.by import By

    alice = site["alice"]
    browser.get(live_server.url + "/accounts/login/")
    browser.add_cookie({"name": "sessionid", "value": alice.cookies["sessionid"].value, "path": "/"})
    browser.get(f"{live_server.url}/campaigns/new/")
    browser.execute_script(
        "var f = document.getElementById('campaign-form');"
        "f.name.value = 'phone'; f.dataset.value = 'h8sub'; f.kind.value = 'rating'; f.provider.value = 'prolific';"
        "f.images.value = '4'; f.practice.value = '1'; f.practice_pass.value = '1.5';"
        "f.consent_text.value = 'I agree.'; f.bundle_size.value = '3'; f.submit();")
    row = browser.find_element(By.ID, "row-practice_pass")
    assert "practice pass mark" in row.text
    for width in (1400, 390):
        shoot(browser, "new-campaign", width)
        assert fits(browser), width
    browser.execute_script("document.getElementById('row-bundle_size').scrollIntoView()")
    shoot(browser, "new-campaign-journey", 390)
    browser.get(f"{live_server.url}/campaigns/pro/prolific/")
    assert browser.find_element(By.ID, "create-form").is_displayed()
    for width in (1400, 390):
        shoot(browser, "prolific-create", width)
        assert fits(browser), width
    act(alice, "create", CREATE)
    act(alice, "sync")
    act(alice, "cost")  # the browser shares alice's session: the cost was shown to it
    browser.get(f"{live_server.url}/campaigns/pro/prolific/")
    assert browser.find_element(By.ID, "publish-form").is_displayed()
    assert "UNPUBLISHED" in browser.find_element(By.ID, "study-status").text
    for width in (1400, 390):
        shoot(browser, "prolific-study", width)
        assert fits(browser), width
