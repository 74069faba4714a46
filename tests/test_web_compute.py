"""Compute from the web (issue 15): metric runs and score uploads started by staff and campaign
owners as background jobs with progress, the gap-weighted options offered only when they work, and
the progress bar of a report being computed (status JSON, updated in place, one reload when done).

The in-process tests run as the quick start does (no broker: a background thread of the web
process); ``test_run_started_by_post_completes_on_a_real_worker`` runs the same POST against a real
Celery worker with Redis and PostgreSQL."""
import re
import threading
import time
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from analysis import cached_reports
from analysis.models import Report
from crowd import engine
from crowd.models import Dataset
from metrics import jobs
from metrics.models import MetricRun, MetricScore, UploadJob
from metrics.uploads import uploaded_runs

from .conftest import run_command, stale
from .servers import web_and_worker


@pytest.fixture
def subset(subset_dir):
    run_command("import_dataset", "flickr8k-expert", str(subset_dir), "--name", "sub")
    return Dataset.objects.get(name="sub")


from .test_user_metrics import csrf_client, staff  # noqa: E402,F401 (staff is a fixture)
from .test_user_metrics import page_token as token  # noqa: E402


def wait_done(client, name, timeout=300, seen=None):
    """Poll jobs.json until nothing is pending or running; returns the last answer. ``seen``: a list
    collecting every (metric, completed, total) observed."""
    deadline = time.monotonic() + timeout
    while True:
        data = client.get(reverse("metrics:jobs-json", args=[name])).json()
        if seen is not None:
            seen.extend((r["metric"], r["completed"], r["total"]) for r in data["runs"])
        if not data["busy"]:
            return data
        assert time.monotonic() < deadline, data
        time.sleep(0.2)


def length_csv(dataset):
    rows = dataset.candidates().order_by("id").values_list("image__key", "key", "text")
    return "image,caption,score\n" + "".join(f"{i},{k},{len(t)}\n" for i, k, t in rows)


# --- who may start jobs -----------------------------------------------------------------------------

@pytest.mark.django_db
def test_only_staff_may_start_jobs_and_csrf_is_kept(subset, staff):
    compute = reverse("metrics:compute", args=["sub"])
    page = reverse("analysis:dataset", args=["sub"])
    # anonymous: sent to the login page, nothing recorded
    response = Client().post(compute, {"metric": ["bleu_4"]})
    assert response.status_code == 302 and response["Location"].startswith(reverse("login"))
    # a logged-in user who owns nothing here: 403 everywhere, and no panel on the dataset page
    other = User.objects.create_user("other", password="pw")
    client = Client()
    client.force_login(other)
    assert client.post(compute, {"metric": ["bleu_4"]}).status_code == 403
    assert client.get(reverse("metrics:jobs-json", args=["sub"])).status_code == 403
    assert client.get(reverse("metrics:upload-scores", args=["sub"])).status_code == 403
    assert 'id="compute-panel"' not in client.get(page).content.decode()
    assert MetricRun.objects.count() == 0
    # nor does owning a campaign on the dataset (anyone logged in may create one): still 403
    owner = User.objects.create_user("owner", password="pw")
    engine.create_campaign(subset, "rating", name="mine", owners=[owner], options={"images": 2}, gold_every=0)
    client.force_login(owner)
    assert not jobs.can_compute(owner, subset) and client.post(compute, {"metric": ["bleu_4"]}).status_code == 403
    assert 'id="compute-panel"' not in client.get(page).content.decode()
    # a staff user may: the panel is shown, with a CSRF token
    assert jobs.can_compute(staff, subset)
    strict = csrf_client(staff)
    html = strict.get(page).content.decode()
    assert 'id="compute-panel"' in html and 'id="compute-form"' in html and "csrfmiddlewaretoken" in html
    # without the token the POST is refused
    assert strict.post(compute, {"metric": ["bleu_4"]}).status_code == 403
    assert MetricRun.objects.count() == 0
    # GET is not a way to start anything
    assert strict.get(compute).status_code == 405
    # a metric that is not offered (VIFIDEL needs object labels; Flickr8k has none) or none: 400, nothing recorded
    offered, refused = jobs.metric_choices(subset)
    assert "bleu_4" in {m["key"] for m in offered} and "cider_d" in {m["key"] for m in offered}
    assert any(m["key"] == "vifidel" and "object labels" in m["reason"] for m in refused)
    assert 'data-metric="vifidel"' in html and 'value="vifidel"' not in html
    for choice in (["vifidel"], [], ["no_such_metric"]):
        response = strict.post(compute, {"metric": choice, "csrfmiddlewaretoken": token(strict, page)})
        assert response.status_code == 400 and 'id="compute-error"' in response.content.decode(), choice
    assert MetricRun.objects.count() == 0


@pytest.mark.django_db
def test_a_dataset_without_references_offers_no_reference_metric(subset, staff):
    subset.reference_system = None
    subset.save()
    offered, refused = jobs.metric_choices(subset)
    assert not {"bleu_4", "cider_d", "meteor", "rouge_l"} & {m["key"] for m in offered}
    assert all("reference captions" in m["reason"] for m in refused if m["key"] in ("bleu_4", "cider_d"))
    # a request for it anyway is refused with the reason
    client = csrf_client(staff)
    page = reverse("analysis:dataset", args=["sub"])
    response = client.post(reverse("metrics:compute", args=["sub"]), {"metric": ["cider_d"], "csrfmiddlewaretoken": token(client, page)})
    assert response.status_code == 400 and "not offered" in response.content.decode()
    from analysis.views import weighting_choices

    choices, reason = weighting_choices(subset)
    assert choices == [] and "reference captions" in reason


# --- in-process (quick start): the POST returns at once, a background thread computes --------------

@pytest.mark.django_db(transaction=True)
def test_run_started_by_post_returns_at_once_and_progress_advances_to_done(subset, staff, settings, monkeypatch):
    assert jobs.in_process()  # no broker in this test process: the quick-start mode
    settings.METRICS_CHUNK_SIZE = 40  # several chunks, so progress is seen between 0 and done
    # METEOR's chunks can all finish between two polls: after its first stored chunk the background
    # thread waits (at most 60 s) until a poll of the page's progress has seen the partial count
    from metrics import pipeline

    seen_partial = threading.Event()
    real_score = pipeline.Level.score

    def gated_score(self, units):
        created = real_score(self, units)  # committed: the progress is visible to other connections
        if self.run.metric == "meteor" and 0 < self.run.completed < self.run.total:
            seen_partial.wait(60)
        return created

    monkeypatch.setattr(pipeline.Level, "score", gated_score)
    client = csrf_client(staff)
    page = reverse("analysis:dataset", args=["sub"])
    started = time.monotonic()
    response = client.post(reverse("metrics:compute", args=["sub"]),
                           {"metric": ["bleu_4", "meteor"], "csrfmiddlewaretoken": token(client, page)})
    answered = time.monotonic() - started
    assert response.status_code == 302 and response["Location"] == page + "#runs"
    runs = {r.metric: r for r in MetricRun.objects.filter(dataset=subset)}
    assert set(runs) == {"bleu_4", "meteor"}
    assert answered < 2.0, answered
    assert runs["meteor"].status != MetricRun.DONE  # METEOR takes seconds: still computing after the answer
    html = client.get(page).content.decode()
    assert "Started BLEU-4, METEOR in the background of this server" in html
    assert f'data-run="{runs["meteor"].pk}"' in html
    seen = []
    deadline = time.monotonic() + 60
    try:
        while not any(m == "meteor" and 0 < c < t for m, c, t in seen):  # progress between start and done
            assert time.monotonic() < deadline, seen
            data = client.get(reverse("metrics:jobs-json", args=["sub"])).json()
            seen.extend((r["metric"], r["completed"], r["total"]) for r in data["runs"])
            time.sleep(0.05)
        assert data["busy"]
    finally:
        seen_partial.set()  # also when an assertion fails: the background thread goes on at once
    data = wait_done(client, "sub", seen=seen)
    final = {r["metric"]: r for r in data["runs"]}
    for key, run in runs.items():
        run.refresh_from_db()
        assert run.status == MetricRun.DONE and final[key]["percent"] == 100.0
        assert MetricScore.objects.filter(run=run).count() == run.total == final[key]["total"] == subset.candidates().count()
    # a second request for done metrics starts nothing
    response = client.post(reverse("metrics:compute", args=["sub"]),
                           {"metric": ["bleu_4"], "csrfmiddlewaretoken": token(client, page)}, follow=True)
    assert "Already up to date: BLEU-4." in response.content.decode()
    assert MetricRun.objects.filter(dataset=subset).count() == 2


@pytest.mark.django_db(transaction=True)
def test_large_upload_is_a_background_job_with_progress(subset, staff, monkeypatch):
    url = reverse("metrics:upload-scores", args=["sub"])
    body = length_csv(subset).encode()
    monkeypatch.setattr(jobs, "INLINE_UPLOAD_BYTES", 1024)  # the subset's file is small; make it "large"
    assert len(body) > jobs.INLINE_UPLOAD_BYTES
    client = csrf_client(staff)
    response = client.post(url, {"csrfmiddlewaretoken": token(client, url), "name": "Length", "higher": "better",
                                 "file": SimpleUploadedFile("length.csv", body, content_type="text/csv")})
    assert response.status_code == 302 and response["Location"] == url
    job = UploadJob.objects.get()
    assert job.size == len(body) and job.filename == "length.csv"
    html = client.get(url).content.decode()
    assert f'data-job="{job.pk}"' in html
    data = wait_done(client, "sub", timeout=120)
    assert data["uploads"][0]["status"] == "done" and "Stored 'Length'" in data["uploads"][0]["message"]
    job.refresh_from_db()
    run = uploaded_runs(subset)["user_length"]
    assert job.run_id == run.pk and job.content == b""  # the bytes are not kept once stored
    stored = dict(MetricScore.objects.filter(run=run).values_list("caption__key", "value"))
    expected = dict(subset.candidates().values_list("key", "text"))
    assert stored == {k: float(len(expected[k])) for k in stored} and len(stored) == len(expected)
    # a bad file fails its job with the reason and stores nothing
    bad = body + b"nope.jpg,nope#0,1\n"
    client.post(url, {"csrfmiddlewaretoken": token(client, url), "name": "Broken", "higher": "better",
                      "file": SimpleUploadedFile("broken.csv", bad, content_type="text/csv")})
    data = wait_done(client, "sub", timeout=120)
    broken = data["uploads"][0]
    assert broken["status"] == "failed" and "line" in broken["message"] and "user_broken" not in uploaded_runs(subset)
    html = client.get(url).content.decode()
    assert "failed" in html and 'id="upload-jobs"' in html
    # a bad name is refused at once, no job
    response = client.post(url, {"csrfmiddlewaretoken": token(client, url), "name": "CIDEr-D", "higher": "better",
                                 "file": SimpleUploadedFile("c.csv", body, content_type="text/csv")})
    assert response.status_code == 400 and UploadJob.objects.count() == 2


# --- gap-weighted options: offered = those that work -----------------------------------------------

@pytest.mark.django_db
def test_gap_weighted_choices_offered_are_exactly_those_that_work(subset):
    client = Client()
    page = reverse("analysis:dataset", args=["sub"])
    run_command("compute_metrics", "--dataset", "sub", "--metric", "bleu_4", "cider_d")
    html = client.get(page).content.decode()
    # nothing offered before the lexical runs: one line why, no dropdown
    assert 'id="weighting-unavailable"' in html and "lexical" in html and 'name="weighting"' not in html
    response = client.get(page + "?weighting=gap:mtld")
    assert response.status_code == 200
    assert 'id="weighting-problem"' in response.content.decode() and 'data-metric="cider_d"' in response.content.decode()
    assert client.get(reverse("analysis:report-json", args=["sub"]) + "?weighting=gap:mtld").status_code == 404
    run_command("compute_metrics", "--dataset", "sub", "--metric", "lexical")
    html = client.get(page).content.decode()
    offered = re.findall(r'<option value="([a-z]+:[a-z_]+)"', html)
    assert len(offered) == 10 and 'id="weighting-unavailable"' not in html  # both factors x 5 measures
    for value in offered:
        factor, measure = value.split(":")
        html = client.get(page, {"weighting": value}).content.decode()
        assert 'id="weighting-problem"' not in html and 'id="no-report"' not in html, value
        assert f'data-metric="cider_d+{factor}_{measure}"' in html, value
        data = client.get(reverse("analysis:report-json", args=["sub"]), {"weighting": value}).json()
        assert data["weighting"]["measure"] == measure and f"bleu_4+{factor}_{measure}" in data["metrics"]


# --- the progress of a report being computed ----------------------------------------------------------

@pytest.mark.django_db
def test_report_status_json_and_the_no_script_fallback(subset):
    run_command("compute_metrics", "--dataset", "sub", "--metric", "bleu_4")
    key, params = cached_reports.correlation_key(subset, None)
    # the same report computed once before (so an estimate exists), and the current one queued
    t0 = timezone.now()
    previous = Report.objects.create(kind=Report.CORRELATIONS, key="0" * 64, params=params, dataset=subset,
                                     status=Report.DONE, payload="{}", started_at=t0 - timedelta(seconds=40),
                                     finished_at=t0 - timedelta(seconds=20))
    row = Report.objects.create(kind=Report.CORRELATIONS, key=key, params=params, dataset=subset)
    client = Client()
    html = client.get(reverse("analysis:dataset", args=["sub"])).content.decode()
    status_url = reverse("analysis:report-status", args=[row.pk])
    assert f'data-status-url="{status_url}"' in html and '<meta http-equiv="refresh" content="2">' in html
    data = client.get(status_url).json()
    assert data["status"] == "pending" and data["percent"] is None and data["refresh"] == 2 and data["last_seconds"] == 20.0
    Report.objects.filter(pk=row.pk).update(status=Report.RUNNING, started_at=timezone.now() - timedelta(seconds=5))
    data = client.get(status_url).json()
    assert data["status"] == "running" and 20 <= data["percent"] <= 30 and 5 <= data["elapsed"] < 10
    Report.objects.filter(pk=row.pk).update(status=Report.PENDING)
    assert cached_reports.compute(row.pk) == Report.DONE
    data = client.get(status_url).json()
    assert data["status"] == "done" and data["percent"] == 100.0 and data["refresh"] is None
    assert not Report.objects.filter(pk=previous.pk).exists()
    assert client.get(reverse("analysis:report-status", args=[row.pk + 1000])).status_code == 404


# --- browser: the bars move in place and the page reloads once when done ----------------------------

@pytest.mark.django_db(transaction=True)
def test_progress_bars_advance_in_place_and_finish_in_chromium(subset, staff, live_server, browser, settings,
                                                              monkeypatch):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from metrics import pipeline

    settings.METRICS_CHUNK_SIZE = 40
    # each stored chunk stays visible for a moment (the run goes on in this process's background
    # thread), so the 1 s polling sees a partial bar whatever the machine's speed
    reported = pipeline.report_progress

    def slow_report(run):
        out = reported(run)
        time.sleep(0.8)
        return out

    monkeypatch.setattr(pipeline, "report_progress", slow_report)
    run_command("compute_metrics", "--dataset", "sub", "--metric", "bleu_4")
    # 1. a report being computed: the bar and text change in place, one reload when it is stored
    key, params = cached_reports.correlation_key(subset, None)
    row = Report.objects.create(kind=Report.CORRELATIONS, key=key, params=params, dataset=subset)
    client = Client()
    client.force_login(staff)
    browser.get(live_server.url + "/")
    browser.add_cookie({"name": "sessionid", "value": client.cookies["sessionid"].value, "path": "/"})
    browser.get(live_server.url + reverse("analysis:dataset", args=["sub"]))
    box = browser.find_element(By.ID, "report-computing")
    assert "is queued" in box.text
    browser.execute_script("window.__same_page = 1;")
    Report.objects.filter(pk=row.pk).update(status=Report.RUNNING, started_at=timezone.now())
    WebDriverWait(browser, 10).until(lambda d: "is being computed" in d.find_element(By.ID, "report-computing").text)
    assert browser.execute_script("return window.__same_page") == 1  # updated in place, not reloaded
    Report.objects.filter(pk=row.pk).update(status=Report.PENDING)
    cached_reports.compute(row.pk)
    WebDriverWait(browser, 15).until(stale(box))
    assert browser.find_elements(By.ID, "correlations") and not browser.find_elements(By.ID, "report-computing")
    # 2. a metric run started with the form: its row's bar advances in place, then the page reloads with it done
    panel = browser.find_element(By.ID, "compute-panel")
    if panel.get_attribute("open") is None:  # folded once some metric is done
        panel.find_element(By.TAG_NAME, "summary").click()
    for box_ in browser.find_elements(By.CSS_SELECTOR, '#compute-form input[name="metric"]'):
        if box_.is_selected() != (box_.get_attribute("value") == "meteor"):
            box_.click()
    browser.find_element(By.ID, "compute-submit").click()
    run = WebDriverWait(browser, 15).until(lambda d: MetricRun.objects.filter(metric="meteor").first())
    row_el = WebDriverWait(browser, 15).until(lambda d: d.find_element(By.CSS_SELECTOR, f'tr[data-run="{run.pk}"]'))
    browser.execute_script("window.__same_page = 2;")
    widths = set()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if browser.execute_script("return window.__same_page") != 2:
                break  # reloaded: every run finished
            widths.add(row_el.find_element(By.CSS_SELECTOR, ".percent").text)
        except Exception:  # noqa: BLE001 - the page is being replaced
            break
        time.sleep(0.1)
    partial = {w for w in widths if w not in ("0.0%", "100.0%")}
    assert partial, widths  # seen between start and done without a reload
    WebDriverWait(browser, 30).until(
        lambda d: d.find_element(By.CSS_SELECTOR, f'tr[data-run="{run.pk}"] .status').text == "done")
    assert browser.find_element(By.CSS_SELECTOR, f'tr[data-run="{run.pk}"] .percent').text == "100.0%"


# --- a real Celery worker ---------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_run_started_by_post_completes_on_a_real_worker(subset, staff, tmp_path):
    """The web server (runserver, with a broker) queues the run; a real worker computes it."""
    import httpx

    with web_and_worker(tmp_path, threading=False, METRICS_CHUNK_SIZE="50") as (base, worker):
        with httpx.Client(base_url=base, timeout=30) as http:
            page = http.get("/accounts/login/").text
            csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
            logged = http.post("/accounts/login/", data={"username": "curator", "password": "pw", "csrfmiddlewaretoken": csrf})
            assert logged.status_code == 302, logged.text[:500]
            html = http.get("/datasets/sub/").text
            assert "on the Celery workers" in html
            csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', html).group(1)
            started = time.monotonic()
            response = http.post("/datasets/sub/compute/", data={"metric": ["cider_d", "rouge_l"], "csrfmiddlewaretoken": csrf})
            assert response.status_code == 302 and time.monotonic() - started < 3
            assert "on the Celery workers" in http.get("/datasets/sub/").text
            deadline = time.monotonic() + 300
            while True:
                data = http.get("/datasets/sub/jobs.json").json()
                if not data["busy"]:
                    break
                assert time.monotonic() < deadline and worker.poll() is None, data
                time.sleep(0.5)
        for run in MetricRun.objects.filter(dataset=subset):
            assert run.status == MetricRun.DONE, (run.metric, run.error)
            assert MetricScore.objects.filter(run=run).count() == run.total > 0
        assert {r.metric for r in MetricRun.objects.filter(dataset=subset)} == {"cider_d", "rouge_l"}
