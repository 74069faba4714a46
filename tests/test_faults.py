"""Faults (issue 7), each with real processes and a real fault, nothing mocked:

1. a Celery worker SIGKILLed (its whole process group) in the middle of a metric run: a new worker
   completes the run with every score exactly once, equal to an in-process run;
2. PostgreSQL restarted (``pg_ctl restart -m fast``, then stopped for seconds) while simulated
   raters submit through gunicorn: a private cluster, so the shared server is never touched; every
   answer is normal or a 503 with ``Retry-After``, retrying clients succeed, nothing is half-written;
3. Redis (broker and cache) stopped: raters keep working and the dashboard keeps loading through
   gunicorn, ``compute_metrics`` answers at once that the run is queued, and once Redis is back the
   surviving worker reconnects and completes the run; a broker that hangs (SIGSTOPped) does not
   block ``compute_metrics`` either.

Each test prints a short report (run pytest with ``-s`` to see it).
"""
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import psycopg
import pytest
import redis
import requests
from django.db.models import Count
from psycopg.rows import namedtuple_row

from crowd import engine
from crowd.models import Campaign, Dataset, HumanJudgment
from crowd.simulate import CSRF, ITEM, SUBMIT_KEY, TASK_URL, HttpTransport, _path
from metrics.models import MetricRun, MetricScore

from .conftest import ROOT, TEST_IMAGE_URL, run_command, write_subset
from .test_celery_worker import BROKER, database_url

PY = sys.executable
PG_BIN = Path(os.environ.get("PG_BIN", "/usr/lib/postgresql/15/bin"))
RETRY_MESSAGE = "Nothing from this request was saved"
pytestmark = pytest.mark.slow


# --- processes --------------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(predicate, timeout: float, what: str, interval: float = 0.2):
    """Poll ``predicate`` until it returns something truthy (returned); fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    pytest.fail(f"timed out after {timeout:g} s waiting for {what}")


def stop(proc: subprocess.Popen, timeout: float = 30) -> None:
    """Stop ``proc`` gracefully (SIGTERM to it, which stops its children), else SIGKILL its group."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


class Processes:
    """Server processes of one test, each in its own process group (so a group can be SIGKILLed)
    with its output in ``<name>.log``; whatever still runs is stopped at teardown."""

    def __init__(self, directory: Path):
        self.directory, self.started = directory, []

    def spawn(self, name: str, args, env) -> subprocess.Popen:
        with open(self.directory / f"{name}.log", "ab") as out:
            proc = subprocess.Popen(args, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        self.started.append((name, proc))
        return proc

    def log(self, name: str, n: int = 3000) -> str:
        path = self.directory / f"{name}.log"
        return path.read_text(errors="replace")[-n:] if path.exists() else ""

    def worker(self, name: str, env) -> subprocess.Popen:
        """A Celery worker (2 processes) on ``env["CELERY_QUEUE"]``."""
        return self.spawn(name, [PY, "-m", "celery", "-A", "evalsite", "worker", "-l", "info", "--concurrency", "2",
                                 "-Q", env["CELERY_QUEUE"], "--without-gossip", "--without-mingle",
                                 "--without-heartbeat"], env)

    def gunicorn(self, env) -> str:
        """gunicorn with 2 sync workers on a free port; returns its base URL once it answers."""
        port = free_port()
        proc = self.spawn("gunicorn", [PY, "-m", "gunicorn", "evalsite.wsgi", "-b", f"127.0.0.1:{port}", "-w", "2",
                                       "--timeout", "30"], env)
        base = f"http://127.0.0.1:{port}"

        def up():
            if proc.poll() is not None:
                pytest.fail(f"gunicorn exited:\n{self.log('gunicorn')}")
            try:
                return requests.get(base + "/rate/", timeout=30).status_code < 500
            except requests.RequestException:
                return False

        wait_until(up, 90, "gunicorn to answer")
        return base

    def redis(self, name: str, port: int) -> subprocess.Popen:
        """A private redis-server without persistence on ``port``, once it answers PING."""
        proc = self.spawn(name, ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                 "--appendonly", "no"], dict(os.environ))
        wait_until(lambda: redis_up(port), 30, f"redis-server on port {port}")
        return proc

    def stop_all(self):
        while self.started:
            name, proc = self.started.pop()
            stop(proc)
            print(f"--- {name} log (end) ---\n{self.log(name, 1500)}")


@pytest.fixture
def procs(tmp_path):
    processes = Processes(tmp_path)
    yield processes
    processes.stop_all()


def redis_up(port: int) -> bool:
    try:
        return redis.Redis(port=port, socket_connect_timeout=0.5).ping()
    except redis.ConnectionError:
        return False


def manage(*args, env, timeout: float = 300) -> str:
    """``manage.py <args>`` in a subprocess with ``env``; its stdout (the test fails on an error)."""
    result = subprocess.run([PY, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=timeout)
    assert result.returncode == 0, f"manage.py {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def manage_all(*commands, env, timeout: float = 300) -> list[str]:
    """Several ``manage.py`` commands (each a list of arguments) one after another in a single
    subprocess with ``env`` (one Django start-up instead of one per command); their stdouts (the test
    fails on an error)."""
    code = ("import io, json, os, sys; os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'evalsite.settings'); "
            "import django; django.setup(); from django.core.management import call_command; outs = []\n"
            "for args in json.loads(sys.argv[1]):\n"
            "    out = io.StringIO(); call_command(*args, stdout=out); outs.append(out.getvalue())\n"
            "print(json.dumps(outs))")
    result = subprocess.run([PY, "-c", code, json.dumps([list(c) for c in commands])], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"manage.py {commands} failed:\n{result.stdout}\n{result.stderr}"
    return json.loads(result.stdout.splitlines()[-1])


def web_env(**extra) -> dict:
    """Environment of a production-like web process: DEBUG off (so ``handler500`` is in charge)."""
    return dict(os.environ, DJANGO_DEBUG="0", DJANGO_ALLOWED_HOSTS="127.0.0.1", DJANGO_SECRET_KEY="fault-tests",
                **extra)


# --- simulated raters over HTTP (no database access of their own) ------------------------------------
@dataclass
class RaterLog:
    responses: list = field(default_factory=list)  # every requests.Response, retried ones included
    submitted: list = field(default_factory=list)  # (assignment pk, submit_key, answer) the server confirmed
    problems: list = field(default_factory=list)  # unexpected answers or exceptions (timeouts...)
    reason: str = ""  # why the server had no more tasks
    retried: int = 0


def rate(base: str, campaign: str, join_path: str, seed: int, max_tasks: int, stop: threading.Event,
         out: RaterLog) -> None:
    """One rater through the HTML flow of crowd/views/rater.py (join, preview, accept, task, submit
    with the CSRF token), recording into ``out`` as it goes; 503/429 answers are retried after
    ``Retry-After`` by :class:`HttpTransport`. Stops when the server has no task, after ``max_tasks``
    submissions, when ``stop`` is set (between tasks) or at the first problem."""
    http = HttpTransport(base, retries=12, timeout=30, log=out.responses)
    rng = random.Random(seed)
    try:
        status, _, _ = http.get(join_path)
        if status != 302:
            out.problems.append(("join", status))
            return
        while len(out.submitted) < max_tasks and not stop.is_set():
            status, location, html = http.get(f"/rate/{campaign}/")
            if status == 200 and 'id="reason"' not in html:
                status, location, html = http.post(f"/rate/{campaign}/accept/",
                                                   {"csrfmiddlewaretoken": CSRF.search(html).group(1)})
            if status == 200 and 'id="reason"' in html:
                out.reason = re.search(r'data-reason="(\w+)"', html).group(1)
                break
            if status != 302:
                out.problems.append(("next/accept", status))
                break
            task = _path(location)
            status, _, html = http.get(task)
            if status != 200:
                out.problems.append((task, status))
                break
            answer = {"relevance": str(rng.randint(1, 5)), "thoroughness": str(rng.randint(1, 5))}
            form = {"csrfmiddlewaretoken": CSRF.search(html).group(1), "submit_key": SUBMIT_KEY.search(html).group(1),
                    "item": ITEM.search(html).group(1), **answer}
            status, _, _ = http.post(task + "submit/", form)
            if status != 302:
                out.problems.append((task + "submit/", status))
                break
            out.submitted.append((int(TASK_URL.search(task).group(1)), form["submit_key"], answer))
    except Exception as exc:  # noqa: BLE001 - a hung or refused request is a finding, reported by the test
        out.problems.append(("exception", repr(exc)))
    out.retried = http.retried


class Raters:
    """Simulated raters, one thread per invitation link; ``logs`` fill as they work."""

    def __init__(self, base: str, campaign: str, join_paths, max_tasks: int = 10**6):
        self.logs = [RaterLog() for _ in join_paths]
        self.stopping = threading.Event()
        self.threads = [
            threading.Thread(target=rate, args=(base, campaign, path, i, max_tasks, self.stopping, self.logs[i]),
                             daemon=True)
            for i, path in enumerate(join_paths)
        ]
        for t in self.threads:
            t.start()

    def confirmed(self) -> int:
        return sum(len(log.submitted) for log in self.logs)

    def wait_for(self, n: int, timeout: float = 120):
        """Wait until ``n`` submissions in all were confirmed (fail if the raters stopped before)."""

        def reached():
            if self.confirmed() >= n:
                return True
            if not any(t.is_alive() for t in self.threads):
                pytest.fail(f"the raters stopped after {self.confirmed()} submissions: "
                            f"{[(log.reason, log.problems) for log in self.logs]}")
            return False

        wait_until(reached, timeout, f"{n} confirmed submissions")

    def join(self, stop: bool = False, timeout: float = 240):
        """Wait for every rater to end (after its current task if ``stop``)."""
        if stop:
            self.stopping.set()
        for t in self.threads:
            t.join(timeout=timeout)
        assert not any(t.is_alive() for t in self.threads), "a rater is stuck"


def check_responses(logs: list[RaterLog]) -> Counter:
    """Every answer is a normal one (200, 302) or a 503 that says it is retryable, with Retry-After;
    returns the count per status."""
    statuses = Counter()
    for log in logs:
        assert not log.problems, f"a rater hit a problem: {log.problems}"
        for r in log.responses:
            statuses[r.status_code] += 1
            assert r.status_code in (200, 302, 503), f"{r.request.method} {r.request.path_url} -> {r.status_code}"
            if r.status_code == 503:
                assert r.headers.get("Retry-After", "").isdigit(), r.headers
                assert RETRY_MESSAGE in r.text, r.text[:500]
    return statuses


# --- 1. a worker killed in the middle of a metric run ----------------------------------------------------
def queue_state(client: redis.Redis, queue: str) -> tuple[int, int]:
    """(messages waiting in ``queue``, messages of ``queue`` delivered but not acknowledged)."""
    unacked = sum(1 for v in client.hvals("unacked") if v.decode(errors="replace").rstrip().endswith(f'"{queue}"]'))
    return client.llen(queue), unacked


def forget_queue(client: redis.Redis, queue: str) -> None:
    """Remove the test queue, its bindings and its unacknowledged messages from the broker database."""
    client.delete(queue, f"_kombu.binding.{queue}", f"_kombu.binding_permanent.{queue}")
    for tag, v in client.hgetall("unacked").items():
        if v.decode(errors="replace").rstrip().endswith(f'"{queue}"]'):
            client.hdel("unacked", tag)
            client.zrem("unacked_index", tag)


@pytest.mark.django_db(transaction=True)
def test_worker_killed_mid_run_completes_after_restart(procs, tmp_path):
    # 150 images (about 870 candidates, 221 chunks of 4 per metric): a run long enough to be killed in
    # its middle (with chunks of 20 a fast machine finished both runs between two polls, in a CI run);
    # the full dataset only made the two runs and their in-process repeat longer
    run_command("import_dataset", "flickr8k-expert", str(write_subset(tmp_path / "sub150", 150)), "--name", "faults")
    queue = f"faults-{uuid.uuid4().hex}"
    env = dict(os.environ, DATABASE_URL=database_url(), CELERY_BROKER_URL=BROKER, CELERY_QUEUE=queue,
               METRICS_CHUNK_SIZE="4")
    broker = redis.Redis.from_url(BROKER)
    try:
        first = procs.worker("worker1", env)
        out = manage("compute_metrics", "--dataset", "faults", "--metric", "bleu_4", "cider_d", env=env)
        assert "queued 2 metric run(s)" in out, out
        runs = MetricRun.objects.filter(dataset__name="faults")  # a query: evaluated afresh each time
        total = sum(r.total for r in runs.all())
        n_scores = lambda: MetricScore.objects.filter(run__in=runs).count()  # noqa: E731
        wait_until(lambda: n_scores() > 0, 180, "the first scores", interval=0.02)
        os.killpg(first.pid, signal.SIGKILL)  # the main process and its pool, mid-chunk
        first.wait()
        waiting, unacked = queue_state(broker, queue)
        at_kill = n_scores()
        assert 0 < at_kill < total, "the worker was not killed in the middle of the run"
        assert unacked > 0, "the killed worker held no message: nothing was lost"
        assert runs.filter(status=MetricRun.DONE).count() < 2

        procs.worker("worker2", env)
        wait_until(lambda: runs.filter(status=MetricRun.DONE).count() == 2, 240,
                   "the runs to complete after the restart")
        procs.stop_all()
    finally:
        forget_queue(broker, queue)

    stored = {}
    for run in runs.all():
        assert run.status == MetricRun.DONE and run.completed == run.total
        rows = list(MetricScore.objects.filter(run=run).values_list("caption_id", "value"))
        ids = [c for c, _ in rows]
        assert len(ids) == len(set(ids)) == run.total, "missing or duplicated scores"
        assert set(ids) == set(run.dataset.candidates().values_list("id", flat=True))
        stored[run.metric] = dict(rows)
    dups = MetricScore.objects.filter(run__in=runs).values("run", "caption").annotate(n=Count("id")).filter(n__gt=1)
    assert not dups.exists()

    # the same runs computed again in-process (no broker in this process: tasks run eagerly)
    run_command("compute_metrics", "--dataset", "faults", "--metric", "bleu_4", "cider_d", "--force")
    for run in runs.all():
        eager = dict(MetricScore.objects.filter(run=run).values_list("caption_id", "value"))
        keys = sorted(eager)
        assert keys == sorted(stored[run.metric])
        np.testing.assert_allclose([stored[run.metric][k] for k in keys], [eager[k] for k in keys], rtol=0, atol=1e-12)
    print(f"\nworker SIGKILLed with {at_kill:,}/{total:,} scores stored, {waiting} messages waiting in the queue and "
          f"{unacked} unacknowledged (lost with the worker until the visibility timeout); after a new worker: "
          f"{total:,}/{total:,} scores, 0 duplicates, equal to the in-process run")


# --- 2. PostgreSQL restarted while raters submit ---------------------------------------------------------
def _as_postgres(*args) -> list[str]:
    """Run a PostgreSQL server binary as the ``postgres`` user when we are root (initdb refuses root)."""
    return ["runuser", "-u", "postgres", "--", *map(str, args)] if os.geteuid() == 0 else list(map(str, args))


@pytest.fixture
def private_postgres():
    """A throw-away PostgreSQL cluster on a free port (trust auth, 127.0.0.1 only) that the test may
    restart; stopped and removed afterwards. Yields (database URL, ``pg_ctl(*args)``)."""
    if not (PG_BIN / "initdb").exists():
        pytest.fail(f"PostgreSQL server binaries not found in {PG_BIN} (set PG_BIN)")
    root = Path(f"/tmp/pgfault-{uuid.uuid4().hex[:12]}")
    root.mkdir()
    data, port = root / "data", free_port()

    def pg_ctl(*args, check=True):
        subprocess.run(_as_postgres(PG_BIN / "pg_ctl", "-D", data, "-l", root / "server.log", "-w", "-t", "60", *args),
                       check=check, capture_output=True, timeout=90)

    try:
        if os.geteuid() == 0:
            shutil.chown(root, "postgres", "postgres")
        subprocess.run(_as_postgres(PG_BIN / "initdb", "-D", data, "-A", "trust", "-U", "postgres", "--no-sync"),
                       check=True, capture_output=True, timeout=120)
        with open(data / "postgresql.conf", "a") as conf:
            conf.write(f"port = {port}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{root}'\n"
                       "fsync = off\n")
        pg_ctl("start")
        yield f"postgres://postgres@127.0.0.1:{port}/postgres", pg_ctl
    finally:
        pg_ctl("-m", "immediate", "stop", check=False)
        shutil.rmtree(root, ignore_errors=True)


def test_postgres_restart_while_raters_submit(private_postgres, procs, subset_dir):
    url, pg_ctl = private_postgres
    env = web_env(DATABASE_URL=url, RATER_RATE_LIMIT="0", CELERY_BROKER_URL="",
                  CROWD_MIN_SECONDS_PER_TASK="0")  # machine-speed raters: no speed check
    *_, links = manage_all(
        ["migrate", "--noinput"],
        ["import_dataset", "flickr8k-expert", str(subset_dir), "--name", "sub"],
        ["create_campaign", "rating", "--dataset", "sub", "--name", "pgfault", "--k", "3", "--gold", "0",
         "--gold-every", "0", "--live", "--image-url", TEST_IMAGE_URL],  # raters must see a picture to be published
        ["invite_raters", "--campaign", "pgfault", "-n", "8"], env=env)
    links = links.split()
    assert len(links) == 8, links
    base = procs.gunicorn(env)
    raters = Raters(base, "pgfault", [_path(link) for link in links])
    raters.wait_for(20)  # 8 raters at work (20 submissions per phase: every rater has come through each fault)
    before_restart = raters.confirmed()
    pg_ctl("-m", "fast", "restart")
    raters.wait_for(before_restart + 20)
    before_stop = raters.confirmed()
    pg_ctl("-m", "fast", "stop")
    time.sleep(4)  # raters keep asking meanwhile and are told to come back
    pg_ctl("start")
    raters.wait_for(before_stop + 20)  # the raters caught in the outage got through
    raters.join(stop=True)
    procs.stop_all()
    logs = raters.logs

    statuses = check_responses(logs)
    assert statuses[503] > 0, "no request met the outage"
    with psycopg.connect(url, row_factory=namedtuple_row) as conn:
        campaign = conn.execute("SELECT id, judgments_per_item AS k FROM crowd_campaign WHERE name = 'pgfault'").fetchone()
        assignments = {a.id: a for a in conn.execute(
            "SELECT a.id, a.state, a.counted, a.submit_key, a.answer, a.item_id, (i.payload->>'caption')::bigint "
            "AS caption, w.provider || ':' || w.external_id AS rater FROM crowd_assignment a "
            "JOIN crowd_item i ON i.id = a.item_id JOIN crowd_worker w ON w.id = a.worker_id WHERE a.campaign_id = %s",
            [campaign.id])}
        judgments = Counter(tuple(j) for j in conn.execute(
            "SELECT rater, caption_id, criterion FROM crowd_humanjudgment WHERE campaign_id = %s", [campaign.id]))
    counted = [a for a in assignments.values() if a.counted]
    # every counted assignment has its judgment rows (one per criterion), and no judgment lacks its assignment
    assert judgments == Counter((a.rater, a.caption, c) for a in counted for c in ("relevance", "thoroughness"))
    assert max(Counter(a.item_id for a in counted).values()) <= campaign.k, "an item over k counted judgments"
    assert len({(a.item_id, a.rater) for a in assignments.values()}) == len(assignments), "an (item, rater) twice"
    # submitted, or the next task the rater flow claimed after a rater's last answer (then the rater
    # stopped): accepted, empty, uncounted, at most one per rater; nothing half-done
    assert {a.state for a in assignments.values()} <= {"submitted", "accepted"}, "an assignment left half-done"
    held = [a for a in assignments.values() if a.state == "accepted"]
    assert all(a.answer is None and not a.counted and not a.submit_key for a in held), "an assignment left half-done"
    assert max(Counter(a.rater for a in held).values(), default=0) <= 1
    # every submission a client saw succeed is stored, exactly once, as sent
    seen = [s for log in logs for s in log.submitted]
    assert len({pk for pk, _, _ in seen}) == len(seen) == len(assignments) - len(held)
    for pk, key, answer in seen:
        assert assignments[pk].submit_key == key
        assert assignments[pk].answer == {c: int(v) for c, v in answer.items()}
    print(f"\nPostgreSQL restarted after {before_restart} submissions, stopped for 4 s after {before_stop}: "
          f"{sum(statuses.values()):,} responses {dict(statuses)}, {sum(log.retried for log in logs)} retries after "
          f"Retry-After, {len(seen)} submissions confirmed and each stored once, {sum(judgments.values())} judgments "
          f"= {len(counted)} counted assignments x 2 criteria, no item over k = {campaign.k}")


# --- 3. Redis unavailable ----------------------------------------------------------------------------
@pytest.mark.django_db(transaction=True)
def test_redis_down_raters_keep_working_and_queued_run_completes(procs, subset_dir):
    run_command("import_dataset", "flickr8k-expert", str(subset_dir), "--name", "rdown")
    campaign = engine.create_campaign(Dataset.objects.get(name="rdown"), "rating", name="rdown", k=2,
                                      options={"gold": 0}, gold_every=0, state=Campaign.LIVE)
    joins = [f"/rate/join/{w.token}/?next=/rate/rdown/" for w in engine.invite_workers(4, label="redis-", campaign=campaign)]
    port = free_port()
    env = web_env(DATABASE_URL=database_url(), CELERY_BROKER_URL=f"redis://127.0.0.1:{port}/0",
                  CACHE_URL=f"redis://127.0.0.1:{port}/1", RATER_RATE_LIMIT="100000/m",
                  CELERY_QUEUE=f"faults-{uuid.uuid4().hex}", METRICS_CHUNK_SIZE="20")
    redis_server = procs.redis("redis", port)
    base = procs.gunicorn(env)
    worker = procs.worker("worker", env)
    before = Raters(base, "rdown", joins[:2], max_tasks=2)  # while Redis is up
    before.join()

    stop(redis_server)
    assert not redis_up(port)
    judged_before = HumanJudgment.objects.filter(campaign=campaign).count()
    during = Raters(base, "rdown", joins, max_tasks=3)
    during.join()
    statuses = check_responses(before.logs + during.logs)
    assert set(statuses) <= {200, 302}, statuses
    confirmed = during.confirmed()
    assert confirmed == 12
    assert HumanJudgment.objects.filter(campaign=campaign).count() == judged_before + 2 * confirmed
    for page in ("/", "/datasets/rdown/", "/datasets/rdown/runs.json", "/campaigns/"):
        assert requests.get(base + page, timeout=30, allow_redirects=False).status_code in (200, 302), page

    started = time.monotonic()
    out = manage("compute_metrics", "--dataset", "rdown", "--metric", "bleu_4", "cider_d", env=env, timeout=60)
    answered_in = time.monotonic() - started
    assert "broker (CELERY_BROKER_URL) is unreachable" in out and "recorded as queued" in out, out
    runs = MetricRun.objects.filter(dataset__name="rdown")  # a query: evaluated afresh each time
    assert runs.count() == 2 and {r.status for r in runs.all()} == {MetricRun.PENDING}
    assert not MetricScore.objects.filter(run__in=runs).exists()
    assert worker.poll() is None, "the worker died while Redis was down"

    procs.redis("redis-again", port)  # an empty Redis: whatever was queued before is gone too
    wait_until(lambda: runs.filter(status=MetricRun.DONE).count() == 2, 150,
               "the queued runs to complete once Redis is back")
    procs.stop_all()
    for run in runs.all():
        ids = list(MetricScore.objects.filter(run=run).values_list("caption_id", flat=True))
        assert len(ids) == len(set(ids)) == run.total == run.completed
    print(f"\nRedis down: {confirmed} submissions by 4 raters, all answered 200/302 {dict(statuses)}; "
          f"compute_metrics answered in {answered_in:.1f} s that the runs are queued; once Redis was back the "
          f"running worker reconnected and stored {sum(r.total for r in runs.all())} scores, each once")


@pytest.mark.django_db(transaction=True)
def test_compute_metrics_answers_when_the_broker_hangs(procs, subset_dir):
    """A broker that accepts connections but never answers (SIGSTOPped, as in a network partition)
    used to block ``compute_metrics`` forever; now the publish times out and the run stays queued."""
    run_command("import_dataset", "flickr8k-expert", str(subset_dir), "--name", "hung")
    port = free_port()
    env = dict(os.environ, DATABASE_URL=database_url(), CELERY_BROKER_URL=f"redis://127.0.0.1:{port}/0",
               CELERY_QUEUE=f"faults-{uuid.uuid4().hex}")
    server = procs.redis("redis", port)
    os.kill(server.pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        out = manage("compute_metrics", "--dataset", "hung", "--metric", "cider_d", env=env, timeout=120)
        answered_in = time.monotonic() - started
    finally:
        os.kill(server.pid, signal.SIGCONT)
    assert "unreachable" in out and "recorded as queued" in out, out
    run = MetricRun.objects.get(dataset__name="hung")
    assert run.status == MetricRun.PENDING and run.started_at is None and not run.scores.exists()
    print(f"\ncompute_metrics with a hung broker answered in {answered_in:.1f} s (Django start-up included): "
          f"{out.strip()}")
