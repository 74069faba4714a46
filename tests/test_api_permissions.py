"""The permission matrix of the REST API (tests/api_matrix.py): every endpoint's request sent as an
anonymous client, a rater's account, another campaign's owner, the owner and a staff user, each
with its own token, against one world of real data; the status must be the row's. Every error is a
problem document. The API's campaign helpers follow the owner pages' rule exactly."""
import pytest
from django.contrib.auth.models import AnonymousUser
from django.http import Http404
from django.test import Client, RequestFactory
from rest_framework.exceptions import NotAuthenticated

from api import base

from .api_matrix import ROWS, USERS, request, world  # noqa: F401 (world is a fixture)


@pytest.mark.parametrize("user", USERS)
@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_matrix(row, user, world, db):
    response = request(Client(), row, world, user)
    expected = row.expect[user]
    body = response.content[:300] if not response.streaming else b"(streamed)"
    assert response.status_code == expected, f"{row.id} as {user}: {response.status_code} {body!r}"
    if expected >= 400:
        assert response["Content-Type"] == "application/problem+json", (row.id, user)
        problem = response.json()
        assert problem["status"] == expected and problem["instance"] == row.url(world)
    if expected == 401:
        assert response["WWW-Authenticate"] == "Token"


def test_every_user_kind_has_a_status_in_every_row():
    assert all(set(row.expect) == set(USERS) for row in ROWS)
    assert len({row.id for row in ROWS}) == len(ROWS)


def test_campaign_helpers_follow_the_owner_pages(world, db):
    """visible_campaigns(user) holds exactly the campaigns owned_campaign gives that user."""
    factory = RequestFactory()
    users = [AnonymousUser(), *world.users.values()]
    names = [world.campaign, world.other_campaign]
    for user in users:
        req = factory.get("/")
        req.user = user
        allowed = set()
        for name in names:
            try:
                allowed.add(base.owned_campaign(req, name).name)
            except Http404:
                pass
            except NotAuthenticated:
                assert not user.is_authenticated
        assert set(base.visible_campaigns(user).filter(name__in=names).values_list("name", flat=True)) == allowed
    assert {c.name for c in base.visible_campaigns(world.users["owner"])} == {world.campaign}


def test_every_api_write_from_a_browser_session_needs_the_csrf_token(world, db):  # noqa: F811
    """A logged-in browser's session authenticates API requests too, so every write row of the
    matrix sent with the session cookie but no CSRF token is refused (403, DRF's check) and changes
    nothing, whoever is logged in; the same request with a token instead of the cookie is the
    matrix's own row (no cookie a forged page could make the browser send)."""
    from .test_security import db_state

    writes = [row for row in ROWS if row.method not in ("GET", "HEAD", "OPTIONS")]
    assert writes
    before = db_state()
    for user in USERS[1:]:
        client = Client(enforce_csrf_checks=True)
        client.force_login(world.users[user])
        for row in writes:
            response = request(client, row, world, "anonymous")  # the session only, no token header
            assert response.status_code == 403, (row.id, user, response.status_code)
            assert "CSRF" in response.json()["detail"], (row.id, user)
    assert db_state() == before
