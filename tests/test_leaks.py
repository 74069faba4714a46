"""Small leaks and gaps (issue 31), each through real HTTP requests against the running site
(Django's live server; httpx as the client, with a logged-in session cookie or an API token):

* a report id of another owner's campaign answers exactly as a missing id (status and body);
* co-owners only by invitation: a non-superuser naming ``owners`` gets one answer whatever the
  names (no user-name oracle); an owner invites a user name (the same answer for a name with and
  without an account), only the user of that name sees and accepts it and then owns the campaign;
* publishing a campaign's results and the irreversible actions of the provider pages (here
  stopping a Prolific study on the fake Prolific) are written to the audit trail, previews are not;
* the Prolific webhook deduplicates on the signed content: a captured delivery sent again with a new
  ``X-Event-ID`` is a duplicate (no second call to Prolific, no second event row);
* API keys are stored hashed (django-rest-knox): the page shows a new key once, with
  ``Cache-Control: no-store``; the database and the admin never hold it; keys made before (Django
  REST framework's plain-text ``authtoken`` rows) are hashed by the migration and keep working."""
from __future__ import annotations

import hashlib
import json
import re
import time

import httpx
import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client

from analysis.models import Report
from crowd.models import AuditEntry, Campaign, Dataset, ProlificEvent, ProlificStudy
from tests.fake_prolific import fake_prolific  # noqa: F401 - fixture
from tests.fake_prolific.server import new_id

from .conftest import run_command, write_subset

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def session(live_server):
    """``session(user)``: an HTTP client of the live server logged in as ``user`` (its session
    cookie), sending the CSRF token a page of the site gave it, as a browser's form would. The
    clients are closed at the end (so the server's threads end and close their connections)."""
    clients = []

    def login(user) -> httpx.Client:
        django_client = Client()
        django_client.force_login(user)
        http = httpx.Client(base_url=live_server.url, timeout=30,
                            cookies={"sessionid": django_client.cookies["sessionid"].value})
        clients.append(http)
        assert http.get("/accounts/api-token/").status_code == 200  # a page with a form sets the CSRF cookie
        http.headers["X-CSRFToken"] = http.cookies["csrftoken"]
        return http

    yield login
    for http in clients:
        http.close()


def user(name: str, **flags) -> User:
    """An account (no password: the tests log in with the session, not the slow password hasher)."""
    return User.objects.create(username=name, **flags)


def bare_campaign(name: str, owner, provider: str = Campaign.LOCAL) -> Campaign:
    """A draft campaign without items (the tests below read no item)."""
    dataset, _ = Dataset.objects.get_or_create(name="leaks", defaults={"kind": "test"})
    campaign = Campaign.objects.create(name=name, title=name, kind="rating", dataset=dataset, provider=provider,
                                       instructions="", template_version="1")
    campaign.owners.add(owner)
    return campaign


def test_a_foreign_report_id_answers_exactly_as_a_missing_one(live_server, session):
    alice = user("alice")
    bob = user("bob")
    row = Report.objects.create(kind=Report.CAMPAIGN, key="k" * 64, campaign=bare_campaign("hers", alice))
    missing = row.pk + 1000
    assert session(alice).get(f"/api/reports/status/{row.pk}/").status_code == 200
    http = session(bob)
    for path in ("/api/reports/status/{}/", "/reports/{}/status.json"):  # the API and the page it serves
        foreign, absent = http.get(path.format(row.pk)), http.get(path.format(missing))
        assert foreign.status_code == absent.status_code == 404
        assert foreign.headers["content-type"] == absent.headers["content-type"]
        # the same body but for the path it names (a problem document's "instance")
        assert foreign.text.replace(f"/{row.pk}/", "/ID/") == absent.text.replace(f"/{missing}/", "/ID/"), path


def test_co_owners_only_by_an_invitation_the_invited_user_accepts(live_server, session, tmp_path):
    run_command("import_dataset", "flickr8k-expert", str(write_subset(tmp_path / "sub", 2)), "--name", "sub")
    bob = user("bob")
    alice = user("alice")
    carol = user("carol")
    as_bob, as_alice, as_carol = (session(u) for u in (bob, alice, carol))
    create = {"kind": "rating", "dataset": "sub", "name": "shared", "images": 2}
    # naming owners: one answer for an existing and an unknown user name, nothing created
    known = as_bob.post("/api/campaigns/", json={**create, "owners": ["alice"]})
    unknown = as_bob.post("/api/campaigns/", json={**create, "owners": ["nobody-at-all"]})
    assert known.status_code == unknown.status_code == 400
    assert known.text == unknown.text and "invite" in known.json()["detail"]
    assert not Campaign.objects.filter(name="shared").exists()
    assert as_bob.post("/api/campaigns/", json=create).status_code == 201
    campaign = Campaign.objects.get(name="shared")
    assert list(campaign.owners.all()) == [bob]

    # inviting: the same answer for a name with an account and one without
    url = "/api/campaigns/shared/owner-invitations/"
    invited = as_bob.post(url, json={"username": "alice"})
    nobody = as_bob.post(url, json={"username": "nobody-at-all"})
    assert invited.status_code == nobody.status_code == 201
    assert set(invited.json()) == set(nobody.json()) and invited.json()["state"] == nobody.json()["state"] == "pending"
    assert as_alice.post(url, json={"username": "carol"}).status_code == 404  # not an owner: no such campaign
    assert list(campaign.owners.all()) == [bob]  # nobody became an owner by being named

    # only the invited user sees and answers it; to anyone else it is missing
    pk = invited.json()["id"]
    assert [i["id"] for i in as_alice.get("/api/owner-invitations/").json()["results"]] == [pk]
    assert as_carol.get("/api/owner-invitations/").json()["results"] == []
    assert as_alice.get("/api/campaigns/shared/").status_code == 404
    stolen, absent = as_carol.post(f"/api/owner-invitations/{pk}/accept/"), as_carol.post("/api/owner-invitations/999999/accept/")
    assert stolen.status_code == absent.status_code == 404
    assert stolen.json()["detail"] == absent.json()["detail"]
    page = as_alice.get("/campaigns/").text  # the campaign list offers it too
    assert 'id="owner-invitations"' in page and f'id="accept-{pk}"' in page
    accepted = as_alice.post(f"/api/owner-invitations/{pk}/accept/")
    assert accepted.status_code == 200 and accepted.json()["state"] == "accepted"
    assert set(campaign.owners.values_list("username", flat=True)) == {"alice", "bob"}
    assert as_alice.get("/api/campaigns/shared/").json()["owners"] == ["alice", "bob"]
    assert as_alice.post(f"/api/owner-invitations/{pk}/accept/").status_code == 409  # answered already
    assert list(AuditEntry.objects.filter(campaign=campaign).order_by("pk").values_list("action", "actor", "target")) == [
        ("owner-invite", "bob", "alice"), ("owner-invite", "bob", "nobody-at-all"), ("owner-accept", "alice", "alice")]
    from crowd.models import OwnerInvitation

    assert OwnerInvitation.objects.get(username="nobody-at-all").state == "pending"


def test_publishing_results_and_irreversible_provider_actions_are_audited(live_server, session, fake_prolific):
    alice = user("alice")
    http = session(alice)
    campaign = bare_campaign("mine", alice)
    for _ in range(2):  # publishing twice: one publication, one entry
        assert http.post("/campaigns/mine/publish-results/", data={"confirmed": "yes"}).status_code == 302
    campaign.refresh_from_db()
    assert campaign.results_published_at is not None
    entries = list(AuditEntry.objects.filter(campaign=campaign).values_list("action", "actor"))
    assert entries == [("publish-results", "alice")]

    study_campaign = bare_campaign("study", alice, provider=Campaign.PROLIFIC)
    study_campaign.state = Campaign.LIVE
    study_campaign.save(update_fields=["state"])
    sid = new_id()
    fake_prolific.studies[sid] = {"id": sid, "status": "ACTIVE", "total_available_places": 5, "reward": 100,
                                  "places_taken": 0, "number_of_submissions": 0, "completion_codes": []}
    ProlificStudy.objects.create(campaign=study_campaign, study_id=sid, status="ACTIVE", name="s", description="d",
                                 places=5, reward=100, estimated_minutes=5)
    # a review's preview sends nothing and records nothing; stopping the study is final and recorded
    assert http.post("/campaigns/study/prolific/review/", data={}).status_code == 302
    assert not AuditEntry.objects.filter(campaign=study_campaign).exists()
    assert http.post("/campaigns/study/prolific/stop/").status_code == 302
    assert fake_prolific.studies[sid]["status"] == "COMPLETED"
    entry = AuditEntry.objects.get(campaign=study_campaign)
    assert (entry.action, entry.actor) == ("prolific-stop", "alice") and "stopped" in entry.detail["result"]


def test_a_signed_webhook_resent_with_a_new_event_id_is_a_duplicate(live_server, fake_prolific):
    owner = user("olive")
    sid = new_id()
    fake_prolific.studies[sid] = {"id": sid, "status": "PAUSED", "total_available_places": 5, "reward": 100,
                                  "places_taken": 0, "number_of_submissions": 0, "completion_codes": []}
    ProlificStudy.objects.create(campaign=bare_campaign("pl", owner, Campaign.PROLIFIC), study_id=sid,
                                 status="ACTIVE", name="s", description="d", places=5, reward=100, estimated_minutes=5)
    hook = live_server.url + "/prolific-hooks/"
    payload = {"resource_id": sid, "status": "PAUSED"}
    ts = str(int(time.time()))

    def reads():
        return sum(1 for c in fake_prolific.calls if c[:2] == ("GET", f"studies/{sid}/"))

    assert fake_prolific.send_webhook(hook, "study.status.change", payload, timestamp=ts, event_id="evt-1") == 200
    assert reads() == 1 and ProlificStudy.objects.get(study_id=sid).status == "PAUSED"
    # the captured delivery, the same signed timestamp and body, with a new unsigned event id
    assert fake_prolific.send_webhook(hook, "study.status.change", payload, timestamp=ts, event_id="evt-2") == 200
    assert reads() == 1 and ProlificEvent.objects.count() == 1
    # a new delivery (a new signed timestamp) is a new event
    assert fake_prolific.send_webhook(hook, "study.status.change", payload, timestamp=str(int(ts) + 1)) == 200
    assert reads() == 2 and ProlificEvent.objects.count() == 2


def _stored_text() -> str:
    """Every stored API token row as text: what a database dump or a superuser's query would show."""
    from knox.models import AuthToken

    return json.dumps(list(AuthToken.objects.values()), default=str)


def test_api_keys_are_stored_hashed_and_shown_once_with_no_store(live_server, session):
    dana = user("dana")
    root = user("root", is_staff=True, is_superuser=True)
    http = session(dana)
    created = http.post("/accounts/api-token/", data={"action": "create"})
    assert created.status_code == 200
    assert "no-store" in created.headers["cache-control"]
    key = re.search(r'id="new-key" readonly value="([^"]+)"', created.text).group(1)
    assert len(key) >= 40
    assert httpx.get(live_server.url + "/api/campaigns/", headers={"Authorization": f"Token {key}"}).status_code == 200
    later = http.get("/accounts/api-token/")
    assert key not in later.text and key[:4] in later.text and "no-store" in later.headers["cache-control"]
    assert key not in _stored_text() and hashlib.sha512(key.encode()).hexdigest() in _stored_text()
    admin = session(root)
    listing = admin.get("/admin/knox/authtoken/")
    assert listing.status_code == 200 and "dana" in listing.text and key not in listing.text
    assert http.post("/accounts/api-token/", data={"action": "revoke"}).status_code == 200
    assert httpx.get(live_server.url + "/api/campaigns/", headers={"Authorization": f"Token {key}"}).status_code == 401


def test_plain_text_keys_of_before_are_hashed_by_the_migration_and_keep_working(live_server):
    """A database of before: Django REST framework's authtoken table with a plain-text key. The
    migration's function (api/migrations/0003_hash_api_tokens.py) hashes it in place."""
    import importlib

    from django.apps import apps

    migration = importlib.import_module("api.migrations.0003_hash_api_tokens")
    erin = user("erin")
    old_key = "0123456789abcdef0123456789abcdef01234567"
    qn = connection.ops.quote_name
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE TABLE {qn('authtoken_token')} ({qn('key')} varchar(40) PRIMARY KEY, "
                       f"{qn('created')} timestamp with time zone NOT NULL, {qn('user_id')} integer NOT NULL UNIQUE)")
        cursor.execute(f"INSERT INTO {qn('authtoken_token')} VALUES (%s, %s, %s)",
                       [old_key, "2024-05-01 10:00:00+00", erin.pk])
    try:
        with connection.schema_editor() as editor:
            migration.hash_old_tokens(apps, editor)
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT count(*) FROM {qn('authtoken_token')}")
            assert cursor.fetchone()[0] == 0  # no plain-text key left
        assert old_key not in _stored_text()
        auth = {"Authorization": f"Token {old_key}"}
        assert httpx.get(live_server.url + "/api/campaigns/", headers=auth).status_code == 200
        assert httpx.get(live_server.url + "/api/campaigns/",
                         headers={"Authorization": f"Token {old_key[:-1]}8"}).status_code == 401
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"DROP TABLE {qn('authtoken_token')}")


def test_owner_invitations_are_in_the_admin_read_only_but_their_expiry(live_server, session):
    from datetime import timedelta

    from crowd import owners
    from crowd.models import OwnerInvitation

    bob = user("bob")
    root = user("root", is_staff=True, is_superuser=True)
    invitation = owners.invite(bare_campaign("shared", bob), "carol", bob)
    admin = session(root)
    listing = admin.get("/admin/crowd/ownerinvitation/?q=carol&state__exact=pending")
    assert listing.status_code == 200 and "carol" in listing.text and "shared" in listing.text
    url = f"/admin/crowd/ownerinvitation/{invitation.pk}/change/"
    page = admin.get(url)
    assert page.status_code == 200 and 'name="expires_at_0"' in page.text
    assert 'name="state"' not in page.text and 'name="username"' not in page.text  # read-only: shown, not fields
    assert admin.get("/admin/crowd/ownerinvitation/add/").status_code == 403
    later = invitation.expires_at + timedelta(days=3)
    changed = admin.post(url, data={"expires_at_0": f"{later:%Y-%m-%d}", "expires_at_1": f"{later:%H:%M:%S}",
                                    "state": "accepted", "username": "mallory", "_save": "Save"})
    assert changed.status_code == 302
    invitation.refresh_from_db()
    assert (invitation.state, invitation.username) == ("pending", "carol")  # the hand-written values are ignored
    assert invitation.expires_at.date() == later.date()
    assert list(invitation.campaign.owners.all()) == [bob]
