"""Simulated raters, for demos and tests: they use the rater pages exactly as people do (preview,
accept, submit forms with the CSRF token, return tasks) over HTTP against a running server, or
in-process through Django's test client when no server URL is given.

Their answers come from the kind's :meth:`~crowd.kinds.base.TaskKind.simulate` (a latent truth plus
noise, or uniform noise for spammers). Faults can be injected: double submissions (the same form
posted twice), returns, and expiries (a task is abandoned, its deadline moved into the past as if
time had passed, and it is sometimes submitted late afterwards).

The simulator reads the item and presentation order of its own assignments from the database (a
simulated person has to "see" the task somehow); everything it changes goes through HTTP, except
the injected passage of time.
"""
from __future__ import annotations

import random
import re
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import timedelta

from django.db import connection
from django.db.models import F
from django.utils import timezone

from .kinds import RaterProfile, get_kind
from .models import Assignment, Campaign, Worker

CSRF = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')
#: Seconds a simulated rater "reads" each task (added to its work time; above the speed check's floor).
SIMULATED_READING_SECONDS = 5
SUBMIT_KEY = re.compile(r'name="submit_key" value="([^"]+)"')
ITEM = re.compile(r'name="item" value="([^"]+)"')
TASK_URL = re.compile(r"/rate/[\w-]+/task/(\d+)/$")
DB_SLOTS = threading.BoundedSemaphore(4)


@dataclass
class Faults:
    """Probabilities (0-1) of injected faults per task."""

    double_submit: float = 0.0
    return_task: float = 0.0
    abandon: float = 0.0  # expire: the deadline passes without a submission
    late_submit: float = 0.5  # of abandoned tasks, the share later submitted anyway


@dataclass
class SimulationResult:
    """What a simulation did: ``raters`` taking part; ``counts`` of events (``submitted``,
    ``returned``, ``abandoned``, ``late``, ``double``, ``http_<status>`` for unexpected answers);
    ``stop_reasons``, how many raters stopped for each reason the server gave (``done``,
    ``no_tasks``, ...); ``seconds`` of wall-clock time. ``str()`` gives the one-line summary that
    ``manage.py simulate_raters`` prints."""

    raters: int
    counts: Counter = field(default_factory=Counter)  # submitted, returned, abandoned, late, double, http_<status>
    stop_reasons: Counter = field(default_factory=Counter)
    seconds: float = 0.0

    def __str__(self):
        parts = ", ".join(f"{k} {v}" for k, v in sorted(self.counts.items()))
        stops = ", ".join(f"{k} {v}" for k, v in sorted(self.stop_reasons.items()))
        return f"{self.raters} simulated raters in {self.seconds:.1f} s: {parts}; stopped because: {stops}"


class HttpTransport:
    """HTTP against a live server with ``requests`` (cookies kept per rater).

    An answer 503 (database restarting) or 429 (rate limit) with ``Retry-After`` is retried with
    the same request after the delay it asks for (at most 30 s), up to ``retries`` times, as a
    patient person would; a submission carries its idempotency key, so a retry never stores an
    answer twice. ``retried`` counts the retries; ``log``, if a list, receives every
    ``requests.Response`` (retried ones included). ``timeout``: seconds per request.
    """

    RETRYABLE = (429, 503)

    def __init__(self, base_url: str, *, retries: int = 5, timeout: float = 60, log: list | None = None):
        import requests

        self.base = base_url.rstrip("/")
        self.session = requests.Session()
        self.retries, self.timeout, self.log, self.retried = retries, timeout, log, 0

    def _send(self, method, path, data=None):
        headers = {"Referer": self.base + path} if method == "POST" else {}
        for attempt in range(self.retries + 1):
            r = self.session.request(method, self.base + path, data=data, headers=headers, allow_redirects=False,
                                     timeout=self.timeout)
            if self.log is not None:
                self.log.append(r)
            wait = r.headers.get("Retry-After", "")
            if r.status_code not in self.RETRYABLE or not wait.isdigit() or attempt == self.retries:
                break
            self.retried += 1
            time.sleep(min(int(wait), 30))
        return r.status_code, r.headers.get("Location", ""), r.text

    def get(self, path):
        """GET ``path`` (relative to the base URL): ``(status, Location header, body text)``."""
        return self._send("GET", path)

    def post(self, path, data):
        """POST the form ``data`` (a dict) to ``path``: ``(status, Location header, body text)``."""
        return self._send("POST", path, data)


class ClientTransport:
    """In-process requests through :class:`django.test.Client` (no server needed)."""

    def __init__(self):
        from django.test import Client

        self.client = Client(SERVER_NAME="localhost")

    def get(self, path):
        """GET ``path``: ``(status, Location header, body text)``."""
        r = self.client.get(path)
        return r.status_code, r.get("Location", ""), r.content.decode()

    def post(self, path, data):
        """POST the form ``data`` (a dict) to ``path``: ``(status, Location header, body text)``."""
        r = self.client.post(path, data)
        return r.status_code, r.get("Location", ""), r.content.decode()


def _path(location: str) -> str:
    return re.sub(r"^https?://[^/]+", "", location)


class SimulatedRater:
    """One simulated person working through a campaign's rater pages with ``transport``
    (:class:`HttpTransport` or :class:`ClientTransport`): joins with the worker's invitation link,
    previews, accepts and submits tasks with answers from the kind's
    :meth:`~crowd.kinds.base.TaskKind.simulate` (``profile``: noise or spammer), and injects the
    ``faults``. Events are counted into the shared ``result`` under ``lock``; ``seed`` makes its
    random choices repeatable."""

    def __init__(self, campaign: Campaign, worker: Worker, transport, profile: RaterProfile, faults: Faults,
                 seed: int, hints: dict, result: SimulationResult, lock: threading.Lock):
        self.campaign, self.worker, self.http = campaign, worker, transport
        self.profile, self.faults, self.rng = profile, faults, random.Random(seed)
        self.spec, self.hints, self.result, self.lock = get_kind(campaign.kind), hints, result, lock
        self.abandoned: list[tuple[int, dict, str]] = []

    def read(self, query):
        """Run a database query for the simulation itself. Over HTTP, at most a few raters hold a
        connection at once and close it at once, so the server keeps the connections it needs."""
        if isinstance(self.http, ClientTransport):
            return query()
        with DB_SLOTS:
            try:
                return query()
            finally:
                connection.close()

    def count(self, key, n=1):
        """Add ``n`` to the shared event counter ``key`` (thread-safe)."""
        with self.lock:
            self.result.counts[key] += n

    def join(self):
        """Open the worker's invitation link (a session for this rater); RuntimeError unless the
        server answers with a redirect."""
        status, location, _ = self.http.get(f"/rate/join/{self.worker.token}/?next=/rate/{self.campaign.name}/")
        if status != 302:
            raise RuntimeError(f"invitation link answered {status}")

    def run(self, max_tasks: int = 10_000) -> str:
        """Work until there is no task; returns the reason given by the server."""
        for _ in range(max_tasks):
            reason = self.step()
            if reason:
                return reason
        return "max_tasks"

    def step(self) -> str | None:
        """Do one task (or try to); returns the server's reason when there is none."""
        status, location, html = self.http.get(f"/rate/{self.campaign.name}/")
        if status == 302:
            task_path = _path(location)
        elif 'id="reason"' in html:
            self.flush_late()
            return re.search(r'data-reason="(\w+)"', html).group(1)
        else:
            status, location, html = self.http.post(f"/rate/{self.campaign.name}/accept/", {"csrfmiddlewaretoken": CSRF.search(html).group(1)})
            if status != 302:
                if 'id="reason"' in html:  # taken by others since the preview
                    self.flush_late()
                    return re.search(r'data-reason="(\w+)"', html).group(1)
                self.count(f"http_{status}")
                return None
            task_path = _path(location)
        self.do_task(task_path)
        return None

    def do_task(self, task_path):
        """Open the task page at ``task_path`` and submit, return or abandon it (faults drawn
        with this rater's random generator)."""
        status, _, html = self.http.get(task_path)
        if status != 200:
            self.count(f"http_{status}")
            return
        pk = int(TASK_URL.search(task_path).group(1))
        # a person reads the task before answering: move the acceptance back by a reading time, so
        # the speed check (crowd.quality.speed_check) sees a human pace, not the simulator's
        self.read(lambda: Assignment.objects.filter(pk=pk, state=Assignment.ACCEPTED).update(
            accepted_at=F("accepted_at") - timedelta(seconds=SIMULATED_READING_SECONDS)))
        a = self.read(lambda: Assignment.objects.select_related("item").get(pk=pk))
        form = {
            "csrfmiddlewaretoken": CSRF.search(html).group(1), "submit_key": SUBMIT_KEY.search(html).group(1),
            "item": ITEM.search(html).group(1),
        }
        form.update(self.spec.simulate(a.item.payload, a.order, self.rng, self.profile, self.hints))
        roll = self.rng.random()
        if roll < self.faults.return_task:
            status, _, _ = self.http.post(task_path + "return/", {"csrfmiddlewaretoken": form["csrfmiddlewaretoken"], "reason": "simulated: unclear"})
            self.count("returned" if status == 302 else f"http_{status}")
            return
        if roll < self.faults.return_task + self.faults.abandon:
            # time passes: the deadline is over; the expiry sweep will return the slot
            self.read(lambda: Assignment.objects.filter(pk=pk, state=Assignment.ACCEPTED).update(
                deadline=timezone.now() - timedelta(seconds=1)))
            self.count("abandoned")
            if self.rng.random() < self.faults.late_submit:
                self.abandoned.append((pk, form, task_path))
            return
        status, _, _ = self.http.post(task_path + "submit/", form)
        self.count("submitted" if status == 302 else f"http_{status}")
        if self.rng.random() < self.faults.double_submit:
            status, _, _ = self.http.post(task_path + "submit/", form)
            self.count("double" if status == 302 else f"http_double_{status}")

    def flush_late(self):
        """Submit the abandoned tasks now, after their deadline (late submissions)."""
        while self.abandoned:
            pk, form, task_path = self.abandoned.pop()
            status, _, _ = self.http.post(task_path + "submit/", form)
            self.count("late" if status == 302 else f"http_late_{status}")


def simulate(
    campaign: Campaign, *, raters: int = 20, spammers: int = 0, url: str | None = None, threads: int | None = None,
    faults: Faults | None = None, seed: int = 0, noise: float = 0.1, workers: list[Worker] | None = None,
) -> SimulationResult:
    """Run ``raters`` simulated raters (the first ``spammers`` of them answer at random) on a live
    ``campaign`` until nothing is left for any of them. With ``url`` they talk HTTP to that server
    (``threads`` at a time, default all at once); without, they run one after another in-process.
    Rounds repeat while a round still completed work (a task returned or expired at the end of a
    round is picked up by the next). The raters (new invited workers, or ``workers``) are made
    raters of ``campaign`` (:func:`crowd.engine.add_raters`). Returns counts of what happened."""
    from . import engine

    if campaign.state != Campaign.LIVE:
        raise ValueError(f"campaign {campaign.name!r} is {campaign.state}; publish it first (set it live)")
    faults = faults or Faults()
    if workers:  # the given workers become raters of the campaign (the rater pages serve only those)
        engine.add_raters(campaign, workers)
    else:
        workers = engine.invite_workers(raters, label="sim-", campaign=campaign)
    hints = get_kind(campaign.kind).simulation_hints(campaign)
    result = SimulationResult(raters=len(workers))
    lock = threading.Lock()
    started = time.monotonic()
    transports = [HttpTransport(url) if url else ClientTransport() for _ in workers]
    team = [
        SimulatedRater(campaign, w, t, RaterProfile(noise=noise, spammer=i < spammers), faults, seed * 100_003 + i,
                       hints, result, lock)
        for i, (w, t) in enumerate(zip(workers, transports))
    ]
    for r in team:
        r.join()

    def work(rater):
        reason = rater.run()
        with lock:
            result.stop_reasons[reason] += 1

    for _ in range(20):
        before = Assignment.objects.filter(campaign=campaign, state__in=Assignment.DONE_STATES).count()
        result.stop_reasons.clear()
        if url:
            n = threads or len(team)
            for start in range(0, len(team), n):
                batch = [threading.Thread(target=work, args=(r,)) for r in team[start:start + n]]
                for t in batch:
                    t.start()
                for t in batch:
                    t.join()
        else:  # in-process: the raters take turns, one task each
            active = list(team)
            while active:
                for r in list(active):
                    reason = r.step()
                    if reason:
                        result.stop_reasons[reason] += 1
                        active.remove(r)
        engine.expire_overdue(campaign)
        after = Assignment.objects.filter(campaign=campaign, state__in=Assignment.DONE_STATES).count()
        if after == before:
            break
    retried = sum(getattr(t, "retried", 0) for t in transports)
    if retried:
        result.counts["retried"] = retried
    result.seconds = time.monotonic() - started
    return result
