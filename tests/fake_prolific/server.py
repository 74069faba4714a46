"""A fake Prolific API: a small real HTTP server on loopback, for tests (no network, no account).

It speaks the subset of Prolific's public API (https://docs.prolific.com/api-reference/) that
:mod:`crowd.prolific` calls, under ``/api/v1/``, with ``Authorization: Token <token>``:

- every request body is validated against the documented fields (unknown fields, wrong types,
  rewards not in minor units... -> 400 ``{"error": {"detail": "..."}}``); a bad or missing token
  -> 401; an unknown path -> 404;
- state is kept (``studies``, ``submissions``, ``bonuses``: dicts by id) and study transitions
  follow Prolific's lifecycle (PUBLISH only from UNPUBLISHED; places only increase once published);
- lists are paginated like Prolific's (``results``, ``_links.next.href``, ``meta.count``) with a
  small page size so that clients must follow the pages;
- faults can be injected: :meth:`FakeProlific.fail_next` (429/5xx, optional ``Retry-After``) and
  :meth:`FakeProlific.timeout_next` (answer after the client has given up; ``apply=True``: the
  call's effect happens anyway, as when a real request reaches the server but its answer is lost);
- the participant side is driven from tests: :meth:`~FakeProlific.start_submission`,
  :meth:`~FakeProlific.complete`, :meth:`~FakeProlific.set_status`, and
  :meth:`~FakeProlific.send_webhook` (signed like Prolific's webhooks).

Handlers live in modules that register them with :func:`route` (``studies.py`` here; the
submission, bonus and webhook-subscription handlers in ``submissions.py``). A handler is
``handler(fake, match, body, query) -> (status, dict)``; it may raise :class:`Invalid` (400) or
:class:`NotFound` (404) and runs under ``fake.lock``.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import secrets
import threading
import time
import urllib.error
import urllib.request
import uuid
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlencode, urlsplit

API_PREFIX = "/api/v1/"
ROUTES: list[tuple[str, re.Pattern, object]] = []


class Invalid(Exception):
    """A request the real API would refuse with 400; the message is the ``detail``."""


class NotFound(Exception):
    """An unknown resource: 404."""


FALLBACK_ROUTES: list[tuple[str, re.Pattern, object]] = []


def route(method: str, pattern: str, *, fallback: bool = False):
    """Register ``handler(fake, match, body, query) -> (status, dict)`` for ``method`` and the
    regular expression ``pattern`` matched (fullmatch) against the path after ``/api/v1/``
    (e.g. ``r"studies/(?P<id>[0-9a-f]{24})/"``). ``fallback=True``: used only when no ordinary
    route matches the method and path (a minimal stand-in another module may replace)."""
    compiled = re.compile(pattern)

    def register(handler):
        (FALLBACK_ROUTES if fallback else ROUTES).append((method.upper(), compiled, handler))
        return handler

    return register


def new_id() -> str:
    """A Prolific-like id: 24 lowercase hex characters."""
    return secrets.token_hex(12)


def now_iso() -> str:
    """Now, UTC, ISO 8601 with a Z (as Prolific writes timestamps)."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def sign(secret: str, timestamp: str, body: bytes) -> str:
    """Prolific's webhook signature: base64 of HMAC-SHA256(secret, timestamp + raw body)
    (Prolific API docs, "Webhooks: verifying")."""
    mac = hmac.new(secret.encode(), timestamp.encode() + body, hashlib.sha256).digest()
    return base64.b64encode(mac).decode()


# Submission statuses whose place is free again (Prolific researcher help, "Submission statuses").
FREED_STATUSES = {"RETURNED", "TIMED-OUT", "REJECTED"}


class _Fault:
    def __init__(self, kind, method, path_regex, count, status=None, retry_after=None, apply=True):
        self.kind, self.method, self.regex, self.count = kind, method.upper(), re.compile(path_regex), count
        self.status, self.retry_after, self.apply = status, retry_after, apply


class FakeProlific:
    """The fake server. ``start()`` returns its base URL ``http://127.0.0.1:PORT/api/v1/``.

    Attributes: ``studies``, ``submissions``, ``bonuses`` (dicts by id, Prolific's JSON shapes);
    ``calls``: every request received, as ``(method, path, body)`` with ``path`` relative to
    ``/api/v1/`` and without the query (``body`` the parsed JSON, None without one), including
    refused and faulted ones; ``log``: the same as dicts with ``query`` and ``status`` too;
    ``pay_calls``: the bonus ids of every pay call that took effect; ``return_requests``: the
    submission ids of every return request that took effect; ``screen_outs``: ``(submission id,
    amount paid in major units)`` of every screen-out that took effect; ``slow_seconds``: how long a
    timed-out call waits before answering (longer than the client's timeout)."""

    def __init__(self, token: str = "test-token", page_size: int = 2, webhook_secret: str = "whsec-test"):
        self.token, self.page_size, self.webhook_secret = token, page_size, webhook_secret
        self.studies: dict[str, dict] = {}
        self.submissions: dict[str, dict] = {}
        self.bonuses: dict[str, dict] = {}
        self.hooks: dict[str, dict] = {}
        self.calls: list[tuple[str, str, object]] = []
        self.log: list[dict] = []
        self.pay_calls: list[str] = []
        self.return_requests: list[str] = []
        self.screen_outs: list[tuple[str, str]] = []
        self.slow_seconds = 3.0
        self.lock = threading.RLock()
        self._faults: list[_Fault] = []
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self.base_url = ""

    # -- life cycle --------------------------------------------------------------------------
    def start(self) -> str:
        """Serve on 127.0.0.1 (a free port) in a daemon thread; returns the base URL."""
        fake = self

        class Handler(_Handler):
            pass

        Handler.fake = fake
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="fake-prolific", daemon=True)
        self._thread.start()
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}{API_PREFIX}"
        return self.base_url

    def stop(self) -> None:
        """Stop serving (slow answers in progress are cut short)."""
        self._stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    # -- fault injection ---------------------------------------------------------------------
    def fail_next(self, method: str, path_regex: str, status: int = 429, count: int = 1, retry_after=None) -> None:
        """The next ``count`` requests ``method`` whose relative path matches ``path_regex``
        (re.search) get ``status`` (429, 500, 503...) with ``{"error": {"detail": ...}}`` and,
        if ``retry_after`` is not None, a ``Retry-After: <seconds>`` header; no effect happens."""
        with self.lock:
            self._faults.append(_Fault("fail", method, path_regex, count, status=status, retry_after=retry_after))

    def timeout_next(self, method: str, path_regex: str, count: int = 1, apply: bool = True) -> None:
        """The next ``count`` matching requests are answered only after ``slow_seconds`` (the
        client has timed out by then). ``apply=True``: the request is executed anyway (its effect
        happens, e.g. a bonus is paid); ``apply=False``: it is not."""
        with self.lock:
            self._faults.append(_Fault("timeout", method, path_regex, count, apply=apply))

    def _take_fault(self, method: str, path: str) -> _Fault | None:
        with self.lock:
            for fault in self._faults:
                if fault.count > 0 and fault.method == method and fault.regex.search(path):
                    fault.count -= 1
                    if fault.count == 0:
                        self._faults.remove(fault)
                    return fault
        return None

    def pending_faults(self) -> int:
        """How many injected faults have not fired yet."""
        with self.lock:
            return sum(f.count for f in self._faults)

    # -- helpers for handlers ----------------------------------------------------------------
    def paginate(self, items: list, query: dict, path: str) -> dict:
        """One page of ``items`` like Prolific's list answers: ``{"results": [...], "_links":
        {"self": {"href"}, "next": {"href": url | None}, "previous": {"href": url | None}},
        "meta": {"count": n}}``. Pages are 1-based (``?page=N``); ``?page_size`` may ask for
        fewer than ``self.page_size``, never more. Other query parameters are kept in the links."""
        try:
            page = int(query.get("page", "1"))
            size = min(int(query.get("page_size", self.page_size)), self.page_size)
        except ValueError:
            raise Invalid("page and page_size must be integers") from None
        if page < 1 or size < 1:
            raise Invalid("page and page_size must be positive")
        start = (page - 1) * size
        rows = items[start:start + size]

        def link(n):
            q = {k: v for k, v in query.items() if k != "page"} | {"page": str(n)}
            return {"href": f"{self.base_url}{path}?{urlencode(q)}"}

        return {
            "results": rows,
            "_links": {"self": link(page),
                       "next": link(page + 1) if start + size < len(items) else {"href": None},
                       "previous": link(page - 1) if page > 1 else {"href": None}},
            "meta": {"count": len(items)},
        }

    def study(self, study_id: str) -> dict:
        """The stored study ``study_id``; NotFound otherwise."""
        try:
            return self.studies[study_id]
        except KeyError:
            raise NotFound(f"study {study_id} not found") from None

    def places_taken(self, study_id: str) -> int:
        """Submissions of the study that hold a place (not returned, timed out or rejected)."""
        return sum(1 for s in self.submissions.values()
                   if s["study_id"] == study_id and s["status"] not in FREED_STATUSES)

    # -- participant side --------------------------------------------------------------------
    def start_submission(self, study_id: str, participant_id: str | None = None) -> dict:
        """A participant takes a place in an ACTIVE study: a new submission (status ACTIVE).
        ValueError if the study is not active, full, or the participant already has a submission
        in it (one per participant)."""
        with self.lock:
            study = self.study(study_id)
            if study["status"] != "ACTIVE":
                raise ValueError(f"study {study_id} is {study['status']}, not ACTIVE")
            if self.places_taken(study_id) >= study["total_available_places"]:
                raise ValueError(f"study {study_id} is full")
            participant_id = participant_id or new_id()
            if any(s["study_id"] == study_id and s["participant_id"] == participant_id
                   for s in self.submissions.values()):
                raise ValueError(f"participant {participant_id} already has a submission in study {study_id}")
            sub = {"id": new_id(), "study_id": study_id, "participant_id": participant_id, "status": "ACTIVE",
                   "started_at": now_iso(), "completed_at": None, "is_complete": False, "study_code": None,
                   "reward": study["reward"], "time_taken": None}
            self.submissions[sub["id"]] = sub
            self._refresh_study(study_id)
            return dict(sub)

    def complete(self, submission_id: str, code: str) -> dict:
        """The participant lands on the completion URL with ``code``: the submission records it
        and takes the status its code's actions give (AUTOMATICALLY_APPROVE -> APPROVED,
        MANUALLY_REVIEW -> AWAITING REVIEW, FIXED_SCREEN_OUT_PAYMENT -> SCREENED OUT,
        REQUEST_RETURN -> RETURNED (the fake assumes the participant complies); a code the study
        does not have -> AWAITING REVIEW)."""
        with self.lock:
            sub = self.submissions[submission_id]
            study = self.studies[sub["study_id"]]
            entry = next((c for c in study["completion_codes"] if c["code"] == code), None)
            actions = [a["action"] for a in entry["actions"]] if entry else []
            status = "AWAITING REVIEW"
            if "AUTOMATICALLY_APPROVE" in actions:
                status = "APPROVED"
            elif "FIXED_SCREEN_OUT_PAYMENT" in actions:
                status = "SCREENED OUT"
            elif "REQUEST_RETURN" in actions:
                status = "RETURNED"
            started = datetime.strptime(sub["started_at"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc)
            sub.update(status=status, study_code=code, completed_at=now_iso(), is_complete=True,
                       time_taken=int((datetime.now(timezone.utc) - started).total_seconds()))
            self._refresh_study(sub["study_id"])
            return dict(sub)

    def set_status(self, submission_id: str, status: str) -> dict:
        """Force a submission's status (e.g. RETURNED, TIMED-OUT as Prolific decides them)."""
        with self.lock:
            sub = self.submissions[submission_id]
            sub["status"] = status
            self._refresh_study(sub["study_id"])
            return dict(sub)

    def _refresh_study(self, study_id: str) -> None:
        study = self.studies.get(study_id)
        if study is not None:
            study["places_taken"] = self.places_taken(study_id)
            study["number_of_submissions"] = sum(1 for s in self.submissions.values() if s["study_id"] == study_id)

    def send_webhook(self, url: str, event_type: str, payload: dict, *, secret: str | None = None,
                     timestamp: str | None = None, event_id: str | None = None, body: bytes | None = None) -> int:
        """POST a webhook to ``url`` as Prolific does; returns the HTTP status. The body is
        ``{"event_type": event_type, **payload}`` as JSON (or ``body`` verbatim); headers:
        ``X-Prolific-Request-Timestamp`` (POSIX seconds), ``X-Prolific-Request-Signature``
        (:func:`sign` with ``secret``, default ``self.webhook_secret``), ``X-Event-ID``."""
        raw = body if body is not None else json.dumps({"event_type": event_type, **payload}).encode()
        ts = timestamp if timestamp is not None else str(int(time.time()))
        headers = {"Content-Type": "application/json", "X-Prolific-Request-Timestamp": ts,
                   "X-Prolific-Request-Signature": sign(secret if secret is not None else self.webhook_secret, ts, raw),
                   "X-Event-ID": event_id or uuid.uuid4().hex}
        request = urllib.request.Request(url, data=raw, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status
        except urllib.error.HTTPError as exc:
            return exc.code


class _Handler(BaseHTTPRequestHandler):
    fake: FakeProlific = None
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):  # quiet
        pass

    def do_GET(self):
        self._handle("GET")

    def do_POST(self):
        self._handle("POST")

    def do_PATCH(self):
        self._handle("PATCH")

    def do_PUT(self):
        self._handle("PUT")

    def do_DELETE(self):
        self._handle("DELETE")

    def _send(self, status: int, data: dict | None, headers: dict | None = None):
        raw = json.dumps(data).encode() if data is not None else b""
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(raw)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (a timeout test)

    def _handle(self, method: str):
        fake = self.fake
        parts = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        path = parts.path[len(API_PREFIX):] if parts.path.startswith(API_PREFIX) else None
        query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        body, bad_json = None, False
        if raw:
            try:
                body = json.loads(raw)
            except ValueError:
                bad_json = True
        entry = {"method": method, "path": path if path is not None else parts.path, "query": query, "body": body}
        with fake.lock:
            fake.calls.append((method, entry["path"], body))
            fake.log.append(entry)

        def answer(status, data, headers=None):
            entry["status"] = status
            self._send(status, data, headers)

        if self.headers.get("Authorization", "") != f"Token {fake.token}":
            return answer(401, {"error": {"detail": "Invalid token."}})
        if path is None:
            return answer(404, {"error": {"detail": "Not found."}})
        fault = fake._take_fault(method, path)
        if fault is not None and fault.kind == "fail":
            headers = {"Retry-After": str(fault.retry_after)} if fault.retry_after is not None else None
            return answer(fault.status, {"error": {"detail": f"injected {fault.status}"}}, headers)
        if bad_json:
            return answer(400, {"error": {"detail": "The body is not valid JSON."}})
        if method in ("POST", "PATCH", "PUT") and body is not None and not isinstance(body, dict):
            return answer(400, {"error": {"detail": "The body must be a JSON object."}})
        if fault is not None and not fault.apply:  # a lost request: nothing happens, the answer comes too late
            fake._stopping.wait(fake.slow_seconds)
            return answer(504, {"error": {"detail": "injected timeout (not applied)"}})
        status, data = self._dispatch(method, path, body, query)
        if fault is not None:  # a lost answer: the effect happened, the answer comes too late
            fake._stopping.wait(fake.slow_seconds)
        answer(status, data)

    def _dispatch(self, method, path, body, query):
        fake = self.fake
        known_path = False
        for m, pattern, handler in ROUTES + FALLBACK_ROUTES:
            match = pattern.fullmatch(path)
            if not match:
                continue
            known_path = True
            if m != method:
                continue
            try:
                with fake.lock:
                    return handler(fake, match, body if body is not None else {}, query)
            except Invalid as exc:
                return 400, {"error": {"detail": str(exc)}}
            except NotFound as exc:
                return 404, {"error": {"detail": str(exc)}}
        if known_path:
            return 405, {"error": {"detail": f"Method {method} not allowed."}}
        return 404, {"error": {"detail": "Not found."}}
