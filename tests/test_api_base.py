"""The REST API's foundation (api/base.py, api/account.py, manage.py api_token): errors as RFC 9457
problem documents, pagination, the rate limit, Idempotency-Key replay and conflicts, API tokens
from the command and from the account page (with headless Chromium screenshots at 1400 and 390
pixels wide). Requests go to the real endpoints over one world of real data (tests/api_matrix.py)."""
import json
import re
from datetime import timedelta

import pytest
from django.core.cache import cache
from django.core.management.base import CommandError
from django.test import Client
from knox.crypto import hash_token
from knox.models import AuthToken
from rest_framework.parsers import JSONParser
from rest_framework.request import Request
from rest_framework.test import APIRequestFactory

from api import base
from api.models import IdempotencyRecord
from crowd.models import Caption, System
from metrics.models import MetricRun

from .api_matrix import world  # noqa: F401 (a fixture)
from .conftest import run_command, stale

PROBLEM_KEYS = {"type", "title", "status", "detail", "instance"}


def auth(world, user):  # noqa: F811
    return {"HTTP_AUTHORIZATION": f"Token {world.tokens[user]}"}


def post_json(client, path, data, **headers):
    return client.post(path, json.dumps(data), content_type="application/json", **headers)


def problem_of(response, status):
    assert response.status_code == status, response.content[:500]
    assert response["Content-Type"] == "application/problem+json"
    body = response.json()
    assert PROBLEM_KEYS <= set(body) and body["status"] == status
    assert body["type"].startswith("urn:captioneval:problem:") and body["detail"]
    return body


# --- problem details ------------------------------------------------------------------------------------

def test_errors_are_problem_documents(world, db):  # noqa: F811
    c = Client()
    body = problem_of(c.get("/api/no/such/thing/"), 404)
    assert set(body) == PROBLEM_KEYS and body["title"] == "Not Found" and body["instance"] == "/api/no/such/thing/"
    assert body["type"] == "urn:captioneval:problem:not_found"
    hint = problem_of(c.get("/api/datasets"), 404)["detail"]
    assert hint.endswith("did you mean /api/datasets/ (API paths end with a slash)?")
    assert "did you mean" not in problem_of(c.get("/api/nothing"), 404)["detail"]
    # a path with an encoded line break is an API path too (not Django's HTML 404)
    assert problem_of(c.get("/api/no%0Athing/"), 404)["instance"] == "/api/no\nthing/"

    response = post_json(c, "/api/runs/", {"dataset": world.dataset, "metrics": ["bleu_1"]})
    assert problem_of(response, 401)["type"].endswith(":not_authenticated")
    assert response["WWW-Authenticate"] == "Token"
    bad = post_json(c, "/api/runs/", {}, HTTP_AUTHORIZATION="Token " + "0" * 40)
    assert problem_of(bad, 401)["type"].endswith(":authentication_failed")

    denied = problem_of(post_json(c, "/api/runs/", {"dataset": world.dataset, "metrics": ["bleu_1"]},
                                  **auth(world, "owner")), 403)
    assert denied["type"].endswith(":permission_denied") and denied["title"] == "Forbidden"

    invalid = problem_of(post_json(c, "/api/runs/", {"metrics": "bleu_1", "extra": 1}, **auth(world, "staff")), 400)
    assert invalid["type"].endswith(":invalid")
    fields = {e["field"]: e for e in invalid["errors"]}
    assert set(fields) == {"dataset", "metrics"} and fields["dataset"]["code"] == "required"
    assert "dataset: " in invalid["detail"] and "metrics: " in invalid["detail"]

    # Django's Http404 from get_object_or_404 inside a view, and a 405 with its Allow header
    missing = problem_of(c.get("/api/datasets/no-such-dataset/"), 404)
    assert "No Dataset matches" in missing["detail"]
    put = c.put(f"/api/runs/{world.run}/", "{}", content_type="application/json", **auth(world, "staff"))
    assert problem_of(put, 405)["type"].endswith(":method_not_allowed") and "GET" in put["Allow"]
    text = c.post("/api/runs/", "dataset=x", content_type="text/plain", **auth(world, "staff"))
    assert problem_of(text, 415)["type"].endswith(":unsupported_media_type")
    unknown_metric = problem_of(post_json(c, "/api/runs/", {"dataset": world.dataset, "metrics": ["nope"]},
                                          **auth(world, "staff")), 400)
    assert unknown_metric["errors"][0]["field"] == "metrics" and "nope" in unknown_metric["detail"]
    nul = problem_of(c.get("/api/runs/?metric=a%00b"), 400)
    assert nul["errors"][0]["field"] == "metric"
    # the browser's session works for reads, and its writes keep Django's CSRF check
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(world.users["staff"])
    assert browser.get("/api/datasets/").status_code == 200
    csrf = problem_of(post_json(browser, "/api/runs/", {"dataset": world.dataset, "metrics": ["bleu_1"]}), 403)
    assert "CSRF" in csrf["detail"]


def test_an_unexpected_exception_is_a_500_problem_without_details(world, db, monkeypatch):  # noqa: F811
    from api import importing

    def broken():
        raise RuntimeError("secret internal detail")

    monkeypatch.setattr(importing, "datasets_queryset", broken)
    response = Client().get("/api/datasets/")
    body = problem_of(response, 500)
    assert "secret" not in response.content.decode() and body["type"].endswith(":server_error")


# --- pagination -------------------------------------------------------------------------------------------

def test_pagination_walks_every_caption_once_in_order(world, db):  # noqa: F811
    c = Client()
    expected = list(Caption.objects.filter(system__dataset__name=world.dataset).order_by("pk")
                    .values_list("pk", flat=True))
    assert len(expected) > 100
    page = c.get(f"/api/datasets/{world.dataset}/captions/?limit=7&offset=5").json()
    assert page["count"] == len(expected) and [r["id"] for r in page["results"]] == expected[5:12]
    assert "offset=12" in page["next"] and "limit=7" in page["next"] and "offset=5" not in page["previous"]
    seen, url = [], f"/api/datasets/{world.dataset}/captions/?limit=50"
    while url:
        data = c.get(url).json()
        seen += [r["id"] for r in data["results"]]
        url = data["next"]
    assert seen == expected
    capped = c.get(f"/api/datasets/{world.dataset}/captions/?limit=100000").json()
    assert len(capped["results"]) == min(len(expected), base.Pagination.max_limit)
    one_system = c.get(f"/api/datasets/{world.dataset}/captions/?system=model&limit=1000").json()
    model = System.objects.get(dataset__name=world.dataset, name="model")
    assert one_system["count"] == model.captions.count() and {r["system"] for r in one_system["results"]} == {"model"}


# --- rate limit -------------------------------------------------------------------------------------------

def test_the_rate_limit_answers_429_problem_with_retry_after(world, db, settings):  # noqa: F811
    settings.API_RATE_LIMIT = "3/m"
    cache.clear()
    c = Client()
    statuses = [c.get("/api/datasets/", **auth(world, "owner")).status_code for _ in range(3)]
    assert statuses == [200, 200, 200]
    over = c.get("/api/datasets/", **auth(world, "owner"))
    body = problem_of(over, 429)
    assert body["type"].endswith(":throttled") and 1 <= int(over["Retry-After"]) <= 60
    # counted per user: another token and an anonymous client still have their own allowance
    assert c.get("/api/datasets/", **auth(world, "rater")).status_code == 200
    assert c.get("/api/datasets/").status_code == 200
    settings.API_RATE_LIMIT = "0"
    assert c.get("/api/datasets/", **auth(world, "owner")).status_code == 200
    cache.clear()


# --- idempotency ------------------------------------------------------------------------------------------

def test_idempotency_key_replays_and_refuses_another_request(world, db):  # noqa: F811
    c, staff = Client(), auth(world, "staff")
    body = {"dataset": world.dataset, "metrics": ["bleu_1"]}
    runs_before = MetricRun.objects.count()
    first = post_json(c, "/api/runs/", body, HTTP_IDEMPOTENCY_KEY="job-1", **staff)
    assert first.status_code == 202 and "Idempotent-Replayed" not in first
    again = post_json(c, "/api/runs/", body, HTTP_IDEMPOTENCY_KEY='"job-1"', **staff)  # structured-field string
    assert again.status_code == 202 and again["Idempotent-Replayed"] == "true" and again.json() == first.json()
    assert IdempotencyRecord.objects.filter(key="job-1").count() == 1 and MetricRun.objects.count() == runs_before
    other = post_json(c, "/api/runs/", {**body, "metrics": ["bleu_2"]}, HTTP_IDEMPOTENCY_KEY="job-1", **staff)
    assert problem_of(other, 422)["type"].endswith(":idempotency_key_reused")
    assert MetricRun.objects.count() == runs_before  # nothing planned for the refused request
    # keys are per user: another staff user's "job-1" is a different key
    for bad in ("", "x" * 256, "caf\u00e9"):
        refused = post_json(c, "/api/runs/", body, HTTP_IDEMPOTENCY_KEY=bad, **staff)
        assert problem_of(refused, 400)["errors"][0]["field"] == "Idempotency-Key"
    # an error is not stored: the same key with a corrected request is processed
    wrong = post_json(c, "/api/runs/", {"dataset": world.dataset, "metrics": ["nope"]},
                      HTTP_IDEMPOTENCY_KEY="job-2", **staff)
    assert wrong.status_code == 400 and not IdempotencyRecord.objects.filter(key="job-2").exists()
    # a remembered key expires
    IdempotencyRecord.objects.filter(key="job-1").update(created_at=base.timezone.now() - timedelta(days=2))
    IdempotencyRecord.objects.create(user=world.users["staff"], key="old-other", method="POST", path="/api/runs/",
                                     request_hash="x", status=202)
    IdempotencyRecord.objects.filter(key="old-other").update(created_at=base.timezone.now() - timedelta(days=2))
    fresh = post_json(c, "/api/runs/", body, HTTP_IDEMPOTENCY_KEY="job-1", **staff)
    assert fresh.status_code == 202 and "Idempotent-Replayed" not in fresh
    assert not IdempotencyRecord.objects.filter(key="old-other").exists()  # expired keys are forgotten


def test_idempotency_key_in_progress_is_a_409(world, db):  # noqa: F811
    body = {"dataset": world.dataset, "metrics": ["bleu_1"]}
    raw = APIRequestFactory().post("/api/runs/", body, format="json")
    digest = base.request_digest(Request(raw, parsers=[JSONParser()]))
    IdempotencyRecord.objects.create(user=world.users["staff"], key="busy", method="POST", path="/api/runs/",
                                     request_hash=digest)  # status None: the first request is still running
    response = post_json(Client(), "/api/runs/", body, HTTP_IDEMPOTENCY_KEY="busy", **auth(world, "staff"))
    assert problem_of(response, 409)["type"].endswith(":idempotency_key_in_progress")
    # a request that died without an answer (older than IN_PROGRESS_SECONDS) frees its key
    IdempotencyRecord.objects.filter(key="busy").update(
        created_at=base.timezone.now() - timedelta(seconds=base.IN_PROGRESS_SECONDS + 1))
    retried = post_json(Client(), "/api/runs/", body, HTTP_IDEMPOTENCY_KEY="busy", **auth(world, "staff"))
    assert retried.status_code == 202 and IdempotencyRecord.objects.get(key="busy").status == 202


def test_idempotency_key_on_a_multipart_upload(world, db):  # noqa: F811
    from django.core.files.uploadedfile import SimpleUploadedFile

    results = (world.files / "thumb_models.json").read_bytes()

    def upload(content, name="model-c"):
        return Client().post("/api/datasets/", {"format": "coco", "name": world.dataset, "system": name,
                                                "results": SimpleUploadedFile("r.json", content)},
                             HTTP_IDEMPOTENCY_KEY="up-1", **auth(world, "staff"))

    first = upload(results)
    assert first.status_code == 201 and first.json()["created"] is True
    replay = upload(results)
    assert replay.status_code == 201 and replay["Idempotent-Replayed"] == "true" and replay.json() == first.json()
    changed = json.loads(results)
    changed[0]["caption"] += " (edited)"
    assert upload(json.dumps(changed).encode()).status_code == 422
    assert System.objects.filter(dataset__name=world.dataset, name="model-c").count() == 1


# --- tokens: command ----------------------------------------------------------------------------------------

def test_api_token_command_creates_lists_replaces_and_revokes(world, db):  # noqa: F811
    from django.contrib.auth.models import User

    User.objects.create_user("carol", password="pw")
    key = run_command("api_token", "create", "--user", "carol").strip()
    stored = AuthToken.objects.get(user__username="carol")  # its digest, never the key
    assert re.fullmatch(r"[0-9a-f]{64}", key) and stored.digest == hash_token(key) and key not in str(vars(stored))
    c = Client()
    assert c.get("/api/datasets/", HTTP_AUTHORIZATION=f"Token {key}").status_code == 200
    with pytest.raises(CommandError, match="already has a token"):
        run_command("api_token", "create", "--user", "carol")
    listed = run_command("api_token", "list")
    assert f"carol\t" in listed and key[:4] + "..." in listed and key not in listed
    new = run_command("api_token", "create", "--user", "carol", "--replace").strip()
    assert new != key and c.get("/api/datasets/", HTTP_AUTHORIZATION=f"Token {key}").status_code == 401
    assert "revoked" in run_command("api_token", "revoke", "--user", "carol")
    assert c.get("/api/datasets/", HTTP_AUTHORIZATION=f"Token {new}").status_code == 401
    with pytest.raises(CommandError, match="has no token"):
        run_command("api_token", "revoke", "--user", "carol")
    with pytest.raises(CommandError, match="no user named"):
        run_command("api_token", "create", "--user", "nobody")
    with pytest.raises(CommandError, match="needs --user"):
        run_command("api_token", "create")


# --- tokens: account page -----------------------------------------------------------------------------------

def test_account_page_creates_shows_once_and_revokes(world, db):  # noqa: F811
    from django.contrib.auth.models import User

    user = User.objects.create_user("dave", password="pw")
    assert Client().get("/accounts/api-token/").status_code == 302  # anonymous: to the login page
    c = Client(enforce_csrf_checks=True)
    c.force_login(user)
    page = c.get("/accounts/api-token/")
    assert page.status_code == 200 and "You have no API token" in page.content.decode()
    csrf = page.cookies["csrftoken"].value
    assert c.post("/accounts/api-token/", {"action": "create"}).status_code == 403  # no CSRF token: refused
    assert not AuthToken.objects.filter(user=user).exists()
    created = c.post("/accounts/api-token/", {"action": "create", "csrfmiddlewaretoken": csrf})
    key = re.search(r'id="new-key" readonly value="([0-9a-f]{64})"', created.content.decode()).group(1)
    assert created.status_code == 200 and AuthToken.objects.get(user=user).digest == hash_token(key)
    assert Client().get("/api/datasets/", HTTP_AUTHORIZATION=f"Token {key}").status_code == 200
    later = c.get("/accounts/api-token/").content.decode()
    assert key not in later and key[:4] in later  # shown once only
    replaced = c.post("/accounts/api-token/", {"action": "create", "csrfmiddlewaretoken": csrf})
    new = re.search(r'id="new-key" readonly value="([0-9a-f]{64})"', replaced.content.decode()).group(1)
    assert new != key and AuthToken.objects.get(user=user).digest == hash_token(new)
    assert c.post("/accounts/api-token/", {"action": "nonsense", "csrfmiddlewaretoken": csrf}).status_code == 400
    revoked = c.post("/accounts/api-token/", {"action": "revoke", "csrfmiddlewaretoken": csrf})
    assert "API token revoked" in revoked.content.decode() and not AuthToken.objects.filter(user=user).exists()
    assert Client().get("/api/datasets/", HTTP_AUTHORIZATION=f"Token {new}").status_code == 401


@pytest.mark.django_db(transaction=True)
def test_account_page_in_chromium_at_1400_and_390(live_server, browser, tmp_path):
    """Log in, create a token, read it from the page (it is the stored one), screenshot the page
    at 1400 and 390 pixels wide (tmp_path/api-token-<width>.png); at 390 nothing scrolls sideways."""
    from django.contrib.auth.models import User
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    User.objects.create_user("erin", password="pw-erin-1")
    browser.get(live_server.url + "/accounts/login/?next=/accounts/api-token/")
    browser.find_element(By.NAME, "username").send_keys("erin")
    browser.find_element(By.NAME, "password").send_keys("pw-erin-1")
    browser.find_element(By.CSS_SELECTOR, "form button[type=submit], form input[type=submit]").click()
    WebDriverWait(browser, 10).until(lambda d: d.find_elements(By.ID, "token-state"))
    assert "You have no API token" in browser.find_element(By.ID, "token-state").text
    old = browser.find_element(By.ID, "token-state")
    browser.find_element(By.ID, "create-token").click()
    WebDriverWait(browser, 10).until(stale(old))
    shown = browser.find_element(By.ID, "new-key").get_attribute("value")
    assert AuthToken.objects.get(user__username="erin").digest == hash_token(shown)
    for width in (1400, 390):
        browser.set_window_size(width, 900)
        assert browser.execute_script("return document.documentElement.scrollWidth") <= width
        browser.save_screenshot(str(tmp_path / f"api-token-{width}.png"))
        assert (tmp_path / f"api-token-{width}.png").stat().st_size > 5000
    old = browser.find_element(By.ID, "token-message")
    browser.find_element(By.ID, "revoke-token").click()
    WebDriverWait(browser, 10).until(stale(old))
    assert "API token revoked" in browser.find_element(By.ID, "token-message").text
    assert not AuthToken.objects.filter(user__username="erin").exists()


def test_production_refuses_a_malformed_api_rate():
    from .test_security import manage

    out = manage("check", "--deploy", API_RATE_LIMIT="lots")
    assert out.returncode != 0 and "API_RATE_LIMIT: bad rate 'lots'" in out.stderr, out.stderr[-2000:]
    assert manage("check", "--deploy", API_RATE_LIMIT="600/m").returncode == 0
