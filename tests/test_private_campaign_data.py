"""Campaign data stays private until its owner publishes the results (issue 21, item 7;
crowd.privacy). Real data: the COCO caption sets of the Self-CIDEr example (tests/coco_sets.py)
with Self-CIDEr, LSA and vocabulary computed, and a live description campaign whose raters'
descriptions are submitted through the engine. The issue's reproduction: an anonymous visitor of
the dataset's image page saw the campaign's system name and the raters' descriptions."""
import pytest
from django.contrib.auth.models import User
from django.test import Client

from crowd import engine
from crowd.models import Campaign, Caption, Dataset

from .coco_sets import write_coco_files
from .conftest import run_command

pytestmark = pytest.mark.django_db

DESCRIPTIONS = ["a lone zebrafish swims past the purple coral wall",
                "someone photographed a quiet purple coral wall underwater today"]
SYSTEM = "campaign-secret-desc"


@pytest.fixture
def live_description(tmp_path):
    """The 30-image COCO dataset ``div`` and a live description campaign ``secret-desc`` (alice owns
    it) with two raters' descriptions of one image; metrics recomputed so the campaign's system has
    set-level scores too. Returns (campaign, image key, alice)."""
    d = write_coco_files(tmp_path)
    run_command("import_coco", "--name", "div", "--annotations", str(d / "captions.json"),
                "--results", f"merge={d / 'merge.json'}")
    alice = User.objects.create_user("alice", password="pw-alice")
    dataset = Dataset.objects.get(name="div")
    campaign = engine.create_campaign(dataset, "description", name="secret-desc", owners=[alice],
                                      state=Campaign.LIVE, options={"images": 1}, k=2, gold_every=0)
    key = None
    for worker, text in zip(engine.invite_workers(2, campaign=campaign), DESCRIPTIONS):
        assignment = engine.accept(campaign, worker)
        key = assignment.item.payload["image_key"]
        engine.submit(assignment.pk, worker, {"description": text})
    assert Caption.objects.filter(system__name=SYSTEM).count() == 2
    run_command("compute_metrics", "--dataset", "div", "--metric", "self_cider", "lsa", "vocabulary", "--wait")
    return campaign, key, alice


def _public_responses(client, key):
    """Every public page and download of the dataset, by URL: status and body."""
    urls = [
        "/", "/datasets/div/", "/datasets/div/runs.json", "/datasets/div/correlations.json",
        "/datasets/div/correlations.csv", "/datasets/div/benchmark/", "/datasets/div/benchmark.json",
        "/compare/", "/compare.json", "/compare.csv", "/compare.tex",
        "/datasets/div/diversity/", "/datasets/div/diversity.json", "/datasets/div/diversity.csv",
        f"/datasets/div/images/{key}/",
    ]
    return {url: client.get(url) for url in urls}


def test_anonymous_pages_hide_a_live_campaign_until_the_owner_publishes(live_description):
    campaign, key, alice = live_description
    anonymous = Client()
    page = anonymous.get(f"/datasets/div/images/{key}/")
    assert page.status_code == 200
    html = page.content.decode()
    assert html.count('class="caption-set"') == 2  # the references and merge, nothing else
    assert SYSTEM not in html and "secret-desc" not in html
    assert not any(text in html for text in DESCRIPTIONS)
    assert anonymous.get(f"/datasets/div/images/{key}/radar/{SYSTEM}.png").status_code == 404

    for url, response in _public_responses(anonymous, key).items():
        body = response.content.decode(errors="replace")
        assert SYSTEM not in body and "secret-desc" not in body, url
        assert not any(text in body for text in DESCRIPTIONS), url
    summary = anonymous.get("/datasets/div/diversity.json").json()
    assert {s["system"] for s in summary["systems"]} == {"coco-references", "merge"}

    # the owner publishes (CSRF-protected POST on the owner page); then the page shows them
    owner = Client(enforce_csrf_checks=True)
    owner.force_login(alice)
    detail = owner.get("/campaigns/secret-desc/")
    assert 'id="publish-results"' in detail.content.decode()
    assert owner.post("/campaigns/secret-desc/publish-results/").status_code == 403  # no CSRF token
    campaign.refresh_from_db()
    assert campaign.results_published_at is None
    token = detail.cookies["csrftoken"].value
    # without confirmed=yes (no JavaScript): a confirmation page saying what becomes public, nothing published
    asked = owner.post("/campaigns/secret-desc/publish-results/", {"csrfmiddlewaretoken": token})
    assert asked.status_code == 200 and 'id="confirm-form"' in asked.content.decode()
    assert "Make private again" in asked.content.decode()
    campaign.refresh_from_db()
    assert campaign.results_published_at is None
    response = owner.post("/campaigns/secret-desc/publish-results/", {"csrfmiddlewaretoken": token, "confirmed": "yes"})
    assert response.status_code == 302 and response["Location"] == "/campaigns/secret-desc/"
    campaign.refresh_from_db()
    assert campaign.results_published_at is not None
    assert 'id="results-published"' in owner.get("/campaigns/secret-desc/").content.decode()

    html = anonymous.get(f"/datasets/div/images/{key}/").content.decode()
    assert html.count('class="caption-set"') == 3 and SYSTEM in html
    assert all(text in html for text in DESCRIPTIONS)
    radar = anonymous.get(f"/datasets/div/images/{key}/radar/{SYSTEM}.png")
    assert radar.status_code == 200 and radar.content[:4] == b"\x89PNG"
    summary = anonymous.get("/datasets/div/diversity.json").json()
    assert {s["system"] for s in summary["systems"]} == {"coco-references", "merge", SYSTEM}
    assert SYSTEM in anonymous.get("/datasets/div/diversity.csv").content.decode()


def test_only_an_owner_can_publish(live_description, client):
    campaign, key, alice = live_description
    bob = User.objects.create_user("bob", password="pw-bob")
    staff = User.objects.create_user("carol", password="pw-carol", is_staff=True)
    # anonymous: sent to the login page, nothing published
    response = client.post("/campaigns/secret-desc/publish-results/")
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")
    for user in (bob, staff):  # another owner, staff without ownership: the campaign does not exist
        client.force_login(user)
        assert client.post("/campaigns/secret-desc/publish-results/").status_code == 404
        assert client.post("/campaigns/no-such-campaign/publish-results/").status_code == 404
    client.force_login(alice)
    assert client.get("/campaigns/secret-desc/publish-results/").status_code == 405  # POST only
    campaign.refresh_from_db()
    assert campaign.results_published_at is None
    # the owner still sees the descriptions on the owner pages (export) before publishing
    export = client.get("/campaigns/secret-desc/judgments.csv").content.decode()
    assert all(text in export for text in DESCRIPTIONS)
    html = Client().get(f"/datasets/div/images/{key}/").content.decode()
    assert not any(text in html for text in DESCRIPTIONS)


def test_publishing_is_idempotent_and_only_shows_that_campaign(live_description, client):
    campaign, key, alice = live_description
    from crowd import privacy

    other = engine.create_campaign(campaign.dataset, "description", name="other-desc", owners=[alice],
                                   state=Campaign.LIVE, options={"images": 1}, k=1, gold_every=0)
    ids = privacy.private_system_ids(campaign.dataset)
    assert len(ids) == 2
    first = privacy.publish_results(campaign).results_published_at
    assert privacy.publish_results(campaign).results_published_at == first
    assert privacy.private_system_ids(campaign.dataset) == [
        s for s in ids if s != Caption.objects.filter(system__name=SYSTEM).values_list("system_id", flat=True)[0]]
    assert {s.name for s in privacy.public_systems(campaign.dataset)} == {"coco-references", "merge", SYSTEM}
    assert other.results_published_at is None
