"""Simulated raters, for demos and tests: they use the rater pages exactly as people do (preview,
accept, submit forms with the CSRF token, return tasks) over HTTP against a running server, or
in-process through Django's test client when no server URL is given. Both transports wait out a
429 (rate limit) or 503 answer for its ``Retry-After`` and send the request again
(:class:`PatientTransport`), as a patient person would.

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
REASON = re.compile(r'data-reason="(\w+)"')
#: unexpected answers in a row after which a simulated rater stops for the round (SimulatedRater.refused)
MAX_REFUSALS = 3
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
    ``no_tasks``, ...); ``seconds`` of wall-clock time; ``waited``, seconds the raters waited for
    ``Retry-After`` (rate limit, database restart), summed over raters (``counts["retried"]``
    requests were sent again after such a wait). ``str()`` gives the one-line summary that
    ``manage.py simulate_raters`` prints."""

    raters: int
    counts: Counter = field(default_factory=Counter)  # submitted, returned, abandoned, late, double, http_<status>
    stop_reasons: Counter = field(default_factory=Counter)
    seconds: float = 0.0
    waited: float = 0.0

    def __str__(self):
        parts = ", ".join(f"{k} {v}" for k, v in sorted(self.counts.items()))
        stops = ", ".join(f"{k} {v}" for k, v in sorted(self.stop_reasons.items()))
        waited = f" (waited {self.waited:.0f} s for Retry-After)" if self.waited else ""
        return f"{self.raters} simulated raters in {self.seconds:.1f} s{waited}: {parts}; stopped because: {stops}"


def retry_after(value) -> int | None:
    """Seconds a ``Retry-After`` header value asks for (RFC 9110, Sec. 10.2.3, delay-seconds form:
    one or more digits), or None when absent or not in that form (an HTTP date is not used here)."""
    value = (value or "").strip()
    return int(value) if re.fullmatch(r"[0-9]{1,10}", value) else None


class PatientTransport:
    """What both transports share: the rater pages over some request function, retried as a patient
    person would.

    An answer 503 (database restarting) or 429 (rate limit, :mod:`crowd.ratelimit`) with
    ``Retry-After`` is retried with the same request after the delay it asks for (at most
    :attr:`MAX_WAIT` = 30 s at a time: a longer wait is taken in steps, each retried), up to
    ``retries`` times; a submission carries its idempotency key, so a retry never stores an answer
    twice. ``retried`` counts the retries and ``waited`` the seconds slept; ``log``, if a list,
    receives every response object (retried ones included). Subclasses implement :meth:`exchange`;
    :attr:`sleep` (default :func:`time.sleep`) is the one place a wait happens, so a test can
    replace it with a simulated clock.
    """

    RETRYABLE = (429, 503)
    MAX_WAIT = 30
    sleep = staticmethod(time.sleep)

    def __init__(self, *, retries: int = 5, log: list | None = None):
        self.retries, self.log, self.retried, self.waited = retries, log, 0, 0.0

    def exchange(self, method: str, path: str, data: dict | None):
        """Send one request; returns ``(response object, status, headers mapping, body text)``."""
        raise NotImplementedError

    def _send(self, method, path, data=None):
        for attempt in range(self.retries + 1):
            response, status, headers, text = self.exchange(method, path, data)
            if self.log is not None:
                self.log.append(response)
            wait = retry_after(headers.get("Retry-After"))
            if status not in self.RETRYABLE or wait is None or attempt == self.retries:
                break
            self.retried += 1
            self.waited += min(wait, self.MAX_WAIT)
            self.sleep(min(wait, self.MAX_WAIT))
        return status, headers.get("Location", ""), text

    def get(self, path):
        """GET ``path`` (relative to the site root): ``(status, Location header, body text)``."""
        return self._send("GET", path)

    def post(self, path, data):
        """POST the form ``data`` (a dict) to ``path``: ``(status, Location header, body text)``."""
        return self._send("POST", path, data)


class HttpTransport(PatientTransport):
    """HTTP against a live server at ``base_url`` with ``requests`` (cookies kept per rater);
    retries as :class:`PatientTransport`; ``timeout``: seconds per request."""

    def __init__(self, base_url: str, *, retries: int = 5, timeout: float = 60, log: list | None = None):
        import requests

        super().__init__(retries=retries, log=log)
        self.base = base_url.rstrip("/")
        self.session = requests.Session()
        self.timeout = timeout

    def exchange(self, method, path, data):
        """One request with ``requests`` (no redirects followed; a POST carries a same-origin Referer)."""
        headers = {"Referer": self.base + path} if method == "POST" else {}
        r = self.session.request(method, self.base + path, data=data, headers=headers, allow_redirects=False,
                                 timeout=self.timeout)
        return r, r.status_code, r.headers, r.text


class ClientTransport(PatientTransport):
    """In-process requests through :class:`django.test.Client` (no server needed); retries as
    :class:`PatientTransport`, so the rate limiter's 429 is waited out here too."""

    def __init__(self, *, retries: int = 5, log: list | None = None):
        from django.test import Client

        super().__init__(retries=retries, log=log)
        self.client = Client(SERVER_NAME="localhost")

    def exchange(self, method, path, data):
        """One request through the test client (the whole middleware stack, no redirects followed)."""
        r = self.client.get(path) if method == "GET" else self.client.post(path, data)
        return r, r.status_code, r.headers, r.content.decode()


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
        self.refusals = 0  # answers in a row that were neither a task nor a reason (see refused)

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
        elif (reason := REASON.search(html)) and 'id="reason"' in html:
            self.flush_late()
            return reason.group(1)
        elif status != 200 or not (token := CSRF.search(html)):
            return self.refused(status)
        else:
            status, location, html = self.http.post(f"/rate/{self.campaign.name}/accept/", {"csrfmiddlewaretoken": token.group(1)})
            if status != 302:
                if (reason := REASON.search(html)) and 'id="reason"' in html:  # taken by others since the preview
                    self.flush_late()
                    return reason.group(1)
                return self.refused(status)
            task_path = _path(location)
        self.refusals = 0
        self.do_task(task_path)
        return None

    def refused(self, status: int) -> str | None:
        """Count an answer that is neither a task nor the server's reason for having none (e.g. a 429
        still refused after the transport's patient retries, a 5xx): the rater tries again, and
        after :data:`MAX_REFUSALS` such answers in a row stops for this round with the reason
        ``http_<status>`` (a later round of :func:`simulate` takes it up again)."""
        self.count(f"http_{status}")
        self.refusals += 1
        return f"http_{status}" if self.refusals >= MAX_REFUSALS else None

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
    Either way an answer 429 (the rater rate limit, ``settings.RATER_RATE_LIMIT``) or 503 with
    ``Retry-After`` is waited out and retried (:class:`PatientTransport`), so raters finish on any
    campaign size with the default limit (taking as long as the limit demands).
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
    retried = sum(t.retried for t in transports)
    if retried:
        result.counts["retried"] = retried
    result.waited = sum(t.waited for t in transports)
    result.seconds = time.monotonic() - started
    return result
