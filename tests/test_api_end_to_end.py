"""The end-to-end script of docs/api.md (docs/examples/api_end_to_end.py) run as a researcher runs
it, in a subprocess, against a live server (Django's live_server; no broker, as the quick start:
runs and reports are computed in the web process): THumB's COCO files (scripts/thumb_as_coco.py)
for two systems are uploaded (in the request, and once more through background import jobs),
BLEU-4 is computed, the leaderboard is downloaded. Its numbers must be
those the leaderboard code gives for the same stored runs, so the documented script cannot rot."""
import json
import subprocess
import sys

import pytest

from analysis.leaderboard import leaderboard
from crowd.models import Caption
from metrics.models import MetricRun

from .conftest import ROOT

SCRIPT = ROOT / "docs" / "examples" / "api_end_to_end.py"
FILES = {"up-down": "Up-Down", "vinvl-base": "VinVL-base"}  # system -> its THumB results file


def run_script(url, token, dataset, folder, out):
    """Run the documented script as a researcher would: upload THumB's two systems from ``folder``
    (scripts/thumb_as_coco.py's files) as ``dataset``, compute BLEU-4, write the leaderboard to ``out``."""
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--url", url, "--token", token, "--dataset", dataset,
         "--annotations", str(folder / "captions_thumb.json"),
         *[a for name, file in FILES.items() for a in ("--results", f"{name}={folder / f'results_{file}.json'}")],
         "--metric", "bleu_4", "--out", str(out), "--timeout", "600"],
        capture_output=True, text=True, timeout=900)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("inline_bytes", [1024 * 1024, 20000], ids=["inline", "background-import"])
def test_the_documented_script_uploads_computes_and_downloads_the_leaderboard(live_server, tmp_path, settings,
                                                                               inline_bytes):
    from django.contrib.auth.models import User
    from api.account import create_token

    settings.API_INLINE_IMPORT_BYTES = inline_bytes  # 20000: every file is imported by a background job
    subprocess.run([sys.executable, str(ROOT / "scripts" / "thumb_as_coco.py"), str(tmp_path)], check=True,
                   capture_output=True)
    staff = User.objects.create_user("researcher", password="pw", is_staff=True)
    token = create_token(staff)
    out = tmp_path / "leaderboard.json"
    proc = run_script(live_server.url, token, "thumb-api", tmp_path, out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    board = json.loads(out.read_text())
    assert set(board["systems"]) == {"up-down", "vinvl-base"}
    for name in ("up-down", "vinvl-base"):
        results = json.loads((tmp_path / f"results_{FILES[name]}.json").read_text())
        assert Caption.objects.filter(system__dataset__name="thumb-api", system__name=name).count() == len(results)
    expected = leaderboard("thumb-api", metrics=["bleu_4"])
    for name, system in board["systems"].items():
        assert system["metrics"]["bleu_4"]["score"] == expected["systems"][name]["metrics"]["bleu_4"]["score"]
        assert f"{name:<20} {system['metrics']['bleu_4']['score']:.4f}" in proc.stdout
    # a second run of the same script (its uploads replayed by their Idempotency-Keys, the run up to
    # date) writes nothing and gives the same leaderboard
    captions, runs = Caption.objects.count(), MetricRun.objects.count()
    again = subprocess.run(proc.args, capture_output=True, text=True, timeout=900)
    assert again.returncode == 0, again.stderr[-3000:]
    assert (Caption.objects.count(), MetricRun.objects.count()) == (captions, runs)
    assert json.loads(out.read_text())["systems"] == board["systems"]


@pytest.mark.django_db(transaction=True)
def test_the_documented_script_against_a_server_with_a_real_celery_worker(tmp_path):
    """The production shape: the web server (runserver) with a broker (Redis), a real Celery worker.
    Every upload goes through an import job (API_INLINE_IMPORT_BYTES=20000), the runs and the
    leaderboard report are computed by the worker; the script's leaderboard is the leaderboard code's."""
    from django.contrib.auth.models import User
    from api.account import create_token

    from api.models import ImportJob

    from .servers import web_and_worker

    subprocess.run([sys.executable, str(ROOT / "scripts" / "thumb_as_coco.py"), str(tmp_path)], check=True,
                   capture_output=True)
    staff = User.objects.create_user("researcher", password="pw", is_staff=True)
    token = create_token(staff)
    with web_and_worker(tmp_path, ready_path="/api/schema/", API_INLINE_IMPORT_BYTES="20000", API_RATE_LIMIT="0",
                        REPORTS_AFTER_METRIC_RUNS="0") as (url, worker):
        out = tmp_path / "leaderboard.json"
        proc = run_script(url, token, "thumb-worker", tmp_path, out)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert worker.poll() is None
    assert sorted(ImportJob.objects.values_list("status", flat=True)) == ["done", "done"]
    board = json.loads(out.read_text())
    expected = leaderboard("thumb-worker", metrics=["bleu_4"])
    assert set(board["systems"]) == {"up-down", "vinvl-base"}
    for name, system in board["systems"].items():
        assert system["metrics"]["bleu_4"]["score"] == expected["systems"][name]["metrics"]["bleu_4"]["score"]
