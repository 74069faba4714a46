"""An LLM judge end to end on the platform through real Celery workers (PostgreSQL, Redis), against
the fake OpenAI-compatible server on loopback (tests/fake_openai.py): ``compute_metrics --metric
clair`` queues the run, a worker asks the fake, and the worker is killed (SIGKILL of its process
group) in the middle of the run; a second worker resumes the unfinished run (every worker queues
``metrics.resume_runs`` when it connects) and finishes it. The fake's recorded requests show that
nothing already answered was asked again: at most the one request in flight when the worker died
(``JUDGE_CONCURRENCY=1``) is repeated, every other answer comes from the reply cache."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid

import pytest

from .conftest import ROOT, run_command
from .fake_openai import Answer, Delay, FakeOpenAI
from .test_learned_pipeline import coco_files

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

KEY = "sk-e2e-" + "c0ffee" * 4


def wait_for(condition, seconds: float, what: str):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_killed_worker_s_run_resumes_without_asking_again(tmp_path):
    from metrics.models import JudgeReply, JudgeUsage, MetricRun, MetricScore

    from .servers import BROKER, database_url, stop_group

    run_command("import_coco", "--name", "pictures", *coco_files(tmp_path))
    with FakeOpenAI(lambda body, n: Delay(0.3, Answer('{"score": 70, "reason": "close"}')), api_key=KEY) as server:
        env = dict(os.environ, DATABASE_URL=database_url(), CELERY_BROKER_URL=BROKER,
                   CELERY_QUEUE=f"test-{uuid.uuid4().hex}", CAPTIONEVAL_JUDGE_URL=server.url,
                   CAPTIONEVAL_JUDGE_MODEL=server.model, CAPTIONEVAL_JUDGE_API_KEY_ENV="E2E_JUDGE_KEY",
                   E2E_JUDGE_KEY=KEY, CAPTIONEVAL_JUDGE_CACHE=str(tmp_path / "judge-cache"),
                   JUDGE_CONCURRENCY="1", JUDGE_BATCH="3")
        logs = []

        def worker(name):
            log = open(tmp_path / f"{name}.log", "w+")
            logs.append(log)
            return subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "evalsite", "worker", "-l", "info", "--concurrency", "1",
                 "--without-gossip", "--without-mingle", "--without-heartbeat", "-n", f"{name}@%h"],
                cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

        first = worker("first")
        second = None
        try:
            queued = subprocess.run([sys.executable, "manage.py", "compute_metrics", "--dataset", "pictures",
                                     "--metric", "clair"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
            assert queued.returncode == 0, queued.stderr + queued.stdout
            run = MetricRun.objects.get(metric="clair")
            # the first batch of 3 is stored, the second is being asked: kill the worker there
            wait_for(lambda: MetricScore.objects.filter(run=run).count() == 3 and len(server.requests) >= 5, 90,
                     "the first batch and two requests of the second")
            os.killpg(first.pid, signal.SIGKILL)
            first.wait(10)
            asked_before = len(server.requests)
            assert MetricRun.objects.get(pk=run.pk).status == MetricRun.RUNNING
            second = worker("second")
            wait_for(lambda: MetricRun.objects.get(pk=run.pk).status == MetricRun.DONE, 120, "the resumed run")
        finally:
            for proc in (first, second):
                if proc is not None and proc.poll() is None:
                    stop_group(proc)
            for log in logs:
                log.seek(0)
                print(log.read()[-3000:])
        bodies = [json.dumps(r["body"], sort_keys=True) for r in server.requests]
    assert not server.problems
    assert len(set(bodies)) == 12  # one request per caption
    repeated = len(bodies) - len(set(bodies))
    assert repeated <= 1, f"{repeated} requests asked twice"  # at most the one in flight at the kill
    assert asked_before >= 5 and len(bodies) <= 13
    usage = JudgeUsage.objects.get(run=run)
    assert usage.cached >= asked_before - 3 - 1  # the killed batch's answers came from the cache
    assert MetricScore.objects.filter(run=run, value=0.7).count() == 12
    assert JudgeReply.objects.filter(run=run, outcome="ok").count() == 12
    for log in logs:
        log.seek(0)
        assert KEY not in log.read()


def test_a_judge_run_on_the_embedded_sqlite_default(tmp_path):
    """The quick start (SQLite, tasks in-process): CLAIR with an unparseable reply, stored as NaN with
    its outcome; the run's page shows the counts; the reply cache lies in var/judge-cache."""
    from .sqlite_var import migrated_var, sqlite_env

    var = migrated_var(tmp_path / "var")

    def behaviour(body, n):
        text = body["messages"][0]["content"]
        return Answer("no number here" if "- A cat sleeps .\n" in text else '{"score": 80, "reason": "ok"}')

    with FakeOpenAI(behaviour) as server:
        env = {**sqlite_env(var), "CAPTIONEVAL_JUDGE_URL": server.url, "CAPTIONEVAL_JUDGE_MODEL": server.model}
        env.pop("CAPTIONEVAL_JUDGE_CACHE", None)
        run = lambda *args: subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env,  # noqa: E731
                                           capture_output=True, text=True, timeout=300)
        imported = run("import_coco", "--name", "pictures", *coco_files(tmp_path))
        assert imported.returncode == 0, imported.stderr
        computed = run("compute_metrics", "--dataset", "pictures", "--metric", "clair", "--wait")
        assert computed.returncode == 0, computed.stderr + computed.stdout
    assert not server.problems and len(server.requests) == 11 + 3  # the unparseable caption is asked 3 times
    assert "clair: done, 12/12 scores" in computed.stdout
    assert "11 ok, 0 retried, 1 failed (failed: 1); 14 requests sent, 0 read from the cache" in computed.stdout
    assert len(list((var / "judge-cache").glob("??/*.json"))) == 14
    board = subprocess.run([sys.executable, "manage.py", "leaderboard", "--dataset", "pictures", "--metric", "clair",
                            "--resamples", "100", "--json"], cwd=ROOT, env=env, capture_output=True, text=True,
                           timeout=300)
    assert board.returncode == 0, board.stderr
    systems = json.loads(board.stdout)["systems"]
    # model_b's "A cat sleeps ." failed: left out of its mean, not averaged as 0
    assert systems["model_a"]["metrics"]["clair"]["score"] == pytest.approx(0.8)
    assert systems["model_b"]["metrics"]["clair"]["score"] == pytest.approx(0.8)
