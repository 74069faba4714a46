"""The campaign resources of the REST API (api/campaigns.py) on real data: the 40-image
Flickr8k-Expert subset with BLEU-4 and CIDEr-D, campaigns rated by simulated raters. Creating over
the API gives the campaign ``create_campaign`` gives for the same options, refuses what the command
refuses (nothing written) and honours Idempotency-Key; state moves are the page's (audit trail,
finishing needs a confirmation); progress, report, judgments (JSON, CSV, JSON Lines) and worker
statistics are the owner pages' downloads; only owners (and superusers) see a campaign: others
get 404, anonymous clients 401."""
import json

import pytest
from django.contrib.auth.models import User
from api.account import create_token

from crowd import engine
from crowd.models import AuditEntry, Campaign, Item
from crowd.simulate import simulate

from .conftest import run_command
from .test_campaign_pages import alice, bob, scored  # noqa: F401 - fixtures

pytestmark = pytest.mark.django_db


def post(client, url, data, **headers):
    return client.post(url, json.dumps(data), content_type="application/json", **headers)


def _problem(response, status: int, field: str | None = None) -> dict:
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/problem+json"
    body = response.json()
    assert body["status"] == status and body["detail"]
    if field is not None:
        assert [e["field"] for e in body["errors"]] == [field], body
    return body


def _items(campaign):
    return list(Item.objects.filter(campaign=campaign).order_by("position")
                .values_list("position", "key", "payload", "is_gold", "gold"))


def test_create_gives_the_campaign_of_create_campaign_with_the_same_options(scored, alice, client, tmp_path):  # noqa: F811
    client.force_login(alice)
    options = {"images": 12, "k": 2, "gold": 3, "seed": 7, "cap": 20, "minutes": 5, "reward": "0.25",
               "gold_every": 4, "title": "Rate these", "bundle": 6, "practice": 2, "practice_pass": 0.5,
               "consent_text": "I agree to take part.", "attention_max_failures": 2}
    response = post(client, "/api/campaigns/", {"kind": "rating", "dataset": "sub", "name": "api-made", **options})
    assert response.status_code == 201, response.content
    body = response.json()
    assert response["Location"] == "http://testserver/api/campaigns/api-made/"
    assert body["name"] == "api-made" and body["state"] == "draft" and body["owners"] == ["alice"]
    assert body["transitions"] == ["finished", "live"] and body["k"] == 2 and body["reward"] == "0.25"
    consent = tmp_path / "consent.txt"
    consent.write_text("I agree to take part.", encoding="utf-8")
    run_command("create_campaign", "rating", "--dataset", "sub", "--name", "cmd-made", "--owner", "alice",
                "--images", "12", "--k", "2", "--gold", "3", "--seed", "7", "--cap", "20", "--minutes", "5",
                "--reward", "0.25", "--gold-every", "4", "--title", "Rate these", "--bundle", "6", "--practice", "2",
                "--practice-pass", "0.5", "--consent-file", str(consent), "--attention-max-failures", "2")
    api, cmd = Campaign.objects.get(name="api-made"), Campaign.objects.get(name="cmd-made")
    fields = ("title", "kind", "dataset_id", "instructions", "judgments_per_item", "per_worker_cap",
              "assignment_seconds", "reward", "state", "provider", "template_version", "options", "gold_every",
              "bundle_size", "session_minutes", "consent_text", "practice_pass", "attention_max_failures")
    assert {f: getattr(api, f) for f in fields} == {f: getattr(cmd, f) for f in fields}
    assert _items(api) == _items(cmd) and len(_items(api)) > 12  # real items of 12 images + gold
    assert list(api.owners.all()) == list(cmd.owners.all()) == [alice]
    assert body["progress"] == client.get("/campaigns/api-made/status.json").json()


def test_create_refuses_what_the_command_refuses_and_writes_nothing(scored, alice, bob, client):  # noqa: F811
    client.force_login(alice)
    good = {"kind": "rating", "dataset": "sub", "name": "fine", "images": 5}
    cases = [
        ({"name": "not a slug"}, "name", "invalid name 'not a slug'"),
        ({"k": 0}, "k", "k must be between 1 and 32,767, got 0"),
        ({"cap": 0}, "cap", "cap must be between 1"),
        ({"minutes": 0.01}, "minutes", "minutes must be between 1/6"),
        ({"lifetime_days": -1}, "lifetime_days", "lifetime_days must be between 0 and 36,500"),
        ({"reward": "ten"}, "reward", "reward must be an amount of dollars"),
        ({"image_url": "ftp://host/{key}"}, "image_url", "image_url"),
        ({"bundle": 5000}, "bundle", "bundle size must be a whole number from 0 to 1000"),
        ({"practice_pass": 0}, "practice_pass", "practice pass mark must be a share in (0, 1]"),
        ({"consent_text": "x" * 20_001}, "consent_text", "20000 characters"),
        ({"dataset": "no-such-dataset"}, "dataset", "unknown dataset 'no-such-dataset'"),
        ({"owners": ["nobody"]}, "owners", "only a superuser sets owners directly"),
        ({"owners": ["bob"]}, "owners", "only a superuser sets owners directly"),
        ({"kind": "no-such-kind"}, "kind", "is not a valid choice"),
        ({"systems": ["no-such-system"], "kind": "diversity"}, None, "no-such-system"),
        ({"practice": 3, "kind": "description"}, None, "have no gold items, so no practice items either"),
    ]
    for change, field, message in cases:
        body = _problem(post(client, "/api/campaigns/", {**good, **change}), 400, field)
        assert message in body["detail"], (change, body["detail"])
    assert not Campaign.objects.exists()
    assert post(client, "/api/campaigns/", good).status_code == 201
    body = _problem(post(client, "/api/campaigns/", {**good, "images": 6}), 409)
    assert body["detail"] == "a campaign named 'fine' exists already"
    assert Campaign.objects.count() == 1 and Campaign.objects.get().owners.get() == alice
    # more owners, as create_campaign --owner: a superuser names them (anyone else invites: test_leaks.py)
    client.force_login(User.objects.create_superuser("root", password="pw"))
    assert post(client, "/api/campaigns/", {**good, "name": "shared", "owners": ["bob", "alice"]}).status_code == 201
    assert set(Campaign.objects.get(name="shared").owners.values_list("username", flat=True)) == {"root", "alice", "bob"}
    _problem(post(client, "/api/campaigns/", {**good, "name": "shared2", "owners": ["nobody"]}), 400, "owners")


def test_create_with_an_idempotency_key_replays_instead_of_creating_twice(scored, alice, client):  # noqa: F811
    client.force_login(alice)
    data = {"kind": "rating", "dataset": "sub", "name": "once", "images": 5}
    first = post(client, "/api/campaigns/", data, HTTP_IDEMPOTENCY_KEY="create-once-1")
    again = post(client, "/api/campaigns/", data, HTTP_IDEMPOTENCY_KEY="create-once-1")
    assert first.status_code == again.status_code == 201
    assert again.json() == first.json() and again["Idempotent-Replayed"] == "true"
    assert again["Location"] == first["Location"]
    assert Campaign.objects.filter(name="once").count() == 1
    # the key of another request: 422, nothing created
    _problem(post(client, "/api/campaigns/", {**data, "name": "twice"}, HTTP_IDEMPOTENCY_KEY="create-once-1"), 422)
    assert not Campaign.objects.filter(name="twice").exists()
    # without a key the same request is refused on the name
    _problem(post(client, "/api/campaigns/", data), 409)


def test_state_moves_are_the_pages_with_the_audit_trail(scored, alice, client):  # noqa: F811
    campaign = engine.create_campaign(scored, "rating", name="moves", owners=[alice], options={"images": 5})
    client.force_login(alice)
    url = "/api/campaigns/moves/state/"
    steps = [("live", "publish", ["finished", "paused"]), ("paused", "pause", ["finished", "live"]),
             ("live", "resume", ["finished", "paused"])]
    for state, verb, transitions in steps:
        response = post(client, url, {"state": state})
        assert response.status_code == 200 and response.json()["state"] == state
        assert response.json()["transitions"] == transitions
        assert AuditEntry.objects.filter(campaign=campaign).first().action == verb
    assert post(client, url, {"state": "live"}).status_code == 200  # the same state again: nothing changes
    assert AuditEntry.objects.filter(campaign=campaign).count() == 3
    body = _problem(post(client, url, {"state": "finished"}), 400, "confirm")
    assert "finishing is final" in body["detail"] and "send confirm: true" in body["detail"]
    campaign.refresh_from_db()
    assert campaign.state == "live"
    _problem(post(client, url, {"state": "closed"}), 400, "state")
    response = post(client, url, {"state": "finished", "confirm": True})
    assert response.status_code == 200 and response.json()["transitions"] == []
    assert AuditEntry.objects.filter(campaign=campaign).first().action == "finish"
    assert AuditEntry.objects.filter(campaign=campaign).first().actor == "alice"
    body = _problem(post(client, url, {"state": "live"}), 409)
    assert body["detail"] == "a finished campaign cannot become live"
    campaign.refresh_from_db()
    assert campaign.state == "finished"


def test_progress_report_judgments_and_workers_are_the_owner_pages_downloads(scored, alice, client):  # noqa: F811
    campaign = engine.create_campaign(scored, "rating", name="rated", owners=[alice], state=Campaign.LIVE,
                                      options={"images": 4}, k=3)
    simulate(campaign, raters=2, seed=3, noise=0.05)  # two of the three judgments per item: not finished
    client.force_login(alice)
    progress = client.get("/api/campaigns/rated/progress/")
    assert progress.status_code == 200 and progress.json() == client.get("/campaigns/rated/status.json").json()
    assert progress.json()["judgments"] == 2 * progress.json()["items"] and progress.json()["state"] == "live"
    page_report = client.get("/campaigns/rated/report.json").json()
    report = client.get("/api/campaigns/rated/report/")
    assert report.status_code == 200 and report.json() == page_report
    assert report.json()["agreement"]["relevance"]["ratings"] == 2 * progress.json()["items"]
    workers = client.get("/api/campaigns/rated/workers/").json()
    assert workers == {"campaign": "rated", "workers": page_report["workers"]} and len(workers["workers"]) == 2
    page_jsonl = client.get("/campaigns/rated/judgments.jsonl").content.decode()
    rows = client.get("/api/campaigns/rated/judgments/")
    assert rows.status_code == 200 and rows["Content-Type"] == "application/json"
    assert rows.json() == [json.loads(line) for line in page_jsonl.splitlines()]
    assert len(rows.json()) > 0 and {r["criterion"] for r in rows.json()} == {"relevance", "thoroughness"}
    as_csv = client.get("/api/campaigns/rated/judgments/?format=csv")
    assert as_csv.status_code == 200 and as_csv["Content-Type"] == "text/csv; charset=utf-8"
    assert as_csv.content == client.get("/campaigns/rated/judgments.csv").content
    assert as_csv["Content-Disposition"] == 'attachment; filename="rated-judgments.csv"'
    as_jsonl = client.get("/api/campaigns/rated/judgments/?format=jsonl")
    assert as_jsonl.status_code == 200 and as_jsonl.content.decode() == page_jsonl
    assert client.get("/api/campaigns/rated/judgments/", HTTP_ACCEPT="text/csv").content == as_csv.content
    _problem(client.get("/api/campaigns/rated/judgments/?format=xml"), 400, "format")
    detail = client.get("/api/campaigns/rated/").json()
    assert detail["progress"] == progress.json() and detail["state"] == "live"


def test_a_formula_in_an_answer_is_neutralised_in_the_csv(scored, alice, client):  # noqa: F811
    campaign = engine.create_campaign(scored, "description", name="texts", owners=[alice], state=Campaign.LIVE,
                                      options={"images": 2}, k=1)
    worker = engine.invite_workers(1, campaign=campaign)[0]
    while True:
        try:
            assignment = engine.accept(campaign, worker)
        except engine.NoTask:
            break
        engine.submit(assignment.pk, worker, {"description": "=HYPERLINK(\"http://evil\") a dog runs on the grass"})
    client.force_login(alice)
    text = client.get("/api/campaigns/texts/judgments/?format=csv").content.decode()
    assert "'=HYPERLINK" in text and ",=HYPERLINK" not in text
    assert all(r["value"].startswith("=HYPERLINK") for r in client.get("/api/campaigns/texts/judgments/").json())


def test_only_owners_and_superusers_see_a_campaign(scored, alice, bob, client):  # noqa: F811
    mine = engine.create_campaign(scored, "rating", name="alices", owners=[alice], state=Campaign.LIVE,
                                  options={"images": 3})
    engine.create_campaign(scored, "rating", name="bobs", owners=[bob], options={"images": 3})
    rater = User.objects.create_user("rater", password="pw")
    engine.add_raters(mine, [engine.worker_for_user(rater)])  # rates alice's campaign, owns nothing
    root = User.objects.create_superuser("root", password="pw")
    staff = User.objects.create_user("staff", password="pw", is_staff=True)
    gets = ["", "progress/", "report/", "judgments/", "judgments/?format=csv", "workers/"]

    def names(user):
        client.force_login(user)
        return [c["name"] for c in client.get("/api/campaigns/").json()["results"]]

    assert names(alice) == ["alices"] and names(bob) == ["bobs"] and names(rater) == [] and names(staff) == []
    assert names(root) == ["bobs", "alices"]  # newest first
    for user in (bob, rater, staff):
        client.force_login(user)
        for tail in gets:
            body = _problem(client.get(f"/api/campaigns/alices/{tail}"), 404)
            assert body["detail"] == "no such campaign"
        _problem(post(client, "/api/campaigns/alices/state/", {"state": "paused"}), 404)
    client.force_login(root)
    for tail in gets:
        assert client.get(f"/api/campaigns/alices/{tail}").status_code == 200, tail
    client.logout()
    for tail in gets:
        _problem(client.get(f"/api/campaigns/alices/{tail}"), 401)
    _problem(client.get("/api/campaigns/"), 401)
    _problem(post(client, "/api/campaigns/", {"kind": "rating", "dataset": "sub", "name": "anon"}), 401)
    _problem(post(client, "/api/campaigns/alices/state/", {"state": "paused"}), 401)
    mine.refresh_from_db()
    assert mine.state == "live" and not Campaign.objects.filter(name="anon").exists()
    # a token works as the session does
    token = create_token(alice)
    response = client.get("/api/campaigns/alices/progress/", HTTP_AUTHORIZATION=f"Token {token}")
    assert response.status_code == 200 and response.json()["campaign"] == "alices"


def test_the_list_is_paginated(scored, alice, client):  # noqa: F811
    for i in range(3):
        engine.create_campaign(scored, "rating", name=f"c{i}", owners=[alice], options={"images": 2})
    client.force_login(alice)
    first = client.get("/api/campaigns/?limit=2").json()
    assert first["count"] == 3 and [c["name"] for c in first["results"]] == ["c2", "c1"]
    rest = client.get(first["next"]).json()
    assert [c["name"] for c in rest["results"]] == ["c0"] and rest["next"] is None
    row = first["results"][0]
    assert row["url"] == "http://testserver/api/campaigns/c2/" and row["state"] == "draft"
    assert row["items"] == Item.objects.filter(campaign__name="c2", is_gold=False).count()
    assert row["judgments"] == 0 and row["agreement"] is None


def test_the_report_is_202_while_queued_then_the_pages_json(scored, alice, client):  # noqa: F811
    from unittest import mock

    from analysis.models import Report
    from analysis.tasks import compute_report

    campaign = engine.create_campaign(scored, "rating", name="queued", owners=[alice], state=Campaign.LIVE,
                                      options={"images": 5}, k=3)
    simulate(campaign, raters=2, seed=2, noise=0.05)
    client.force_login(alice)
    queued = []
    with mock.patch.object(compute_report, "delay", side_effect=queued.append):  # a broker holds the message
        response = client.get("/api/campaigns/queued/report/")
        assert response.status_code == 202 and response["Retry-After"] == "2"
        body = response.json()
        assert body["report"] == "campaign report" and body["status"] == Report.PENDING
        assert response["Location"] == body["status_url"] == f"http://testserver/api/reports/status/{body['id']}/"
        assert client.get(body["status_url"]).json()["status"] == Report.PENDING
        assert client.get("/api/campaigns/queued/report/").status_code == 202
    assert queued == [body["id"]]  # queued once
    assert compute_report(queued[0]) == Report.DONE  # what the worker runs
    report = client.get("/api/campaigns/queued/report/")
    assert report.status_code == 200 and report.json() == client.get("/campaigns/queued/report.json").json()
    assert report.json()["progress"]["judgments"] == 2 * campaign.items.filter(is_gold=False).count()
