"""Issue 31, "Unbounded computation for anonymous visitors", through real HTTP requests against the
running site (Django's live_server: the project's URLs, middleware and settings; reports computed
in the request, as without a broker) on a 10-image Flickr8k-Expert subset with BLEU-4 computed:

* settings that are not offered (:data:`analysis.limits.OFFERED`), asked by a visitor who is not
  staff, are refused by the pages, downloads, charts and API resources with one line naming the
  offered values, and no Report row is written (nor for a criterion nobody judged, an unknown
  dataset or uploaded metric); the offered values are computed, and staff may ask for any value;
* ``benchmark.json`` is rate-limited, on one counter with every other report request (pages, API);
* the cap on concurrent computations holds under parallel requests: a request over it answers 503
  with ``Retry-After`` and writes nothing, and no two computations ran at once;
* the campaign owners' report pages and the API's campaign report go through the same cap: refused
  there they answer 503 with ``Retry-After`` and store nothing, the owners' console still showing
  with the previous report;
* stored reports of other settings that nobody read for ``REPORT_UNUSED_DAYS`` are deleted when a
  new computation is stored; the pages' defaults and reports read since stay.
"""
from __future__ import annotations

import re
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import httpx
import pytest
from django.contrib.auth.models import User
from django.core.cache import cache
from django.test import Client
from django.utils import timezone

from analysis import benchmarks
from api.account import create_token
from analysis.models import Report
from crowd import engine, ratelimit
from crowd.models import Campaign, Dataset
from crowd.simulate import simulate

from .conftest import run_command, write_subset

pytestmark = pytest.mark.django_db(transaction=True)

#: offered values other than the defaults: each a report of its own, computed in a fraction of a second
CHEAP = "resamples=100&permutations=100"
SEEDS = "choose one of 0, 1, 2, 3, 4 (other values: staff only)"


@pytest.fixture
def tiny(tmp_path):
    run_command("import_dataset", "flickr8k-expert", str(write_subset(tmp_path / "tiny", 10)), "--name", "tiny")
    run_command("compute_metrics", "--dataset", "tiny", "--metric", "bleu_4", "--wait")


@pytest.fixture
def http(live_server):
    with httpx.Client(base_url=live_server.url, timeout=120) as client:
        yield client


@pytest.fixture
def clock(monkeypatch):
    """The rate limiter's clock frozen in the middle of an hour (a window cannot end during the
    test) and no counter left by another test; ``clock[0] += s`` moves it on."""
    cache.clear()
    now = [3600.0 * 500_000 + 60]
    monkeypatch.setattr(ratelimit, "time", type("Clock", (), {"time": staticmethod(lambda: now[0])}))
    yield now
    cache.clear()


def problem_line(response) -> str:
    """The one line of a page's 400 (``<p id='problem'>``)."""
    return re.search(r"<p id='problem'>(.*?)</p>", response.text).group(1)


def test_settings_not_offered_are_refused_and_store_nothing_unless_staff(tiny, http):
    refused = {
        f"/datasets/tiny/benchmark/?seed=7&{CHEAP}": f"seed 7 is not offered: {SEEDS}",
        f"/datasets/tiny/benchmark.json?seed=4294967295&{CHEAP}": f"seed 4294967295 is not offered: {SEEDS}",
        "/datasets/tiny/benchmark/chart/item/pearson.png?resamples=250": "resamples 250 is not offered: choose one of "
                                                                          "100, 1000, 10000 (other values: staff only)",
        "/datasets/tiny/benchmark/significance.svg?permutations=999": "permutations 999 is not offered: choose one of "
                                                                     "100, 1000, 10000 (other values: staff only)",
        "/datasets/tiny/benchmark/chart/item/pearson.json?alpha=0.04": "alpha 0.04 is not offered: choose one of "
                                                                       "0.01, 0.05, 0.1 (other values: staff only)",
        f"/compare.json?seed=12&{CHEAP}": f"seed 12 is not offered: {SEEDS}",
        "/compare/?seed=5": f"seed 5 is not offered: {SEEDS}",
        "/datasets/tiny/leaderboard.json?seed=9": f"seed 9 is not offered: {SEEDS}",
        "/datasets/tiny/leaderboard/?resamples=200": "resamples 200 is not offered: choose one of 100, 1000, 10000 "
                                                     "(other values: staff only)",
    }
    for url, line in refused.items():
        response = http.get(url)
        assert response.status_code == 400, (url, response.status_code)
        assert problem_line(response) == line, url
    for url, field in ((f"/api/reports/benchmark/tiny/?seed=7&{CHEAP}", "seed"),
                       ("/api/reports/comparison/?alpha=0.2", "alpha"),
                       ("/api/reports/leaderboard/tiny/?resamples=5000", "resamples")):
        body = http.get(url).json()
        assert body["status"] == 400 and body["errors"][0]["field"] == field, (url, body)
        assert "is not offered: choose one of" in body["detail"], body
    # a criterion nobody judged, a dataset or an uploaded metric that does not exist: each would be a new
    # report too, and is refused before one is requested
    page = http.get("/datasets/tiny/benchmark/?criterion=made-up-1")
    assert page.status_code == 200 and 'id="no-report"' in page.text and "has no judgments on criterion" in page.text
    for url in ("/datasets/tiny/benchmark.json?criterion=made-up-2", "/compare.json?dataset=made-up-3",
                "/datasets/tiny/leaderboard.json?metric=user_made_up"):
        assert http.get(url).status_code == 400, url
    assert Report.objects.count() == 0  # nothing computed, nothing stored

    # the offered values are computed, and the form offers them as menus
    offered = http.get(f"/datasets/tiny/benchmark.json?seed=3&{CHEAP}")
    assert offered.status_code == 200 and offered.json()["settings"]["seed"] == 3
    assert Report.objects.count() == 1
    page = http.get(f"/datasets/tiny/benchmark/?seed=3&{CHEAP}").text
    menu = re.search(r'<select name="seed">(.*?)</select>', page).group(1)
    assert re.findall(r'<option value="(\d+)"', menu) == ["0", "1", "2", "3", "4"]
    assert '<option value="3" selected>' in menu and '<input name="seed"' not in page

    # staff choose any value in the page's range: on a page (their session) and in the API (their token)
    staff = User.objects.create_user("staff", password="pw-staff-1", is_staff=True)
    browser = Client()
    browser.force_login(staff)
    with httpx.Client(base_url=str(http.base_url), timeout=120, cookies={"sessionid": browser.cookies["sessionid"].value}) as own:
        chosen = own.get(f"/datasets/tiny/benchmark.json?seed=7&{CHEAP}")
        assert chosen.status_code == 200 and chosen.json()["settings"]["seed"] == 7
        assert '<input name="seed" value="7"' in own.get(f"/datasets/tiny/benchmark/?seed=7&{CHEAP}").text
    token = create_token(staff)
    api = http.get(f"/api/reports/benchmark/tiny/?seed=8&{CHEAP}", headers={"Authorization": f"Token {token}"})
    assert api.status_code == 200 and api.json()["settings"]["seed"] == 8
    assert sorted(r.params["seed"] for r in Report.objects.all()) == [3, 7, 8]


def test_benchmark_json_is_rate_limited_on_one_counter_with_every_report_request(tiny, http, settings, clock):
    settings.REPORT_RATE_LIMIT = "4/m"
    url = f"/datasets/tiny/benchmark.json?{CHEAP}"
    assert [http.get(url).status_code for _ in range(4)] == [200] * 4  # computed once, then read
    over = http.get(url)
    assert over.status_code == 429 and over.headers["Retry-After"] == "60"
    assert "Too many requests" in over.text
    # one counter: the API resource, the page, a chart and the comparison are refused as well
    api = http.get(f"/api/reports/benchmark/tiny/?{CHEAP}")
    assert api.status_code == 429 and api.headers["Retry-After"] == "60"
    assert api.json()["type"] == "urn:captioneval:problem:throttled"
    for other in (f"/datasets/tiny/benchmark/?{CHEAP}", f"/datasets/tiny/benchmark/chart/item/pearson.json?{CHEAP}",
                  "/compare.csv", "/datasets/tiny/"):
        assert http.get(other).status_code == 429, other
    # a report's progress is not a report request; the dataset list neither
    row = Report.objects.get()
    assert http.get(f"/reports/{row.pk}/status.json").status_code == 200
    assert http.get("/").status_code == 200
    # the window ends: allowed again
    clock[0] += 60
    assert http.get(url).status_code == 200
    assert Report.objects.count() == 1


def test_the_cap_on_concurrent_computations_holds(tiny, http, live_server, settings, monkeypatch):
    settings.REPORT_MAX_COMPUTING = 1
    real = benchmarks.benchmark_report

    def lasting(*args, **kwargs):  # the real computation, made to last long enough that requests overlap
        time.sleep(0.3)
        return real(*args, **kwargs)

    monkeypatch.setattr(benchmarks, "benchmark_report", lasting)
    # ten reports never stored, asked for at the same moment through the download and the API
    urls = [f"/datasets/tiny/benchmark.json?seed={s}&{CHEAP}" for s in range(5)] + [
        f"/api/reports/benchmark/tiny/?seed={s}&alpha=0.01&{CHEAP}" for s in range(5)]
    start = threading.Barrier(len(urls))

    def get(url):
        with httpx.Client(base_url=live_server.url, timeout=120) as client:
            start.wait()
            return url, client.get(url)

    with ThreadPoolExecutor(len(urls)) as pool:
        answers = list(pool.map(get, urls))
    codes = Counter(r.status_code for _, r in answers)
    assert set(codes) <= {200, 503} and codes[200] >= 1 and codes[503] >= 1, codes
    for url, r in answers:
        if r.status_code == 503:
            assert r.headers["Retry-After"] == "5", url
            detail = r.json()["detail"] if url.startswith("/api/") else r.text
            assert "as many reports as it may at once (1 of 1)" in detail, detail
            if url.startswith("/api/"):
                assert r.json()["type"] == "urn:captioneval:problem:busy"
    rows = list(Report.objects.order_by("started_at"))
    assert len(rows) == codes[200] and {r.status for r in rows} == {Report.DONE}  # nothing stored for a refusal
    for before, after in zip(rows, rows[1:]):  # one computation at a time
        assert after.started_at >= before.finished_at, (before.params, after.params)
    # once nothing is being computed, a refused report is computed when asked again
    refused = next(url for url, r in answers if r.status_code == 503)
    assert http.get(refused).status_code == 200
    assert Report.objects.count() == len(rows) + 1


def test_unused_reports_of_other_settings_expire_when_a_new_one_is_stored(tiny, http, settings):
    settings.REPORT_UNUSED_DAYS = 7
    seed = {s: f"/datasets/tiny/benchmark.json?seed={s}&{CHEAP}" for s in range(5)}
    first = {s: http.get(seed[s]).json() for s in (1, 2, 3)}
    default = http.get("/datasets/tiny/benchmark.json")  # the page's defaults: never expire
    assert default.status_code == 200 and default.json()["settings"]["n_resamples"] == benchmarks.DEFAULT_RESAMPLES
    stored = {r.params["seed"] if r.params["resamples"] == 100 else "default": r.pk for r in Report.objects.all()}
    assert set(stored) == {1, 2, 3, "default"}
    Report.objects.update(used_at=timezone.now() - timedelta(days=8))  # nobody read any of them for 8 days
    assert http.get(seed[2]).json() == first[2]  # ... until now: seed 2 is read again
    assert http.get(seed[4]).status_code == 200  # a new computation is stored: the unused ones expire
    kept = {r.params["seed"] if r.params["resamples"] == 100 else "default": r.pk for r in Report.objects.all()}
    assert kept == {2: stored[2], "default": stored["default"], 4: kept[4]}
    # an expired report is computed again when asked for, with the same numbers
    assert http.get(seed[1]).json() == first[1]
    assert Report.objects.count() == 4


def test_campaign_reports_go_through_the_cap_too(tiny, http, settings):
    settings.REPORT_MAX_COMPUTING = 1
    alice = User.objects.create_user("alice", password="pw-alice-1")
    campaign = engine.create_campaign(Dataset.objects.get(name="tiny"), "rating", name="capped", owners=[alice],
                                      state=Campaign.LIVE, options={"images": 6}, k=3)
    simulate(campaign, raters=2, seed=1)
    browser = Client()
    browser.force_login(alice)
    token = create_token(alice)
    with httpx.Client(base_url=str(http.base_url), timeout=120,
                      cookies={"sessionid": browser.cookies["sessionid"].value}) as own:
        assert own.get("/campaigns/capped/").status_code == 200  # the cap is free: computed
        first = Report.objects.get(kind=Report.CAMPAIGN)
        simulate(campaign, raters=2, seed=2)  # new judgments: a new report to compute
        # another report is being computed (queued a moment ago by someone else): the cap of 1 is reached
        Report.objects.create(kind=Report.BENCHMARK, key="f" * 64, status=Report.PENDING)
        page = own.get("/campaigns/capped/")
        assert page.status_code == 503 and page.headers["Retry-After"] == "5"
        # the console is still there (owners, state buttons), with the previous report and one line saying why
        assert 'id="owner-names"' in page.text and 'id="agreement"' in page.text
        assert 'data-status="busy"' in page.text and "as many reports as it may at once (1 of 1)" in page.text
        for url in ("/campaigns/capped/report.json", "/campaigns/capped/correlations/relevance.png"):
            refused = own.get(url, headers={"Accept": "application/json"})
            assert refused.status_code == 503 and refused.headers["Retry-After"] == "5", url
            assert "as many reports as it may at once (1 of 1)" in refused.json()["error"], url
    api = http.get("/api/campaigns/capped/report/", headers={"Authorization": f"Token {token}"})
    assert api.status_code == 503 and api.headers["Retry-After"] == "5"
    assert api.json()["type"] == "urn:captioneval:problem:busy"
    assert list(Report.objects.filter(kind=Report.CAMPAIGN)) == [first]  # nothing stored for a refusal
    # the other computation ends: the campaign's new report is computed when asked again
    Report.objects.filter(kind=Report.BENCHMARK).update(status=Report.DONE)
    again = http.get("/api/campaigns/capped/report/", headers={"Authorization": f"Token {token}"})
    assert again.status_code == 200 and again.json()["progress"]["judgments"] > first.data["progress"]["judgments"]
    assert Report.objects.get(kind=Report.CAMPAIGN).key != first.key  # (its predecessor deleted when it was stored)
