"""The REST API's foundation: errors as RFC 9457 problem details, pagination, rate limits, who may
do what (the pages' own rules, called, not copied), and the ``Idempotency-Key`` header of writes.

Errors
    Every error under ``/api/`` -- DRF's exceptions (validation, 401, 403, 404, 405, 406, 415, 429),
    Django's ``Http404`` and ``PermissionDenied`` raised by the pages' helpers, an unknown URL, and an
    unexpected exception (500, logged, nothing of it shown) -- is answered by :func:`problem` as
    ``application/problem+json`` (RFC 9457, https://www.rfc-editor.org/rfc/rfc9457):
    ``{"type", "title", "status", "detail", "instance"}``, plus ``errors`` (``[{"field", "detail",
    "code"}]``, one per message) for a request the API refuses as invalid. ``type`` is
    ``urn:captioneval:problem:<code>`` (``invalid``, ``not_found``, ``not_authenticated``,
    ``permission_denied``, ``throttled``, ``idempotency_key_reused``...), ``title`` the HTTP status'
    phrase, ``instance`` the request's path. The schema documents them on every operation
    (:class:`api.schema.ProblemAutoSchema`).

Pagination
    :class:`Pagination`: ``?limit=N&offset=M`` (default 50, at most 1000) with ``{"count", "next",
    "previous", "results"}``; documented in the schema by drf-spectacular.

Rate limits
    :class:`RateThrottle`: ``settings.API_RATE_LIMIT`` (default the rater pages' ``RATER_RATE_LIMIT``)
    per user, or per client address for anonymous requests, counted by
    :func:`crowd.ratelimit.hit` (the rater pages' counter: the shared cache, fail-open).

Who may do what
    :func:`is_staff` (datasets are imported by staff: :func:`crowd.views.judgments_upload.is_staff`),
    :func:`can_compute` (metric runs: :func:`metrics.jobs.can_compute`), :func:`owned_campaign` and
    :func:`visible_campaigns` (campaigns: the owner pages' :func:`crowd.views.owner.owned_campaign`),
    :func:`public_systems` and :func:`hidden_system_ids` (systems of unpublished campaigns stay
    hidden: :mod:`crowd.privacy`).
    :class:`StaffWritesOrReadOnly` is the permission class of resources everybody reads and staff
    write.

Idempotency
    :func:`idempotent` wraps a write: a request with ``Idempotency-Key: <key>`` (1-255 printable
    ASCII characters, optionally as a quoted string) is stored with its response
    (:class:`api.models.IdempotencyRecord`, per user, for ``settings.API_IDEMPOTENCY_SECONDS``);
    the same key with the same request replays the stored response (header ``Idempotent-Replayed:
    true``), with a different request answers 422, while the first is still being processed 409
    (for at most :data:`IN_PROGRESS_SECONDS`: a request that died without an answer frees its key).
    A response of 5xx or an error raised is not stored (the request may be retried).
"""
from __future__ import annotations

import hashlib
import http
import json
import logging
from datetime import timedelta

from django.conf import settings
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.db import IntegrityError, transaction
from django.http import Http404
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from rest_framework import exceptions, permissions, serializers
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.response import Response
from rest_framework.throttling import BaseThrottle
from rest_framework.utils.encoders import JSONEncoder as DRFJSONEncoder

from analysis.query import has_control_character
from crowd import privacy
from crowd.models import Campaign
from crowd.ratelimit import client_address, hit
from crowd.views import judgments_upload, owner
from metrics import jobs

from .models import IdempotencyRecord

log = logging.getLogger("api")

PROBLEM_CONTENT_TYPE = "application/problem+json"
PROBLEM_TYPE = "urn:captioneval:problem:"


# --- problem details ---------------------------------------------------------------------------------

def problem(request, status: int, detail: str, code: str | None = None, errors: list | None = None,
            headers: dict | None = None) -> Response:
    """An RFC 9457 problem response: ``{"type": "urn:captioneval:problem:<code>", "title": <the
    status' phrase>, "status", "detail", "instance": <request path>}`` (+ ``errors`` when given),
    content type ``application/problem+json``. ``code`` defaults to the phrase in snake case."""
    phrase = http.HTTPStatus(status).phrase
    body = {"type": PROBLEM_TYPE + (code or phrase.lower().replace(" ", "_").replace("-", "_")),
            "title": phrase, "status": status, "detail": detail,
            "instance": getattr(request, "path", "") or ""}
    if errors is not None:
        body["errors"] = errors
    return Response(body, status=status, headers=headers, content_type=PROBLEM_CONTENT_TYPE)


def _flatten(data, prefix="") -> list[dict]:
    """DRF's validation error detail (nested dicts and lists of ErrorDetail) as
    ``[{"field": "a.b" ("" for the whole request), "detail": message, "code": code}]``."""
    out = []
    if isinstance(data, dict):
        for key, value in data.items():
            name = "" if key in ("non_field_errors", "detail") and not prefix else f"{prefix}.{key}" if prefix else str(key)
            out += _flatten(value, name)
    elif isinstance(data, list):
        if all(not isinstance(x, (dict, list)) for x in data):
            out += [{"field": prefix, "detail": str(x), "code": getattr(x, "code", "invalid") or "invalid"} for x in data]
        else:
            for i, value in enumerate(data):
                out += _flatten(value, f"{prefix}.{i}" if prefix else str(i))
    else:
        out.append({"field": prefix, "detail": str(data), "code": getattr(data, "code", "invalid") or "invalid"})
    return out


def problem_exception_handler(exc, context):
    """``REST_FRAMEWORK["EXCEPTION_HANDLER"]``: every exception of an API view as a problem
    response (see the module docstring). Django's ``Http404``/``PermissionDenied`` become 404/403
    with their message; an exception DRF does not know is logged and answered 500 without details."""
    from rest_framework.views import exception_handler as drf_exception_handler  # views read these settings
    from rest_framework.views import set_rollback

    request = context.get("request")
    if isinstance(exc, Http404):
        exc = exceptions.NotFound(str(exc) or None)
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied(str(exc) or None)
    response = drf_exception_handler(exc, context)
    if response is None:
        log.exception("API request %s failed", getattr(request, "path", "?"), exc_info=exc)
        set_rollback()  # as DRF does for the errors it knows (ATOMIC_REQUESTS)
        return problem(request, 500, "the server failed to answer this request; it has been logged", "server_error")
    headers = {k: v for k, v in response.items() if k in ("WWW-Authenticate", "Retry-After", "Allow")}
    if isinstance(exc, exceptions.ValidationError):
        errors = _flatten(exc.detail)
        detail = "; ".join(f"{e['field']}: {e['detail']}" if e["field"] else e["detail"] for e in errors) or "invalid request"
        return problem(request, response.status_code, detail, "invalid", errors=errors, headers=headers)
    code = exc.get_codes() if isinstance(exc, exceptions.APIException) else None
    code = code if isinstance(code, str) else None
    data = response.data
    detail = str(data.get("detail", "")) if isinstance(data, dict) else str(data)
    return problem(request, response.status_code, detail or http.HTTPStatus(response.status_code).description,
                   code, headers=headers)


@csrf_exempt
def not_found(request, *args, **kwargs):
    """A URL under ``/api/`` that names no resource: 404 as a problem (plain Django view; exempt
    from the CSRF check, as DRF's views are, so that a POST there is a 404 too, not an HTML 403)."""
    from django.urls import Resolver404, resolve
    from rest_framework.renderers import JSONRenderer

    detail = f"no API resource at {request.path}"
    if not request.path.endswith("/"):
        try:
            if resolve(request.path + "/").func is not not_found:
                detail += f"; did you mean {request.path}/ (API paths end with a slash)?"
        except Resolver404:
            pass
    response = problem(request, 404, detail, "not_found")
    response.accepted_renderer = JSONRenderer()
    response.accepted_media_type = PROBLEM_CONTENT_TYPE
    response.renderer_context = {}
    return response.render()


class ProblemFieldErrorSerializer(serializers.Serializer):
    """One message about the request: its field (dotted path, "" for the whole request)."""

    field = serializers.CharField()
    detail = serializers.CharField()
    code = serializers.CharField()


class ProblemSerializer(serializers.Serializer):
    """RFC 9457 problem details, as every error of the API is answered."""

    type = serializers.CharField(help_text="urn:captioneval:problem:<code>")
    title = serializers.CharField(help_text="the HTTP status' phrase")
    status = serializers.IntegerField()
    detail = serializers.CharField()
    instance = serializers.CharField(help_text="the request's path")
    errors = ProblemFieldErrorSerializer(many=True, required=False, help_text="validation problems, one per message")


# --- pagination and rate limits ------------------------------------------------------------------------

class Pagination(LimitOffsetPagination):
    """``?limit=N&offset=M``: N items (default 50, at most 1000) from position M (0-based)."""

    default_limit = 50
    max_limit = 1000


class RateThrottle(BaseThrottle):
    """``settings.API_RATE_LIMIT`` requests per window per user (``api:user:<pk>``), anonymous
    clients per address (``api:ip:<address>``, :func:`crowd.ratelimit.client_address`), counted by
    :func:`crowd.ratelimit.hit`; over it DRF raises ``Throttled`` (429, ``Retry-After``). A subclass
    counts something else by overriding :meth:`count`."""

    def count(self, request) -> int:
        """Count ``request``; 0 when allowed, else the seconds to wait (:func:`crowd.ratelimit.hit`)."""
        user = getattr(request, "user", None)
        key = f"api:user:{user.pk}" if user is not None and user.is_authenticated else f"api:ip:{client_address(request)}"
        return hit(key, settings.API_RATE_LIMIT)

    def allow_request(self, request, view):
        self._wait = self.count(request)
        return not self._wait

    def wait(self):
        return getattr(self, "_wait", None) or None


def text_param(request, name: str, max_length: int = 255, choices=None) -> str | None:
    """The query parameter ``name`` as a filter value, or None when absent. Raises ValidationError
    (400) for a value longer than ``max_length``, holding a NUL or other control character
    (:func:`analysis.query.has_control_character`: no stored name or key holds one, and PostgreSQL
    refuses NUL), or not among ``choices`` when given."""
    if name not in request.query_params:
        return None
    value = request.query_params[name]
    if len(value) > max_length:
        raise exceptions.ValidationError({name: [f"at most {max_length} characters"]})
    if has_control_character(value):
        raise exceptions.ValidationError({name: ["control characters are not allowed"]})
    if choices is not None and value not in choices:
        raise exceptions.ValidationError({name: [f"one of {', '.join(choices)}"]})
    return value


# --- who may do what ------------------------------------------------------------------------------------

def is_staff(user) -> bool:
    """Who may import datasets: :func:`crowd.views.judgments_upload.is_staff` (the upload page's rule)."""
    return judgments_upload.is_staff(user)


def can_compute(user, dataset) -> bool:
    """Who may start metric runs on ``dataset``: :func:`metrics.jobs.can_compute` (the compute form's rule)."""
    return jobs.can_compute(user, dataset)


def owned_campaign(request, name) -> Campaign:
    """The campaign ``name`` as the owner pages give it (:func:`crowd.views.owner.owned_campaign`:
    its owners and superusers; anyone else: Http404, answered 404). An anonymous request raises
    NotAuthenticated (401; the pages send it to the login page)."""
    if not (request.user and request.user.is_authenticated):
        raise exceptions.NotAuthenticated()
    return owner.owned_campaign(request, name)


def visible_campaigns(user):
    """The campaigns ``user`` sees on the owner pages (QuerySet): :func:`crowd.privacy.visible_campaigns`
    (all for a superuser, else those they own; none for an anonymous user), the rule of
    :func:`owned_campaign` too (checked in tests/test_api_permissions.py)."""
    return privacy.visible_campaigns(user)


def public_systems(dataset):
    """The systems of ``dataset`` public pages show: :func:`crowd.privacy.public_systems`."""
    return privacy.public_systems(dataset)


def hidden_system_ids(dataset) -> list[int]:
    """Primary keys of the systems of ``dataset`` public pages hide: :func:`crowd.privacy.private_system_ids`."""
    return privacy.private_system_ids(dataset)


class StaffWritesOrReadOnly(permissions.BasePermission):
    """Everybody reads (GET, HEAD, OPTIONS); writes need an authenticated user (401 otherwise) who
    is staff (:func:`is_staff`, 403 otherwise)."""

    message = "only staff users may import datasets and start metric runs"

    def has_permission(self, request, view):
        if request.method in permissions.SAFE_METHODS:
            return True
        if not (request.user and request.user.is_authenticated):
            raise exceptions.NotAuthenticated()
        return is_staff(request.user)


# --- idempotency ------------------------------------------------------------------------------------------

#: a request still "in progress" after this many seconds died without an answer; its key is free again
IN_PROGRESS_SECONDS = 600


class IdempotencyKeyReused(exceptions.APIException):
    status_code = 422
    default_detail = "this Idempotency-Key was used with a different request"
    default_code = "idempotency_key_reused"


class IdempotencyKeyInProgress(exceptions.APIException):
    status_code = 409
    default_detail = "a request with this Idempotency-Key is still being processed; retry later"
    default_code = "idempotency_key_in_progress"


def idempotency_key(request) -> str | None:
    """The request's ``Idempotency-Key`` (quotes of a structured-field string removed), or None when
    absent. Raises ValidationError (400) for an empty key, one over 255 characters or with
    characters other than printable ASCII."""
    raw = request.headers.get("Idempotency-Key")
    if raw is None:
        return None
    key = raw.strip()
    if len(key) >= 2 and key[0] == key[-1] == '"':
        key = key[1:-1]
    if not key or len(key) > 255 or any(not (0x20 <= ord(c) <= 0x7E) for c in key):
        raise exceptions.ValidationError({"Idempotency-Key": ["must be 1-255 printable ASCII characters"]})
    return key


def request_digest(request) -> str:
    """SHA-256 (hex) of what identifies a write: method, path, sorted query parameters, and the body
    as parsed (JSON: canonical with sorted keys; forms: sorted fields, each uploaded file by field,
    name and the SHA-256 of its bytes, read in chunks and rewound)."""
    h = hashlib.sha256()
    h.update(f"{request.method} {request.path}\n".encode())
    h.update(json.dumps(sorted(request.query_params.lists()), default=str).encode())
    data = request.data
    if hasattr(data, "lists"):
        items = []
        for name, values in data.lists():
            for value in values:
                if hasattr(value, "chunks"):
                    fh = hashlib.sha256()
                    for chunk in value.chunks():
                        fh.update(chunk)
                    value.seek(0)
                    items.append((name, "file", getattr(value, "name", ""), fh.hexdigest()))
                else:
                    items.append((name, "value", str(value)))
        h.update(json.dumps(sorted(items)).encode())
    else:
        h.update(json.dumps(data, sort_keys=True, default=str).encode())
    return h.hexdigest()


def idempotent_write(request, form_class, write):
    """The answer of a write whose body is the serializer ``form_class``: under the request's
    ``Idempotency-Key`` (:func:`idempotent`), the body validated (ValidationError, 400 naming each
    field, otherwise) and ``write(validated_data)`` run; ``write`` returns a DRF Response."""

    def handler():
        form = form_class(data=request.data)
        form.is_valid(raise_exception=True)
        return write(form.validated_data)

    return idempotent(request, handler)


def idempotent(request, handler):
    """Run ``handler()`` (a write returning a DRF Response) under the request's ``Idempotency-Key``,
    if any (see the module docstring). Raises IdempotencyKeyReused (422) or IdempotencyKeyInProgress
    (409); returns the stored response, with ``Idempotent-Replayed: true``, for a repeated request."""
    key = idempotency_key(request)
    if key is None or not request.user.is_authenticated:
        return handler()
    digest = request_digest(request)
    cutoff = timezone.now() - timedelta(seconds=settings.API_IDEMPOTENCY_SECONDS)
    # forget the user's expired keys (this one included), so the table holds one day of writes at most
    IdempotencyRecord.objects.filter(user=request.user, created_at__lt=cutoff).delete()
    try:
        with transaction.atomic():
            record = IdempotencyRecord.objects.create(user=request.user, key=key, method=request.method,
                                                      path=request.path[:2000], request_hash=digest)
    except IntegrityError:
        existing = IdempotencyRecord.objects.filter(user=request.user, key=key).first()
        if existing is None:  # forgotten in between: treat as new
            return idempotent(request, handler)
        if existing.request_hash != digest:
            raise IdempotencyKeyReused(f"Idempotency-Key {key!r} was used for another request "
                                       f"({existing.method} {existing.path}) or another body") from None
        if existing.status is None:
            if existing.created_at < timezone.now() - timedelta(seconds=IN_PROGRESS_SECONDS):
                existing.delete()  # its request died without an answer (a killed process): start again
                return idempotent(request, handler)
            raise IdempotencyKeyInProgress() from None
        return Response(existing.body, status=existing.status,
                        headers={**existing.headers, "Idempotent-Replayed": "true"})
    try:
        response = handler()
    except BaseException:
        record.delete()
        raise
    if response.status_code >= 500:
        record.delete()
        return response
    record.status = response.status_code
    # the body as the client received it: DRF's encoder turns dates, decimals, UUIDs into JSON
    record.body = json.loads(json.dumps(response.data, cls=DRFJSONEncoder))
    record.headers = {k: response[k] for k in ("Location", "Content-Location") if k in response}
    with transaction.atomic():
        record.save(update_fields=["status", "body", "headers"])
    return response
