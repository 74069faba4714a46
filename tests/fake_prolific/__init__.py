"""The fake Prolific API for tests (see server.py) and its pytest fixture.

Use in a test module::

    from tests.fake_prolific import fake_prolific  # noqa: F401

    def test_something(fake_prolific):
        fake_prolific.fail_next("POST", r"^studies/$", status=429, retry_after=0)
        ...

The fixture starts the server, points ``settings.PROLIFIC_API_URL`` at it, sets the environment
variables ``PROLIFIC_TOKEN`` and ``PROLIFIC_WEBHOOK_SECRET`` to its token and secret, shortens the
client's timeout (``PROLIFIC_TIMEOUT_SECONDS`` = 0.5 s; the fake answers timed-out calls after
1.5 s) and back-off (``PROLIFIC_BACKOFF_SECONDS`` = 0.01 s), yields the :class:`FakeProlific`
and stops it.
"""
import importlib

import pytest

from .server import (FALLBACK_ROUTES, ROUTES, FakeProlific, Invalid, NotFound, new_id, now_iso,  # noqa: F401
                     route, sign)
from . import studies  # noqa: F401,E402  (registers the study routes)

try:  # the submission, bonus and webhook handlers (tests/fake_prolific/submissions.py), when present
    importlib.import_module(f"{__name__}.submissions")
except ModuleNotFoundError as exc:
    if exc.name != f"{__name__}.submissions":
        raise


@pytest.fixture
def fake_prolific(settings, monkeypatch):
    """A running :class:`FakeProlific` wired into the settings and the environment."""
    fake = FakeProlific()
    base_url = fake.start()
    # A timed-out request (FakeProlific.timeout_next) is answered after 5 s, well past the client's
    # 2 s; the 2 s leave room for a loaded CI machine, where 0.5 s once timed out an ordinary
    # POST studies/ and its retry created a sixth study (test_lists_follow_every_page).
    fake.slow_seconds = 5.0
    settings.PROLIFIC_API_URL = base_url
    settings.PROLIFIC_TIMEOUT_SECONDS = 2.0
    settings.PROLIFIC_BACKOFF_SECONDS = 0.01
    monkeypatch.setenv("PROLIFIC_TOKEN", fake.token)
    monkeypatch.setenv("PROLIFIC_WEBHOOK_SECRET", fake.webhook_secret)
    try:
        yield fake
    finally:
        fake.stop()
