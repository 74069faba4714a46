"""The API token page of an account (``/accounts/api-token/``): a logged-in user creates, replaces
or revokes their REST API token (django-rest-knox's ``AuthToken``, one per user here).

The database keeps only a token's SHA-512 digest and its first 15 characters (knox's
``token_key``, to find the row), never the key: the key is shown once, on the response that
creates it, which is marked ``Cache-Control: no-store`` (every answer of the page is: Django's
``never_cache``). GET shows whether the user has a token (when it was created and its first four
characters); POST ``action=create`` makes a new token (replacing the old one, which stops working at
once) and shows its key on that response only; POST ``action=revoke`` deletes it. Both forms keep
Django's CSRF check. The same can be done with ``manage.py api_token`` (docs/api.md). Tokens made
before the platform hashed them (Django REST framework's ``authtoken``) were hashed in place by the
migration ``api.0003_hash_api_tokens`` and keep working."""
from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.db import transaction
from django.shortcuts import render
from django.urls import path
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods
from knox.models import AuthToken


def create_token(user) -> str:
    """A new token for ``user`` (an existing one is deleted first: one token per user); returns its
    key, 64 hexadecimal characters, which is stored nowhere (only its digest is)."""
    with transaction.atomic():
        AuthToken.objects.filter(user=user).delete()
        return AuthToken.objects.create(user=user, expiry=None)[1]


def revoke_token(user) -> bool:
    """Delete ``user``'s token; True when there was one."""
    return AuthToken.objects.filter(user=user).delete()[0] > 0


def token_of(user) -> AuthToken | None:
    """``user``'s token row (its digest, ``token_key`` prefix and creation time), or None."""
    return AuthToken.objects.filter(user=user).order_by("-created").first()


@never_cache
@login_required
@require_http_methods(["GET", "POST"])
def api_token_page(request):
    """The token page: GET the state, POST ``action`` = ``create`` or ``revoke`` (400 for another)."""
    new_key, status, message = None, 200, ""
    if request.method == "POST":
        action = request.POST.get("action")
        if action == "create":
            new_key = create_token(request.user)
            message = "New API token created. Copy it now: it is shown only once."
        elif action == "revoke":
            message = "API token revoked." if revoke_token(request.user) else "You had no API token."
        else:
            status, message = 400, "Unknown action: use the buttons below."
    token = token_of(request.user)
    return render(request, "api/token.html", {"token": token, "new_key": new_key, "message": message,
                                              "error": status == 400}, status=status)


urlpatterns = [path("api-token/", api_token_page, name="api-token")]
