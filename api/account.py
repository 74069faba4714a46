"""The API token page of an account (``/accounts/api-token/``): a logged-in user creates, replaces
or revokes their REST API token (``rest_framework.authtoken``'s ``Token``, one per user).

GET shows whether the user has a token (when it was created and its first four characters, never
the whole key); POST ``action=create`` makes a new token (replacing the old one, which stops working
at once) and shows its key on that response only; POST ``action=revoke`` deletes it. Both forms
keep Django's CSRF check. The same can be done with ``manage.py api_token`` (docs/api.md)."""
from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.db import transaction
from django.shortcuts import render
from django.urls import path
from django.views.decorators.http import require_http_methods
from rest_framework.authtoken.models import Token


def create_token(user) -> Token:
    """A new token for ``user``; an existing one is deleted first (one token per user)."""
    with transaction.atomic():
        Token.objects.filter(user=user).delete()
        return Token.objects.create(user=user)


def revoke_token(user) -> bool:
    """Delete ``user``'s token; True when there was one."""
    return Token.objects.filter(user=user).delete()[0] > 0


@login_required
@require_http_methods(["GET", "POST"])
def api_token_page(request):
    """The token page: GET the state, POST ``action`` = ``create`` or ``revoke`` (400 for another)."""
    new_key, status, message = None, 200, ""
    if request.method == "POST":
        action = request.POST.get("action")
        if action == "create":
            new_key = create_token(request.user).key
            message = "New API token created. Copy it now: it is shown only once."
        elif action == "revoke":
            message = "API token revoked." if revoke_token(request.user) else "You had no API token."
        else:
            status, message = 400, "Unknown action: use the buttons below."
    token = Token.objects.filter(user=request.user).first()
    return render(request, "api/token.html", {"token": token, "new_key": new_key, "message": message,
                                              "error": status == 400}, status=status)


urlpatterns = [path("api-token/", api_token_page, name="api-token")]
