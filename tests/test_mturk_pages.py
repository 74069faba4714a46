"""The owner's MTurk page: permissions, cost estimate and live confirmation, dry-run publishing,
requester-website downloads and results upload, and the rater pool staying separate."""
import csv
import io

import pytest
from django.contrib.auth.models import User
from django.http import HttpRequest
from django.test import Client, override_settings

from crowd import engine
from crowd.models import Assignment, Campaign, Dataset, MTurkCall
from crowd.mturk import publish as pub

from . import fake_mturk
from .conftest import run_command

pytestmark = pytest.mark.django_db


@pytest.fixture
def setup(subset_dir):
    fake_mturk.FAKES.clear()
    run_command("import_dataset", "flickr8k-expert", str(subset_dir), "--name", "sub")
    alice = User.objects.create_user("alice", password="pw")
    User.objects.create_user("mallory", password="pw")
    c = engine.create_campaign(Dataset.objects.get(name="sub"), "rating", name="mtp", options={"images": 3, "gold": 1},
                               reward="0.04", provider=Campaign.MTURK, owners=[alice])
    cfg = pub.config_for(c)
    cfg.public_url = "https://captions.example.org"
    cfg.save()
    with override_settings(MTURK_CLIENT_FACTORY="tests.fake_mturk.fake_client"):
        yield c


def login(name):
    client = Client()
    # logins are counted per request by django-axes, whose backend needs one (as its docs say for tests)
    assert client.login(request=HttpRequest(), username=name, password="pw")
    return client


def test_permissions(setup):
    c = setup
    url = f"/campaigns/{c.name}/mturk/"
    assert Client().get(url).status_code == 302
    mallory = login("mallory")
    assert mallory.get(url).status_code == 404
    assert mallory.post(url + "publish/", {}).status_code == 404
    assert mallory.post(url + "golive/", {"confirm": c.name}).status_code == 404
    assert pub.config_for(c).environment == "sandbox" and not MTurkCall.objects.exists()
    # a local-pool campaign has no MTurk page; an MTurk campaign is not offered to the local pool
    local = engine.create_campaign(c.dataset, "rating", name="loc", options={"images": 2, "gold": 1},
                                   owners=[User.objects.get(username="alice")])
    assert login("alice").get(f"/campaigns/{local.name}/mturk/").status_code == 404
    assert login("alice").get(f"/rate/{c.name}/").status_code == 404


def test_estimate_golive_publish_and_calls(setup):
    c = setup
    alice = login("alice")
    page = alice.get(f"/campaigns/{c.name}/mturk/").content.decode()
    n = c.items.count()
    assert f"{n} HITs, {3 * n} assignments at $0.04 each" in page and 'id="golive"' in page
    r = alice.post(f"/campaigns/{c.name}/mturk/publish/", {"dry_run": "1", "limit": "2"}, follow=True)
    text = r.content.decode()
    assert "DRY RUN, nothing sent" in text and "create_hit_with_hit_type" in text
    assert not fake_mturk.FAKES.get("sandbox") or not fake_mturk.FAKES["sandbox"].hits
    r = alice.post(f"/campaigns/{c.name}/mturk/golive/", {"confirm": "nope"}, follow=True)
    assert "type the campaign name" in r.content.decode() and pub.config_for(c).environment == "sandbox"
    r = alice.post(f"/campaigns/{c.name}/mturk/golive/", {"confirm": c.name}, follow=True)
    cfg = pub.config_for(c)
    assert cfg.environment == "live" and cfg.live_confirmed_by == "alice"
    r = alice.post(f"/campaigns/{c.name}/mturk/publish/", {"limit": "2"}, follow=True)
    assert "HITs created 2" in r.content.decode()
    assert len(fake_mturk.FAKES["live"].hits) == 2
    assert MTurkCall.objects.filter(campaign=c, operation="create_hit_with_hit_type", ok=True, dry_run=False).count() == 2
    r = alice.post(f"/campaigns/{c.name}/mturk/sandbox/", follow=True)
    assert pub.config_for(c).environment == "sandbox" and pub.config_for(c).live_confirmed_at is None
    bad = alice.post(f"/campaigns/{c.name}/mturk/settings/", {"question_type": "external", "public_url": "http://insecure.example",
                                                             "frame_height": 0, "keywords": "x", "hit_lifetime_seconds": 60,
                                                             "auto_approval_seconds": 60}, follow=True)
    assert "https" in bad.content.decode() and pub.config_for(c).public_url == "https://captions.example.org"


def test_website_download_and_upload(setup):
    c = setup
    alice = login("alice")
    alice.post(f"/campaigns/{c.name}/mturk/export/", {})
    batch = c.mturk_batches.get()
    layout = alice.get(f"/campaigns/{c.name}/mturk/batch/{batch.pk}/layout.html")
    assert layout.status_code == 200 and b"${task_html}" in layout.content
    rows = list(csv.DictReader(io.StringIO(alice.get(f"/campaigns/{c.name}/mturk/batch/{batch.pk}/input.csv").content.decode())))
    assert len(rows) == c.items.count() and all(r["batch_id"] == batch.batch_id for r in rows)
    assert login("mallory").get(f"/campaigns/{c.name}/mturk/batch/{batch.pk}/input.csv").status_code == 404
    out = io.StringIO()
    w = csv.writer(out)
    w.writerow(["HITId", "AssignmentId", "WorkerId", "AssignmentStatus", "WorkTimeInSeconds", "Input.batch_id",
                "Input.item_key", "Answer.relevance", "Answer.thoroughness"])
    w.writerow(["H" * 30, "A" * 30, "AWORKER00001", "Approved", "12", batch.batch_id, rows[0]["item_key"], "2", "5"])
    upload = io.BytesIO(out.getvalue().encode())
    upload.name = "results.csv"
    r = alice.post(f"/campaigns/{c.name}/mturk/import/", {"results": upload}, follow=True)
    assert "1 rows: imported 1" in r.content.decode()
    a = Assignment.objects.get(provider_ref="A" * 30)
    assert a.state == "approved" and a.answer == {"relevance": 2, "thoroughness": 5}
    garbage = io.BytesIO(b"\xff\xfe\x00garbage")
    garbage.name = "x.csv"
    r = alice.post(f"/campaigns/{c.name}/mturk/import/", {"results": garbage}, follow=True)
    assert "NOTHING IMPORTED" in r.content.decode() and Assignment.objects.count() == 1
