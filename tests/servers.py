"""A web server and a real Celery worker in subprocesses, as in production, for the tests that
follow a request through the broker to a worker (tests/test_web_compute.py,
tests/test_api_end_to_end.py).

:func:`web_and_worker` starts ``celery -A evalsite worker`` on a queue of its own and
``manage.py runserver`` on a free loopback port, both on the test database (PostgreSQL) and the test
broker (Redis), waits until the server answers, yields its base URL and stops both (SIGTERM, then
SIGKILL after 30 s), printing the end of their logs so that a failure shows what they said."""
from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import uuid

import httpx
import pytest
from django.db import connection

from .conftest import ROOT

BROKER = os.environ.get("TEST_BROKER_URL", "redis://127.0.0.1:6379/15")


def database_url() -> str:
    """The test database as a ``postgres://`` URL for a subprocess; fails the test on SQLite."""
    s = connection.settings_dict
    if connection.vendor != "postgresql":
        pytest.fail("a test with a real worker needs PostgreSQL: set DATABASE_URL (./run test does)")
    return f"postgres://{s['USER'] or 'postgres'}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


def stop_group(proc: subprocess.Popen) -> None:
    """Stop ``proc`` started with ``start_new_session=True``: SIGTERM to its process group, SIGKILL
    after 30 s."""
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)


@contextlib.contextmanager
def web_and_worker(log_dir, *, threading: bool = True, ready_path: str = "/accounts/login/", **env):
    """Start a Celery worker (concurrency 2, a fresh queue) and ``runserver`` (``--nothreading``
    unless ``threading``) with the environment ``env`` added to the test database and broker;
    yield ``(base_url, worker_process)`` once a GET of ``ready_path`` connects (at most 30 s).
    Logs go to ``log_dir/procs.log``; the last 3,000 characters are printed at the end."""
    env = dict(os.environ, DATABASE_URL=database_url(), CELERY_BROKER_URL=BROKER,
               CELERY_QUEUE=f"test-{uuid.uuid4().hex}", DJANGO_DEBUG="0", **env)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    logs = open(log_dir / "procs.log", "w+")
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "evalsite", "worker", "-l", "info", "--concurrency", "2",
         "-Q", env["CELERY_QUEUE"], "--without-gossip", "--without-mingle", "--without-heartbeat"],
        cwd=ROOT, env=env, stdout=logs, stderr=subprocess.STDOUT, start_new_session=True)
    server = subprocess.Popen(
        [sys.executable, "manage.py", "runserver", "--noreload", *([] if threading else ["--nothreading"]),
         f"127.0.0.1:{port}"], cwd=ROOT, env=env, stdout=logs, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(150):
            try:
                httpx.get(url + ready_path, timeout=5)
                break
            except httpx.TransportError:
                time.sleep(0.2)
        yield url, worker
    finally:
        for proc in (server, worker):
            stop_group(proc)
        logs.seek(0)
        print(logs.read()[-3000:])
        logs.close()
