"""A fake OpenAI-compatible chat-completions server on 127.0.0.1 for the judges' tests.

It runs in a thread of the test process (``http.server.ThreadingHTTPServer``), validates every
request (method, path, JSON body fields and types, the Authorization header when a key is expected,
image parts as base64 data URLs that decode to a PNG or JPEG, logprobs settings when ``logprobs`` is
required) and records each one (``requests``: the parsed body, headers). Answers come from
``behaviour(body, n)``, a function of the request body and its 1-based number that returns one of

* ``Answer(text, logprobs=None)``: a 200 chat-completions body with that content (and
  ``choices[0].logprobs.content`` when given: ``[(token, {token: logprob})]``);
* ``Raw(status, body_bytes, headers)``: exactly that (429 with ``Retry-After``, 500, not JSON,
  2 MB, empty choices...);
* ``Delay(seconds, inner)``: sleeps, then answers ``inner``.

An invalid request gets 400 with the reason, and the reason is appended to ``problems`` (tests
assert it stays empty)."""
from __future__ import annotations

import base64
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable


@dataclass
class Answer:
    text: Any
    logprobs: list | None = None


@dataclass
class Raw:
    status: int
    body: bytes = b""
    headers: dict = field(default_factory=dict)


@dataclass
class Delay:
    seconds: float
    inner: Any


def completion(text, logprobs=None) -> dict:
    choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
    if logprobs is not None:
        choice["logprobs"] = {"content": [
            {"token": tok, "logprob": top.get(tok, -30.0),
             "top_logprobs": [{"token": t, "logprob": lp} for t, lp in top.items()]} for tok, top in logprobs]}
    return {"id": "chatcmpl-fake", "object": "chat.completion", "model": "fake", "choices": [choice]}


def check_image_url(url) -> str | None:
    """None when ``url`` is a base64 data URL of a PNG or JPEG whose MIME type matches its bytes."""
    if not isinstance(url, str) or not url.startswith("data:image/") or ";base64," not in url:
        return "image_url.url is not a base64 data URL"
    head, _, data = url.partition(";base64,")
    try:
        raw = base64.b64decode(data, validate=True)
    except ValueError:
        return "image data is not valid base64"
    kind = "image/png" if raw.startswith(b"\x89PNG\r\n\x1a\n") else "image/jpeg" if raw.startswith(b"\xff\xd8\xff") else None
    if kind is None or head != f"data:{kind}":
        return f"data URL type {head!r} does not match the bytes"
    return None


class FakeOpenAI:
    """Start with ``with FakeOpenAI(behaviour, ...) as server:``; ``server.url`` is the API base."""

    def __init__(self, behaviour: Callable[[dict, int], Any], *, model="judge-model", api_key=None,
                 logprobs=False, images=False):
        self.behaviour, self.model, self.api_key = behaviour, model, api_key
        self.need_logprobs, self.need_images = logprobs, images
        self.requests: list[dict] = []
        self.problems: list[str] = []
        self._lock = threading.Lock()

    def validate(self, headers, body) -> str | None:
        if headers.get("Content-Type") != "application/json":
            return "Content-Type is not application/json"
        if self.api_key is not None and headers.get("Authorization") != f"Bearer {self.api_key}":
            return "wrong or missing Authorization"
        if self.api_key is None and "Authorization" in headers:
            return "unexpected Authorization header"
        if not isinstance(body, dict) or body.get("model") != self.model:
            return "model missing or wrong"
        allowed = {"model", "messages", "temperature", "max_tokens", "logprobs", "top_logprobs", "top_p", "seed", "n"}
        if set(body) - allowed:
            return f"unknown fields {sorted(set(body) - allowed)}"
        if not isinstance(body.get("temperature"), (int, float)) or not 0 <= body["temperature"] <= 2:
            return "temperature missing or out of range"
        if not isinstance(body.get("max_tokens"), int) or body["max_tokens"] < 1:
            return "max_tokens missing"
        msgs = body.get("messages")
        if not isinstance(msgs, list) or not msgs or any(m.get("role") not in ("system", "user", "assistant") for m in msgs):
            return "messages malformed"
        images = 0
        for m in msgs:
            content = m.get("content")
            if isinstance(content, str):
                continue
            if not isinstance(content, list):
                return "content is neither text nor parts"
            for part in content:
                if part.get("type") == "text" and isinstance(part.get("text"), str):
                    continue
                if part.get("type") == "image_url":
                    images += 1
                    problem = check_image_url((part.get("image_url") or {}).get("url"))
                    if problem:
                        return problem
                    continue
                return f"unknown content part {part.get('type')!r}"
        if self.need_images and images != 1:
            return f"expected one image, got {images}"
        if self.need_logprobs:
            if body.get("logprobs") is not True or not isinstance(body.get("top_logprobs"), int) \
                    or not 1 <= body["top_logprobs"] <= 20:
                return "logprobs settings missing or out of range"
        elif "logprobs" in body or "top_logprobs" in body:
            return "logprobs asked for by a text judge"
        return None

    def __enter__(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                length = int(self.headers.get("Content-Length", 0))
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = None
                headers = {k: v for k, v in self.headers.items()}
                problem = "wrong path" if self.path != "/v1/chat/completions" else server.validate(headers, body)
                with server._lock:
                    server.requests.append({"body": body, "headers": headers})
                    n = len(server.requests)
                    if problem:
                        server.problems.append(problem)
                if problem:
                    return self._send(Raw(400, json.dumps({"error": problem}).encode()))
                self._send(server.behaviour(body, n))

            def _send(self, answer):
                while isinstance(answer, Delay):
                    time.sleep(answer.seconds)
                    answer = answer.inner
                if isinstance(answer, Answer):
                    answer = Raw(200, json.dumps(completion(answer.text, answer.logprobs)).encode())
                try:
                    self.send_response(answer.status)
                    for k, v in answer.headers.items():
                        self.send_header(k, v)
                    self.send_header("Content-Length", str(len(answer.body)))
                    self.end_headers()
                    self.wfile.write(answer.body)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        class Server(ThreadingHTTPServer):
            request_queue_size = 256  # the default 5 drops connections when 32 clients connect at once

        self.httpd = Server(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)

    def prompts(self) -> list[str]:
        """The text of each recorded request's user message (text parts joined)."""
        out = []
        for r in self.requests:
            content = r["body"]["messages"][-1]["content"]
            out.append(content if isinstance(content, str) else "".join(p.get("text", "") for p in content))
        return out
