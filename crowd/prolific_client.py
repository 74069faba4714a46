"""The one wrapper through which every call to Prolific's API goes (httpx, synchronous).

Facts (Prolific public API documentation, https://docs.prolific.com/api-reference/): base URL
``https://api.prolific.com/api/v1/`` (``settings.PROLIFIC_API_URL``); header
``Authorization: Token <token>``; tokens do not expire and carry the workspace's full rights, so
the token is read from the environment (``PROLIFIC_TOKEN``) and never written anywhere (not in
the database, not in the call log, not in error messages). No fixed rate limit is documented;
429 answers happen (notably for payments): they and 5xx answers and timeouts are retried with
exponential back-off, honouring ``Retry-After``. Lists are paginated: ``results`` and
``_links.next.href``.

:class:`ProlificAPI` logs every call as a :class:`~crowd.models.ProlificCall` row (method, path,
JSON body, status, attempts, one-line error) and in *dry-run* mode sends nothing: it records and
echoes what it would have sent and returns ``{}``.
"""
from __future__ import annotations

import functools
import json as jsonlib
import logging
import os
import re
import ssl
import sys
import time
from email.utils import parsedate_to_datetime
from urllib.parse import parse_qsl, urlencode, urlsplit

import httpx
from django.conf import settings

log = logging.getLogger(__name__)

RETRY_STATUSES = {429, 500, 502, 503, 504}
MAX_RETRY_AFTER = 60.0  # seconds: never sleep longer than this on one Retry-After
SAFE_ID = re.compile(r"^[0-9A-Za-z_-]{1,64}$")


class ProlificError(Exception):
    """A Prolific request failed. ``status``: the HTTP status (None: no answer); ``detail``:
    Prolific's one-line explanation (or ours). ``str()`` is one line naming the call."""

    def __init__(self, detail: str, status: int | None = None, *, method: str = "", path: str = ""):
        self.status = status
        self.detail = " ".join(str(detail).split())[:500]
        where = f"{method} {path}: " if method else ""
        super().__init__(f"Prolific {where}{self.detail}" + (f" (HTTP {status})" if status else ""))


class ProlificUnavailable(ProlificError):
    """Prolific could not be reached or kept refusing: timeouts, connection errors, 429 or 5xx
    after ``PROLIFIC_MAX_RETRIES`` retries (or at once for calls that must not be repeated)."""


def _detail(response: httpx.Response) -> str:
    try:
        data = response.json()
    except ValueError:
        return response.text[:200] or response.reason_phrase
    if isinstance(data, dict):
        err = data.get("error", data)
        if isinstance(err, dict):
            detail = err.get("detail", err)
            if isinstance(detail, (list, dict)):
                return jsonlib.dumps(detail)[:300]
            return str(detail)
        return str(err)
    return str(data)[:300]


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("Retry-After")
    if value is None:
        return None
    try:
        return max(0.0, min(float(value), MAX_RETRY_AFTER))
    except ValueError:
        pass
    try:
        delta = parsedate_to_datetime(value).timestamp() - time.time()
    except (TypeError, ValueError):
        return None
    return max(0.0, min(delta, MAX_RETRY_AFTER))


def _safe_id(value: str, what: str) -> str:
    value = str(value)
    if not SAFE_ID.match(value):
        raise ProlificError(f"malformed {what} {value[:70]!r}")
    return value


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The TLS context every :class:`ProlificAPI` client shares: httpx's default (certificates
    verified against certifi's CA bundle), built once per process, because building one loads the
    whole bundle (0.2-1.4 s on a 2-core machine; a page that reviews submissions builds a client)."""
    return httpx.create_ssl_context()


class ProlificAPI:
    """A Prolific API session.

    ``token``: None reads ``os.environ["PROLIFIC_TOKEN"]`` (ProlificError if unset, except in a
    dry run); it is kept only in the HTTP client's headers. ``base_url``: default
    ``settings.PROLIFIC_API_URL``. ``campaign``/``user``: recorded on each ProlificCall.
    ``dry_run``: send nothing, log the call (``dry_run=True``), echo it (``echo``, default
    stdout) and return ``{}``. ``timeout``: seconds per attempt (default
    ``settings.PROLIFIC_TIMEOUT_SECONDS``); ``max_retries``: retries after the first attempt
    (default ``settings.PROLIFIC_MAX_RETRIES``); ``backoff``: first back-off in seconds, doubled
    each retry (default ``settings.PROLIFIC_BACKOFF_SECONDS`` if set, else 0.5). ``sent`` lists
    ``(method, path, body)`` of every call made or, in a dry run, that would have been made.
    """

    def __init__(self, token: str | None = None, *, base_url: str | None = None, campaign=None, user=None,
                 dry_run: bool = False, timeout: float | None = None, max_retries: int | None = None,
                 backoff: float | None = None, echo=None):
        self.base_url = (base_url or settings.PROLIFIC_API_URL).rstrip("/") + "/"
        self.campaign, self.user, self.dry_run = campaign, user, dry_run
        self.timeout = float(timeout if timeout is not None else settings.PROLIFIC_TIMEOUT_SECONDS)
        self.max_retries = int(max_retries if max_retries is not None else settings.PROLIFIC_MAX_RETRIES)
        self.backoff = float(backoff if backoff is not None else getattr(settings, "PROLIFIC_BACKOFF_SECONDS", 0.5))
        self.echo = echo or (lambda line: sys.stdout.write(line + "\n"))
        self.sent: list[tuple[str, str, object]] = []
        token = token if token is not None else os.environ.get("PROLIFIC_TOKEN", "")
        if not token and not dry_run:
            raise ProlificError("PROLIFIC_TOKEN is not set: export your Prolific API token "
                                "(Settings > API tokens) in the environment")
        self._http = None if dry_run else httpx.Client(
            headers={"Authorization": f"Token {token}", "Accept": "application/json"}, verify=tls_context(),
            timeout=httpx.Timeout(self.timeout), follow_redirects=False)

    def __repr__(self):
        return f"<ProlificAPI {self.base_url}{' dry-run' if self.dry_run else ''}>"

    def close(self) -> None:
        """Close the HTTP connection pool."""
        if self._http is not None:
            self._http.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- the one request path ---------------------------------------------------------------
    def _log(self, method, path, body, *, status=None, ok=False, error="", attempts=1):
        from crowd.models import ProlificCall

        ProlificCall.objects.create(
            campaign=self.campaign if getattr(self.campaign, "pk", None) else None, method=method, path=path[:300],
            body=body, status=status, ok=ok, dry_run=self.dry_run, error=error[:2000], attempts=attempts,
            user=self.user if getattr(self.user, "is_authenticated", False) else None)

    def request(self, method: str, path: str, *, json=None, params=None, retry: bool = True) -> dict:
        """Send ``method path`` (``path`` relative to the base URL, e.g. ``"studies/"``) with a
        JSON body and query ``params``; returns the decoded JSON answer (``{}`` for an empty one
        or in a dry run). Retries 429/5xx/timeouts/connection errors up to ``max_retries`` times
        (``Retry-After`` honoured, else ``backoff * 2**n`` seconds) unless ``retry=False``.
        Raises ProlificUnavailable when it gives up, ProlificError for any other failure (4xx,
        a non-JSON answer)."""
        method = method.upper()
        path = path.lstrip("/")
        shown = path + (f"?{urlencode(params)}" if params else "")
        self.sent.append((method, shown, json))
        if self.dry_run:
            self._log(method, shown, json, ok=True)
            self.echo(f"DRY RUN {method} {self.base_url}{shown}" + (f" {jsonlib.dumps(json, sort_keys=True)}" if json is not None else ""))
            return {}
        attempt, last_error, last_status = 0, "", None
        while True:
            attempt += 1
            wait = None
            try:
                response = self._http.request(method, self.base_url + path, json=json, params=params)
            except httpx.TimeoutException:
                last_status, last_error = None, f"no answer within {self.timeout:g} s"
            except httpx.TransportError as exc:
                last_status, last_error = None, f"unreachable ({type(exc).__name__})"
            else:
                last_status = response.status_code
                if response.status_code < 400:
                    try:
                        data = response.json() if response.content else {}
                    except ValueError:
                        self._log(method, shown, json, status=last_status, error="answer is not JSON", attempts=attempt)
                        raise ProlificError("answer is not JSON", last_status, method=method, path=shown) from None
                    self._log(method, shown, json, status=last_status, ok=True, attempts=attempt)
                    return data if isinstance(data, dict) else {"results": data}
                last_error = _detail(response)
                if response.status_code not in RETRY_STATUSES:
                    self._log(method, shown, json, status=last_status, error=last_error, attempts=attempt)
                    raise ProlificError(last_error, last_status, method=method, path=shown)
                wait = _retry_after(response)
            if not retry or attempt > self.max_retries:
                self._log(method, shown, json, status=last_status, error=last_error, attempts=attempt)
                more = "" if retry else "; not retried (outcome unknown: check before repeating)"
                raise ProlificUnavailable(f"{last_error} after {attempt} attempt{'s' if attempt > 1 else ''}{more}",
                                          last_status, method=method, path=shown)
            time.sleep(wait if wait is not None else self.backoff * 2 ** (attempt - 1))

    def pages(self, path: str, params=None):
        """Yield every item of a paginated list (``results``), following ``_links.next.href``
        (only to this API's own base URL: the token is never sent elsewhere)."""
        params = dict(params or {})
        while True:
            page = self.request("GET", path, params=params)
            yield from page.get("results", [])
            nxt = ((page.get("_links") or {}).get("next") or {}).get("href")
            if not nxt:
                return
            if not nxt.startswith(self.base_url):
                raise ProlificError(f"refusing to follow a next link outside {self.base_url}", method="GET", path=path)
            parts = urlsplit(nxt)
            path = parts.path[len(urlsplit(self.base_url).path):]
            params = dict(parse_qsl(parts.query))

    def describe(self) -> str:
        """What was (or would have been) sent, one line per call: ``METHOD path {json}``."""
        return "\n".join(f"{m} {p}" + (f" {jsonlib.dumps(b, sort_keys=True)}" if b is not None else "")
                         for m, p, b in self.sent)

    # -- studies ----------------------------------------------------------------------------
    def create_study(self, body: dict) -> dict:
        """``POST /studies/``: create a draft study; returns it (with ``id``, ``status``)."""
        return self.request("POST", "studies/", json=body)

    def update_study(self, study_id: str, body: dict) -> dict:
        """``PATCH /studies/{id}/``: edit a draft (once published: only more places)."""
        return self.request("PATCH", f"studies/{_safe_id(study_id, 'study id')}/", json=body)

    def get_study(self, study_id: str) -> dict:
        """``GET /studies/{id}/``."""
        return self.request("GET", f"studies/{_safe_id(study_id, 'study id')}/")

    def transition_study(self, study_id: str, action: str) -> dict:
        """``POST /studies/{id}/transition/`` with ``{"action": PUBLISH | PAUSE | START | STOP}``."""
        return self.request("POST", f"studies/{_safe_id(study_id, 'study id')}/transition/", json={"action": action})

    def cost_calculator(self, reward: int, places: int) -> dict:
        """``POST /study-cost-calculator/`` with ``reward`` (minor units) and places; Prolific
        answers ``total_cost``, ``rewards``, ``fees``, ``vat`` (minor units)."""
        return self.request("POST", "study-cost-calculator/", json={"reward": reward, "total_available_places": places})

    def study_cost(self, study_id: str) -> dict:
        """``GET /studies/{id}/cost/``: the cost of a created study (same fields)."""
        return self.request("GET", f"studies/{_safe_id(study_id, 'study id')}/cost/")

    # -- submissions ------------------------------------------------------------------------
    def list_submissions(self, study_id: str):
        """Every submission of the study (``GET /submissions/?study=<id>``, all pages)."""
        return self.pages("submissions/", {"study": _safe_id(study_id, "study id")})

    def get_submission(self, submission_id: str) -> dict:
        """``GET /submissions/{id}/``: ``participant_id``, ``study_id``, ``status``, ``study_code``..."""
        return self.request("GET", f"submissions/{_safe_id(submission_id, 'submission id')}/")

    def transition_submission(self, submission_id: str, action: str, *, message: str = "",
                              rejection_category: str = "") -> dict:
        """``POST /submissions/{id}/transition/`` with ``action`` (APPROVE | REJECT) and, for a
        rejection, ``message`` (at least 100 characters) and ``rejection_category``."""
        body = {"action": action}
        if message:
            body["message"] = message
        if rejection_category:
            body["rejection_category"] = rejection_category
        return self.request("POST", f"submissions/{_safe_id(submission_id, 'submission id')}/transition/", json=body)

    def bulk_approve(self, study_id: str, submission_ids) -> dict:
        """``POST /submissions/bulk-approve/`` with ``submission_ids`` (the form Prolific
        recommends); ``study_id`` is only checked for format."""
        _safe_id(study_id, "study id")
        return self.request("POST", "submissions/bulk-approve/",
                            json={"submission_ids": [_safe_id(s, "submission id") for s in submission_ids]})

    def request_return(self, submission_id: str, reasons) -> dict:
        """``POST /submissions/{id}/request-return/`` with ``request_return_reasons`` (a non-empty
        list of short texts, e.g. ``["Withdrew consent."]``): Prolific asks the participant to
        return the submission (unpaid; the place reopens once they do). Pays nothing."""
        reasons = [str(r) for r in reasons]
        if not reasons:
            raise ProlificError("a return request needs at least one reason")
        return self.request("POST", f"submissions/{_safe_id(submission_id, 'submission id')}/request-return/",
                            json={"request_return_reasons": reasons})

    def screen_out(self, study_id: str, submission_ids, bonus_per_submission: float, *,
                   increase_places: bool = False) -> dict:
        """``POST /studies/{id}/screen-out-submissions/`` with ``submission_ids``,
        ``bonus_per_submission`` (MAJOR units, e.g. 0.15 for 15 pence: the study's fixed screen-out
        payment) and ``increase_places``: the submissions become SCREENED OUT and each participant
        is paid the fixed amount. It pays, so it is never retried here (after a lost answer, sync
        before any second call)."""
        ids = [_safe_id(s, "submission id") for s in submission_ids]
        return self.request("POST", f"studies/{_safe_id(study_id, 'study id')}/screen-out-submissions/",
                            json={"submission_ids": ids, "bonus_per_submission": bonus_per_submission,
                                  "increase_places": bool(increase_places)}, retry=False)

    # -- bonuses ----------------------------------------------------------------------------
    def create_bonus(self, study_id: str, csv_bonuses: str) -> dict:
        """``POST /submissions/bonus-payments/`` with ``study_id`` and ``csv_bonuses``
        (``"<participant id>,<amount>\\n..."``, amounts in MAJOR units); creates a pending bulk
        bonus (``id``), paid by :meth:`pay_bonus`."""
        return self.request("POST", "submissions/bonus-payments/",
                            json={"study_id": _safe_id(study_id, "study id"), "csv_bonuses": csv_bonuses})

    def pay_bonus(self, bonus_id: str) -> dict:
        """``POST /bulk-bonus-payments/{id}/pay/``. NOT idempotent: never retried here; after a
        timeout read :meth:`get_bonus` before any second call."""
        return self.request("POST", f"bulk-bonus-payments/{_safe_id(bonus_id, 'bonus id')}/pay/", retry=False)

    def get_bonus(self, bonus_id: str) -> dict:
        """``GET /bulk-bonus-payments/{id}/``: the bonus's state, read before any second pay."""
        return self.request("GET", f"bulk-bonus-payments/{_safe_id(bonus_id, 'bonus id')}/")
