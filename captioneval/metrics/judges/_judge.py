"""The shared class of the LLM-judge metrics (CLAIR, FLEUR, RefFLEUR): the endpoint, the client with
its cache and budget (:mod:`captioneval.kernels.judges.client`), the signature, the failure policy
and the per-caption record of every raw reply."""
from __future__ import annotations

import hashlib
import math
import os
import re
from pathlib import Path

import numpy as np

from captioneval.kernels.judges import client as jc
from captioneval.metrics import base

#: environment variables that configure the default endpoint (the registry and the platform)
URL_ENV, MODEL_ENV, KEY_ENV_ENV, CACHE_ENV = ("CAPTIONEVAL_JUDGE_URL", "CAPTIONEVAL_JUDGE_MODEL",
                                              "CAPTIONEVAL_JUDGE_API_KEY_ENV", "CAPTIONEVAL_JUDGE_CACHE")
#: what happens to a caption whose answer cannot be scored: ``"nan"`` (recorded, left out of means)
#: or ``"reference"`` (what the reference code does: CLAIR scores 0)
FAILURE_POLICIES = ("nan", "reference")
#: how many characters of each raw reply ``Scores.details`` keeps (the cache keeps the whole reply)
DETAIL_CHARS = 4000
#: a caption that may carry an instruction to the judge (braces, or the word "score")
SUSPICIOUS = re.compile(r"[{}]|\bscore\b", re.IGNORECASE)


def default_cache_dir() -> Path:
    """``$CAPTIONEVAL_JUDGE_CACHE``, else ``$XDG_CACHE_HOME/captioneval/judges`` (``~/.cache/...``)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "captioneval" / "judges"


class JudgeMetric(base.Metric):
    """A caption-level metric answered by a language model behind an OpenAI-compatible endpoint.

    Parameters
    ----------
    endpoint, model : the API base URL and the model name (default ``$CAPTIONEVAL_JUDGE_URL`` and
        ``$CAPTIONEVAL_JUDGE_MODEL``; ValueError when neither is given).
    api_key_env : the NAME of the environment variable holding the API key (default
        ``$CAPTIONEVAL_JUDGE_API_KEY_ENV``; None: no key). The key is never stored.
    temperature, max_tokens : sampling settings sent with every request (in the signature).
    failure : ``"nan"`` (default) or ``"reference"``, see :data:`FAILURE_POLICIES`.
    concurrency, max_retries, backoff, max_backoff, timeout : see :class:`~captioneval.kernels.judges.client.ChatClient`.
    cache_dir : the reply cache (default :func:`default_cache_dir`; False: no cache).
    max_requests, max_total_tokens : the budget of one :meth:`score` call: HTTP requests, and tokens
        as the server reports them (``usage.total_tokens``); None: unlimited.
    max_reply_bytes : the largest reply read.
    transport, sleep : for tests (an httpx transport; the back-off's sleeping function).

    After :meth:`score`, :attr:`report` counts the captions by status, the requests sent and read
    from the cache, retries, replies too large or not JSON, and the captions that may carry an
    instruction to the judge (``suspicious``: braces or the word "score" in the caption).
    """

    level = "caption"
    family = "judge"
    groups = ("judges",)
    higher = "better"
    temperature_default = 0.0
    max_tokens_default = 1024
    template = ""
    parser_version = ""

    def __init__(self, endpoint: str | None = None, model: str | None = None, api_key_env: str | None = None, *,
                 temperature: float | None = None, max_tokens: int | None = None, failure: str = "nan",
                 concurrency: int = 8, max_retries: int = 4, backoff: float = 1.0, max_backoff: float = 30.0,
                 timeout: float = 120.0, cache_dir=None, max_requests: int | None = None,
                 max_total_tokens: int | None = None,
                 max_reply_bytes: int = 1_000_000, transport=None, sleep=None, **attributes):
        super().__init__(**attributes)
        endpoint = endpoint or os.environ.get(URL_ENV)
        model = model or os.environ.get(MODEL_ENV)
        if not endpoint or not model:
            raise ValueError(f"{self.key} needs a judge endpoint and model: endpoint=URL, model=NAME (or set "
                             f"{URL_ENV} and {MODEL_ENV})")
        if failure not in FAILURE_POLICIES:
            raise ValueError(f"failure must be one of {', '.join(FAILURE_POLICIES)}, got {failure!r}")
        self.endpoint = jc.Endpoint(endpoint, model, api_key_env or os.environ.get(KEY_ENV_ENV) or None, float(timeout))
        self.temperature = self.temperature_default if temperature is None else float(temperature)
        self.max_tokens = self.max_tokens_default if max_tokens is None else int(max_tokens)
        self.failure = failure
        self.max_requests, self.max_total_tokens = max_requests, max_total_tokens
        if cache_dir is False:
            cache = None
        else:
            cache = jc.ReplyCache(default_cache_dir() if cache_dir is None else cache_dir)
        self.client_options = dict(concurrency=int(concurrency), max_retries=int(max_retries), backoff=float(backoff),
                                   max_backoff=float(max_backoff), cache=cache, max_reply_bytes=int(max_reply_bytes),
                                   transport=transport)
        if sleep is not None:
            self.client_options["sleep"] = sleep
        self.report: dict = {}

    def client(self) -> jc.ChatClient:
        """A new client for one run (its own budget and counters)."""
        return jc.ChatClient(self.endpoint, budget=jc.Budget(self.max_requests, self.max_total_tokens), **self.client_options)

    def parameters(self) -> dict:
        """Model, prompt template (its SHA-256 and name), temperature, max_tokens, the sampling settings
        of the request, the parser's version and the failure policy; never the URL's credentials nor the key."""
        return {"model": self.endpoint.model,
                "prompt_sha256": hashlib.sha256(self.template.encode("utf-8")).hexdigest()[:16],
                "temperature": self.temperature, "max_tokens": self.max_tokens, **self.sampling(),
                "parser": self.parser_version, "failure": self.failure}

    def sampling(self) -> dict:
        """Further request settings that change the answers (FLEUR: logprobs)."""
        return {}

    def body(self, content) -> dict:
        """The request body for one user message ``content`` (text or content parts)."""
        return {"model": self.endpoint.model, "messages": [{"role": "user", "content": content}],
                "temperature": self.temperature, "max_tokens": self.max_tokens, **self.request_extra()}

    def request_extra(self) -> dict:
        return {}

    @staticmethod
    def reply_text(reply: jc.Reply | None) -> str | None:
        """The message text of a reply (None: no reply, a body that is not JSON or cut, no choices)."""
        if reply is None or reply.status != "ok":
            return None
        return jc.message_text(reply.response)

    @staticmethod
    def raw_of(reply: jc.Reply | None) -> dict:
        """What ``details`` keeps of one reply: its cache key, status and the start of its text."""
        if reply is None:
            return {}
        text = JudgeMetric.reply_text(reply)
        if text is None:
            text = reply.raw if reply.raw is not None else None
        return {"key": reply.key, "status": reply.status, "cached": reply.cached,
                "text": None if text is None else text[:DETAIL_CHARS], "chars": None if text is None else len(text)}

    def finish(self, values: list[float], details: list[dict], texts, client: jc.ChatClient) -> base.Scores:
        """``Scores`` with ``details``, and :attr:`report` filled."""
        statuses: dict[str, int] = {}
        for d in details:
            statuses[d["status"]] = statuses.get(d["status"], 0) + 1
        self.report = {"captions": len(values), "statuses": statuses, "requests": dict(client.stats),
                       "suspicious": sum(bool(SUSPICIOUS.search(t or "")) for t in texts),
                       "nan": int(sum(1 for v in values if math.isnan(v)))}
        return base.Scores(np.asarray(values, dtype=np.float64), details=details)
