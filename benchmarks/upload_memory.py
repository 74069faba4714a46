"""Peak memory of a web worker while it takes a large dataset upload through the API (issue 31,
"Resource limits": a 100 MiB upload raised the workers' memory by about 9x the upload).

gunicorn (one sync worker, production settings, no broker: the import job runs in a background
thread of that worker, as in the quick start) on PostgreSQL; the client streams a ``.zip`` of
``--size-mib`` MiB from disk to ``POST /api/datasets/`` (format ``flickr8k-expert``): the bundled
Flickr8k folder (``data/flickr8k``) with, as a researcher's folder often has, a large file the
importer does not read (``Flicker8k_Dataset/images.bin``, random bytes, stored uncompressed). Over
``API_INLINE_IMPORT_BYTES`` the upload is a background job (202); the client waits until the job
is done. The worker's peak resident memory (``VmHWM`` of ``/proc/PID/status``, reset through
``/proc/PID/clear_refs`` just before the upload) and its resident memory after the job are
printed against its memory before, so the growth per uploaded MiB is what the platform's upload
path (request parsing, job storage, extraction, import) costs.

Run: .venv/bin/python benchmarks/upload_memory.py [--size-mib 100] [--json out.json]
Needs PostgreSQL (``--database-url``, default the ``captioneval_upload`` database on 127.0.0.1,
created and migrated if missing).
"""
from __future__ import annotations

import argparse
import json
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks.rater_load import ensure_database, stop  # noqa: E402 (after the path)

DEFAULT_DB = "postgres://postgres@127.0.0.1:5432/captioneval_upload"
MIB = 1024 * 1024


def prepare(database_url: str) -> str:
    """Migrate the database and create a staff user; returns its API token."""
    ensure_database(database_url)
    os.environ["DATABASE_URL"] = database_url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "evalsite.settings")
    import django

    django.setup()
    from django.contrib.auth.models import User
    from django.core.management import call_command
    from django.db import connection

    from api.account import create_token

    call_command("migrate", verbosity=0)
    user = User.objects.create_user(f"upload-{secrets.token_hex(4)}", password=secrets.token_hex(8), is_staff=True)
    key = create_token(user)
    connection.close()
    return key


def write_archive(path: Path, size_mib: int) -> int:
    """The Flickr8k folder plus a file of random bytes, ``size_mib`` MiB in all; returns its size."""
    folder = ROOT / "data" / "flickr8k"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for f in sorted(folder.iterdir()):
            zf.write(f, f"Flickr8k/{f.name}")
    filler = max(0, size_mib * MIB - path.stat().st_size - 200)
    with zipfile.ZipFile(path, "a", zipfile.ZIP_STORED) as zf:
        with zf.open("Flickr8k/Flicker8k_Dataset/images.bin", "w", force_zip64=True) as out:
            left = filler
            while left:
                chunk = os.urandom(min(left, MIB))
                out.write(chunk)
                left -= len(chunk)
    return path.stat().st_size


def memory(pid: int) -> dict[str, int]:
    """Resident and peak resident memory of ``pid`` in bytes."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0]) * 1024
    return out


def start_gunicorn(database_url: str, port: int, log) -> tuple[subprocess.Popen, int]:
    """gunicorn with one sync worker; returns (master, worker pid) once it answers."""
    env = dict(os.environ, DATABASE_URL=database_url, DJANGO_SETTINGS_MODULE="evalsite.settings", DJANGO_DEBUG="0",
               DJANGO_ALLOWED_HOSTS="127.0.0.1,localhost", LOG_LEVEL="ERROR")
    for name in ("CELERY_BROKER_URL", "CACHE_URL"):
        env.pop(name, None)
    proc = subprocess.Popen([str(Path(sys.executable).with_name("gunicorn")), "evalsite.wsgi", "-b", f"127.0.0.1:{port}",
                             "-w", "1", "--timeout", "600", "--log-level", "warning"],
                            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            httpx.get(f"http://127.0.0.1:{port}/api/", timeout=5)
            children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
            return proc, int(children[0])
        except (httpx.TransportError, IndexError):
            if proc.poll() is not None:
                raise SystemExit("gunicorn exited at start")
            time.sleep(0.3)
    raise SystemExit("gunicorn did not answer within 60 s")


def measure(args) -> dict:
    token = prepare(args.database_url)
    headers = {"Authorization": f"Token {token}"}
    with tempfile.TemporaryDirectory(prefix="upload-memory-") as tmp, socket.socket() as s:
        archive = Path(tmp) / "flickr8k.zip"
        size = write_archive(archive, args.size_mib)
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        log = open(Path(tmp) / "gunicorn.log", "w+")
        server, worker = start_gunicorn(args.database_url, port, log)
        try:
            base = f"http://127.0.0.1:{port}"
            with httpx.Client(base_url=base, headers=headers, timeout=600) as client:
                client.get("/api/datasets/")  # warm: the worker has loaded the API
                before = memory(worker)["VmRSS"]
                Path(f"/proc/{worker}/clear_refs").write_text("5")  # VmHWM := VmRSS
                t0 = time.perf_counter()
                with archive.open("rb") as fh:
                    response = client.post("/api/datasets/", data={"format": "flickr8k-expert",
                                                                  "name": f"upload-{secrets.token_hex(3)}"},
                                           files={"archive": (archive.name, fh, "application/zip")})
                answered = time.perf_counter() - t0
                body = response.json()
                if response.status_code == 202:
                    while body["status"] not in ("done", "failed"):
                        time.sleep(0.2)
                        body = client.get(body["url"]).json()
                elapsed = time.perf_counter() - t0
                after = memory(worker)
        finally:
            stop(server)
            log.seek(0)
            tail = log.read()[-2000:]
            log.close()
    return {"upload_bytes": size, "status": response.status_code, "job": body.get("status"),
            "message": body.get("message") or body.get("summary", "")[:100], "answered_s": round(answered, 2),
            "done_s": round(elapsed, 2), "rss_before": before, "peak_rss": after["VmHWM"], "rss_after": after["VmRSS"],
            "peak_growth_per_upload_byte": round((after["VmHWM"] - before) / size, 2), "log_tail": tail}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size-mib", type=int, default=100, help="size of the uploaded archive (MiB)")
    p.add_argument("--database-url", default=os.environ.get("UPLOAD_DATABASE_URL", DEFAULT_DB))
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    args = p.parse_args(argv)
    r = measure(args)
    log_tail = r.pop("log_tail")
    print(f"upload {r['upload_bytes'] / MIB:.1f} MiB: HTTP {r['status']}, job {r['job']} ({r['message']}); "
          f"answered in {r['answered_s']} s, done in {r['done_s']} s")
    print(f"web worker resident memory: before {r['rss_before'] / MIB:.0f} MiB, peak {r['peak_rss'] / MIB:.0f} MiB "
          f"(+{(r['peak_rss'] - r['rss_before']) / MIB:.0f} MiB, {r['peak_growth_per_upload_byte']}x the upload), "
          f"after {r['rss_after'] / MIB:.0f} MiB")
    if r["job"] == "failed" or r["status"] >= 400:
        print(log_tail)
    if args.json:
        Path(args.json).write_text(json.dumps(r, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
