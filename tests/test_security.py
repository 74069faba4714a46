"""Security of the platform (issue 7): the production settings pass ``manage.py check --deploy``,
secrets come only from the environment and never reach a page or the database, every POST is
CSRF-protected, campaigns and their results are visible only to their owners, and the rater pages
are rate-limited (failing open when the cache is down).

URL patterns are enumerated from the resolver (not listed here), so a new view is covered by the
CSRF and permission tests as soon as it is routed; a URL keyword without a sample value fails the
test with a message saying which one to add.
"""
import functools
import importlib
import itertools
import json
import logging
import os
import re
import secrets
import subprocess
import sys
from urllib.parse import urljoin, urlsplit

import pytest
from django.apps import apps
from django.contrib.auth.hashers import make_password
from django.contrib.auth.models import User
from django.core import signing
from django.core.cache import cache
from django.test import Client, override_settings
from django.urls import URLResolver, get_resolver, resolve
from django.urls.exceptions import Resolver404

from analysis.models import Report
from crowd import engine, ratelimit
from crowd.models import Assignment, Campaign, Dataset, Item, MTurkCall, MTurkHIT, ProlificStudy
from crowd.mturk import publish as pub
from crowd.providers import SESSION_KEY
from crowd.simulate import simulate
from crowd.views import mturk as mturk_views
from crowd.views import prolific as prolific_views

from .conftest import ROOT, run_command, write_subset

pytestmark = pytest.mark.django_db

REDIS_DB = os.environ.get("TEST_BROKER_URL", "redis://127.0.0.1:6379/10")
REDIS_CACHE = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_DB,
                           "OPTIONS": {"socket_connect_timeout": 0.2, "socket_timeout": 0.2}}}
DEAD_CACHE = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache",
                          "LOCATION": "redis://127.0.0.1:6399/0",  # nothing listens there
                          "OPTIONS": {"socket_connect_timeout": 0.2, "socket_timeout": 0.2}}}
CSRF_FAILED = b"CSRF verification failed"


# --- helpers ------------------------------------------------------------------------------------

def all_patterns(resolver=None, prefix=""):
    """(full route text, URLPattern) of every routed view, walking included URLconfs."""
    for p in (resolver or get_resolver()).url_patterns:
        if isinstance(p, URLResolver):
            yield from all_patterns(p, prefix + str(p.pattern))
        else:
            yield prefix + str(p.pattern), p


_ROUTE_PARAM = re.compile(r"<(?:\w+:)?(\w+)>|\(\?P<(\w+)>[^)]*\)")


def concrete_urls(route: str, samples: dict) -> list[str]:
    """Every URL of ``route`` (path() or re_path() text) with its parameters filled from
    ``samples`` (name -> list of values; all combinations)."""
    names = [a or b for a, b in _ROUTE_PARAM.findall(route)]
    missing = [n for n in names if n not in samples]
    assert not missing, f"add sample values for URL parameter(s) {missing} of {route!r} to this test"
    urls = []
    for values in itertools.product(*(samples[n] for n in names)):
        it = iter(values)
        url = _ROUTE_PARAM.sub(lambda m: str(next(it)), route).replace("^", "").replace("$", "").replace("\\", "")
        urls.append("/" + url)
    return urls


def db_state() -> dict:
    """Every row of the project's tables and of auth (users, groups, permissions), except the
    users' last login time (logging a test client in is not a change made by a request)."""
    return {
        m._meta.label: [{k: v for k, v in row.items() if k != "last_login"} for row in m.objects.order_by("pk").values()]
        for m in apps.get_models() if m._meta.app_label in ("crowd", "metrics", "analysis", "auth")
    }


def rater_client(worker, **kwargs) -> Client:
    """A browser whose session carries ``worker`` (as an invitation link leaves it)."""
    client = Client(**kwargs)
    session = client.session
    session[SESSION_KEY] = worker.pk
    session.save()
    return client


def logged_in(user, **kwargs) -> Client:
    client = Client(**kwargs)
    client.force_login(user)
    return client


def mturk_actions() -> list[str]:
    """The actions the owner's MTurk page posts (read from its template, not listed by hand)."""
    text = (ROOT / "templates" / "crowd" / "owner" / "mturk.html").read_text()
    actions = sorted(set(re.findall(r"'crowd:mturk-action' campaign\.name '([\w-]+)'", text)))
    assert len(actions) >= 10
    return actions


# --- fixtures -----------------------------------------------------------------------------------

@functools.cache
def password_hash() -> str:
    """The hash of the test users' password "pw", computed once (PBKDF2 takes a good part of a second)."""
    return make_password("pw")


def user(name: str, **flags) -> User:
    """A user with the password "pw" (``flags``: is_staff, is_superuser)."""
    return User.objects.create(username=name, password=password_hash(), **flags)


@pytest.fixture
def small_subset(tmp_path):
    """An 8-image Flickr8k-Expert subset: every page kind exists (the campaigns below use 2-3
    images), and the crawl does not spend its time on dozens of image pages and charts."""
    return write_subset(tmp_path / "flickr8k-subset", 8)


@pytest.fixture
def site(small_subset, settings):
    """Owners alice and bob, staff user sam (not a superuser), superuser root; alice's live local
    campaign with simulated judgments, her MTurk campaign with a requester-website batch and a
    dry-run publish, bob's own campaign, and two invited raters, one with an open task."""
    settings.MTURK_CLIENT_FACTORY = "tests.fake_mturk.fake_client"
    run_command("import_dataset", "flickr8k-expert", str(small_subset), "--name", "sub")
    run_command("compute_metrics", "--dataset", "sub", "--metric", "bleu_4", "--wait")
    dataset = Dataset.objects.get(name="sub")
    alice, bob = user("alice"), user("bob")
    sam = user("sam", is_staff=True)
    root = user("root", is_staff=True, is_superuser=True)
    local = engine.create_campaign(dataset, "rating", name="alpha", title="Alpha secret study", owners=[alice],
                                   options={"images": 2}, state=Campaign.LIVE, gold_every=0)
    simulate(local, raters=2, seed=1)  # k = 3: every item stays open for a third rater
    mt = engine.create_campaign(dataset, "rating", name="alpha-mt", title="Alpha MTurk study", owners=[alice],
                                options={"images": 3, "gold": 1}, reward="0.05", provider=Campaign.MTURK)
    cfg = pub.config_for(mt)
    cfg.public_url = "https://captions.example.org"
    cfg.save()
    owner = logged_in(alice)
    assert owner.post("/campaigns/alpha-mt/mturk/export/", {"limit": "1"}).status_code == 302
    assert owner.post("/campaigns/alpha-mt/mturk/publish/", {"dry_run": "1"}).status_code == 302
    pro = engine.create_campaign(dataset, "rating", name="alpha-pro", title="Alpha Prolific study", owners=[alice],
                                 options={"images": 3, "gold": 1}, provider=Campaign.PROLIFIC)
    ProlificStudy.objects.create(campaign=pro, study_id="a1" * 12, status="UNPUBLISHED", name="Alpha Prolific study",
                                 description="d", places=3, reward=100, estimated_minutes=5)
    beta = engine.create_campaign(dataset, "rating", name="beta", title="Beta study", owners=[bob],
                                  options={"images": 2}, state=Campaign.LIVE, gold_every=0)
    w1, w2 = engine.invite_workers(2, campaign=local)
    other = engine.accept(local, w2)
    return {"dataset": dataset, "alice": alice, "bob": bob, "sam": sam, "root": root, "local": local, "mt": mt,
            "pro": pro, "beta": beta, "w1": w1, "w2": w2, "batch": mt.mturk_batches.get(), "other": other}


def samples_for(site, campaign) -> dict:
    """Sample values of every URL parameter of the project, for ``campaign``'s URLs."""
    dataset = site["dataset"]
    image = dataset.images.order_by("key").first()
    other = site["other"]
    return {
        "name": [campaign.name], "criterion": ["relevance"], "fmt": ["csv", "jsonl"],
        "action": list(prolific_views.ACTIONS) if campaign.provider == Campaign.PROLIFIC else mturk_actions(),
        "pk": [site["batch"].pk if campaign.provider == Campaign.MTURK else other.pk],
        "filename": ["layout.html", "input.csv"], "token": [site["w1"].token],
        "item_pk": [campaign.items.order_by("pk").first().pk], "metric": ["bleu_4"],
        "level": ["item"], "statistic": ["kendall_tau_c"], "key": [image.key],
        "system": [dataset.systems.order_by("name").first().name],
        # Django's own (admin, auth)
        "object_id": ["1"], "content_type_id": ["1"], "id": ["1"], "app_label": ["crowd"], "url": ["x/"],
        "uidb64": ["MQ"],
    }


# --- 1. production settings ---------------------------------------------------------------------

def production_env(**overrides) -> dict:
    """The process environment for evalsite.production: a strong key, hosts, a PostgreSQL URL
    (never connected to by the checks); ``None`` removes a variable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "RATER_")) and k != "DATABASE_URL"}
    env.update(DJANGO_SETTINGS_MODULE="evalsite.production", DJANGO_SECRET_KEY=secrets.token_urlsafe(50),
               DJANGO_ALLOWED_HOSTS="captions.example.org", DATABASE_URL="postgres://captioneval@127.0.0.1:5432/captioneval")
    for key, value in overrides.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def manage(*args, **env_overrides) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=production_env(**env_overrides),
                          capture_output=True, text=True, timeout=120)


def test_deploy_check_passes_with_no_issue_under_the_production_settings():
    out = manage("check", "--deploy", "--fail-level", "WARNING")
    assert out.returncode == 0, out.stderr
    assert "System check identified no issues (0 silenced)" in out.stdout
    # the development settings, by contrast, fail it (DEBUG, the development key, no HTTPS settings)
    dev = manage("check", "--deploy", "--fail-level", "WARNING", DJANGO_SETTINGS_MODULE="evalsite.settings",
                 DJANGO_SECRET_KEY=None)
    assert dev.returncode != 0 and "security.W018" in dev.stderr and "security.W009" in dev.stderr


@pytest.mark.parametrize("overrides, message", [
    ({"DJANGO_SECRET_KEY": None}, "DJANGO_SECRET_KEY must be set in the environment"),
    ({"DJANGO_SECRET_KEY": ""}, "DJANGO_SECRET_KEY must be set in the environment"),
    ({"DJANGO_SECRET_KEY": "insecure-local-development-key"}, "DJANGO_SECRET_KEY is the insecure development key"),
    ({"DJANGO_SECRET_KEY": "django-insecure-" + "k" * 60}, "DJANGO_SECRET_KEY is the insecure development key"),
    ({"DJANGO_SECRET_KEY": "short-key"}, "DJANGO_SECRET_KEY is too weak"),
    ({"DJANGO_SECRET_KEY": "ab" * 40}, "DJANGO_SECRET_KEY is too weak"),  # long but 2 distinct characters
    ({"DJANGO_ALLOWED_HOSTS": None}, "DJANGO_ALLOWED_HOSTS must list"),
    ({"DJANGO_ALLOWED_HOSTS": " , "}, "DJANGO_ALLOWED_HOSTS must list"),
    ({"DATABASE_URL": None}, "DATABASE_URL must be set for production"),
    ({"DATABASE_URL": "sqlite:////tmp/x.sqlite3"}, "DATABASE_URL must point at PostgreSQL"),
    ({"DJANGO_SECURE_HSTS_SECONDS": "a year"}, "DJANGO_SECURE_HSTS_SECONDS must be a whole number"),
    ({"DJANGO_SECURE_HSTS_PRELOAD": "maybe"}, "DJANGO_SECURE_HSTS_PRELOAD must be 1 or 0"),
    ({"RATER_RATE_LIMIT": "lots"}, "RATER_RATE_LIMIT: bad rate 'lots'"),
])
def test_production_refuses_to_start_without_safe_settings(overrides, message):
    out = manage("check", "--deploy", **overrides)
    assert out.returncode != 0
    assert "ImproperlyConfigured" in out.stderr and message in out.stderr, out.stderr[-2000:]


def test_production_settings_come_from_the_environment():
    marker = "marker-" + secrets.token_urlsafe(48)
    code = ("import django, json; django.setup(); from django.conf import settings as s; print(json.dumps({k: getattr(s, k, None) "
            "for k in ['SECRET_KEY', 'DEBUG', 'ALLOWED_HOSTS', 'CSRF_TRUSTED_ORIGINS', 'SECURE_HSTS_SECONDS', "
            "'SECURE_HSTS_PRELOAD', 'SECURE_PROXY_SSL_HEADER', 'RATELIMIT_TRUSTED_PROXIES', 'SECURE_SSL_REDIRECT', "
            "'SESSION_COOKIE_SECURE', 'CSRF_COOKIE_SECURE']}))")

    def settings_with(**env):
        out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=production_env(**env), capture_output=True,
                             text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    s = settings_with(DJANGO_SECRET_KEY=marker, DJANGO_DEBUG="1", DJANGO_ALLOWED_HOSTS="a.example.org, b.example.org",
                      DJANGO_CSRF_TRUSTED_ORIGINS="https://a.example.org", DJANGO_SECURE_HSTS_SECONDS="600",
                      DJANGO_SECURE_HSTS_PRELOAD="0", DJANGO_SECURE_PROXY_SSL_HEADER="1", DJANGO_TRUSTED_PROXIES="1")
    assert s["SECRET_KEY"] == marker and s["DEBUG"] is False  # DJANGO_DEBUG cannot turn debugging on
    assert s["ALLOWED_HOSTS"] == ["a.example.org", "b.example.org"]
    assert s["CSRF_TRUSTED_ORIGINS"] == ["https://a.example.org"]
    assert s["SECURE_HSTS_SECONDS"] == 600 and s["SECURE_HSTS_PRELOAD"] is False
    assert s["SECURE_PROXY_SSL_HEADER"] == ["HTTP_X_FORWARDED_PROTO", "https"] and s["RATELIMIT_TRUSTED_PROXIES"] == 1
    assert s["SECURE_SSL_REDIRECT"] and s["SESSION_COOKIE_SECURE"] and s["CSRF_COOKIE_SECURE"]
    # the proxy header is opt-in: trusting X-Forwarded-Proto from any client would let it claim HTTPS
    assert settings_with()["SECURE_PROXY_SSL_HEADER"] is None
    # no secret is written in the settings modules: the only literal key is the refused development one
    for module in ("settings.py", "production.py"):
        text = (ROOT / "evalsite" / module).read_text()
        literals = re.findall(r"""["']([A-Za-z0-9_\-+/=!@#$%^&*(]{40,})["']""", text)
        assert not literals, f"long string literal(s) in evalsite/{module}: {literals}"


@pytest.fixture
def production(monkeypatch):
    """The security settings of evalsite.production (imported with a test environment) applied to
    this test's requests."""
    for key, value in production_env(DJANGO_ALLOWED_HOSTS="testserver").items():
        monkeypatch.setenv(key, value)
    monkeypatch.delitem(sys.modules, "evalsite.production", raising=False)
    prod = importlib.import_module("evalsite.production")
    names = [n for n in dir(prod) if n.startswith(("SECURE_", "SESSION_COOKIE_", "CSRF_", "X_FRAME")) or n == "ALLOWED_HOSTS"]
    with override_settings(**{n: getattr(prod, n) for n in names}):
        yield prod
    sys.modules.pop("evalsite.production", None)


def test_under_production_settings_only_mturk_task_pages_are_frameable(site, production, settings):
    mt = site["mt"]
    engine.set_state(mt, Campaign.LIVE)
    item = mt.items.order_by("pk").first()
    assert Client().get("/campaigns/").status_code == 301  # plain http is redirected to https
    task = Client().get(f"/mturk/{mt.name}/item/{item.pk}/", secure=True)
    assert task.status_code == 200 and "X-Frame-Options" not in task
    assert task["Content-Security-Policy"] == "frame-ancestors " + " ".join(settings.MTURK_FRAME_ANCESTORS)
    assert task["Strict-Transport-Security"].startswith(f"max-age={production.SECURE_HSTS_SECONDS}")
    owner = logged_in(site["alice"])
    for url in ("/", "/campaigns/", f"/campaigns/{mt.name}/mturk/", "/accounts/login/"):
        page = owner.get(url, secure=True)
        assert page.status_code == 200 and page["X-Frame-Options"] == "DENY", url
    login = Client().get("/accounts/login/", secure=True)
    assert login.cookies["csrftoken"]["secure"]


# --- 2. secrets only from the environment -------------------------------------------------------

class _Raw:
    def __init__(self, body: bytes):
        self.body = body

    def stream(self, **kwargs):
        yield self.body


SIGNED = []


def signing_client(environment):
    """The real boto3 client (credentials from the standard chain), with every signed request
    answered locally by a RequestError instead of going to AWS; the requests are kept in SIGNED."""
    from botocore.awsrequest import AWSResponse

    from crowd.mturk.client import boto3_client

    client = boto3_client(environment)

    def answer(request, **kwargs):
        SIGNED.append(request)
        body = json.dumps({"__type": "RequestError", "Message": "refused by the test"}).encode()
        return AWSResponse(request.url, 400, {"Content-Type": "application/x-amz-json-1.1"}, _Raw(body))

    client.meta.events.register("before-send", answer)
    return client


def test_no_model_has_a_field_for_credentials():
    suspicious = re.compile(r"secret|password|passwd|credential|access_key|aws|api_key", re.I)
    fields = [f"{m._meta.label}.{f.name}" for m in apps.get_models() for f in m._meta.get_fields()
              if suspicious.search(f.name)]
    assert fields == ["auth.User.password"]  # Django's salted hash, not a credential of ours


def crawl(client, seeds, budget=700) -> dict:
    """GET ``seeds`` and every same-site link (href/src) of the HTML pages reached, breadth first.
    Admin pages: no query strings, no delete pages, one object page per model. Returns url -> response."""
    seen, queue, pages, admin_models = set(), list(seeds), {}, set()
    while queue and len(pages) < budget:
        url = queue.pop(0)
        if url in seen:
            continue
        seen.add(url)
        response = client.get(url)
        pages[url] = response
        if "text/html" not in response.get("Content-Type", ""):
            continue
        for link in re.findall(r"""(?:href|src)=["']([^"'#]+)""", response.content.decode()):
            parts = urlsplit(urljoin(url, link))
            if parts.netloc and parts.netloc != "testserver" or parts.path.startswith("/static/"):
                continue
            target = parts.path + (f"?{parts.query}" if parts.query else "")
            if parts.path.startswith("/admin/"):
                m = re.match(r"^/admin/(\w+)/(\w+)/[^/]+/", parts.path)
                if parts.query or "/delete/" in parts.path or "/logout/" in parts.path:
                    continue
                if m and not parts.path.endswith(("/add/",)):
                    if m.groups() in admin_models:
                        continue
                    admin_models.add(m.groups())
            queue.append(target.replace("&amp;", "&"))
    return pages


def test_credentials_and_the_secret_key_never_reach_a_page_or_the_database(site, settings, monkeypatch):
    markers = {"AWS_ACCESS_KEY_ID": "AKIAMARKER" + secrets.token_hex(5).upper(),
               "AWS_SECRET_ACCESS_KEY": "awsmarker" + secrets.token_urlsafe(24),
               "DJANGO_SECRET_KEY": "djangomarker" + secrets.token_urlsafe(48)}
    for key in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent/config")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    for key, value in markers.items():
        monkeypatch.setenv(key, value)
    settings.SECRET_KEY = markers["DJANGO_SECRET_KEY"]  # what evalsite.production reads from the environment
    settings.MTURK_CLIENT_FACTORY = "tests.test_security.signing_client"
    SIGNED.clear()
    mt, alice, root = site["mt"], site["alice"], site["root"]
    owner = logged_in(alice)
    # a real (non-dry) publish: boto3 signs with the credentials from the environment, "AWS" refuses
    r = owner.post(f"/campaigns/{mt.name}/mturk/publish/", {"limit": "1"}, follow=True)
    assert r.status_code == 200 and "refused by the test" in r.content.decode()
    auth = [h if isinstance(h, str) else h.decode() for h in (req.headers["Authorization"] for req in SIGNED)]
    assert auth and all(f"Credential={markers['AWS_ACCESS_KEY_ID']}/" in h for h in auth)
    assert MTurkCall.objects.filter(campaign=mt, ok=False, error_code="RequestError", dry_run=False).exists()
    stored = json.dumps(db_state(), default=str)
    for name, marker in markers.items():
        assert marker not in stored, f"{name} was written to the database"

    crowd_names = set()
    for user, client in ((alice, owner), (root, logged_in(root))):
        seeds = ["/", "/campaigns/", "/compare/", "/admin/", "/accounts/login/"]
        for campaign in (site["local"], mt, site["pro"]):
            for route, pattern in all_patterns():
                if route.startswith(("campaigns/<slug:name>", "datasets/")):
                    s = samples_for(site, campaign) | {"name": [campaign.name if route.startswith("campaigns/")
                                                                else site["dataset"].name]}
                    seeds += concrete_urls(route, s)
        pages = crawl(client, seeds)
        for url, response in pages.items():
            assert response.status_code < 500, (user, url, response.status_code)
            raw = b"".join(response.streaming_content) if response.streaming else response.content
            body = raw.decode(errors="replace") + str(response.headers)
            for name, marker in markers.items():
                assert marker not in body, f"{name} shown to {user} on {url}"
            if response.status_code == 200:
                try:
                    crowd_names.add(resolve(urlsplit(url).path).url_name)
                except Resolver404:
                    pass
        assert len(pages) > 60
    # the crawl reached every campaign page, download and MTurk page (including Django's admin)
    owner_pages = {p.name for route, p in all_patterns() if route.startswith("campaigns/<slug:name>") and p.name}
    assert owner_pages - {"campaign-state", "campaign-invite", "campaign-publish-results", "campaign-unpublish-results",
                           "mturk-action",
                           "campaign-prolific-action", "campaign-owners"} <= crowd_names  # POST only
    assert {"crowd_mturkconfig_change", "crowd_worker_change", "crowd_campaign_change"} <= crowd_names


# --- 3. CSRF on every form ----------------------------------------------------------------------

def test_the_only_csrf_exempt_views_are_the_token_authorised_mturk_submit_and_the_signed_prolific_webhook():
    """...and the REST API's views under /api/: DRF exempts its views from Django's middleware check
    and makes it itself for the browser's session (SessionAuthentication; token requests carry no
    cookie to forge), see tests/test_api_permissions.py; api.base.not_found answers 404 to anything."""
    from rest_framework.views import APIView

    def is_api(route, callback):
        return route.startswith("api/") and (
            issubclass(getattr(callback, "cls", type), APIView) or f"{callback.__module__}.{callback.__name__}" == "api.base.not_found")

    exempt = {f"{p.callback.__module__}.{p.callback.__name__}" for route, p in all_patterns()
              if getattr(p.callback, "csrf_exempt", False) and not is_api(route, p.callback)}
    assert exempt == {"crowd.views.mturk.submit", "crowd.views.prolific.webhook"}
    assert [route for route, p in all_patterns() if is_api(route, p.callback)]
    from django.conf import settings

    assert "django.middleware.csrf.CsrfViewMiddleware" in settings.MIDDLEWARE


def test_every_view_refuses_a_post_without_a_valid_csrf_token(site):
    """POST to every routed URL (own objects, so that an unprotected view would act) as an owner,
    a superuser, a rater and an anonymous visitor: no token, or a forged one -> 403, nothing changed."""
    identities = {
        "anonymous": Client(enforce_csrf_checks=True),
        "owner": logged_in(site["alice"], enforce_csrf_checks=True),
        "superuser": logged_in(site["root"], enforce_csrf_checks=True),
        "rater": rater_client(site["w2"], enforce_csrf_checks=True),
    }
    for client in identities.values():  # each browser holds a CSRF cookie, as after viewing any form
        assert client.get("/accounts/login/").status_code in (200, 302) and "csrftoken" in client.cookies
    before = db_state()
    checked = 0
    for route, pattern in all_patterns():
        if pattern.callback in (mturk_views.submit, prolific_views.webhook):  # token / signature: tested elsewhere
            continue
        if route.startswith("api/"):  # the REST API: DRF's own CSRF check, tests/test_api_permissions.py
            continue
        campaign = (site["mt"] if route.startswith("mturk/") or "mturk" in route
                    else site["pro"] if route.startswith("campaigns/") and "prolific" in route else site["local"])
        s = samples_for(site, campaign)
        if route.startswith("datasets/"):
            s["name"] = [site["dataset"].name]
        for url in concrete_urls(route, s):
            assert resolve(url).func == pattern.callback, f"{url} does not resolve to {route}"
            for who, client in identities.items():
                data = {"state": "finished", "n": "3", "confirm": "alpha-mt", "dry_run": "", "limit": "1",
                        "relevance": "4", "thoroughness": "4", "username": "alice", "password": "pw"}
                for headers in ({}, {"HTTP_X_CSRFTOKEN": secrets.token_hex(32)}):
                    r = client.post(url, {**data, "csrfmiddlewaretoken": headers.get("HTTP_X_CSRFTOKEN", "")}, **headers)
                    assert r.status_code == 403 and CSRF_FAILED in r.content, (who, url, r.status_code)
                    checked += 1
    assert checked > 500
    assert db_state() == before


def test_the_mturk_submit_refuses_a_missing_or_forged_token(site):
    mt = site["mt"]
    engine.set_state(mt, Campaign.LIVE)
    hit = MTurkHIT.objects.filter(batch__campaign=mt).first()
    hit.hit_id = "3HIT" + "0" * 26
    hit.save()
    item = hit.item
    query = {"assignmentId": "3ASSIGN" + "0" * 23, "hitId": hit.hit_id, "workerId": "AWORKER0001",
             "turkSubmitTo": "https://workersandbox.mturk.com"}
    page = Client().get(f"/mturk/{mt.name}/item/{item.pk}/", query)
    assert page.status_code == 200
    token = re.search(r'name="token" value="([^"]+)"', page.content.decode()).group(1)
    assignment = Assignment.objects.get(campaign=mt, provider_ref=query["assignmentId"])
    claims = signing.loads(token, salt=mturk_views.SALT)
    forged = [
        "",  # none
        token[:-3] + ("AAA" if not token.endswith("AAA") else "BBB"),  # tampered signature
        signing.dumps(claims, salt=mturk_views.SALT, key="not-the-secret-key-" + "x" * 40),  # another key
        signing.dumps(claims, salt="another.salt"),  # signed for something else
        signing.dumps({**claims, "w": claims["w"] + 1}, salt=mturk_views.SALT),  # another worker
    ]
    other_item = Item.objects.filter(campaign=mt).exclude(pk=item.pk).first()
    before = db_state()
    url = f"/mturk/{mt.name}/item/{item.pk}/submit/"
    answer = {"item": item.pk, "relevance": "4", "thoroughness": "4", "submit_key": "k" * 32}
    for bad in forged:
        r = Client(enforce_csrf_checks=True).post(url, {**answer, "token": bad})
        assert r.status_code == 403 and b"not valid for this task" in r.content, bad
    # a genuine token only works for its own item
    r = Client().post(f"/mturk/{mt.name}/item/{other_item.pk}/submit/", {**answer, "item": other_item.pk, "token": token})
    assert r.status_code == 403
    assert db_state() == before
    # ... and the genuine token is accepted without any cookie (the control that the test can fail)
    r = Client(enforce_csrf_checks=True).post(url, {**answer, "token": token})
    assert r.status_code == 200 and b'id="mturk-form"' in r.content
    assignment.refresh_from_db()
    assert assignment.state == Assignment.SUBMITTED


def test_every_post_form_in_the_templates_carries_the_csrf_token():
    """Static check of templates/: every <form method="post"> includes {% csrf_token %}, except the
    pages shown inside MTurk's frame (templates/crowd/mturk/), which get no cookies and post either
    to MTurk itself (the token must not leak there) or to the token-authorised submit view."""
    forms_seen = 0
    for path in sorted((ROOT / "templates").rglob("*.html")):
        text = path.read_text()
        for m in re.finditer(r"<form\b([^>]*)>(.*?)</form>", text, re.S | re.I):
            if not re.search(r"""method\s*=\s*["']?post""", m.group(1), re.I):
                continue
            forms_seen += 1
            rel = path.relative_to(ROOT / "templates").as_posix()
            has_token = "{% csrf_token %}" in m.group(2)
            if rel.startswith("crowd/mturk/"):
                assert not has_token, f"{rel}: a form shown in MTurk's frame must not carry the CSRF token"
                external = re.search(r"""action=["']\{\{ (submit_url|default_submit) \}\}""", m.group(1))
                assert external or 'name="token"' in m.group(2), f"{rel}: form neither to MTurk nor token-signed"
            else:
                assert has_token, f"{rel}: <form method=post> without {{% csrf_token %}}"
    assert forms_seen >= 20


# --- 4. object-level permissions ----------------------------------------------------------------

def campaign_urls(site, campaign) -> list[tuple[str, object]]:
    """Every URL under /campaigns/<name>/ for ``campaign``: (url, view)."""
    return [(url, p.callback) for route, p in all_patterns() if route.startswith("campaigns/<slug:name>")
            for url in concrete_urls(route, samples_for(site, campaign))]


def test_nobody_but_the_owners_reads_or_changes_a_campaign(site):
    local, mt = site["local"], site["mt"]
    pro = site["pro"]
    urls = campaign_urls(site, local) + campaign_urls(site, mt) + campaign_urls(site, pro)
    assert len(urls) > 30
    # the control: alice, the owner, reaches every page and download (GET views) of her campaigns
    alice = logged_in(site["alice"])
    readable = 0
    for url, view in urls:
        r = alice.get(url)
        if r.status_code == 405:  # a POST-only action
            continue
        if url.startswith((f"/campaigns/{local.name}/mturk/", f"/campaigns/{pro.name}/mturk/",
                           f"/campaigns/{local.name}/prolific/", f"/campaigns/{mt.name}/prolific/")):
            assert r.status_code == 404, url  # only an MTurk (Prolific) campaign has an MTurk (Prolific) page
        else:
            assert r.status_code == 200, (url, r.status_code)
            readable += 1
    assert readable >= 10
    others = {"bob": logged_in(site["bob"]), "sam (staff)": logged_in(site["sam"]),
              "rater": rater_client(site["w1"]), "anonymous": Client()}
    before = db_state()
    for who, client in others.items():
        for url, view in urls:
            for method in ("get", "post"):
                data = {"state": "finished", "n": "5", "confirm": mt.name, "limit": "1", "question_type": "external",
                        "public_url": "https://evil.example", "amount": "1", "reason": "x", "subject": "s",
                        "message": "m", "hours": "1"} if method == "post" else {}
                r = getattr(client, method)(url, data)
                if who in ("rater", "anonymous"):
                    assert r.status_code == 302 and r["Location"].startswith("/accounts/login/"), (who, method, url)
                else:
                    assert r.status_code in (403, 404, 405), (who, method, url, r.status_code)
                assert not any(c.title.encode() in r.content for c in (local, mt, pro))
    assert db_state() == before
    for who in ("bob", "sam (staff)"):
        listing = others[who].get("/campaigns/").content.decode()
        assert local.name not in listing and mt.name not in listing and pro.name not in listing
    assert "/campaigns/beta/" in others["bob"].get("/campaigns/").content.decode()  # bob's own is listed
    # a superuser (Django's admin) may see every campaign
    root = logged_in(site["root"])
    assert root.get(f"/campaigns/{local.name}/report.json").status_code == 200
    assert local.name in root.get("/campaigns/").content.decode()  # and lists it, as the API does
    # the status of the campaign's stored report follows the same rule (crowd.privacy.visible_campaigns):
    # its owner and a superuser read it; another owner and a plain staff user get 404, as anyone else
    row = Report.objects.filter(campaign=local).first()
    assert row is not None  # stored by alice's report.json above
    for url in (f"/reports/{row.pk}/status.json", f"/api/reports/status/{row.pk}/"):
        assert alice.get(url).status_code == 200 and alice.get(url).json()["kind"] == row.kind, url
        assert root.get(url).status_code == 200, url
        for who in ("bob", "sam (staff)"):
            assert others[who].get(url).status_code == 404, (who, url)
        assert Client().get(url).status_code == 404, url


def test_staff_only_pages_refuse_everyone_else(site, tmp_path):
    url = f"/datasets/{site['dataset'].name}/upload-scores/"
    ids = site["dataset"].candidates().order_by("pk").values_list("pk", flat=True)
    upload = ("caption_id,score\n" + "".join(f"{pk},{i % 7 / 7}\n" for i, pk in enumerate(ids))).encode()

    def post(client):
        f = tmp_path / "scores.csv"
        f.write_bytes(upload)
        with f.open("rb") as fh:
            return client.post(url, {"name": "Sneaky", "higher": "better", "file": fh})

    before = db_state()
    assert Client().get(url).status_code == 302 and post(Client()).status_code == 302
    for client in (logged_in(site["alice"]), rater_client(site["w1"])):
        assert client.get(url).status_code in (302, 403)
        assert post(client).status_code in (302, 403)
    assert logged_in(site["alice"]).get(url).status_code == 403
    assert db_state() == before
    # the admin: not for owners or raters; a staff user without permissions sees no model
    for client in (Client(), logged_in(site["alice"]), rater_client(site["w1"])):
        for page in ("/admin/", "/admin/crowd/campaign/", "/admin/crowd/mturkconfig/", "/admin/auth/user/"):
            r = client.get(page)
            assert r.status_code == 302 and r["Location"].startswith("/admin/login/"), page
    sam = logged_in(site["sam"])
    assert sam.get("/admin/").status_code == 200
    for page in ("/admin/crowd/campaign/", "/admin/crowd/mturkconfig/", "/admin/crowd/worker/"):
        assert sam.get(page).status_code == 403
    # the control: staff may upload
    r = post(sam)
    assert r.status_code == 302 and r["Location"] == f"/datasets/{site['dataset'].name}/"


def test_a_rater_cannot_see_or_touch_another_raters_assignment(site):
    local, w1, w2 = site["local"], site["w1"], site["w2"]
    other = site["other"]
    assert other is not None and other.worker_id == w2.pk and other.state == Assignment.ACCEPTED
    routes = [(route, p) for route, p in all_patterns() if route.startswith("rate/<slug:name>/task/<int:pk>/")]
    assert len(routes) >= 3
    me = rater_client(w1)
    before = db_state()
    for route, p in routes:
        url = concrete_urls(route, {"name": [local.name], "pk": [other.pk]})[0]
        for method in ("get", "post"):
            r = getattr(me, method)(url, {"relevance": "1", "thoroughness": "1", "item": other.item_id,
                                          "submit_key": "x" * 32})
            assert r.status_code in (403, 404, 405), (method, url, r.status_code)
            assert other.item.payload["text"].encode() not in r.content
    assert db_state() == before
    # the control: w2 sees it
    assert rater_client(w2).get(f"/rate/{local.name}/task/{other.pk}/").status_code == 200


# --- 5. rate limits -----------------------------------------------------------------------------

@pytest.fixture
def clock(monkeypatch):
    """The rate limiter's clock, frozen at the start of a one-minute window and moved by hand."""
    now = [60.0 * 29_000_000]
    monkeypatch.setattr(ratelimit, "time", type("Clock", (), {"time": staticmethod(lambda: now[0])}))
    return now


@pytest.fixture
def redis_cache(settings):
    """Django's cache on the real Redis, under a key prefix of this test's own (no flush needed;
    the counters expire a window later)."""
    settings.CACHES = {"default": REDIS_CACHE["default"] | {"KEY_PREFIX": "security-test-" + secrets.token_hex(6)}}
    return cache


def test_parse_rate():
    assert ratelimit.parse_rate("120/m") == (120, 60)
    assert ratelimit.parse_rate(" 7 / 2 m ") == (7, 120)
    assert ratelimit.parse_rate("10/5s") == (10, 5)
    assert ratelimit.parse_rate("3/h") == (3, 3600)
    for off in ("0", "", None, "0/m"):
        assert ratelimit.parse_rate(off) is None
    for bad in ("lots", "5", "5/x", "5/0s", "-1/m", "1.5/m", "5/m/s", "m/5"):
        with pytest.raises(ValueError, match="bad rate"):
            ratelimit.parse_rate(bad)


def test_hit_counts_per_key_and_window_in_redis(redis_cache):
    start = 600.0 * 5_000_000  # a window boundary for 1-minute windows
    for i in range(3):
        assert ratelimit.hit("k1", "3/m", now=start + i) == 0
    assert ratelimit.hit("k1", "3/m", now=start + 15) == 45  # seconds left in the window
    assert ratelimit.hit("k1", "3/m", now=start + 59.5) == 1
    assert ratelimit.hit("k2", "3/m", now=start + 20) == 0  # another key counts on its own
    assert ratelimit.hit("k1", "3/m", now=start + 60) == 0  # the next window
    assert redis_cache.get(f"rl:k1:{int(start)}") == 5


@pytest.fixture
def live(small_subset):
    """A live local campaign over the subset and two invited raters."""
    run_command("import_dataset", "flickr8k-expert", str(small_subset), "--name", "sub")
    local = engine.create_campaign(Dataset.objects.get(name="sub"), "rating", name="alpha", options={"images": 3},
                                   state=Campaign.LIVE, gold_every=0)
    return local, *engine.invite_workers(2, campaign=local)


def test_the_sixth_rater_request_in_a_window_gets_429_and_changes_nothing(live, settings, redis_cache, clock):
    settings.RATER_RATE_LIMIT = "5/m"
    local, w1, w2 = live
    me, other = rater_client(w1), rater_client(w2)
    for _ in range(5):
        assert me.get(f"/rate/{local.name}/").status_code == 200
    before = db_state()
    r = me.post(f"/rate/{local.name}/accept/")
    assert r.status_code == 429 and 1 <= int(r["Retry-After"]) <= 60
    assert db_state() == before  # no assignment was accepted
    r = me.get("/rate/", HTTP_ACCEPT="application/json")
    assert r.status_code == 429 and r.json()["retryable"] is True and r.json()["retry_after"] == int(r["Retry-After"])
    assert other.get("/rate/").status_code == 200  # another rater is not affected
    clock[0] += 60  # a window later
    assert me.post(f"/rate/{local.name}/accept/").status_code == 302
    assert Assignment.objects.filter(campaign=local, worker=w1, state=Assignment.ACCEPTED).count() == 1


def test_the_rate_limit_fails_open_when_the_cache_is_down(settings, caplog):
    settings.RATER_RATE_LIMIT = "5/m"
    settings.CACHES = DEAD_CACHE
    me = rater_client(engine.invite_workers(1)[0])
    with caplog.at_level(logging.WARNING, logger="crowd.ratelimit"):
        for _ in range(8):
            assert me.get("/rate/").status_code == 200
    assert "rate limit cache unavailable" in caplog.text


def test_invitation_links_are_limited_by_client_address(settings, redis_cache, clock):
    settings.RATER_RATE_LIMIT = "5/m"
    w1 = engine.invite_workers(1)[0]
    guesser = Client()
    for _ in range(5):
        assert guesser.get(f"/rate/join/{secrets.token_urlsafe(16)}/", REMOTE_ADDR="203.0.113.7").status_code == 404
    # over the limit even a right token is refused, and the session is not bound to the worker
    r = guesser.get(f"/rate/join/{w1.token}/", REMOTE_ADDR="203.0.113.7")
    assert r.status_code == 429 and SESSION_KEY not in guesser.session
    assert Client().get(f"/rate/join/{w1.token}/", REMOTE_ADDR="203.0.113.8").status_code == 302
    # IPv6: one /64 network is one client
    for i in range(5):
        assert Client().get("/rate/join/nope/", REMOTE_ADDR=f"2001:db8::{i + 1}").status_code == 404
    assert Client().get("/rate/join/nope/", REMOTE_ADDR="2001:db8::ff").status_code == 429
    assert Client().get("/rate/join/nope/", REMOTE_ADDR="2001:db8:0:1::1").status_code == 404


def test_behind_a_trusted_proxy_clients_are_told_apart_by_x_forwarded_for(settings, redis_cache, clock):
    settings.RATER_RATE_LIMIT = "5/m"
    proxy = {"REMOTE_ADDR": "10.0.0.2"}
    settings.RATELIMIT_TRUSTED_PROXIES = 0  # not configured: everyone behind the proxy is one client
    for i in range(5):
        Client().get("/rate/join/nope/", HTTP_X_FORWARDED_FOR=f"198.51.100.{i}", **proxy)
    assert Client().get("/rate/join/nope/", HTTP_X_FORWARDED_FOR="198.51.100.99", **proxy).status_code == 429
    settings.RATELIMIT_TRUSTED_PROXIES = 1
    proxy = {"REMOTE_ADDR": "10.0.0.3"}  # a fresh counter for the proxy's own address too
    for i in range(5):
        # a client cannot escape by prepending addresses of its own: the proxy's entry is the last one
        r = Client().get("/rate/join/nope/", HTTP_X_FORWARDED_FOR=f"192.0.2.{i}, 198.51.100.1", **proxy)
        assert r.status_code == 404
    assert Client().get("/rate/join/nope/", HTTP_X_FORWARDED_FOR="192.0.2.77, 198.51.100.1", **proxy).status_code == 429
    assert Client().get("/rate/join/nope/", HTTP_X_FORWARDED_FOR="198.51.100.2", **proxy).status_code == 404
