"""schemathesis against the live OpenAPI schema of the REST API (/api/schema/): property-based
requests to EVERY operation the schema lists (those of api/reports.py and api/campaigns.py
included, since the test walks the whole schema), as an anonymous client, a campaign owner and a
staff user (tokens), against one world of real data (tests/api_matrix.py). No response may be a
server error, and every response must conform to the schema: its status documented with the
content type and body the schema gives (problem documents included) and its headers.

Each operation is tried with schemathesis's positive and negative data (and, for operations with
path parameters, once more naming the world's real objects), ``MAX_EXAMPLES`` examples each,
derandomised so that the run is repeatable and takes well under a minute. schemathesis's own
pytest plugin (``schemathesis.pytest.from_fixture``) fails under pytest 9 (it sets
``request.node._nodeid``), so the test drives its documented strategies
(``APIOperation.as_strategy``) with Hypothesis' ``@given`` itself. The test also checks that every operation of the
schema has a row in the permission matrix."""
import re

import pytest
import schemathesis
from django.test import Client
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from .api_matrix import ROWS, world  # noqa: F401 (world is a fixture)

MAX_EXAMPLES = 10
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_headers_conformance,
          response_schema_conformance]
#: values for the schema's path parameters that name the world's real objects (a second pass per operation)
REAL = {"name": "{dataset}", "dataset": "{dataset}", "id": "{run}"}


def operations(world):  # noqa: F811
    """Every operation of the live schema (``/api/schema/``, fetched through the WSGI application)."""
    from evalsite.wsgi import application

    schema = schemathesis.openapi.from_wsgi("/api/schema/?format=json", application)
    ops = [result.ok() for result in schema.get_all_operations()]
    assert len(ops) >= 10
    return ops


def real_path_parameters(operation, world):  # noqa: F811
    """The world's objects for ``operation``'s path parameters (campaign routes: the owner's
    campaign; run ids: the world's run), or None when it has none."""
    names = re.findall(r"\{([a-z_]+)\}", operation.path)
    if not names:
        return None
    values = {k: v.format(**world.names()) for k, v in REAL.items()}
    if operation.path.startswith("/api/campaigns/"):
        values["name"] = world.campaign
    if operation.path.startswith("/api/imports/"):
        values["id"] = str(world.import_job)
    return {n: values.get(n, "x") for n in names}


def exercise(world, user):  # noqa: F811
    """Run schemathesis's generated requests for every operation as ``user``; returns the failures
    as ``["METHOD path: error", ...]`` (all operations are tried before the test fails)."""
    headers = {} if user == "anonymous" else {"Authorization": f"Token {world.tokens[user]}"}
    failures = []
    for operation in operations(world):
        strategies = [operation.as_strategy(), operation.as_strategy(GenerationMode.NEGATIVE)]
        real = real_path_parameters(operation, world)
        if real:
            strategies.append(operation.as_strategy(path_parameters=real))

        for strategy in strategies:
            @given(case=strategy)
            @settings(max_examples=MAX_EXAMPLES, deadline=None, derandomize=True, database=None,
                      suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.generate])
            def run(case):
                case.call_and_validate(headers=headers, checks=CHECKS)

            try:
                run()
            except (Exception, BaseExceptionGroup) as exc:  # noqa: BLE001 - collected, reported together below
                failures.append(f"{operation.method.upper()} {operation.path}: {str(exc)[:1500]}")
                break
    return failures


@pytest.fixture
def keep_connection():
    """Requests through the WSGI application inside the test's transaction: as Django's test client
    does, the handler must not close the database connection at the end of a request."""
    from django.core import signals
    from django.db import close_old_connections

    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    yield
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)


@pytest.mark.parametrize("user", ["anonymous", "owner", "staff"])
def test_every_operation_conforms_to_the_schema(user, world, db, keep_connection):  # noqa: F811
    failures = exercise(world, user)
    assert not failures, f"{len(failures)} operation(s) failed as {user}:\n" + "\n\n".join(failures)


@pytest.mark.django_db
def test_every_operation_has_a_row_in_the_permission_matrix():
    spec = Client().get("/api/schema/?format=json").json()
    operations = {(method.upper(), path) for path, item in spec["paths"].items() for method in item
                  if method in ("get", "post", "put", "patch", "delete")}
    assert len(operations) >= 10
    covered = set()
    for row in ROWS:
        pattern = re.sub(r"\\\{[a-z_]+\\\}", "[^/]+", re.escape(row.path))
        for method, path in operations:
            if method == row.method and re.fullmatch(pattern, re.sub(r"\{[a-z_]+\}", "x", path)):
                covered.add((method, path))
        # a row naming a concrete object ("{dataset}") also covers the schema's template
        for method, path in operations:
            if method == row.method and re.sub(r"\{[a-z_]+\}", "{}", path) == re.sub(r"\{[a-z_]+\}", "{}", row.path):
                covered.add((method, path))
    missing = sorted(operations - covered)
    assert not missing, f"operations without a row in tests/api_matrix.py: {missing}"


@pytest.mark.django_db
def test_the_schema_is_valid_openapi_without_warnings(tmp_path):
    """drf-spectacular validates the generated schema against the OpenAPI 3 JSON schema; any
    warning (an unresolvable serializer, an enum name collision) fails the test."""
    from django.core.management import call_command

    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(tmp_path / "schema.yaml"))
    text = (tmp_path / "schema.yaml").read_text()
    assert "openapi: 3." in text and "/api/datasets/" in text and "application/problem+json" in text


@pytest.mark.django_db
def test_the_docs_page_is_served_by_the_site_without_a_cdn():
    c = Client()
    page = c.get("/api/docs/")
    assert page.status_code == 200
    html = page.content.decode()
    assets = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert assets and not [a for a in assets if a.startswith(("http:", "https:", "//"))], assets
    assert "/api/schema/" in html
    for asset in assets:
        if asset.startswith("/static/"):
            response = c.get(asset)
            body = b"".join(response.streaming_content) if response.streaming else response.content
            assert response.status_code == 200 and len(body) > 100, asset
