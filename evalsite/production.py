"""Production settings: ``DJANGO_SETTINGS_MODULE=evalsite.production``.

Everything in :mod:`evalsite.settings`, plus what ``manage.py check --deploy`` asks for. Nothing
secret is written here: every secret and host name comes from the environment, and a missing or
unsafe value stops the process at start-up with :class:`~django.core.exceptions.ImproperlyConfigured`
instead of running with a default.

Required:

``DJANGO_SECRET_KEY``
    at least 50 characters, 5 distinct ones, not the development default, not ``django-insecure-...``
    (e.g. ``python -c "import secrets; print(secrets.token_urlsafe(50))"``).
``DJANGO_ALLOWED_HOSTS``
    comma-separated host names the site answers to, e.g. ``captions.example.org``.
``DATABASE_URL``
    a PostgreSQL URL (no SQLite fallback in production).

Optional (HTTPS; the site is served over HTTPS only):

``DJANGO_SECURE_HSTS_SECONDS``
    ``Strict-Transport-Security`` max-age (default 31536000, one year; 0 turns HSTS off, which
    ``check --deploy`` reports). ``DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS`` and
    ``DJANGO_SECURE_HSTS_PRELOAD`` (default ``1``; ``0`` to leave them out of the header).
``DJANGO_SECURE_PROXY_SSL_HEADER``
    ``1`` behind a TLS-terminating reverse proxy that sets ``X-Forwarded-Proto: https`` (and strips
    it from clients): requests it forwarded count as secure. Leave unset when clients reach Django
    directly, or anyone could claim HTTPS.
``DJANGO_TRUSTED_PROXIES``
    how many reverse proxies in front of Django append to ``X-Forwarded-For`` (default 0): the rate
    limits then key anonymous clients by the address the nearest trusted proxy saw, not by the proxy's
    own address (see :func:`crowd.ratelimit.client_address`).
``DJANGO_CSRF_TRUSTED_ORIGINS``
    comma-separated origins (``https://host``) allowed to post forms besides the site itself.
"""
import os

from django.core.checks.security.base import (
    SECRET_KEY_INSECURE_PREFIX,
    SECRET_KEY_MIN_LENGTH,
    SECRET_KEY_MIN_UNIQUE_CHARACTERS,
)
from django.core.exceptions import ImproperlyConfigured

from .rates import parse_rate
from .settings import *  # noqa: F403
from .settings import DATABASES

DEVELOPMENT_SECRET_KEY = "insecure-local-development-key"


def _env_list(name: str) -> list[str]:
    return [x.strip() for x in os.environ.get(name, "").replace(" ", ",").split(",") if x.strip()]


def _env_flag(name: str, default: bool) -> bool:
    value = os.environ.get(name, "").strip().lower()
    if not value:
        return default
    if value not in ("0", "1", "true", "false", "yes", "no"):
        raise ImproperlyConfigured(f"{name} must be 1 or 0, not {value!r}")
    return value in ("1", "true", "yes")


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "").strip()
    try:
        number = int(value) if value else default
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a whole number, not {value!r}") from None
    if number < 0:
        raise ImproperlyConfigured(f"{name} cannot be negative")
    return number


def secret_key_from_env() -> str:
    """``DJANGO_SECRET_KEY``; ImproperlyConfigured if unset, the development default, or too weak
    for Django's deployment check (security.W009)."""
    key = os.environ.get("DJANGO_SECRET_KEY", "")
    how = 'generate one with: python -c "import secrets; print(secrets.token_urlsafe(50))"'
    if not key:
        raise ImproperlyConfigured(f"DJANGO_SECRET_KEY must be set in the environment for production; {how}")
    if key == DEVELOPMENT_SECRET_KEY or key.startswith(SECRET_KEY_INSECURE_PREFIX):
        raise ImproperlyConfigured(f"DJANGO_SECRET_KEY is the insecure development key; {how}")
    if len(key) < SECRET_KEY_MIN_LENGTH or len(set(key)) < SECRET_KEY_MIN_UNIQUE_CHARACTERS:
        raise ImproperlyConfigured(
            f"DJANGO_SECRET_KEY is too weak: it needs at least {SECRET_KEY_MIN_LENGTH} characters and "
            f"{SECRET_KEY_MIN_UNIQUE_CHARACTERS} distinct ones; {how}")
    return key


DEBUG = False
SECRET_KEY = secret_key_from_env()

ALLOWED_HOSTS = _env_list("DJANGO_ALLOWED_HOSTS")
if not ALLOWED_HOSTS:
    raise ImproperlyConfigured("DJANGO_ALLOWED_HOSTS must list the site's host names, e.g. captions.example.org")

if not os.environ.get("DATABASE_URL"):
    raise ImproperlyConfigured("DATABASE_URL must be set for production, e.g. postgres://user:password@host:5432/captioneval")
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    raise ImproperlyConfigured("DATABASE_URL must point at PostgreSQL in production, not SQLite")

# --- HTTPS --------------------------------------------------------------------------------------
SECURE_SSL_REDIRECT = True
SESSION_COOKIE_SECURE = True
CSRF_COOKIE_SECURE = True
SECURE_HSTS_SECONDS = _env_int("DJANGO_SECURE_HSTS_SECONDS", 31536000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = _env_flag("DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS", True)
SECURE_HSTS_PRELOAD = _env_flag("DJANGO_SECURE_HSTS_PRELOAD", True)
if _env_flag("DJANGO_SECURE_PROXY_SSL_HEADER", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
RATELIMIT_TRUSTED_PROXIES = _env_int("DJANGO_TRUSTED_PROXIES", 0)
CSRF_TRUSTED_ORIGINS = _env_list("DJANGO_CSRF_TRUSTED_ORIGINS")
# Owner pages are never framed (X-Frame-Options: DENY, Django's default); the MTurk task pages opt
# out per view and allow MTurk's origins only (crowd.views.mturk.framed, MTURK_FRAME_ANCESTORS).
X_FRAME_OPTIONS = "DENY"

# Owners' and staff passwords (createsuperuser, the admin, password change): Django's usual rules.
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": f"django.contrib.auth.password_validation.{name}"}
    for name in ("UserAttributeSimilarityValidator", "MinimumLengthValidator", "CommonPasswordValidator",
                 "NumericPasswordValidator")
]

# A bad rate would otherwise surface as a 500 on every rater page: refuse to start instead.
for _rate_setting in ("RATER_RATE_LIMIT", "PASSWORD_RESET_RATE_LIMIT", "API_RATE_LIMIT", "MTURK_VERIFY_RATE",
                      "REPORT_RATE_LIMIT"):
    try:
        parse_rate(globals()[_rate_setting])
    except ValueError as exc:
        raise ImproperlyConfigured(f"{_rate_setting}: {exc}") from None
