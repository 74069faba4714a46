"""Issue 21, items 5 and 9, through real HTTP requests (Django's test client, the project's settings
and middleware, django-axes with its database handler):

* logins on ``/accounts/login/`` and ``/admin/login/`` lock out after ``AXES_FAILURE_LIMIT`` failures,
  per client address and per user name, with the lock-out page (HTTP 429, ``Retry-After``); the right
  password is then refused until the cool-off passes or an administrator unlocks (``axes_reset``, or
  deleting the access attempt in the admin);
* the password reset pages answer 404 unless e-mail is configured; when it is, they work and are
  throttled per client address and per e-mail address;
* another rater's assignment answers exactly as a missing one (no existence oracle).
"""
from __future__ import annotations

import re
from datetime import timedelta

import pytest
from axes.models import AccessAttempt
from django.conf import settings as django_settings
from django.contrib.auth.models import User
from django.core import mail, signing
from django.core.cache import cache
from django.test import Client
from django.utils import timezone

from crowd import engine, ratelimit
from crowd.models import Assignment, Campaign, Dataset, HumanJudgment, Item
from crowd.mturk.collect import worker_for
from crowd.views import mturk as mturk_views

from .conftest import run_command
from .test_security import manage, production  # noqa: F401 - production is a fixture

pytestmark = pytest.mark.django_db

LOCKED = 'id="locked-out"'


@pytest.fixture(autouse=True)
def _fresh_counters(monkeypatch):
    """No failure or rate counter left by another test; the rate limiter's clock frozen in the
    middle of an hour so that a fixed window cannot end during the test."""
    cache.clear()
    now = [3600.0 * 500_000 + 60]
    monkeypatch.setattr(ratelimit, "time", type("Clock", (), {"time": staticmethod(lambda: now[0])}))
    yield now
    cache.clear()


@pytest.fixture
def alice():
    return User.objects.create_user("alice", email="alice@example.org", password="right-pw-alice")


@pytest.fixture
def root():
    return User.objects.create_superuser("root", email="root@example.org", password="right-pw-root")


def login(url: str, username: str, password: str, ip: str = "127.0.0.1", client: Client | None = None, **extra):
    """POST the login form of ``url`` from client address ``ip``; returns (client, response)."""
    client = client or Client(REMOTE_ADDR=ip)
    response = client.post(url, {"username": username, "password": password}, REMOTE_ADDR=ip, **extra)
    return client, response


def logged_in_as(client: Client) -> str | None:
    user_id = client.session.get("_auth_user_id")
    return User.objects.get(pk=user_id).username if user_id else None


def assert_locked(response):
    assert response.status_code == 429, response.status_code
    page = response.content.decode()
    assert LOCKED in page and "Logging in is paused" in page and "15 minutes" in page
    assert "axes_reset" in page  # tells how an administrator unlocks
    assert response["Retry-After"] == str(15 * 60)


def age_attempts(minutes: float) -> None:
    """Move every recorded failure ``minutes`` into the past (as if that time had passed)."""
    AccessAttempt.objects.update(attempt_time=timezone.now() - timedelta(minutes=minutes))


# --- logins ---------------------------------------------------------------------------------------

def test_settings_throttle_per_address_and_user_name_in_the_database():
    assert django_settings.AXES_FAILURE_LIMIT == 5
    assert django_settings.AXES_COOLOFF_TIME == timedelta(minutes=15)
    assert django_settings.AXES_LOCKOUT_PARAMETERS == ["ip_address", "username"]
    assert django_settings.AXES_HANDLER == "axes.handlers.database.AxesDatabaseHandler"
    assert django_settings.AUTHENTICATION_BACKENDS[0] == "axes.backends.AxesStandaloneBackend"
    assert django_settings.MIDDLEWARE[-1] == "axes.middleware.AxesMiddleware"
    assert django_settings.DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql"


def test_thirty_wrong_passwords_lock_out_the_login_page_until_the_cool_off(alice):
    codes = []
    client = Client()
    for i in range(30):
        _, r = login("/accounts/login/", "alice", f"guess-{i}", client=client)
        codes.append(r.status_code)
        if r.status_code == 429:
            assert_locked(r)
    # four failures answer the form again; the fifth and every one after it the lock-out page
    assert codes[:4] == [200] * 4 and codes[4:] == [429] * 26
    assert AccessAttempt.objects.get(username="alice", ip_address="127.0.0.1").failures_since_start == 30
    # the right password is refused now, and nobody is logged in
    _, r = login("/accounts/login/", "alice", "right-pw-alice", client=client)
    assert_locked(r)
    assert logged_in_as(client) is None
    assert client.get("/campaigns/").status_code == 302  # still anonymous: sent to the login page
    # 14 minutes later it is still refused (and the refused attempt restarts the cool-off) ...
    age_attempts(14)
    _, r = login("/accounts/login/", "alice", "right-pw-alice", client=client)
    assert_locked(r)
    # ... 16 minutes after the last attempt, the right password works again
    age_attempts(16)
    _, r = login("/accounts/login/", "alice", "right-pw-alice", client=client)
    assert r.status_code == 302 and r["Location"] == "/campaigns/"
    assert logged_in_as(client) == "alice"
    assert not AccessAttempt.objects.exists()  # expired failures are cleaned up


def test_admin_login_locks_out_and_axes_reset_unlocks(root):
    client = Client()
    codes = [login("/admin/login/", "root", f"guess-{i}", client=client)[1].status_code for i in range(10)]
    assert codes == [200] * 4 + [429] * 6
    _, r = login("/admin/login/", "root", "right-pw-root", client=client)
    assert_locked(r)
    assert logged_in_as(client) is None and client.get("/admin/").status_code == 302
    out = run_command("axes_reset")
    assert out == "1 attempts removed.\n" and not AccessAttempt.objects.exists()
    _, r = login("/admin/login/?next=/admin/", "root", "right-pw-root", client=client)
    assert r.status_code == 302 and r["Location"] == "/admin/"
    assert client.get("/admin/").status_code == 200 and logged_in_as(client) == "root"


def test_a_user_name_is_locked_from_every_address(alice):
    bob = User.objects.create_user("bob", password="right-pw-bob")
    for i in range(4):  # four addresses, one failure each: no address reaches the limit
        _, r = login("/accounts/login/", "alice", "wrong", ip=f"10.0.0.{i + 1}")
        assert r.status_code == 200
    _, r = login("/accounts/login/", "alice", "wrong", ip="10.0.0.5")  # the user name's fifth failure
    assert_locked(r)
    client, r = login("/accounts/login/", "alice", "right-pw-alice", ip="192.0.2.77")  # a fresh address
    assert_locked(r)
    assert logged_in_as(client) is None
    # the addresses themselves are not locked: another user logs in from one of them
    client, r = login("/accounts/login/", "bob", "right-pw-bob", ip="10.0.0.1")
    assert r.status_code == 302 and logged_in_as(client) == bob.username


def test_an_address_is_locked_for_every_user_name_and_forged_headers_do_not_help(alice):
    for i in range(5):  # five invented user names from one address, each claiming another origin and browser
        _, r = login("/accounts/login/", f"nobody{i}", "wrong", ip="198.51.100.9",
                     HTTP_X_FORWARDED_FOR=f"203.0.113.{i + 1}", HTTP_USER_AGENT=f"bot/{i}")
    assert_locked(r)
    client, r = login("/accounts/login/", "alice", "right-pw-alice", ip="198.51.100.9",
                      HTTP_X_FORWARDED_FOR="203.0.113.200")
    assert_locked(r)
    assert logged_in_as(client) is None
    # the user name is not locked: alice logs in from another address
    client, r = login("/accounts/login/", "alice", "right-pw-alice", ip="198.51.100.10")
    assert r.status_code == 302 and logged_in_as(client) == "alice"


def test_behind_a_trusted_proxy_clients_are_counted_by_their_own_address(alice, settings):
    settings.RATELIMIT_TRUSTED_PROXIES = 1
    for i in range(5):  # one proxy address, five different clients behind it
        _, r = login("/accounts/login/", f"nobody{i}", "wrong", ip="10.9.9.9", HTTP_X_FORWARDED_FOR=f"203.0.113.{i + 1}")
        assert r.status_code == 200
    client, r = login("/accounts/login/", "alice", "right-pw-alice", ip="10.9.9.9", HTTP_X_FORWARDED_FOR="203.0.113.50")
    assert r.status_code == 302 and logged_in_as(client) == "alice"
    for i in range(5):  # one client behind the proxy
        _, r = login("/accounts/login/", f"someone{i}", "wrong", ip="10.9.9.9", HTTP_X_FORWARDED_FOR="203.0.113.66")
    assert_locked(r)
    assert AccessAttempt.objects.filter(ip_address="203.0.113.66").count() == 5


def test_an_administrator_unlocks_in_the_admin(alice, root):
    for i in range(5):
        _, r = login("/accounts/login/", "alice", f"guess-{i}")
    assert_locked(r)
    admin = Client()
    admin.force_login(root)
    listing = admin.get("/admin/axes/accessattempt/")
    assert listing.status_code == 200 and "alice" in listing.content.decode()
    ids = [str(pk) for pk in AccessAttempt.objects.values_list("pk", flat=True)]
    r = admin.post("/admin/axes/accessattempt/", {"action": "delete_selected", "_selected_action": ids, "post": "yes"})
    assert r.status_code == 302 and not AccessAttempt.objects.exists()
    client, r = login("/accounts/login/", "alice", "right-pw-alice")
    assert r.status_code == 302 and logged_in_as(client) == "alice"


def test_under_the_production_settings_the_lock_out_holds_over_https(alice, production):
    client = Client()
    codes = [client.post("/admin/login/", {"username": "alice", "password": f"guess-{i}"}, secure=True).status_code
             for i in range(6)]
    assert codes == [200] * 4 + [429] * 2
    r = client.post("/admin/login/", {"username": "alice", "password": "right-pw-alice"}, secure=True)
    assert_locked(r)
    assert r["Strict-Transport-Security"].startswith(f"max-age={production.SECURE_HSTS_SECONDS}")
    assert r["X-Frame-Options"] == "DENY"
    assert client.get("/accounts/password_reset/", secure=True).status_code == 404


def test_production_refuses_a_malformed_password_reset_rate():
    out = manage("check", PASSWORD_RESET_RATE_LIMIT="lots")
    assert out.returncode != 0 and "PASSWORD_RESET_RATE_LIMIT: bad rate 'lots'" in out.stderr, out.stderr[-2000:]
    assert manage("check", PASSWORD_RESET_RATE_LIMIT="10/h").returncode == 0


# --- password reset -------------------------------------------------------------------------------

RESET_URLS = ("/accounts/password_reset/", "/accounts/password_reset/done/", "/accounts/reset/MQ/set-password/",
              "/accounts/reset/done/")


def test_password_reset_is_off_without_email(alice):
    assert django_settings.PASSWORD_RESET_ENABLED is False  # no EMAIL_HOST in the test environment
    client = Client()
    for url in RESET_URLS:
        assert client.get(url).status_code == 404, url
        assert client.post(url, {"email": "alice@example.org"}).status_code == 404, url
    assert mail.outbox == []
    page = client.get("/accounts/login/").content.decode()
    assert "password_reset" not in page and "Forgot your password" not in page


def test_password_reset_works_and_is_throttled_when_email_is_configured(alice, settings):
    settings.PASSWORD_RESET_ENABLED = True
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    settings.PASSWORD_RESET_RATE_LIMIT = "3/h"
    page = Client().get("/accounts/login/").content.decode()
    assert 'id="password-reset"' in page and 'href="/accounts/password_reset/"' in page
    # the whole reset, from one address
    client = Client(REMOTE_ADDR="192.0.2.1")
    assert client.get("/accounts/password_reset/").status_code == 200
    r = client.post("/accounts/password_reset/", {"email": "alice@example.org"})
    assert r.status_code == 302 and r["Location"] == "/accounts/password_reset/done/"
    assert len(mail.outbox) == 1 and mail.outbox[0].to == ["alice@example.org"]
    link = re.search(r"https?://[^/\s]+(/accounts/reset/\S+/)", mail.outbox[0].body).group(1)
    r = client.get(link)
    assert r.status_code == 302  # Django moves the token out of the URL
    form_url = r["Location"]
    r = client.post(form_url, {"new_password1": "a-new-pw-4-alice", "new_password2": "a-new-pw-4-alice"})
    assert r.status_code == 302 and r["Location"] == "/accounts/reset/done/"
    assert client.get("/accounts/reset/done/").status_code == 200
    new, r = login("/accounts/login/", "alice", "a-new-pw-4-alice", ip="192.0.2.1")
    assert r.status_code == 302 and logged_in_as(new) == "alice"

    # per address: 3 requests an hour, the 4th refused with no mail sent
    mail.outbox.clear()
    spammer = Client(REMOTE_ADDR="192.0.2.66")
    codes = [spammer.post("/accounts/password_reset/", {"email": f"x{i}@example.org"}).status_code for i in range(3)]
    r = spammer.post("/accounts/password_reset/", {"email": "alice@example.org"})
    assert codes == [302] * 3 and r.status_code == 429 and int(r["Retry-After"]) > 0
    assert mail.outbox == []  # no such accounts, and the 4th was refused before sending
    # per e-mail address, whatever the client address: alice gets at most 3 reset mails an hour (the
    # first was the reset above; the spammer's refused request did not count)
    codes = [Client(REMOTE_ADDR=f"198.51.100.{i + 1}").post("/accounts/password_reset/", {"email": "ALICE@example.org "})
             .status_code for i in range(3)]
    assert codes == [302, 302, 429] and len(mail.outbox) == 2
    # another address and another e-mail are unaffected
    r = Client(REMOTE_ADDR="203.0.113.5").post("/accounts/password_reset/", {"email": "root@example.org"})
    assert r.status_code == 302


# --- no existence oracle for assignments ----------------------------------------------------------

@pytest.fixture
def campaign(subset_dir):
    run_command("import_dataset", "flickr8k-expert", str(subset_dir), "--name", "sub")
    return engine.create_campaign(Dataset.objects.get(name="sub"), "rating", name="probe", options={"images": 2},
                                  state=Campaign.LIVE, gold_every=0)


def test_another_raters_assignment_answers_exactly_as_a_missing_one(campaign):
    w1, w2 = engine.invite_workers(2, campaign=campaign)  # both raters of this campaign
    theirs = engine.accept(campaign, w2)
    missing = Assignment.objects.order_by("-pk").values_list("pk", flat=True).first() + 1000
    me = Client()
    assert me.get(f"/rate/join/{w1.token}/").status_code == 302
    answer = {"relevance": "1", "thoroughness": "1", "item": theirs.item_id, "submit_key": "k" * 32}
    for suffix, method in (("", "get"), ("submit/", "post"), ("return/", "post")):
        responses = [getattr(me, method)(f"/rate/{campaign.name}/task/{pk}/{suffix}", answer)
                     for pk in (theirs.pk, missing)]
        assert [r.status_code for r in responses] == [404, 404], suffix
        assert responses[0].content == responses[1].content, suffix
        assert responses[0].headers.get("Content-Type") == responses[1].headers.get("Content-Type")
    theirs.refresh_from_db()
    assert theirs.state == Assignment.ACCEPTED and theirs.answer is None
    assert not HumanJudgment.objects.filter(campaign=campaign).exists()
    # the control: the owner of the assignment sees it
    owner = Client()
    owner.get(f"/rate/join/{w2.token}/")
    assert owner.get(f"/rate/{campaign.name}/task/{theirs.pk}/").status_code == 200


def test_an_mturk_token_for_another_workers_assignment_answers_as_one_for_a_missing_assignment(subset_dir):
    run_command("import_dataset", "flickr8k-expert", str(subset_dir), "--name", "sub")
    mt = engine.create_campaign(Dataset.objects.get(name="sub"), "rating", name="probe-mt", options={"images": 2},
                                provider=Campaign.MTURK, state=Campaign.LIVE, gold_every=0)
    item = Item.objects.filter(campaign=mt, is_gold=False).order_by("pk").first()
    theirs = engine.accept_item(mt, worker_for("AWORKERTHEIRS1"), item, provider_ref="3ASSIGNTHEIRS")
    mine = worker_for("AWORKERMINE01")
    missing = Assignment.objects.order_by("-pk").values_list("pk", flat=True).first() + 1000
    submit_to = "https://workersandbox.mturk.com"
    answer = {"item": item.pk, "relevance": "4", "thoroughness": "4", "submit_key": "k" * 32}
    responses = [
        Client().post(f"/mturk/{mt.name}/item/{item.pk}/submit/", {
            **answer, "token": signing.dumps({"a": pk, "w": mine.pk, "t": submit_to}, salt=mturk_views.SALT)})
        for pk in (theirs.pk, missing)
    ]
    assert [r.status_code for r in responses] == [403, 403]
    assert responses[0].content == responses[1].content and b"not valid for this task" in responses[0].content
    theirs.refresh_from_db()
    assert theirs.state == Assignment.ACCEPTED and theirs.answer is None
