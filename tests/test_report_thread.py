"""The quick start's report thread (``settings.REPORTS_IN_THREAD``, analysis.tasks.request_report):
without a broker, a dataset page whose report is not stored answers at once with the report's
progress (the same "computing" box a broker gives) and a daemon thread of the web process computes
it; the next visit reads it. ``warm_reports`` (not a web request) still computes inside the call.
Real data: the 40-image Flickr8k-Expert subset with BLEU-4 and CIDEr-D computed."""
import time

import pytest

from analysis.models import Report
from crowd.models import Dataset, Image

from .conftest import run_command

pytestmark = pytest.mark.django_db(transaction=True)  # the thread reads the rows on its own connection


def _wait_done(dataset, timeout=120.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = list(Report.objects.filter(dataset=dataset, kind=Report.CORRELATIONS).values_list("status", flat=True))
        if rows and all(s in (Report.DONE, Report.FAILED) for s in rows):
            return rows
        time.sleep(0.1)
    raise AssertionError(f"the report thread did not finish in {timeout} s: {rows}")


def test_a_page_shows_progress_while_a_thread_computes_its_report(subset_dir, client, settings):
    run_command("import_dataset", "flickr8k-expert", str(subset_dir), "--name", "sub")
    run_command("compute_metrics", "--dataset", "sub", "--metric", "bleu_4", "cider_d", "--wait")
    dataset = Dataset.objects.get(name="sub")
    settings.REPORTS_IN_THREAD = True
    assert settings.CELERY_TASK_ALWAYS_EAGER  # the quick start: no broker

    first = client.get("/datasets/sub/")
    assert first.status_code == 200
    page = first.content.decode()
    assert 'id="report-computing"' in page  # progress, not the table: the request did not compute it
    row = Report.objects.get(dataset=dataset, kind=Report.CORRELATIONS)
    assert row.status in (Report.PENDING, Report.RUNNING, Report.DONE)

    assert _wait_done(dataset) == [Report.DONE]
    second = client.get("/datasets/sub/").content.decode()
    assert 'id="report-computing"' not in second
    assert "CIDEr-D" in second and "BLEU-4" in second
    assert Report.objects.filter(dataset=dataset, kind=Report.CORRELATIONS).count() == 1


def test_warm_reports_still_computes_inside_the_call(subset_dir, settings):
    run_command("import_dataset", "flickr8k-expert", str(subset_dir), "--name", "sub")
    run_command("compute_metrics", "--dataset", "sub", "--metric", "bleu_4", "--wait")
    settings.REPORTS_IN_THREAD = True
    out = run_command("warm_reports", "--dataset", "sub", "--no-compare", "--no-campaigns", "--resamples", "20",
                      "--permutations", "20")
    assert "sub: correlations: ready" in out, out
    assert not Report.objects.exclude(status=Report.DONE).exists()


def test_the_image_page_never_computes_its_view_in_the_request(tmp_path, client, settings, monkeypatch):
    """The per-image diversity page on the quick start's default (no broker, REPORTS_IN_THREAD):
    the first visit answers at once with the progress box and its charts with 503 + Retry-After,
    while a thread of the web process (never the request's own) computes the view; the next visit
    reads it. Real data: the COCO-format caption sets of tests/coco_sets.py with Self-CIDEr and LSA."""
    import threading

    from analysis import diversity

    from .coco_sets import write_coco_files

    d = write_coco_files(tmp_path)
    run_command("import_coco", "--name", "div", "--annotations", str(d / "captions.json"),
                "--results", f"merge={d / 'merge.json'}", "--results", f"thumb-models={d / 'thumb_models.json'}")
    run_command("compute_metrics", "--dataset", "div", "--metric", "self_cider", "lsa", "--wait")
    dataset = Dataset.objects.get(name="div")
    image = Image.objects.filter(dataset=dataset).order_by("key").first()
    settings.REPORTS_IN_THREAD = True
    assert settings.CELERY_TASK_ALWAYS_EAGER
    computed_in = []
    real = diversity.image_detail

    def recording(*args, **kwargs):
        computed_in.append(threading.get_ident())
        return real(*args, **kwargs)

    monkeypatch.setattr(diversity, "image_detail", recording)
    url = f"/datasets/div/images/{image.key}/"
    first = client.get(url)
    assert first.status_code == 200
    assert 'id="report-computing"' in first.content.decode()
    mds = client.get(url + "mds.png")
    assert mds.status_code in (503, 200)  # 503 + Retry-After unless the thread has already finished
    if mds.status_code == 503:
        assert mds["Retry-After"]
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        row = Report.objects.get(kind=Report.IMAGE, image=image)
        if row.status in (Report.DONE, Report.FAILED):
            break
        time.sleep(0.1)
    assert row.status == Report.DONE, row.error
    assert computed_in and threading.get_ident() not in computed_in  # a thread of its own, not the request's
    second = client.get(url).content.decode()
    assert 'id="report-computing"' not in second and 'section class="caption-set"' in second
    assert client.get(url + "mds.png")["Content-Type"] == "image/png"
    assert len(computed_in) == 1  # read from then on
