"""The OpenAPI schema's view of the API (``REST_FRAMEWORK["DEFAULT_SCHEMA_CLASS"]``).

A module of its own because drf-spectacular's AutoSchema imports DRF's views, which read the
settings naming :mod:`api.base`'s pagination and throttle classes: :mod:`api.base` must not import it."""
from __future__ import annotations

import http

from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import OpenApiParameter

from .base import PROBLEM_CONTENT_TYPE, ProblemSerializer

#: statuses every operation documents with a problem body (plus ``default``)
PROBLEM_STATUSES = ("400", "401", "403", "404", "429")


class ProblemAutoSchema(AutoSchema):
    """drf-spectacular's schema with the problem responses every operation may give (400, 401, 403,
    404, 429 and ``default``) as ``application/problem+json``, every other error status a view
    declares documented the same way (the exception handler answers every error so), and the
    ``Idempotency-Key`` header on every write."""

    def _get_response_bodies(self, direction="response"):
        responses = super()._get_response_bodies(direction)
        component = self.resolve_serializer(ProblemSerializer, "response")
        body = {"content": {PROBLEM_CONTENT_TYPE: {"schema": component.ref}}}
        for status, response in responses.items():
            if status[0] in "45" and isinstance(response, dict):  # every error is a problem document
                responses[status] = {"description": response.get("description") or
                                     http.HTTPStatus(int(status)).phrase, **body}
        for status in PROBLEM_STATUSES:
            responses.setdefault(status, {"description": http.HTTPStatus(int(status)).phrase, **body})
        responses.setdefault("default", {"description": "any other error", **body})
        return responses

    def get_override_parameters(self):
        params = list(super().get_override_parameters())
        if self.method in ("POST", "PUT", "PATCH", "DELETE"):
            params.append(OpenApiParameter(
                "Idempotency-Key", str, OpenApiParameter.HEADER, required=False,
                description="1-255 printable ASCII characters: the same key with the same request replays the "
                            "first response; with another request: 422 (docs/api.md#idempotency)"))
        return params
