"""The boto3 ``mturk`` client, the two environments, and one wrapper through which every call goes.

Environments (``MTurkConfig.environment``): ``sandbox`` (default; no money changes hands; workers
use workersandbox.mturk.com) and ``live``. The requester endpoints, worker sites and the Masters
qualification ids differ between them (AWS MTurk API reference,
"QualificationRequirement"). Credentials come only from boto3's standard chain (environment
variables, ``~/.aws/credentials``, an instance role...), never from the database.

:class:`MTurkAPI` is the only place that talks to MTurk: it logs every call (``MTurkCall``),
retries throttling with exponential back-off, turns botocore errors into :class:`MTurkError`, and
in *dry-run* mode sends nothing and records what would have been sent.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal

from django.conf import settings
from django.utils.module_loading import import_string

REGION = "us-east-1"
ENDPOINTS = {
    "sandbox": "https://mturk-requester-sandbox.us-east-1.amazonaws.com",
    "live": "https://mturk-requester.us-east-1.amazonaws.com",
}
WORKER_SITES = {"sandbox": "https://workersandbox.mturk.com", "live": "https://www.mturk.com"}
# System qualification types (AWS MTurk API reference, "QualificationRequirement")
MASTERS = {"live": "2F1QJWKUDD8XADTFD2Q0G6UTO95ALH", "sandbox": "2ARFPLSP75KLA8M8DH1HTEQVJT3SY6"}
APPROVAL_RATE = "000000000000000000L0"
NUMBER_APPROVED = "00000000000000000040"
LOCALE = "00000000000000000071"

RETRYABLE = {"ThrottlingException", "Throttling", "TooManyRequestsException", "ServiceUnavailable", "ServiceFault"}


class MTurkError(Exception):
    """An MTurk request failed: ``code`` is the error code (e.g. ``RequestError``), ``operation``
    the API operation, ``message`` MTurk's text."""

    def __init__(self, operation: str, code: str, message: str):
        self.operation, self.code, self.message = operation, code, message
        super().__init__(f"{operation}: {code}: {message}")


def boto3_client(environment: str):
    """A boto3 ``mturk`` client for ``environment`` ('sandbox' or 'live'), credentials from the AWS chain."""
    import boto3

    if environment not in ENDPOINTS:
        raise ValueError(f"unknown MTurk environment {environment!r}; use 'sandbox' or 'live'")
    return boto3.session.Session().client("mturk", region_name=REGION, endpoint_url=ENDPOINTS[environment])


def make_client(environment: str):
    """The client factory named by ``settings.MTURK_CLIENT_FACTORY`` (default :func:`boto3_client`;
    tests point it at a fake MTurk)."""
    factory = getattr(settings, "MTURK_CLIENT_FACTORY", "crowd.mturk.client.boto3_client")
    return import_string(factory)(environment)


def _jsonable(value):
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


@dataclass
class MTurkAPI:
    """Every MTurk request of a campaign goes through :meth:`call`.

    ``client`` is a boto3 ``mturk`` client (or anything with the same methods); ``dry_run`` sends
    nothing and returns None from every call, recording the would-be requests in ``sent``;
    ``retries`` throttled/unavailable attempts are retried after ``backoff * 2**n`` seconds.
    """

    client: object
    campaign: object
    environment: str
    dry_run: bool = False
    user: object = None
    retries: int = 4
    backoff: float = 0.5
    sent: list = field(default_factory=list)

    @classmethod
    def for_campaign(cls, campaign, *, dry_run: bool = False, user=None, client=None) -> "MTurkAPI":
        from crowd.models import MTurkConfig

        env = MTurkConfig.objects.get_or_create(campaign=campaign)[0].environment  # fresh: never a cached relation
        return cls(client if client is not None else (None if dry_run else make_client(env)),
                   campaign, env, dry_run=dry_run, user=user)

    def _log(self, operation, params, ok, code="", error=""):
        from crowd.models import MTurkCall

        MTurkCall.objects.create(
            campaign=self.campaign, environment=self.environment, operation=operation, params=_jsonable(params),
            ok=ok, dry_run=self.dry_run, error_code=code, error=error[:2000],
            user=self.user if getattr(self.user, "is_authenticated", False) else None,
        )

    def call(self, operation: str, **params):
        """Call ``operation`` (boto3 snake_case method name, e.g. ``create_hit_with_hit_type``) with
        MTurk's parameter names. Returns the response dict (None in dry-run). Raises MTurkError."""
        from botocore.exceptions import BotoCoreError, ClientError

        self.sent.append((operation, _jsonable(params)))
        if self.dry_run:
            self._log(operation, params, True)
            return None
        attempt = 0
        while True:
            try:
                response = getattr(self.client, operation)(**params)
            except ClientError as exc:
                err = exc.response.get("Error", {})
                code, message = err.get("Code", "ClientError"), err.get("Message", str(exc))
                if code in RETRYABLE and attempt < self.retries:
                    time.sleep(self.backoff * 2 ** attempt)
                    attempt += 1
                    continue
                self._log(operation, params, False, code, message)
                raise MTurkError(operation, code, message) from None
            except BotoCoreError as exc:  # no credentials, endpoint unreachable...
                self._log(operation, params, False, type(exc).__name__, str(exc))
                raise MTurkError(operation, type(exc).__name__, str(exc)) from None
            self._log(operation, params, True)
            return response

    def calls_left(self, operation: str, rate: str | None, *, now=None) -> int | None:
        """How many more ``operation`` calls ``rate`` (e.g. ``"20/m"``, parsed by
        :func:`evalsite.rates.parse_rate`) allows now in this environment: its count minus the
        calls of ``operation`` logged as sent (``MTurkCall``, dry runs left out, every campaign
        together) in the window just past -- a sliding window over the call log, which every process
        shares. None when ``rate`` sets no limit (``"0"``); ValueError for a malformed rate."""
        from datetime import timedelta

        from django.utils import timezone

        from crowd.models import MTurkCall
        from evalsite.rates import parse_rate

        limit = parse_rate(rate)
        if limit is None:
            return None
        n, window = limit
        since = (now or timezone.now()) - timedelta(seconds=window)
        used = MTurkCall.objects.filter(environment=self.environment, operation=operation, dry_run=False,
                                        at__gt=since).count()
        return max(0, n - used)

    def paginate(self, operation: str, result_key: str, **params):
        """Yield every element of ``result_key`` over all pages (NextToken), ``MaxResults`` 100."""
        token = None
        while True:
            page = self.call(operation, MaxResults=100, **params, **({"NextToken": token} if token else {}))
            if page is None:
                return
            yield from page.get(result_key, [])
            token = page.get("NextToken")
            if not token:
                return

    def describe(self) -> str:
        """What was (or would have been) sent, one JSON line per call."""
        return "\n".join(f"{op} {json.dumps(params, sort_keys=True)}" for op, params in self.sent)
