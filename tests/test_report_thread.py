"""The quick start's report thread (``settings.REPORTS_IN_THREAD``, analysis.tasks.request_report):
without a broker, a dataset page whose report is not stored answers at once with the report's
progress (the same "computing" box a broker gives) and a daemon thread of the web process computes
it; the next visit reads it. ``warm_reports`` (not a web request) still computes inside the call.
Real data: the 40-image Flickr8k-Expert subset with BLEU-4 and CIDEr-D computed."""
import time

import pytest

from analysis.models import Report
from crowd.models import Dataset

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
