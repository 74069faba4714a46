"""An OpenAI-compatible chat-completions client for LLM judges (vLLM, Ollama, llama.cpp's server, a
hosted service): ``POST {url}/chat/completions`` with a JSON body (the OpenAI chat-completions
protocol, https://platform.openai.com/docs/api-reference/chat), through httpx.

* **Credentials.** The API key is read, at request time, from the environment variable whose *name*
  the configuration holds (:attr:`Endpoint.api_key_env`); the key itself is never stored, logged,
  cached, put in an error message or in a run's identity. No variable named: no ``Authorization``
  header (a local vLLM or Ollama needs none).
* **Concurrency.** :meth:`ChatClient.complete_many` sends at most ``concurrency`` requests at once
  (a thread pool over one httpx client).
* **Retries.** 429, 500, 502, 503, 504, timeouts and connection errors are retried up to
  ``max_retries`` times, sleeping ``Retry-After`` (seconds or an HTTP date, capped at
  ``max_retry_after``) when the server sends it, else ``min(backoff * 2**i, max_backoff)``. Any other
  status (400 for a model without images, 401, 404) is permanent: :class:`JudgeError` at once.
* **Cache.** Every HTTP 200 answer is written, before it is used, to a directory of JSON files named by
  the SHA-256 of the exact request (URL, body, attempt number; :func:`request_key`), one file per
  request, written atomically (temporary file in the same folder, then ``os.replace``): a rerun, or a
  worker restarted after a crash, reads the answer instead of paying for it again.
* **Budget.** :class:`Budget` counts the HTTP requests actually sent (retries included, cache hits
  not) and the tokens the server says it used (``usage.total_tokens``); when either is spent :class:`BudgetExhausted` stops the run after the requests in flight, every
  answer received so far being in the cache.
* **Untrusted replies.** A body over ``max_reply_bytes`` is cut there and marked ``too_large``; a
  body that is not JSON is kept as text (``invalid``); both are answers, cached and reported, never
  an exception.

Django-free.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any, Callable, Sequence

#: statuses retried with back-off (rate limited, server errors)
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
#: the cache file format; changes when the stored record changes
CACHE_VERSION = "captioneval-judge-cache/1"


class JudgeError(RuntimeError):
    """A judge request failed for good: a permanent HTTP status, or retries exhausted. The message
    names the URL and status, and the start of the server's answer; never the API key."""


class BudgetExhausted(JudgeError):
    """The run's request budget is spent. ``sent``: requests sent in this run; ``done``/``total``:
    units scored and asked. Everything answered so far is in the cache: rerun with a larger budget
    to go on without paying twice."""

    def __init__(self, message: str, sent: int = 0, done: int = 0, total: int = 0):
        super().__init__(message)
        self.sent, self.done, self.total = sent, done, total


@dataclass(frozen=True)
class Endpoint:
    """Where a judge runs: ``url`` the API base (``http://127.0.0.1:8000/v1``; requests go to
    ``url + "/chat/completions"``), ``model`` the served model's name, ``api_key_env`` the NAME of
    the environment variable holding the key (None: no key), ``timeout`` seconds per request."""

    url: str
    model: str
    api_key_env: str | None = None
    timeout: float = 60.0

    def __post_init__(self):
        if not isinstance(self.url, str) or not self.url.startswith(("http://", "https://")):
            raise ValueError(f"judge endpoint must be an http:// or https:// URL, got {self.url!r}")
        if not isinstance(self.model, str) or not self.model.strip():
            raise ValueError("judge model name must be a non-empty string")

    @property
    def completions_url(self) -> str:
        """The chat-completions URL."""
        return self.url.rstrip("/") + "/chat/completions"

    def headers(self) -> dict[str, str]:
        """Request headers; the key is read from the environment now and returned only here.
        Raises JudgeError when the named variable is unset or empty (naming the variable)."""
        out = {"Content-Type": "application/json"}
        if self.api_key_env:
            key = os.environ.get(self.api_key_env, "")
            if not key:
                raise JudgeError(f"the judge's API key variable {self.api_key_env} is not set")
            out["Authorization"] = f"Bearer {key}"
        return out


def canonical(obj: Any) -> str:
    """JSON with sorted keys and no spaces (UTF-8 kept): the text hashed by :func:`request_key`."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def request_key(url: str, body: dict, attempt: int = 0) -> str:
    """SHA-256 (64 hex digits) of the exact request: the completions URL, the JSON body and the
    attempt number (a metric that asks again after an unparseable answer, as CLAIR's reference does,
    asks for a new sample, which must not be the cached first one)."""
    return hashlib.sha256(canonical({"url": url, "body": body, "attempt": int(attempt)}).encode("utf-8")).hexdigest()


class ReplyCache:
    """A directory of JSON files, ``<dir>/<key[:2]>/<key>.json``, one per answered request (see the
    module docstring). Thread- and process-safe: files are written to a temporary name and renamed."""

    def __init__(self, directory: str | os.PathLike):
        self.directory = Path(directory)

    def path(self, key: str) -> Path:
        """The file of ``key`` (64 hex digits; ValueError otherwise)."""
        if len(key) != 64 or any(c not in "0123456789abcdef" for c in key):
            raise ValueError(f"not a request key: {key!r}")
        return self.directory / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict | None:
        """The stored record of ``key``, or None (absent, or unreadable: then it is asked again)."""
        try:
            record = json.loads(self.path(key).read_text("utf-8"))
        except (OSError, ValueError):
            return None
        return record if isinstance(record, dict) and record.get("version") == CACHE_VERSION else None

    def put(self, key: str, record: dict) -> None:
        """Write ``record`` (JSON-serialisable) for ``key`` atomically."""
        target = self.path(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".json", dir=target.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump({**record, "version": CACHE_VERSION}, f, ensure_ascii=False)
            os.replace(tmp, target)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise

    def __len__(self) -> int:
        return sum(1 for _ in self.directory.glob("??/*.json")) if self.directory.is_dir() else 0


class Budget:
    """At most ``max_requests`` HTTP requests and ``max_tokens`` tokens (None: unlimited); thread-safe.

    Tokens are those the server reports in each answer's ``usage.total_tokens`` (an untrusted
    number: counted when it is a non-negative integer, else 0). A request is refused once the tokens
    reached the limit, so the requests in flight when it is reached may go over it by one answer each."""

    def __init__(self, max_requests: int | None = None, max_tokens: int | None = None):
        for name, value in (("max_requests", max_requests), ("max_tokens", max_tokens)):
            if value is not None and int(value) < 0:
                raise ValueError(f"{name} must be >= 0")
        self.max_requests = None if max_requests is None else int(max_requests)
        self.max_tokens = None if max_tokens is None else int(max_tokens)
        self.sent = 0
        self.tokens = 0
        self._lock = threading.Lock()

    def take(self) -> bool:
        """Count one request; False (and nothing counted) when the budget is spent."""
        with self._lock:
            if self.max_requests is not None and self.sent >= self.max_requests:
                return False
            if self.max_tokens is not None and self.tokens >= self.max_tokens:
                return False
            self.sent += 1
            return True

    def spend_tokens(self, response: Any) -> int:
        """Add an answer's ``usage.total_tokens`` (see the class docstring); returns what was added."""
        try:
            n = response["usage"]["total_tokens"]
        except (TypeError, KeyError):
            return 0
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            return 0
        with self._lock:
            self.tokens += n
        return n

    def describe(self) -> str:
        """The limits, for messages: ``"100 requests"``, ``"5000 tokens"``..."""
        parts = [f"{self.max_requests} requests"] if self.max_requests is not None else []
        parts += [f"{self.max_tokens} tokens"] if self.max_tokens is not None else []
        return " / ".join(parts) or "unlimited"


@dataclass
class Reply:
    """One answered request. ``key`` its cache key; ``status`` ``"ok"`` (a JSON body), ``"invalid"``
    (not JSON: ``raw`` holds the text), ``"too_large"`` (cut at the limit: ``raw`` holds the start);
    ``response`` the parsed JSON body (None unless ok); ``cached`` read from the cache; ``tries`` HTTP
    requests it took (0 when cached)."""

    key: str
    status: str
    response: Any = None
    raw: str | None = None
    cached: bool = False
    tries: int = 0

    def record(self) -> dict:
        """What the cache stores."""
        return {"key": self.key, "status": self.status, "response": self.response, "raw": self.raw}


def retry_after(value: str | None, cap: float) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or an HTTP date), capped at
    ``cap``; None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            seconds = parsedate_to_datetime(value).timestamp() - time.time()
        except (TypeError, ValueError, OverflowError):
            return None
    if seconds != seconds:  # NaN
        return None
    return min(max(seconds, 0.0), cap)


@dataclass
class ChatClient:
    """Sends chat-completions requests to one :class:`Endpoint` (see the module docstring).

    ``concurrency`` requests at once (>= 1); ``max_retries`` retries per request; ``backoff`` /
    ``max_backoff`` / ``max_retry_after`` seconds; ``cache`` a :class:`ReplyCache` or None;
    ``budget`` a :class:`Budget` (default unlimited); ``max_reply_bytes`` the largest body read;
    ``transport`` an httpx transport (tests); ``sleep`` the sleeping function (tests may record it).
    ``stats`` counts ``sent``, ``cached``, ``retried`` and ``too_large`` / ``invalid`` replies."""

    endpoint: Endpoint
    concurrency: int = 8
    max_retries: int = 4
    backoff: float = 1.0
    max_backoff: float = 30.0
    max_retry_after: float = 120.0
    cache: ReplyCache | None = None
    budget: Budget = field(default_factory=Budget)
    max_reply_bytes: int = 1_000_000
    transport: Any = None
    sleep: Callable[[float], None] = time.sleep
    stats: dict = field(default_factory=lambda: {"sent": 0, "cached": 0, "retried": 0, "too_large": 0, "invalid": 0})

    def __post_init__(self):
        if int(self.concurrency) < 1:
            raise ValueError("concurrency must be at least 1")
        self._lock = threading.Lock()
        self._http = None

    def _count(self, name: str, n: int = 1) -> None:
        with self._lock:
            self.stats[name] = self.stats.get(name, 0) + n

    def _client(self):
        try:
            import httpx
        except ImportError:  # not a base dependency of the library (the platform and the tests have it)
            raise JudgeError("the LLM judges need httpx, which is not installed: pip install httpx") from None

        with self._lock:
            if self._http is None:
                limits = httpx.Limits(max_connections=int(self.concurrency), max_keepalive_connections=int(self.concurrency))
                self._http = httpx.Client(timeout=self.endpoint.timeout, limits=limits, transport=self.transport)
            return self._http

    def close(self) -> None:
        """Close the HTTP connections (the client opens them again when needed)."""
        with self._lock:
            if self._http is not None:
                self._http.close()
                self._http = None

    def _read(self, response) -> tuple[bytes, bool]:
        """At most ``max_reply_bytes`` of the body, and whether it was longer."""
        chunks, size = [], 0
        for chunk in response.iter_bytes():
            chunks.append(chunk)
            size += len(chunk)
            if size > self.max_reply_bytes:
                return b"".join(chunks)[: self.max_reply_bytes], True
        return b"".join(chunks), False

    def complete(self, body: dict, attempt: int = 0) -> Reply:
        """The answer to one request: from the cache, else sent (with retries) and cached.
        Raises :class:`BudgetExhausted` when the budget allows no further request, :class:`JudgeError`
        for a permanent failure or retries exhausted."""
        url = self.endpoint.completions_url
        key = request_key(url, body, attempt)
        if self.cache is not None:
            record = self.cache.get(key)
            if record is not None:
                self._count("cached")
                return Reply(key, record.get("status", "invalid"), record.get("response"), record.get("raw"), cached=True)
        payload = canonical(body).encode("utf-8")
        headers = self.endpoint.headers()
        client = self._client()
        import httpx

        tries, last = 0, ""
        while True:
            if not self.budget.take():
                raise BudgetExhausted(f"the judge's budget ({self.budget.describe()}) is spent",
                                      sent=self.budget.sent)
            tries += 1
            self._count("sent")
            wait = None
            try:
                with client.stream("POST", url, content=payload, headers=headers) as response:
                    if response.status_code == 200:
                        data, cut = self._read(response)
                        reply = self._reply(key, data, cut, tries)
                        if reply.status == "ok":
                            self.budget.spend_tokens(reply.response)
                        if self.cache is not None:
                            self.cache.put(key, reply.record())
                        return reply
                    start, _ = self._read_start(response)
                    last = f"HTTP {response.status_code}: {start}"
                    if response.status_code not in RETRY_STATUSES:
                        raise JudgeError(f"judge request to {url} failed: {last}")
                    wait = retry_after(response.headers.get("Retry-After"), self.max_retry_after)
            except httpx.TimeoutException:
                last = f"timed out after {self.endpoint.timeout} s"
            except httpx.TransportError as exc:
                last = f"{type(exc).__name__}: {exc}"
            if tries > self.max_retries:
                raise JudgeError(f"judge request to {url} failed after {tries} tries: {last}")
            self._count("retried")
            self.sleep(wait if wait is not None else min(self.backoff * 2 ** (tries - 1), self.max_backoff))

    def _read_start(self, response) -> tuple[str, bool]:
        data, cut = b"", False
        for chunk in response.iter_bytes():
            data += chunk
            if len(data) > 300:
                data, cut = data[:300], True
                break
        return " ".join(data.decode("utf-8", "replace").split())[:200], cut

    def _reply(self, key: str, data: bytes, cut: bool, tries: int) -> Reply:
        text = data.decode("utf-8", "replace")
        if cut:
            self._count("too_large")
            return Reply(key, "too_large", None, text, tries=tries)
        try:
            response = json.loads(text)
        except ValueError:
            self._count("invalid")
            return Reply(key, "invalid", None, text, tries=tries)
        return Reply(key, "ok", response, None, tries=tries)

    def complete_many(self, requests: Sequence[tuple[dict, int]]) -> list[Reply | None]:
        """Answers to ``requests`` (``(body, attempt)`` pairs) in order, ``concurrency`` at a time.
        When the budget runs out the requests not yet started are not sent (their entry is None) and
        :class:`BudgetExhausted` is raised after those in flight finish, with ``done`` answered;
        a :class:`JudgeError` of one request is raised likewise, after the others in flight."""
        results: list[Reply | None] = [None] * len(requests)
        stop = threading.Event()
        errors: list[BaseException] = []

        def one(i: int) -> None:
            if stop.is_set():
                return
            try:
                results[i] = self.complete(*requests[i])
            except JudgeError as exc:
                stop.set()
                errors.append(exc)

        workers = max(1, min(int(self.concurrency), len(requests)))
        if workers == 1:
            for i in range(len(requests)):
                one(i)
        else:
            with ThreadPoolExecutor(max_workers=workers) as pool:
                list(pool.map(one, range(len(requests))))
        if errors:
            done = sum(r is not None for r in results)
            budget = next((e for e in errors if isinstance(e, BudgetExhausted)), None)
            if budget is not None:
                raise BudgetExhausted(f"{budget} after {done} of {len(requests)} requests answered (kept in the cache)",
                                      sent=self.budget.sent, done=done, total=len(requests))
            raise errors[0]
        return results


def message_text(response: Any) -> str | None:
    """``choices[0].message.content`` of a chat-completions answer as text (a list of content parts
    joined), or None when the answer has no such string (no choices, a refusal, not an object)."""
    try:
        content = response["choices"][0]["message"]["content"]
    except (TypeError, KeyError, IndexError):
        return None
    if isinstance(content, list):
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return content if isinstance(content, str) else None


def token_logprobs(response: Any) -> list[tuple[str, dict[str, float]]] | None:
    """``[(token, {candidate token: logprob})]`` of ``choices[0].logprobs.content`` (the sampled
    token and its ``top_logprobs``), or None when the answer carries no well-formed logprobs.
    Non-numeric or positive logprobs make the answer malformed (None)."""
    try:
        content = response["choices"][0]["logprobs"]["content"]
    except (TypeError, KeyError, IndexError):
        return None
    if not isinstance(content, list):
        return None
    out = []
    for entry in content:
        if not isinstance(entry, dict) or not isinstance(entry.get("token"), str):
            return None
        top = {}
        for cand in entry.get("top_logprobs") or []:
            if not isinstance(cand, dict) or not isinstance(cand.get("token"), str):
                return None
            lp = cand.get("logprob")
            if isinstance(lp, bool) or not isinstance(lp, (int, float)) or not lp <= 0.0:
                return None
            top[cand["token"]] = float(lp)
        out.append((entry["token"], top))
    return out
