"""Load benchmark of the rater endpoints: simulated raters fetch and submit tasks as fast as they
can against gunicorn + PostgreSQL on this machine, then every judgment is checked in the database.

What one *fetch-and-submit cycle* is (the pages a rater's browser loads, ``crowd/views/rater.py``):

1. ``POST /rate/<campaign>/accept/``      claim the next task (302 to the task page)
2. ``GET  /rate/<campaign>/task/<pk>/``    the task page (form with the item, submit key, CSRF)
3. ``POST /rate/<campaign>/task/<pk>/submit/``  the answer (302 back to the campaign)

With ``--flow browser`` the cycle also loads the preview page ``GET /rate/<campaign>/`` that a
browser follows the submit redirect to (four requests). Each simulated rater holds one keep-alive
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

Run: .venv/bin/python benchmarks/rater_load.py [--raters 600] [--concurrency 8] [--duration 30]
     [--gunicorn-workers 4] [--worker-class sync|gthread --threads N] [--flow direct|browser] [--json out.json]
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
import statistics
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

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


def prepare(args) -> dict:
    """Create (once) the Flickr8k-Expert dataset, then a fresh live rating campaign and
    ``args.raters`` workers, each with a database session. Returns what the client needs."""
    os.environ["DATABASE_URL"] = args.database_url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "evalsite.settings")
    import django

    django.setup()
    from django.contrib.sessions.backends.db import SessionStore
    from django.core.management import call_command
    from django.db import connection

    from crowd import engine
    from crowd.models import Campaign, Dataset
    from crowd.providers import SESSION_KEY

    call_command("migrate", verbosity=0)
    if not Dataset.objects.filter(name="load-flickr8k").exists():
        call_command("import_dataset", "flickr8k-expert", str(ROOT / "data" / "flickr8k"), "--name", "load-flickr8k",
                     verbosity=0)
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
def start_gunicorn(args, port: int) -> subprocess.Popen:
    env = dict(
        os.environ, DATABASE_URL=args.database_url, DJANGO_SETTINGS_MODULE="evalsite.settings", DJANGO_DEBUG="0",
        DJANGO_ALLOWED_HOSTS="127.0.0.1,localhost", CACHE_URL=args.cache_url or "", LOG_LEVEL="ERROR",
        RATER_RATE_LIMIT=args.rate_limit,
    )
    if not args.cache_url:
        env.pop("CACHE_URL")
    cmd = [str(Path(sys.executable).with_name("gunicorn")), "evalsite.wsgi", "-b", f"127.0.0.1:{port}",
           "-w", str(args.gunicorn_workers), "--worker-class", args.worker_class, "--threads", str(args.threads),
           "--keep-alive", "30", "--backlog", "2048", "--log-level", "warning"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, start_new_session=True)
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

    def __init__(self, host: str, port: int, timeout: float = 30.0):
        self.host, self.port, self.timeout = host, port, timeout
        self.reader = self.writer = None

    async def close(self):
        if self.writer is not None:
            self.writer.close()
            self.reader = self.writer = None

    async def request(self, method: str, path: str, headers: dict, body: bytes = b"") -> tuple[int, dict, bytes]:
        for attempt in (0, 1):
            if self.writer is None:
                self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
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
        self.cycles = 0
        self.stops = Counter()


class Rater:
    """One simulated rater: its session, CSRF secret and answers."""

    def __init__(self, i: int, session_key: str):
        self.csrf = secrets.token_hex(16)  # a 32-character CSRF secret, as Django's cookie holds
        cookies = f"sessionid={session_key}; csrftoken={self.csrf}"
        self.get_headers = {"Cookie": cookies}
        self.post_headers = {"Cookie": cookies, "Content-Type": "application/x-www-form-urlencoded",
                             "X-CSRFToken": self.csrf}
        self.rng = random.Random(i)


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

    t0 = time.perf_counter()
    if flow == "browser":
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
    text = page.decode()
    fields = dict(HIDDEN.findall(text))
    choices = defaultdict(list)
    for field, value in RADIO.findall(text):
        choices[field].append(value)
    answer = {f: r.rng.choice(v) for f, v in choices.items()}
    body = "&".join(f"{k}={v}" for k, v in {**fields, **answer}.items()).encode()
    status, _, _ = await call("submit", "POST", f"/rate/{name}/task/{pk}/submit/", body)
    if status != 302:
        stats.stops[f"submit {status}"] += 1
        return False
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


def percentile(values, q):
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q / 100 * (len(values) - 1))))]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
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
    p.add_argument("--worker-class", default="sync",
                   help="gunicorn worker class: sync (default; one request per process at a time, as behind a "
                        "proxy) or gthread (keep-alive, --threads per process)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--flow", choices=("direct", "browser"), default="direct")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--json", help="write the results as JSON to this file")
    args = p.parse_args(argv)

    ensure_database(args.database_url)
    t = time.perf_counter()
    info = prepare(args)
    print(f"campaign {info['campaign']}: {info['slots']} open slots, {len(info['sessions'])} raters "
          f"(setup {time.perf_counter() - t:.1f} s)", flush=True)
    port = args.port or _free_port()
    server = start_gunicorn(args, port)
    try:
        print(f"gunicorn: {args.gunicorn_workers} {args.worker_class} workers x {args.threads} threads on 127.0.0.1:{port}; "
              f"{args.concurrency} raters at once for {args.duration:.0f} s (flow: {args.flow})", flush=True)
        stats, elapsed = asyncio.run(drive(args, info, port))
    finally:
        stop(server)
    from django.db import connection

    connection.close()
    check = verify(info, stats)
    result = {
        "settings": {k: v for k, v in vars(args).items() if k not in ("json",)},
        "seconds": elapsed, "cycles": stats.cycles, "cycles_per_second": stats.cycles / elapsed,
        "requests_per_second": sum(len(v) for k, v in stats.latency.items() if k != "cycle") / elapsed,
        "latency_ms": {k: {"n": len(v), "p50": 1000 * percentile(v, 50), "p95": 1000 * percentile(v, 95),
                           "p99": 1000 * percentile(v, 99), "max": 1000 * max(v)}
                       for k, v in stats.latency.items()},
        "cpu_seconds": stats.cpu,
        "cpu_ms_per_cycle": {k: 1000 * v / max(1, stats.cycles) for k, v in stats.cpu.items()},
        "status": dict(stats.status), "stops": dict(stats.stops), "check": check,
    }
    report(result)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    ok = not (check["lost"] or check["answer_differs"] or check["stored_not_sent"] or check["duplicate_judgments"]
              or check["items_over_k"] or check["worker_item_twice"] or check["judgments_not_matching_answer"]
              or check["judgment_rows"] != check["expected_judgment_rows"])
    return 0 if ok else 1


def report(r: dict) -> None:
    print(f"\n{r['cycles']} fetch-and-submit cycles in {r['seconds']:.1f} s: {r['cycles_per_second']:.0f} cycles/s, "
          f"{r['requests_per_second']:.0f} requests/s")
    print(f"{'endpoint':<10}{'n':>8}{'p50 ms':>9}{'p95 ms':>9}{'p99 ms':>9}{'max ms':>9}")
    for k, v in r["latency_ms"].items():
        print(f"{k:<10}{v['n']:>8}{v['p50']:>9.1f}{v['p95']:>9.1f}{v['p99']:>9.1f}{v['max']:>9.1f}")
    cpu = r["cpu_ms_per_cycle"]
    cores = sum(r["cpu_seconds"].values()) / r["seconds"]
    print(f"CPU per cycle: web {cpu['web']:.1f} ms, PostgreSQL {cpu['db']:.1f} ms, load client {cpu['client']:.1f} ms "
          f"({cores:.2f} of {os.cpu_count()} cores busy); at this cost {TARGET} cycles/s would need "
          f"{TARGET * (cpu['web'] + cpu['db']) / 1000:.1f} cores for web + database")
    print("responses:", ", ".join(f"{k}: {v}" for k, v in sorted(r["status"].items())))
    if r["stops"]:
        print("raters stopped early:", ", ".join(f"{k}: {v}" for k, v in r["stops"].items()))
    c = r["check"]
    print(f"check: {c['client_submissions']} submissions accepted by the server, {c['stored_submissions']} stored; "
          f"lost {c['lost']}, stored but not sent {c['stored_not_sent']}, answer differs {c['answer_differs']}; "
          f"judgment rows {c['judgment_rows']} (expected {c['expected_judgment_rows']}), duplicated "
          f"{c['duplicate_judgments']}, not matching the answer {c['judgments_not_matching_answer']}; items over k "
          f"{c['items_over_k']}; worker judged an item twice {c['worker_item_twice']}")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    sys.exit(main())
