"""Load benchmark of the rater endpoints: simulated raters fetch and submit tasks as fast as they
can against gunicorn + PostgreSQL on this machine, then every judgment is checked in the database.

What one *fetch-and-submit cycle* is (the pages a rater's browser loads, ``crowd/views/rater.py``).
With ``--flow chain`` (the default) it is what a browser does now: the rater accepts once, on its
first preview (``POST /rate/<campaign>/accept/``, 302 to the task page), and from then on each task is

1. ``GET  /rate/<campaign>/task/<pk>/``    the task page (form with the item, submit key, CSRF)
2. ``POST /rate/<campaign>/task/<pk>/submit/``  the answer; the same request accepts the next task
   (:func:`crowd.engine.accept`) and answers 302 to its page, which is step 1 of the next cycle

(two requests; the one accept is in the rater's first cycle). ``--flow accept-each`` is the older
three-request cycle, ``POST accept/`` before every task page (the submit's own next task is
then returned by the next accept as the rater's unfinished one), and ``--flow accept-each-preview``
adds the preview page ``GET /rate/<campaign>/`` before it (four requests): both kept to compare
with the numbers measured before the chain (``direct`` and ``browser`` are their old names). Each simulated rater holds one keep-alive
connection and a real session (made in the database before the run, as an invitation link does),
sends the CSRF token from its cookie, and answers every criterion of the form at random.

The client is a bounded asyncio HTTP/1.1 client on loopback (no third-party event loop, little
CPU per request, so most of the two cores go to the server). It reports throughput and p50/p95/p99
latency per endpoint and per cycle, then checks, in PostgreSQL: every submission the client saw
accepted is stored exactly once with the answer sent, no other assignment was submitted, each
counted assignment has exactly one judgment row per criterion, no judgment row is duplicated, no
item has more than k counted judgments and no worker judged an item twice.

The rate limit (``RATER_RATE_LIMIT``, default 120/m per rater) stays on: there are enough raters
that each stays under it, and 429 answers are counted and reported.

``--scenario study-burst`` (issue 17, "a study that fills in minutes") is a Prolific study filling
up: a campaign with the participant journey (``--bundle`` tasks per session, a consent text), its
study created and published on the fake Prolific API (``tests/fake_prolific``, started in this
process; gunicorn gets ``PROLIFIC_API_URL``/``PROLIFIC_TOKEN`` pointing at it) with one ACTIVE
submission per participant. ``--participants`` (300) arrive over ``--arrival-seconds`` (60; Poisson
arrivals, or ``--arrivals uniform``), each on its own connection from its own loopback address
(127.0.x.y: the arrival pages are rate-limited per client address, as on the Internet), and do what
a browser does, following every redirect: the study link ``GET /prolific/<c>/?PROLIFIC_PID&STUDY_ID&
SESSION_ID`` (the server asks the fake Prolific about the submission), the consent page and agree,
the instructions, then per task ``GET /session/<c>/task/<pk>/`` and ``POST .../submit/`` (the next
task follows), and the completion page. ``--think-seconds`` adds a pause before each answer (0:
machine speed). It reports p50/p95/p99 per endpoint, per task (``per_task``: the task page and its
submission) and per participant (arrival to completion page), the 429 answers, and checks
exactly-once as above plus, per session: ``tasks_done`` equals its submitted assignments, no session
above its bundle or completed short, no submission outside a session, one session per participant,
every participant completed. ``--json`` keeps the keys of the direct scenario (``latency_ms`` per
endpoint with ``p99``, ``check`` with ``lost`` and ``duplicate_judgments``).

Run: .venv/bin/python benchmarks/rater_load.py [--raters 600] [--concurrency 8] [--duration 30]
     [--gunicorn-workers 4] [--worker-class sync|gthread --threads N] [--flow chain|accept-each|accept-each-preview]
     [--json out.json]
     .venv/bin/python benchmarks/rater_load.py --scenario study-burst [--participants 300]
     [--arrival-seconds 60] [--arrivals poisson|uniform] [--bundle 10] [--think-seconds 0] [--json out.json]
Needs PostgreSQL (``--database-url``, default the ``captioneval_load`` database on 127.0.0.1,
created if missing) and, for the shared rate-limit cache, Redis (``--cache-url``).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import secrets
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DEFAULT_DB = "postgres://postgres@127.0.0.1:5432/captioneval_load"
DEFAULT_CACHE = "redis://127.0.0.1:6379/8"
TARGET = 300  # cycles/s with p99 < 200 ms (issue 7)
RADIO = re.compile(r'<input type="radio" name="([\w-]+)" value="([^"]+)"')
HIDDEN = re.compile(r'<input type="hidden" name="(item|submit_key)" value="([^"]*)"')
TASK = re.compile(r"/rate/[\w-]+/task/(\d+)/$")


# --- setup (Django ORM, before the server starts) -------------------------------------------------
def ensure_database(url: str) -> None:
    import psycopg

    base, _, name = url.rpartition("/")
    with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')


def _setup_django(args) -> None:
    """Django against ``args.database_url``, migrated, with the Flickr8k-Expert dataset (imported once)."""
    os.environ["DATABASE_URL"] = args.database_url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "evalsite.settings")
    import django

    django.setup()
    from django.core.management import call_command

    from crowd.models import Dataset

    call_command("migrate", verbosity=0)
    if not Dataset.objects.filter(name="load-flickr8k").exists():
        call_command("import_dataset", "flickr8k-expert", str(ROOT / "data" / "flickr8k"), "--name", "load-flickr8k",
                     verbosity=0)


def prepare(args) -> dict:
    """Create (once) the Flickr8k-Expert dataset, then a fresh live rating campaign and
    ``args.raters`` workers, each with a database session. Returns what the client needs."""
    _setup_django(args)
    from django.contrib.sessions.backends.db import SessionStore
    from django.db import connection

    from crowd import engine
    from crowd.models import Campaign, Dataset
    from crowd.providers import SESSION_KEY

    name = f"load-{int(time.time())}-{secrets.token_hex(2)}"
    campaign = engine.create_campaign(
        Dataset.objects.get(name="load-flickr8k"), "rating", name=name, k=args.k, gold_every=0,
        state=Campaign.LIVE,
        # machine-speed raters: no speed check (crowd.quality); pictures from a URL that refuses at once
        # (port 9, discard): a campaign that shows images needs a source to go live, and the load is
        # about the platform's pages, not about fetching pictures
        options={"min_seconds_per_task": 0, "image_url": "http://127.0.0.1:9/load-images/{key}"},
    )
    workers = engine.invite_workers(args.raters, label="load-", campaign=campaign)
    sessions = []
    for w in workers:
        s = SessionStore()
        s[SESSION_KEY] = w.pk
        s.create()
        sessions.append(s.session_key)
    slots = campaign.items.filter(is_gold=False).count() * campaign.judgments_per_item
    connection.close()
    return {"campaign": campaign.name, "campaign_id": campaign.pk, "sessions": sessions, "slots": slots}


# --- the server -----------------------------------------------------------------------------------
def start_gunicorn(args, port: int, extra_env: dict | None = None, cwd: Path = ROOT) -> subprocess.Popen:
    """gunicorn serving the checkout ``cwd`` (default this one) on ``port``, as ``args`` says
    (``database_url``, ``cache_url``, ``rate_limit``, ``gunicorn_workers``, ``worker_class``,
    ``threads``), with ``extra_env``; returned once it answers (SystemExit if it does not in 60 s)."""
    env = dict(
        os.environ, DATABASE_URL=args.database_url, DJANGO_SETTINGS_MODULE="evalsite.settings", DJANGO_DEBUG="0",
        DJANGO_ALLOWED_HOSTS="127.0.0.1,localhost", CACHE_URL=args.cache_url or "", LOG_LEVEL="ERROR",
        RATER_RATE_LIMIT=args.rate_limit, **(extra_env or {}),
    )
    if not args.cache_url:
        env.pop("CACHE_URL")
    cmd = [str(Path(sys.executable).with_name("gunicorn")), "evalsite.wsgi", "-b", f"127.0.0.1:{port}",
           "-w", str(args.gunicorn_workers), "--worker-class", args.worker_class, "--threads", str(args.threads),
           "--keep-alive", "30", "--backlog", "2048", "--log-level", "warning"]
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, start_new_session=True)
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            status = asyncio.run(_probe(port))
            if status:
                return proc
        except OSError:
            pass
        if proc.poll() is not None:
            raise SystemExit("gunicorn exited at start")
        time.sleep(0.3)
    stop(proc)
    raise SystemExit("gunicorn did not answer within 60 s")


async def _probe(port: int) -> int:
    conn = Conn("127.0.0.1", port)
    status, _, _ = await conn.request("GET", "/rate/", {})
    await conn.close()
    return status


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


# --- CPU accounting (Linux /proc): where the cores went during the measured run -----------------
TICK = os.sysconf("SC_CLK_TCK")


def _cpu_seconds(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICK  # utime + stime
    except (OSError, IndexError, ValueError):
        return 0.0


def _processes() -> dict[str, list[int]]:
    """PIDs of gunicorn processes and PostgreSQL backends now running."""
    found = {"web": [], "db": []}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cmd = (d / "cmdline").read_bytes()
            except OSError:
                continue
            if b"gunicorn" in cmd:
                found["web"].append(int(d.name))
            elif cmd.startswith(b"postgres"):
                found["db"].append(int(d.name))
    return found


def cpu_snapshot() -> dict:
    """CPU seconds used so far by each gunicorn process and PostgreSQL backend, and by this client."""
    return {"client": time.process_time(),
            "by_pid": {p: (role, _cpu_seconds(p)) for role, pids in _processes().items() for p in pids}}


async def cpu_sampler(seen: dict, every: float = 1.0) -> None:
    """Keep ``seen`` (a snapshot) up to date every ``every`` seconds until cancelled: a process that
    exits during the run (a PostgreSQL backend whose connection reached its ``CONN_MAX_AGE``)
    keeps the CPU it had used at the last sample instead of vanishing from the final snapshot."""
    while True:
        await asyncio.sleep(every)
        seen["by_pid"].update(cpu_snapshot()["by_pid"])


def cpu_used(before: dict, after: dict) -> dict[str, float]:
    """CPU seconds per part (web, db, client) between two snapshots; a process started in between
    counts from zero."""
    used = {"web": 0.0, "db": 0.0, "client": after["client"] - before["client"]}
    for pid, (role, cpu) in after["by_pid"].items():
        used[role] += cpu - before["by_pid"].get(pid, (role, 0.0))[1]
    return used


# --- a small keep-alive HTTP/1.1 client -----------------------------------------------------------
class Conn:
    """One keep-alive connection; reconnects when the server closed it."""

    def __init__(self, host: str, port: int, timeout: float = 30.0, local: str | None = None):
        self.host, self.port, self.timeout, self.local = host, port, timeout, local
        self.reader = self.writer = None

    async def close(self):
        if self.writer is not None:
            self.writer.close()
            self.reader = self.writer = None

    async def request(self, method: str, path: str, headers: dict, body: bytes = b"") -> tuple[int, dict, bytes]:
        for attempt in (0, 1):
            if self.writer is None:
                self.reader, self.writer = await asyncio.open_connection(
                    self.host, self.port, local_addr=(self.local, 0) if self.local else None)
            head = [f"{method} {path} HTTP/1.1", f"Host: {self.host}:{self.port}", f"Content-Length: {len(body)}"]
            head += [f"{k}: {v}" for k, v in headers.items()]
            try:
                self.writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + body)
                return await asyncio.wait_for(self._response(), self.timeout)
            except (ConnectionError, asyncio.IncompleteReadError) as exc:
                await self.close()
                if attempt or method != "GET" and not isinstance(exc, asyncio.IncompleteReadError):
                    raise
                # a keep-alive connection the server had closed: nothing reached the view, resend
        raise ConnectionError("unreachable")

    async def _response(self):
        line = await self.reader.readuntil(b"\r\n")
        status = int(line.split()[1])
        headers = {}
        while True:
            line = await self.reader.readuntil(b"\r\n")
            if line == b"\r\n":
                break
            k, _, v = line.decode("latin-1").partition(":")
            k = k.strip().lower()
            v = v.strip()
            if k == "set-cookie":
                headers.setdefault("set-cookie", []).append(v)
            else:
                headers[k] = v
        body = await self.reader.readexactly(int(headers.get("content-length", 0)))
        if headers.get("connection", "").lower() == "close":
            await self.close()
        return status, headers, body


# --- simulated raters -----------------------------------------------------------------------------
class Stats:
    def __init__(self):
        self.latency = defaultdict(list)  # endpoint -> seconds
        self.status = Counter()
        self.submitted = {}  # assignment pk -> answer sent, for submissions answered 302
        self.cycles = 0  # fetch-and-submit cycles (direct), tasks submitted (study-burst)
        self.stops = Counter()
        self.finished = self.warm_finished = 0  # participants who reached the completion page (study-burst)


class Rater:
    """One simulated rater: its session, CSRF secret and answers."""

    def __init__(self, i: int, session_key: str):
        self.next_pk: int | None = None  # chain flow: the task the last submission accepted and redirected to
        self.done = False  # chain flow: the last submission redirected to no task
        self.csrf = secrets.token_hex(16)  # a 32-character CSRF secret, as Django's cookie holds
        cookies = f"sessionid={session_key}; csrftoken={self.csrf}"
        self.get_headers = {"Cookie": cookies}
        self.post_headers = {"Cookie": cookies, "Content-Type": "application/x-www-form-urlencoded",
                             "X-CSRFToken": self.csrf}
        self.rng = random.Random(i)


def answer_form(page: bytes, rng: random.Random) -> tuple[bytes, dict]:
    """The POST body answering a task page, and the answer in it: the page's hidden fields (item,
    submit key) and a random choice for every radio group (each criterion of the form)."""
    text = page.decode()
    fields = dict(HIDDEN.findall(text))
    choices = defaultdict(list)
    for field, value in RADIO.findall(text):
        choices[field].append(value)
    answer = {f: rng.choice(v) for f, v in choices.items()}
    return "&".join(f"{k}={v}" for k, v in {**fields, **answer}.items()).encode(), answer


async def cycle(conn: Conn, r: Rater, name: str, flow: str, stats: Stats, until: float) -> bool:
    """One fetch-and-submit cycle of rater ``r``; False when the rater has nothing more to do."""

    async def call(endpoint, method, path, body=b""):
        while True:
            t0 = time.perf_counter()
            status, headers, data = await conn.request(
                method, path, r.post_headers if method == "POST" else r.get_headers, body)
            stats.latency[endpoint].append(time.perf_counter() - t0)
            stats.status[f"{endpoint} {status}"] += 1
            if status in (429, 503) and time.time() < until:
                await asyncio.sleep(float(headers.get("retry-after", "1")))
                continue
            return status, headers, data

    if r.done:
        return False
    t0 = time.perf_counter()
    pk = r.next_pk if flow == "chain" else None
    if pk is None:  # chain: the rater's first task (accepted once); the older flows: every task
        if flow == "accept-each-preview":
            await call("preview", "GET", f"/rate/{name}/")
        status, headers, _ = await call("accept", "POST", f"/rate/{name}/accept/")
        m = TASK.search(headers.get("location", "")) if status == 302 else None
        if m is None:
            stats.stops["no task" if status == 200 else f"accept {status}"] += 1
            return False
        pk = int(m.group(1))
    status, _, page = await call("task", "GET", f"/rate/{name}/task/{pk}/")
    if status != 200:
        stats.stops[f"task {status}"] += 1
        return False
    body, answer = answer_form(page, r.rng)
    status, headers, _ = await call("submit", "POST", f"/rate/{name}/task/{pk}/submit/", body)
    if status != 302:
        stats.stops[f"submit {status}"] += 1
        return False
    if flow == "chain":  # the submission accepted the next task: its page is the next cycle's first request
        m = TASK.search(headers.get("location", ""))
        r.next_pk = int(m.group(1)) if m else None
        if m is None:
            r.done = True
            stats.stops["no task"] += 1
    stats.submitted[pk] = {k: int(v) for k, v in answer.items()}
    stats.cycles += 1
    stats.latency["cycle"].append(time.perf_counter() - t0)
    return True


async def lane(j: int, raters: list[Rater], args, info: dict, port: int, stats: Stats, until: float):
    """One connection; its raters (every ``concurrency``-th) take turns, one cycle each, so no rater
    is ever used by two lanes and each stays under the per-rater rate limit."""
    mine = raters[j::args.concurrency]
    conn = Conn("127.0.0.1", port)
    try:
        while mine and time.time() < until:
            for r in list(mine):
                if time.time() >= until:
                    break
                if not await cycle(conn, r, info["campaign"], args.flow, stats, until):
                    mine.remove(r)
    finally:
        await conn.close()


async def drive(args, info: dict, port: int) -> tuple[Stats, float]:
    raters = [Rater(i, key) for i, key in enumerate(info["sessions"])]
    warm = Stats()  # warm-up: every gunicorn process connects to PostgreSQL and loads templates
    until = time.time() + args.warmup
    await asyncio.gather(*[lane(j, raters, args, info, port, warm, until) for j in range(args.concurrency)])
    stats = Stats()
    until = time.time() + args.duration
    t0 = time.perf_counter()
    cpu0 = cpu_snapshot()
    await asyncio.gather(*[lane(j, raters, args, info, port, stats, until) for j in range(args.concurrency)])
    elapsed = time.perf_counter() - t0
    stats.cpu = cpu_used(cpu0, cpu_snapshot())
    stats.submitted.update(warm.submitted)
    stats.warmup_cycles = warm.cycles
    return stats, elapsed


# --- verification ---------------------------------------------------------------------------------
def verify(info: dict, stats: Stats) -> dict:
    """Compare the client's accepted submissions with PostgreSQL (see the module docstring)."""
    from django.db.models import Count

    from crowd.models import Assignment, HumanJudgment

    cid = info["campaign_id"]
    done = {a.pk: a for a in Assignment.objects.filter(campaign_id=cid, state__in=Assignment.DONE_STATES)
            .select_related("item", "worker")}
    sent = stats.submitted
    lost = [pk for pk in sent if pk not in done]
    wrong = [pk for pk, ans in sent.items() if pk in done and done[pk].answer != ans]
    unexpected = [pk for pk in done if pk not in sent]
    counted = [a for a in done.values() if a.counted]
    judgments = HumanJudgment.objects.filter(campaign_id=cid)
    dup_judgments = (judgments.values("caption_id", "rater", "criterion").annotate(n=Count("pk"))
                     .filter(n__gt=1).count())
    over_k = (Assignment.objects.filter(campaign_id=cid, counted=True).values("item_id").annotate(n=Count("pk"))
              .filter(n__gt=Assignment.objects.get(pk=next(iter(done))).campaign.judgments_per_item).count()
              if done else 0)
    twice = (Assignment.objects.filter(campaign_id=cid).values("item_id", "worker_id").annotate(n=Count("pk"))
             .filter(n__gt=1).count())
    stored = {(j.caption_id, j.rater, j.criterion): j.score for j in judgments}
    mismatched = 0
    for a in counted:
        for criterion, value in a.answer.items():
            if stored.get((a.item.payload["caption"], a.worker.rater_id, criterion)) != float(value):
                mismatched += 1
    criteria = len(next(iter(sent.values()))) if sent else 0
    return {
        "client_submissions": len(sent), "stored_submissions": len(done), "lost": len(lost),
        "answer_differs": len(wrong), "stored_not_sent": len(unexpected), "counted": len(counted),
        "judgment_rows": judgments.count(), "expected_judgment_rows": len(counted) * criteria,
        "duplicate_judgments": dup_judgments, "items_over_k": over_k, "worker_item_twice": twice,
        "judgments_not_matching_answer": mismatched,
    }

# --- the study-burst scenario (issue 17): a Prolific study fills in minutes ------------------------
CONSENT_TEXT = ("You will rate how well short captions describe pictures. Your answers are stored with your "
                "Prolific ID and used for research. You may stop at any time by returning the study.")
VERSION = re.compile(r'<input type="hidden" name="version" value="(\d+)"')
SESSION_TASK = re.compile(r"^/session/[\w-]+/task/(\d+)/$")
PER_TASK, PER_PARTICIPANT = "per_task", "participant"


def prepare_study(args, fake) -> dict:
    """A Prolific campaign for the burst: live, ``args.bundle`` tasks per session, a consent text,
    ``gold_every=0`` (every task counts, so the exactly-once check covers them all); its study
    created and published on the fake Prolific server ``fake`` with the same calls as
    ``manage.py prolific create`` / ``publish`` (:mod:`crowd.prolific.study`); then one ACTIVE
    submission on the fake for each participant (``args.participants`` + ``args.warmup_participants``,
    each a new participant id), as Prolific holds when participants take places. Returns what the
    client needs: campaign name and id, study id, ``participants`` [(participant id, submission id)]."""
    _setup_django(args)
    from crowd import engine
    from crowd.models import Campaign, Dataset
    from crowd.prolific import study as studies
    from crowd.prolific_client import ProlificAPI

    name = f"burst-{int(time.time())}-{secrets.token_hex(2)}"
    n = args.participants + args.warmup_participants
    campaign = engine.create_campaign(
        Dataset.objects.get(name="load-flickr8k"), "rating", name=name, k=args.k, gold_every=0,
        provider=Campaign.PROLIFIC, bundle_size=args.bundle, consent_text=CONSENT_TEXT,
        session_minutes=args.session_minutes,
        options={"min_seconds_per_task": 0, "image_url": "http://127.0.0.1:9/load-images/{key}"},
    )
    api = ProlificAPI(fake.token, base_url=fake.base_url, campaign=campaign, user="rater_load", echo=lambda line: None)
    study = studies.create_draft(campaign, api, reward=150, estimated_minutes=max(1, args.bundle), places=n,
                                 site_url="http://127.0.0.1")
    studies.publish(study, api, confirmed=True, user="rater_load")
    subs = [fake.start_submission(study.study_id) for _ in range(n)]
    slots = campaign.items.filter(is_gold=False).count() * campaign.judgments_per_item
    from django.db import connection

    connection.close()
    return {"campaign": name, "campaign_id": campaign.pk, "study_id": study.study_id, "slots": slots,
            "participants": [(s["participant_id"], s["id"]) for s in subs]}


class Participant:
    """One Prolific participant's browser: its own loopback address (127.0.x.y, so that the
    server's per-address rate limit counts each participant apart, as on the Internet), its
    cookie jar (the session cookie the arrival sets), a CSRF secret and its answers."""

    def __init__(self, i: int, pid: str, submission_id: str):
        self.pid, self.submission_id = pid, submission_id
        self.address = f"127.0.{1 + i // 250}.{1 + i % 250}"
        self.csrf = secrets.token_hex(16)
        self.cookies = {"csrftoken": self.csrf}
        self.rng = random.Random(i)

    def headers(self, post: bool) -> dict:
        h = {"Cookie": "; ".join(f"{k}={v}" for k, v in self.cookies.items())}
        if post:
            h.update({"Content-Type": "application/x-www-form-urlencoded", "X-CSRFToken": self.csrf})
        return h

    def keep_cookies(self, headers: dict) -> None:
        for line in headers.get("set-cookie", []):
            k, _, v = line.split(";", 1)[0].partition("=")
            if k.strip() != "csrftoken":  # our own secret stays (Django keeps a valid one)
                self.cookies[k.strip()] = v.strip()


async def participant_journey(p: Participant, info: dict, port: int, stats: Stats, think: float) -> None:
    """What one participant's browser does, following every redirect: the study link from Prolific
    (``GET /prolific/<c>/?PROLIFIC_PID&STUDY_ID&SESSION_ID``), the stage page (consent), agree
    (``POST consent/``), the instructions (``POST instructions/``), then the bundle -- each task
    ``GET /session/<c>/task/<pk>/`` and ``POST .../submit/`` (the next task or the completion page
    follows) -- and the completion page. ``think`` is the mean pause (seconds, exponential) before
    each answer; 0: machine speed."""
    name = info["campaign"]
    conn = Conn("127.0.0.1", port, local=p.address)
    start = time.perf_counter()

    async def call(endpoint, method, path, body=b""):
        while True:
            t0 = time.perf_counter()
            status, headers, data = await conn.request(method, path, p.headers(method == "POST"), body)
            stats.latency[endpoint].append(time.perf_counter() - t0)
            stats.status[f"{endpoint} {status}"] += 1
            p.keep_cookies(headers)
            if status in (429, 503):
                await asyncio.sleep(float(headers.get("retry-after", "1")))
                continue
            return status, headers, data

    async def pause():
        if think > 0:
            await asyncio.sleep(p.rng.expovariate(1 / think))

    def where(headers) -> str:
        return urlsplit(headers.get("location", "")).path

    try:
        status, headers, _ = await call(
            "arrive", "GET", f"/prolific/{name}/?PROLIFIC_PID={p.pid}&STUDY_ID={info['study_id']}"
                             f"&SESSION_ID={p.submission_id}")
        if status != 302:
            stats.stops[f"arrive {status}"] += 1
            return
        path = where(headers)
        for _ in range(6):  # the stage pages: consent, instructions, then a redirect to the first task
            if path != f"/session/{name}/":
                break
            status, headers, page = await call("stage", "GET", path)
            if status == 302:
                path = where(headers)
                continue
            text = page.decode()
            if status == 200 and (m := VERSION.search(text)):
                await pause()
                status, headers, _ = await call("consent", "POST", f"/session/{name}/consent/",
                                                f"agree=1&version={m.group(1)}".encode())
            elif status == 200 and "instructions-form" in text:
                await pause()
                status, headers, _ = await call("instructions", "POST", f"/session/{name}/instructions/")
            if status != 302:
                stats.stops[f"stage {status}"] += 1
                return
            path = where(headers)
        while (m := SESSION_TASK.match(path)):
            pk = int(m.group(1))
            t0 = time.perf_counter()
            status, _, page = await call("task", "GET", path)
            if status != 200:
                stats.stops[f"task {status}"] += 1
                return
            body, answer = answer_form(page, p.rng)
            busy = time.perf_counter() - t0
            await pause()
            t1 = time.perf_counter()
            status, headers, _ = await call("submit", "POST", f"{path}submit/", body)
            if status != 302:
                stats.stops[f"submit {status}"] += 1
                return
            stats.submitted[pk] = {k: int(v) for k, v in answer.items()}
            stats.cycles += 1
            stats.latency[PER_TASK].append(busy + time.perf_counter() - t1)  # the two requests, not the pause
            path = where(headers)
        if path != f"/session/{name}/done/":
            stats.stops[f"ended at {path or status}"] += 1
            return
        status, _, _ = await call("done", "GET", path)
        if status != 200:
            stats.stops[f"done {status}"] += 1
            return
        stats.finished += 1
        stats.latency[PER_PARTICIPANT].append(time.perf_counter() - start)
    finally:
        await conn.close()


def arrival_times(n: int, seconds: float, how: str, rng: random.Random) -> list[float]:
    """Offsets (s) of ``n`` arrivals over ``seconds``: ``poisson`` -- a Poisson process conditioned
    on n arrivals in the window, i.e. n sorted uniform times; ``uniform`` -- evenly spaced."""
    if how == "uniform":
        return [i * seconds / n for i in range(n)]
    return sorted(rng.uniform(0, seconds) for _ in range(n))


async def drive_study(args, info: dict, port: int) -> tuple[Stats, float]:
    """The warm-up participants one after another (every gunicorn process loads its templates),
    then the burst: ``args.participants`` participants starting at their arrival times, each on
    its own, none waiting for another."""
    people = [Participant(i, pid, sid) for i, (pid, sid) in enumerate(info["participants"])]
    warm, burst = people[:args.warmup_participants], people[args.warmup_participants:]
    wstats = Stats()
    for p in warm:
        await participant_journey(p, info, port, wstats, 0.0)
    stats = Stats()
    offsets = arrival_times(len(burst), args.arrival_seconds, args.arrivals, random.Random(args.seed))
    t0 = time.perf_counter()
    cpu0 = cpu_snapshot()
    seen = cpu_snapshot()
    sampler = asyncio.ensure_future(cpu_sampler(seen))

    async def arrive(p, at):
        await asyncio.sleep(max(0.0, at - (time.perf_counter() - t0)))
        await participant_journey(p, info, port, stats, args.think_seconds)

    await asyncio.gather(*[arrive(p, at) for p, at in zip(burst, offsets)])
    elapsed = time.perf_counter() - t0
    sampler.cancel()
    end = cpu_snapshot()
    end["by_pid"] = {**seen["by_pid"], **end["by_pid"]}
    stats.cpu = cpu_used(cpu0, end)
    stats.submitted.update(wstats.submitted)
    stats.warmup_cycles = wstats.cycles
    stats.warm_finished = wstats.finished
    return stats, elapsed


def verify_sessions(info: dict, stats: Stats, expected_participants: int) -> dict:
    """The session side of the exactly-once check: one session per participant who arrived; every
    session's ``tasks_done`` equals its assignments in a done state (each exactly its submitted
    tasks), none above its target, every completed session with its full bundle, no submitted
    assignment outside a session, no participant with two sessions."""
    from django.db.models import Count

    from crowd.models import Assignment, ParticipantSession

    cid = info["campaign_id"]
    sessions = list(ParticipantSession.objects.filter(campaign_id=cid))
    done = dict(Assignment.objects.filter(campaign_id=cid, state__in=Assignment.DONE_STATES, session__isnull=False)
                .values_list("session_id").annotate(n=Count("pk")).order_by())
    return {
        "participants": expected_participants, "sessions": len(sessions),
        "sessions_completed": sum(1 for s in sessions if s.outcome == ParticipantSession.COMPLETED),
        "sessions_open": sum(1 for s in sessions if s.ended_at is None),
        "client_finished": stats.finished + stats.warm_finished,
        "sessions_tasks_mismatch": sum(1 for s in sessions if s.tasks_done != done.get(s.pk, 0)),
        "sessions_over_target": sum(1 for s in sessions if s.tasks_target and done.get(s.pk, 0) > s.tasks_target),
        "completed_short": sum(1 for s in sessions if s.outcome == ParticipantSession.COMPLETED
                               and done.get(s.pk, 0) != s.tasks_target),
        "submitted_without_session": Assignment.objects.filter(
            campaign_id=cid, state__in=Assignment.DONE_STATES, session__isnull=True).count(),
        "participant_two_sessions": (ParticipantSession.objects.filter(campaign_id=cid).values("worker_id")
                                     .annotate(n=Count("pk")).filter(n__gt=1).count()),
    }


def run_study_burst(args) -> tuple[dict, Stats, float]:
    """Set up the campaign and the fake Prolific, run gunicorn pointed at the fake, drive the burst."""
    from tests.fake_prolific import FakeProlific

    fake = FakeProlific()
    fake.start()
    try:
        t = time.perf_counter()
        info = prepare_study(args, fake)
        print(f"campaign {info['campaign']} (Prolific study {info['study_id']} on the fake Prolific at "
              f"{fake.base_url}): bundle {args.bundle}, {info['slots']} open slots, "
              f"{args.participants} participants + {args.warmup_participants} warm-up "
              f"(setup {time.perf_counter() - t:.1f} s)", flush=True)
        port = args.port or _free_port()
        server = start_gunicorn(args, port, {"PROLIFIC_API_URL": fake.base_url, "PROLIFIC_TOKEN": fake.token})
        try:
            print(f"gunicorn: {args.gunicorn_workers} {args.worker_class} workers x {args.threads} threads on "
                  f"127.0.0.1:{port}; {args.participants} participants arriving over {args.arrival_seconds:.0f} s "
                  f"({args.arrivals}), think time {args.think_seconds:g} s", flush=True)
            stats, elapsed = asyncio.run(drive_study(args, info, port))
        finally:
            stop(server)
        stats.prolific_calls = Counter(f"{m} {path.split('/')[0]}" for m, path, _ in fake.calls)
    finally:
        fake.stop()
    return info, stats, elapsed



def percentile(values, q):
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q / 100 * (len(values) - 1))))]


AGGREGATES = ("cycle", PER_TASK, PER_PARTICIPANT)  # latency_ms keys that are not single requests


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scenario", choices=("direct", "study-burst"), default="direct",
                   help="direct: invited raters claim and submit as fast as they can for --duration (default); "
                        "study-burst: --participants Prolific participants arrive over --arrival-seconds, each "
                        "consents and does a bundle of --bundle tasks")
    p.add_argument("--database-url", default=os.environ.get("LOAD_DATABASE_URL", DEFAULT_DB))
    p.add_argument("--cache-url", default=os.environ.get("LOAD_CACHE_URL", DEFAULT_CACHE),
                   help="Redis URL of the shared rate-limit cache ('' = per-process memory)")
    p.add_argument("--rate-limit", default="120/m", help="RATER_RATE_LIMIT for the server (default 120/m)")
    p.add_argument("--raters", type=int, default=600)
    p.add_argument("--concurrency", type=int, default=8, help="raters working at the same moment")
    p.add_argument("--duration", type=float, default=30.0, help="seconds measured")
    p.add_argument("--warmup", type=float, default=3.0)
    p.add_argument("--k", type=int, default=10, help="judgments per item (enough slots for the run)")
    p.add_argument("--gunicorn-workers", type=int, default=4)
    p.add_argument("--worker-class", default=None,
                   help="gunicorn worker class: sync (one request per process at a time, as behind a proxy; the "
                        "default of --scenario direct) or gthread (keep-alive, --threads per process; the default of "
                        "--scenario study-burst and of the deployment files: an arrival waits on Prolific's API, "
                        "and the other threads keep serving meanwhile)")
    p.add_argument("--threads", type=int, default=None, help="threads per gthread worker (default 4; sync: 1)")
    p.add_argument("--flow", choices=("chain", "accept-each", "accept-each-preview", "direct", "browser"),
                   default="chain",
                   help="chain: what a browser does now, accept once, then the task page and the answer (which "
                        "accepts the next task) per task; accept-each (old name direct): POST accept/ before every "
                        "task; accept-each-preview (old name browser): also the preview page")
    g = p.add_argument_group("study-burst")
    g.add_argument("--participants", type=int, default=300)
    g.add_argument("--arrival-seconds", type=float, default=60.0, help="the window the participants arrive in")
    g.add_argument("--arrivals", choices=("poisson", "uniform"), default="poisson")
    g.add_argument("--bundle", type=int, default=10, help="tasks per participant session")
    g.add_argument("--think-seconds", type=float, default=10.0,
                   help="mean pause before each answer (exponential; default 10 s, quick for a person reading a "
                        "caption and an image; 0: machine speed, the worst case)")
    g.add_argument("--session-minutes", type=int, default=30, help="the session's time budget")
    g.add_argument("--warmup-participants", type=int, default=4, help="run before the burst, not measured")
    g.add_argument("--seed", type=int, default=0, help="arrival times")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--json", help="write the results as JSON to this file")
    args = p.parse_args(argv)
    args.flow = {"direct": "accept-each", "browser": "accept-each-preview"}.get(args.flow, args.flow)
    if args.worker_class is None:
        args.worker_class = "gthread" if args.scenario == "study-burst" else "sync"
    if args.threads is None:
        args.threads = 4 if args.worker_class == "gthread" else 1

    ensure_database(args.database_url)
    if args.scenario == "study-burst":
        info, stats, elapsed = run_study_burst(args)
    else:
        t = time.perf_counter()
        info = prepare(args)
        print(f"campaign {info['campaign']}: {info['slots']} open slots, {len(info['sessions'])} raters "
              f"(setup {time.perf_counter() - t:.1f} s)", flush=True)
        port = args.port or _free_port()
        server = start_gunicorn(args, port)
        try:
            print(f"gunicorn: {args.gunicorn_workers} {args.worker_class} workers x {args.threads} threads on "
                  f"127.0.0.1:{port}; {args.concurrency} raters at once for {args.duration:.0f} s (flow: {args.flow})",
                  flush=True)
            stats, elapsed = asyncio.run(drive(args, info, port))
        finally:
            stop(server)
    from django.db import connection

    connection.close()
    check = verify(info, stats)
    if args.scenario == "study-burst":
        check.update(verify_sessions(info, stats, args.participants + args.warmup_participants))
    result = {
        "scenario": args.scenario,
        "settings": {k: v for k, v in vars(args).items() if k not in ("json",)},
        "seconds": elapsed, "cycles": stats.cycles, "cycles_per_second": stats.cycles / elapsed,
        "requests_per_second": sum(len(v) for k, v in stats.latency.items() if k not in AGGREGATES) / elapsed,
        "latency_ms": {k: {"n": len(v), "p50": 1000 * percentile(v, 50), "p95": 1000 * percentile(v, 95),
                           "p99": 1000 * percentile(v, 99), "max": 1000 * max(v)}
                       for k, v in stats.latency.items()},
        "cpu_seconds": stats.cpu,
        "cpu_ms_per_cycle": {k: 1000 * v / max(1, stats.cycles) for k, v in stats.cpu.items()},
        "status": dict(stats.status), "stops": dict(stats.stops), "check": check,
        "rate_limited": sum(n for k, n in stats.status.items() if k.endswith(" 429")),
    }
    if args.scenario == "study-burst":
        result["participants_finished"] = stats.finished
        result["prolific_calls"] = dict(stats.prolific_calls)
    report(result)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    ok = not (check["lost"] or check["answer_differs"] or check["stored_not_sent"] or check["duplicate_judgments"]
              or check["items_over_k"] or check["worker_item_twice"] or check["judgments_not_matching_answer"]
              or check["judgment_rows"] != check["expected_judgment_rows"])
    if args.scenario == "study-burst":
        ok = ok and not (check["sessions_tasks_mismatch"] or check["sessions_over_target"] or check["completed_short"]
                         or check["submitted_without_session"] or check["participant_two_sessions"]
                         or check["sessions"] != check["participants"]
                         or check["client_finished"] != check["participants"]
                         or check["sessions_completed"] != check["participants"])
    return 0 if ok else 1


def report(r: dict) -> None:
    burst = r.get("scenario") == "study-burst"
    if burst:
        s = r["settings"]
        print(f"\n{r['participants_finished']} of {s['participants']} participants finished a bundle of {s['bundle']}: "
              f"{r['cycles']} tasks in {r['seconds']:.1f} s ({r['cycles_per_second']:.0f} tasks/s, "
              f"{r['requests_per_second']:.0f} requests/s)")
    else:
        print(f"\n{r['cycles']} fetch-and-submit cycles in {r['seconds']:.1f} s: {r['cycles_per_second']:.0f} cycles/s, "
              f"{r['requests_per_second']:.0f} requests/s")
    print(f"{'endpoint':<13}{'n':>8}{'p50 ms':>9}{'p95 ms':>9}{'p99 ms':>9}{'max ms':>9}")
    for k, v in r["latency_ms"].items():
        print(f"{k:<13}{v['n']:>8}{v['p50']:>9.1f}{v['p95']:>9.1f}{v['p99']:>9.1f}{v['max']:>9.1f}")
    cpu = r["cpu_ms_per_cycle"]
    cores = sum(r["cpu_seconds"].values()) / r["seconds"]
    unit = "task" if burst else "cycle"
    print(f"CPU per {unit}: web {cpu['web']:.1f} ms, PostgreSQL {cpu['db']:.1f} ms, load client {cpu['client']:.1f} ms "
          f"({cores:.2f} of {os.cpu_count()} cores busy)" + ("" if burst else
          f"; at this cost {TARGET} cycles/s would need {TARGET * (cpu['web'] + cpu['db']) / 1000:.1f} cores for "
          "web + database"))
    print("responses:", ", ".join(f"{k}: {v}" for k, v in sorted(r["status"].items())),
          f"(rate limited: {r['rate_limited']})")
    if r["stops"]:
        print(("participants" if burst else "raters") + " stopped early:",
              ", ".join(f"{k}: {v}" for k, v in r["stops"].items()))
    c = r["check"]
    print(f"check: {c['client_submissions']} submissions accepted by the server, {c['stored_submissions']} stored; "
          f"lost {c['lost']}, stored but not sent {c['stored_not_sent']}, answer differs {c['answer_differs']}; "
          f"judgment rows {c['judgment_rows']} (expected {c['expected_judgment_rows']}), duplicated "
          f"{c['duplicate_judgments']}, not matching the answer {c['judgments_not_matching_answer']}; items over k "
          f"{c['items_over_k']}; worker judged an item twice {c['worker_item_twice']}")
    if burst:
        print(f"sessions: {c['sessions']} for {c['participants']} participants (warm-up included), "
              f"{c['sessions_completed']} completed, {c['sessions_open']} open, {c['client_finished']} reached the "
              f"completion page; tasks_done differs from the submitted tasks {c['sessions_tasks_mismatch']}, above "
              f"the bundle {c['sessions_over_target']}, completed short {c['completed_short']}; submitted outside a "
              f"session {c['submitted_without_session']}; participant with two sessions {c['participant_two_sessions']}")
        print("calls to the (fake) Prolific API:", ", ".join(f"{k}: {v}" for k, v in sorted(r["prolific_calls"].items())))


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    sys.exit(main())
