"""Report flood (issue 31, "Unbounded computation for anonymous visitors"): anonymous report requests
with fresh settings, a few a second for a minute, against gunicorn; the CPU the server spent and the
Report rows it wrote.

What it does, for each checkout measured:

1. makes a fresh PostgreSQL database (``--database-url``'s name with ``_before`` or ``_after``),
   migrates it and imports THumB (``data/thumb``: 500 images x 5 systems, human ratings) with BLEU-4,
   by that checkout's own ``manage.py``;
2. starts gunicorn from that checkout (``--gunicorn-workers`` gthread workers x ``--threads``,
   ``evalsite.settings`` with DEBUG off, the shared Redis cache ``--cache-url``, no broker: reports
   are computed in the web processes, as in the quick start and on a site without Celery workers),
   and warms it: the default benchmark and leaderboard reports are computed and stored, and every
   worker has answered requests, before anything is measured;
3. sends ``--requests`` (300) anonymous GETs spread evenly over ``--seconds`` (60), each from its own
   loopback address (127.0.x.y, as many clients would; ``--addresses 1``: all from 127.0.0.1),
   cycling through the benchmark page, its JSON download, the leaderboard JSON, the comparison JSON
   and the API's benchmark and leaderboard resources. ``--settings fresh`` (default): each request has
   a new seed (``seed=1000+i``, ``resamples``/``permutations`` ``--resamples``); ``--settings
   offered``: seeds and alphas among the values offered to visitors (:data:`analysis.limits.OFFERED`),
   which repeat. It waits for every answer (``--timeout`` each);
4. prints the answers by status, the time until the last answer, the CPU seconds the server spent
   from the first request to the last answer (the gunicorn processes and the PostgreSQL backends of
   its database, sampled every second, so a process that exits keeps what it used) and the Report
   rows written.

With ``--before DIR`` (a checkout of main: ``git worktree add --detach /tmp/main-ref main``) the same
flood runs first against DIR, then against this checkout, and both are printed with the ratio
before/after. In the "before" run every request computes a report (seconds of CPU each) and stores
a row; the run lasts until the server has worked through them.

Run: .venv/bin/python benchmarks/report_flood.py [--before /tmp/main-ref] [--requests 300] [--seconds 60]
     [--settings fresh|offered] [--addresses 300] [--resamples 100] [--gunicorn-workers 2] [--threads 4]
     [--database-url postgres://postgres@127.0.0.1:5432/captioneval_flood] [--cache-url redis://127.0.0.1:6379/8]
     [--json FILE]
Needs PostgreSQL and Redis on this machine; the databases are left for inspection (dropped and made
again by the next run).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.rater_load import Conn, _cpu_seconds, _free_port, cpu_used, percentile, start_gunicorn, stop  # noqa: E402

DEFAULT_DB = "postgres://postgres@127.0.0.1:5432/captioneval_flood"
DEFAULT_CACHE = "redis://127.0.0.1:6379/8"
DATASET = "flood"
#: what a visitor may choose (analysis.limits.OFFERED, copied: a "before" checkout has no such module)
OFFERED_SEEDS, OFFERED_ALPHAS = (0, 1, 2, 3, 4), (0.01, 0.05, 0.1)
#: the report requests of the flood, in turn: (label, path with {d} = dataset, {q} = settings, {lq} = leaderboard's)
KINDS = (
    ("benchmark page", "/datasets/{d}/benchmark/?{q}"),
    ("benchmark.json", "/datasets/{d}/benchmark.json?{q}"),
    ("leaderboard.json", "/datasets/{d}/leaderboard.json?{lq}"),
    ("compare.json", "/compare.json?{q}"),
    ("API benchmark", "/api/reports/benchmark/{d}/?{q}"),
    ("API leaderboard", "/api/reports/leaderboard/{d}/?{lq}"),
)


# --- the database and the data -----------------------------------------------------------------
def fresh_database(url: str) -> None:
    """Drop (if it exists) and create the database of ``url``."""
    import psycopg

    base, _, name = url.rpartition("/")
    with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def manage(checkout: Path, url: str, *args: str) -> None:
    """``manage.py *args`` in ``checkout`` on the database ``url`` (in-process tasks); exits on failure."""
    env = dict(os.environ, DATABASE_URL=url, CELERY_BROKER_URL="", DJANGO_SETTINGS_MODULE="evalsite.settings")
    proc = subprocess.run([sys.executable, "manage.py", *args], cwd=checkout, env=env, capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"manage.py {' '.join(args)} failed in {checkout}:\n{proc.stderr[-3000:]}")


def prepare(checkout: Path, url: str) -> None:
    fresh_database(url)
    manage(checkout, url, "migrate", "--noinput")
    manage(checkout, url, "import_dataset", "thumb", str(ROOT / "data" / "thumb"), "--name", DATASET)
    manage(checkout, url, "compute_metrics", "--dataset", DATASET, "--metric", "bleu_4", "--wait")


def report_rows(url: str) -> int:
    import psycopg

    with psycopg.connect(url) as conn:
        return conn.execute("SELECT count(*) FROM analysis_report").fetchone()[0]


# --- CPU of the server ---------------------------------------------------------------------------
def _children(pid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if int((d / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(d.name))
            except (OSError, IndexError, ValueError):
                continue
    return out


def snapshot(server_pid: int, url: str) -> dict:
    """CPU seconds used so far by the gunicorn master and its workers ("web") and by the PostgreSQL
    backends connected to the database of ``url`` ("db"), and by this client (rater_load's format)."""
    import psycopg

    base, _, name = url.rpartition("/")
    with psycopg.connect(f"{base}/postgres") as conn:
        backends = [r[0] for r in conn.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s", (name,))]
    pids = [("web", p) for p in [server_pid, *_children(server_pid)]] + [("db", p) for p in backends]
    return {"client": time.process_time(), "by_pid": {p: (role, _cpu_seconds(p)) for role, p in pids}}


async def sample(seen: dict, server_pid: int, url: str) -> None:
    """Keep ``seen`` up to date every second until cancelled (a process that exits keeps its last figure)."""
    while True:
        await asyncio.sleep(1.0)
        seen["by_pid"].update(snapshot(server_pid, url)["by_pid"])


# --- the flood -----------------------------------------------------------------------------------
def flood_paths(n: int, settings: str, resamples: int) -> list[tuple[str, str]]:
    """(label, path) of the ``n`` requests: :data:`KINDS` in turn, each with its settings."""
    out = []
    for i in range(n):
        label, path = KINDS[i % len(KINDS)]
        if settings == "fresh":
            seed, alpha = 1000 + i, 0.05
        else:
            seed, alpha = OFFERED_SEEDS[i % len(OFFERED_SEEDS)], OFFERED_ALPHAS[(i // len(KINDS)) % len(OFFERED_ALPHAS)]
        lq = f"seed={seed}&resamples={resamples}&alpha={alpha}"
        out.append((label, path.format(d=DATASET, q=f"{lq}&permutations={resamples}", lq=lq)))
    return out


async def get(port: int, path: str, local: str | None, timeout: float) -> tuple[int, float]:
    conn = Conn("127.0.0.1", port, timeout=timeout, local=local)
    t0 = time.perf_counter()
    try:
        status, _, _ = await conn.request("GET", path, {"Accept": "application/json, text/html"})
    except (OSError, EOFError, asyncio.TimeoutError):  # EOFError: asyncio.IncompleteReadError
        status = 0  # no answer in time
    finally:
        await conn.close()
    return status, time.perf_counter() - t0


async def drive(args, port: int, server_pid: int, url: str) -> dict:
    paths = flood_paths(args.requests, args.settings, args.resamples)
    gap = args.seconds / max(1, args.requests)

    def address(i: int) -> str | None:
        k = i % args.addresses
        return None if args.addresses == 1 else f"127.0.{1 + k // 250}.{1 + k % 250}"

    async def one(i: int, label: str, path: str):
        await asyncio.sleep(i * gap)
        status, seconds = await get(port, path, address(i), args.timeout)
        return label, status, seconds

    rows_before = report_rows(url)
    before = snapshot(server_pid, url)
    seen = {"client": before["client"], "by_pid": dict(before["by_pid"])}
    sampler = asyncio.create_task(sample(seen, server_pid, url))
    t0 = time.perf_counter()
    answers = await asyncio.gather(*(one(i, label, path) for i, (label, path) in enumerate(paths)))
    elapsed = time.perf_counter() - t0
    sampler.cancel()
    after = snapshot(server_pid, url)
    seen["by_pid"].update(after["by_pid"])
    seen["client"] = after["client"]
    cpu = cpu_used(before, seen)
    latency = [s for _, _, s in answers]
    return {
        "requests": len(answers), "seconds": elapsed, "status": dict(Counter(str(s) for _, s, _ in answers)),
        "by_kind": {label: dict(Counter(str(s) for k, s, _ in answers if k == label)) for label, _ in KINDS},
        "latency_s": {"p50": percentile(latency, 50), "p95": percentile(latency, 95), "max": max(latency)},
        "cpu_seconds": {"web": cpu["web"], "db": cpu["db"], "server": cpu["web"] + cpu["db"]},
        "rows_written": report_rows(url) - rows_before,
    }


def warm(port: int) -> None:
    """Compute the default reports the flood's pages fall back to and let every worker answer."""
    async def go():
        for path in (f"/datasets/{DATASET}/benchmark.json", f"/datasets/{DATASET}/leaderboard.json", "/compare.json"):
            await get(port, path, None, 600)
        await asyncio.gather(*(get(port, f"/datasets/{DATASET}/benchmark.json", None, 600) for _ in range(16)))

    asyncio.run(go())


def run(args, checkout: Path, url: str) -> dict:
    print(f"{checkout}: preparing {url} (THumB with BLEU-4)", flush=True)
    prepare(checkout, url)
    port = _free_port()
    server_args = SimpleNamespace(database_url=url, cache_url=args.cache_url, rate_limit="120/m",
                                  gunicorn_workers=args.gunicorn_workers, worker_class="gthread", threads=args.threads)
    server = start_gunicorn(server_args, port, {"CELERY_BROKER_URL": "", "REPORTS_AFTER_METRIC_RUNS": "0"}, cwd=checkout)
    try:
        warm(port)
        print(f"{checkout}: {args.requests} requests over {args.seconds:g} s ({args.settings} settings, "
              f"{args.addresses} client address(es))", flush=True)
        result = asyncio.run(drive(args, port, server.pid, url))
    finally:
        stop(server)
    result["checkout"] = str(checkout)
    show(result)
    return result


def show(r: dict) -> None:
    cpu = r["cpu_seconds"]
    print(f"  answers: {', '.join(f'{k}: {v}' for k, v in sorted(r['status'].items()))} "
          f"(0 = none within the timeout); last answer after {r['seconds']:.1f} s; latency p50 "
          f"{r['latency_s']['p50']:.2f} s, p95 {r['latency_s']['p95']:.2f} s, max {r['latency_s']['max']:.2f} s")
    for label, counts in r["by_kind"].items():
        print(f"    {label:<17}{', '.join(f'{k}: {v}' for k, v in sorted(counts.items()))}")
    print(f"  server CPU: {cpu['server']:.1f} s (gunicorn {cpu['web']:.1f} s, PostgreSQL {cpu['db']:.1f} s), "
          f"{1000 * cpu['server'] / r['requests']:.0f} ms per request; Report rows written: {r['rows_written']}",
          flush=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--before", type=Path, help="a checkout to measure first (e.g. of main), printed as 'before'")
    p.add_argument("--requests", type=int, default=300)
    p.add_argument("--seconds", type=float, default=60.0, help="the requests are spread evenly over this time")
    p.add_argument("--settings", choices=("fresh", "offered"), default="fresh",
                   help="fresh: a new seed per request (default); offered: the seeds and alphas offered to visitors")
    p.add_argument("--resamples", type=int, default=100, help="resamples and permutations of every request (default 100)")
    p.add_argument("--addresses", type=int, default=300, help="client addresses the requests come from (default 300)")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds a request may wait for its answer")
    p.add_argument("--gunicorn-workers", type=int, default=2)
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--database-url", default=os.environ.get("FLOOD_DATABASE_URL", DEFAULT_DB))
    p.add_argument("--cache-url", default=os.environ.get("FLOOD_CACHE_URL", DEFAULT_CACHE),
                   help="Redis URL of the shared cache (rate-limit counters); '' = per-process memory")
    p.add_argument("--json", help="write the results as JSON to this file")
    args = p.parse_args(argv)
    results = {}
    if args.before:
        results["before"] = run(args, args.before.resolve(), args.database_url + "_before")
    results["after"] = run(args, ROOT, args.database_url + "_after")
    if args.before:
        b, a = results["before"], results["after"]
        cpu_b, cpu_a = b["cpu_seconds"]["server"], a["cpu_seconds"]["server"]
        print(f"\n{'':<8}{'server CPU s':>14}{'rows written':>14}{'last answer s':>15}  answers")
        for name, r in results.items():
            print(f"{name:<8}{r['cpu_seconds']['server']:>14.1f}{r['rows_written']:>14}{r['seconds']:>15.1f}  "
                  + ", ".join(f"{k}: {v}" for k, v in sorted(r["status"].items())))
        print(f"before/after: server CPU {cpu_b / max(cpu_a, 1e-9):.0f}x, rows written {b['rows_written']} -> "
              f"{a['rows_written']}, last answer {b['seconds'] / max(a['seconds'], 1e-9):.1f}x")
    if args.json:
        Path(args.json).write_text(json.dumps({"settings": {k: str(v) for k, v in vars(args).items()}, **results},
                                              indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
