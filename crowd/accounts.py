"""Owner and staff accounts under ``/accounts/``: throttled logins and a password reset that exists
only when the site can send e-mail.

Logins (this page and ``/admin/login/``) are counted by django-axes (https://github.com/jazzband/django-axes,
MIT): its authentication backend refuses a client that reached ``settings.AXES_FAILURE_LIMIT`` failed
attempts, per client address and per user name (``settings.AXES_LOCKOUT_PARAMETERS``), until
``settings.AXES_COOLOFF_TIME`` has passed without a new failure or an administrator unlocks it
(``python manage.py axes_reset``, or deleting the access attempt in the admin). This module gives
axes the site's client address (:func:`client_ip`, the same one the rater rate limits use) and the
site's lock-out page (:func:`locked_out`).

Password reset (``/accounts/password_reset/`` and the three pages after it) answers 404 unless
``settings.PASSWORD_RESET_ENABLED`` (on when ``EMAIL_HOST`` is set, see :mod:`evalsite.settings`);
when on, each client address and each e-mail address may ask for ``settings.PASSWORD_RESET_RATE_LIMIT``
resets per window (:mod:`crowd.ratelimit`; over it: HTTP 429 with ``Retry-After``). The login page
links to the reset form only when it exists.

The routes and names are those of ``django.contrib.auth.urls``; ``evalsite.urls`` includes this
module instead of it.
"""
from __future__ import annotations

import functools
import hashlib
import ipaddress

from django.conf import settings
from django.contrib.auth import views as auth_views
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import path

from crowd.ratelimit import client_address, hit, too_many

LOCKOUT_TEMPLATE = "registration/locked_out.html"


def client_ip(request: HttpRequest) -> str | None:
    """``AXES_CLIENT_IP_CALLABLE``: the client address axes counts failures against.

    The address of :func:`crowd.ratelimit.client_address` (``REMOTE_ADDR``, or behind
    ``settings.RATELIMIT_TRUSTED_PROXIES`` trusted proxies the address the nearest one saw), with an
    IPv6 client standing for its /64 network, given as the network's first address (axes stores a
    plain IP address). ``None`` when there is no parsable address (e.g. a request built in code)."""
    address = client_address(request)
    try:
        network = ipaddress.ip_network(address, strict=False)
    except ValueError:
        return None
    return str(network.network_address)


def locked_out(request: HttpRequest, original_response: HttpResponse | None = None,
               credentials: dict | None = None) -> HttpResponse:
    """``AXES_LOCKOUT_CALLABLE``: the lock-out page (``registration/locked_out.html``), HTTP
    ``settings.AXES_HTTP_RESPONSE_CODE`` (429) with ``Retry-After`` = the cool-off in seconds when
    there is one (axes restarts the cool-off at every refused attempt)."""
    from axes.helpers import get_cool_off, get_failure_limit

    cool_off = get_cool_off(request)
    seconds = int(cool_off.total_seconds()) if cool_off else None
    response = render(request, LOCKOUT_TEMPLATE, {
        "failure_limit": get_failure_limit(request, credentials),
        "cool_off_minutes": None if seconds is None else max(1, round(seconds / 60)),
    }, status=settings.AXES_HTTP_RESPONSE_CODE)
    if seconds:
        response["Retry-After"] = str(seconds)
    return response


def password_reset_enabled() -> bool:
    """Whether the password reset pages exist (``settings.PASSWORD_RESET_ENABLED``)."""
    return bool(getattr(settings, "PASSWORD_RESET_ENABLED", False))


def _reset_page(view, *, per_email: bool = False):
    """Wrap a password reset view: 404 while the reset is off; when on, every POST counts against
    the client address (and, with ``per_email``, against the e-mail address asked for) at
    ``settings.PASSWORD_RESET_RATE_LIMIT``; over either limit -> 429 from
    :func:`crowd.ratelimit.too_many`, and no e-mail is sent."""

    @functools.wraps(view)
    def wrapped(request, *args, **kwargs):
        if not password_reset_enabled():
            raise Http404("no such page")
        if request.method == "POST":
            rate = settings.PASSWORD_RESET_RATE_LIMIT
            wait = hit(f"pwreset:ip:{client_address(request)}", rate)
            email = request.POST.get("email", "").strip().lower()
            if per_email and email and not wait:  # a request refused already does not count for the address
                digest = hashlib.sha256(email.encode()).hexdigest()[:32]  # no address in cache keys
                wait = max(wait, hit(f"pwreset:email:{digest}", rate))
            if wait:
                return too_many(request, wait)
        return view(request, *args, **kwargs)

    return wrapped


class LoginView(auth_views.LoginView):
    """Django's login view; the page links to the password reset only when it exists."""

    def get_context_data(self, **kwargs):
        return {**super().get_context_data(**kwargs), "password_reset_enabled": password_reset_enabled()}


urlpatterns = [
    path("login/", LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("password_change/", auth_views.PasswordChangeView.as_view(), name="password_change"),
    path("password_change/done/", auth_views.PasswordChangeDoneView.as_view(), name="password_change_done"),
    path("password_reset/", _reset_page(auth_views.PasswordResetView.as_view(), per_email=True), name="password_reset"),
    path("password_reset/done/", _reset_page(auth_views.PasswordResetDoneView.as_view()), name="password_reset_done"),
    path("reset/<uidb64>/<token>/", _reset_page(auth_views.PasswordResetConfirmView.as_view()),
         name="password_reset_confirm"),
    path("reset/done/", _reset_page(auth_views.PasswordResetCompleteView.as_view()), name="password_reset_complete"),
]
