"""Prolific's webhooks: check the signature and the timestamp, then act once per event.

Signature (Prolific's API reference, "Webhooks > Verifying",
https://docs.prolific.com/api-reference/webhooks/verifying): each request carries
``X-Prolific-Request-Timestamp`` (UNIX seconds) and ``X-Prolific-Request-Signature``, the base64 of
HMAC-SHA256, keyed with the workspace's webhook secret (``POST /hooks/secrets/``; here the
environment variable ``PROLIFIC_WEBHOOK_SECRET``), over the timestamp followed by the raw body.
A request whose timestamp is further than ``PROLIFIC_WEBHOOK_TOLERANCE_SECONDS`` from our clock is
refused (a captured request cannot be replayed later). Deliveries are at least once
("Idempotency and the X-Event-ID Header"): :class:`~crowd.models.ProlificEvent.event_key` is the
SHA-256 of what the signature covers, the timestamp and the body, so a redelivery is a no-op. The
``X-Event-ID`` header is not signed, so it takes no part: a captured signed delivery sent again
within the tolerance with a new event id is the same event (a duplicate), not a new one.

The body is a claim about a resource, not the resource: for ``submission.status.change`` we fetch
the submission from the API and apply that (:func:`crowd.prolific.sync.apply_submission`); for
``study.status.change`` we read the study's status from the API. Polling stays the safety net.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import re
import time

from django.conf import settings
from django.db import IntegrityError, transaction

from crowd.models import ProlificEvent, ProlificStudy

SIGNATURE_HEADER = "X-Prolific-Request-Signature"
TIMESTAMP_HEADER = "X-Prolific-Request-Timestamp"
EVENT_TYPES = ("submission.status.change", "study.status.change", "study.progress.change")
ID_RE = re.compile(r"^[0-9A-Za-z]{1,64}$")
MAX_BODY = 64 * 1024


class WebhookRefused(Exception):
    """The request is not accepted; ``status`` is the HTTP answer (401 signature or timestamp,
    400 malformed body, 503 Prolific unreachable: Prolific redelivers)."""

    def __init__(self, message: str, status: int = 401):
        super().__init__(message)
        self.status = status


def sign(secret: str, timestamp: str, body: bytes) -> str:
    """base64(HMAC-SHA256(secret, timestamp + body)), the value of ``X-Prolific-Request-Signature``."""
    mac = hmac.new(secret.encode(), timestamp.encode() + body, hashlib.sha256).digest()
    return base64.b64encode(mac).decode()


def _header(headers, name: str) -> str:
    value = headers.get(name)
    if value is None:  # Django's request.META spelling
        value = headers.get("HTTP_" + name.upper().replace("-", "_"))
    return (value or "").strip()


def verify(headers, body: bytes, *, secret: str | None = None, now: float | None = None) -> str:
    """Check the signature and timestamp of a delivery; returns the timestamp. ``headers`` is a
    mapping (HTTP header names or Django ``META`` keys). Raises :class:`WebhookRefused` (401) for
    no configured secret, a missing or malformed header, a wrong signature, or a timestamp outside
    the tolerance."""
    secret = secret if secret is not None else os.environ.get("PROLIFIC_WEBHOOK_SECRET", "")
    if not secret:
        raise WebhookRefused("no webhook secret is configured (PROLIFIC_WEBHOOK_SECRET)")
    ts, sig = _header(headers, TIMESTAMP_HEADER), _header(headers, SIGNATURE_HEADER)
    if not re.fullmatch(r"\d{1,12}", ts):
        raise WebhookRefused("missing or malformed X-Prolific-Request-Timestamp")
    if not sig or len(sig) > 200:
        raise WebhookRefused("missing or malformed X-Prolific-Request-Signature")
    if not hmac.compare_digest(sign(secret, ts, body).encode(), sig.encode()):
        raise WebhookRefused("bad signature")
    now = time.time() if now is None else now
    if abs(now - int(ts)) > settings.PROLIFIC_WEBHOOK_TOLERANCE_SECONDS:
        raise WebhookRefused("stale timestamp (outside the tolerance): refused as a possible replay")
    return ts


def event_key(timestamp: str, body: bytes) -> str:
    """SHA-256 hex of the signed content: the timestamp (checked by :func:`verify`), ``.``, the raw
    body. Unsigned headers (``X-Event-ID``) take no part, so nobody without the secret can make a
    captured delivery look new."""
    return hashlib.sha256(timestamp.encode() + b"." + body).hexdigest()


def parse(body: bytes) -> dict:
    """The JSON body as {"event_type", "resource_id", "status", ...}; WebhookRefused (400) otherwise."""
    if len(body) > MAX_BODY:
        raise WebhookRefused("body too large", 400)
    try:
        payload = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise WebhookRefused("the body is not JSON", 400) from None
    if not isinstance(payload, dict):
        raise WebhookRefused("the body is not a JSON object", 400)
    if payload.get("event_type") not in EVENT_TYPES:
        raise WebhookRefused(f"unknown event type {str(payload.get('event_type'))[:60]!r}", 400)
    rid = payload.get("resource_id")
    if not isinstance(rid, str) or not ID_RE.match(rid):
        raise WebhookRefused("missing or malformed resource_id", 400)
    return payload


def handle(headers, body: bytes, *, api=None, now: float | None = None) -> str:
    """Verify, record and process one delivery. Returns ``"processed"``, ``"duplicate"`` (already
    processed: nothing done) or ``"ignored"`` (a resource that is not ours). Raises
    :class:`WebhookRefused` (the view answers its ``status``); if Prolific cannot be reached the
    event stays unprocessed (503) and a redelivery processes it."""
    from crowd.prolific_client import ProlificAPI, ProlificError, ProlificUnavailable

    ts = verify(headers, body, now=now)
    payload = parse(body)
    key = event_key(ts, body)
    etype, rid = payload["event_type"], payload["resource_id"]
    status = str(payload.get("status") or "")[:30]
    try:
        with transaction.atomic():
            event, _ = ProlificEvent.objects.get_or_create(
                event_key=key, defaults={"event_type": etype, "resource_id": rid, "status": status, "payload": payload})
    except IntegrityError:  # a concurrent delivery of the same event
        return "duplicate"
    with transaction.atomic():
        event = ProlificEvent.objects.select_for_update().get(pk=event.pk)
        if event.processed:
            return "duplicate"
        api = api or ProlificAPI()
        try:
            result = _process(etype, rid, api)
        except ProlificUnavailable as exc:
            raise WebhookRefused(f"Prolific unreachable, try again: {exc}", 503) from None
        except ProlificError as exc:
            if exc.status == 404:
                result = "ignored"
            else:
                raise WebhookRefused(f"Prolific refused the lookup: {exc}", 503) from None
        event.processed = True
        event.save(update_fields=["processed"])
    return result


def _process(etype: str, rid: str, api) -> str:
    from .sync import SyncError, apply_submission

    if etype == "submission.status.change":
        record = api.get_submission(rid)
        sid = str(record.get("study_id") or record.get("study") or "")
        study = ProlificStudy.objects.filter(study_id=sid).first() if sid else None
        if study is None:
            return "ignored"
        try:
            apply_submission(study, record)
        except SyncError:
            return "ignored"
        return "processed"
    study = ProlificStudy.objects.filter(study_id=rid).first()
    if study is None:
        return "ignored"
    if etype == "study.status.change":
        remote = api.get_study(rid)
        status = remote.get("status")
        if isinstance(status, str) and re.fullmatch(r"[A-Z ]{1,30}", status) and status != study.status:
            study.status = status
            study.save(update_fields=["status"])
    return "processed"
