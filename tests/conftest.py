"""Shared fixtures: the bundled Flickr8k-Expert data, subsets of it, and command helpers."""
import functools
import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from django.contrib.auth.hashers import PBKDF2PasswordHasher
from django.core.management import call_command

from . import flush
from .browser import Chromium

ROOT = Path(__file__).resolve().parent.parent
FLICKR8K = ROOT / "data" / "flickr8k"
# Tests with a real Celery worker check metric runs, not the reports queued after them (their own
# test switches it on: test_cached_reports.py); inherited by the worker and server subprocesses.
os.environ.setdefault("REPORTS_AFTER_METRIC_RUNS", "0")
# Where the environment sets PYTHONDONTWRITEBYTECODE, every Python subprocess of the tests (manage.py,
# runserver, the Celery worker, the library's command) would compile the project's modules again
# (about 0.4 s of CPU each): they may write __pycache__ (git ignores it).
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
# Under pytest-xdist each worker (gw0, gw1, ...) has its own test database (pytest-django adds the
# suffix) and here its own Redis database for the Celery broker and the cache, counted down from the
# configured one (15 by default), so that one worker's Celery worker never takes another's tasks.
_XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
if _XDIST_WORKER.startswith("gw"):
    _broker = os.environ.get("TEST_BROKER_URL", "redis://127.0.0.1:6379/15")
    _base, _, _db = _broker.rpartition("/")
    os.environ["TEST_BROKER_URL"] = f"{_base}/{int(_db) - int(_XDIST_WORKER[2:])}"


@functools.cache
def _subset_texts(n_images: int) -> tuple[str, str]:
    """The two files of :func:`write_subset` for ``n_images``, computed once per test session."""
    expert_lines = (FLICKR8K / "ExpertAnnotations.txt").read_text().splitlines()
    images = list(dict.fromkeys(line.split("\t")[0] for line in expert_lines))  # in file order
    keep_images = set(images[:n_images])
    kept = [line for line in expert_lines if line.split("\t")[0] in keep_images]
    needed = keep_images | {line.split("\t")[1].rpartition("#")[0] for line in kept}
    tokens = [
        line for line in (FLICKR8K / "Flickr8k.token.txt").read_text().splitlines()
        if line.split("\t")[0].rpartition("#")[0] in needed
    ]
    return "\n".join(kept) + "\n", "\n".join(tokens) + "\n"


def write_subset(directory: Path, n_images: int) -> Path:
    """Write a Flickr8k-Expert subset of the first ``n_images`` judged images (real rows, unchanged)
    with every token line their references and candidates need. Returns ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    expert, tokens = _subset_texts(n_images)
    (directory / "ExpertAnnotations.txt").write_text(expert)
    (directory / "Flickr8k.token.txt").write_text(tokens)
    return directory


@pytest.fixture
def flickr8k_dir():
    return FLICKR8K


@pytest.fixture
def subset_dir(tmp_path):
    """A 40-image Flickr8k-Expert subset (about 230 judged pairs)."""
    return write_subset(tmp_path / "flickr8k-subset", 40)


@pytest.fixture
def copy_dir(tmp_path):
    """A writable copy of the full bundled data, for corrupting files."""
    target = tmp_path / "flickr8k-copy"
    target.mkdir()
    for name in ("ExpertAnnotations.txt", "Flickr8k.token.txt"):
        shutil.copy(FLICKR8K / name, target / name)
        os.chmod(target / name, 0o644)
    return target


def build_wheel(source: Path, folder: Path) -> Path:
    """Build the wheel of the project in ``source`` into ``folder`` with ``pip wheel --no-deps`` (its
    build backend fetched by pip's build isolation from the configured index or cache); its path."""
    before = set(folder.glob("*.whl"))
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "--disable-pip-version-check",
                           "-w", str(folder), str(source)], capture_output=True, text=True, timeout=900, cwd=folder)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (wheel,) = set(folder.glob("*.whl")) - before
    return wheel


@pytest.fixture(scope="session")
def captioneval_wheel(tmp_path_factory) -> Path:
    """The ``captioneval`` wheel of the checkout (root pyproject.toml), built once per test session."""
    return build_wheel(ROOT, tmp_path_factory.mktemp("wheels"))


def run_command(*args, **kwargs) -> str:
    """call_command capturing stdout; CommandError propagates."""
    out = io.StringIO()
    call_command(*args, stdout=out, stderr=io.StringIO(), **kwargs)
    return out.getvalue()


class OneIterationPBKDF2(PBKDF2PasswordHasher):
    """Django's PBKDF2-SHA256 password hasher at 1 iteration instead of 1,000,000 (about 0.6-1.8 s
    per password on these machines, paid by every ``create_user`` and every log-in). Its hashes are
    ordinary ``pbkdf2_sha256$1$...`` strings, so a server started as a subprocess with the default
    hashers still accepts them (and upgrades them on a log-in, as for any old hash). Django's testing
    docs recommend a faster hasher in tests for the same reason."""

    iterations = 1


@pytest.fixture(scope="session", autouse=True)
def _fast_password_hashing():
    """Every password hashed or checked in the test process uses :class:`OneIterationPBKDF2`."""
    from django.conf import settings
    from django.test import override_settings

    with override_settings(PASSWORD_HASHERS=[f"{__name__}.OneIterationPBKDF2", *settings.PASSWORD_HASHERS]):
        yield


@pytest.fixture(scope="session", autouse=True)
def _quick_flush():
    """Transactional tests end by emptying only the tables they filled (tests/flush.py)."""
    with flush.installed():
        yield


@pytest.fixture(scope="module", autouse=True)
def _vacuum_dead_rows(django_db_blocker):
    """Before each test module, once the test database exists: vacuum the tables that rolled-back
    tests filled with dead rows (tests/flush.py, :func:`~tests.flush.vacuum_bloated`)."""
    from django.db import connection

    if connection.vendor == "postgresql" and connection.settings_dict["NAME"].startswith("test_"):
        with django_db_blocker.unblock():
            flush.vacuum_bloated()
    yield


@pytest.fixture(scope="session")
def chromium(tmp_path_factory):
    """The session's headless Chromium (tests/browser.py), started when a test first needs it."""
    session = Chromium(tmp_path_factory.mktemp("chromium"))
    yield session
    session.quit()


@pytest.fixture
def browser(chromium):
    """Headless Chromium (Debian's chromium + chromedriver) driven by Selenium: the session's one,
    made new for this test (one blank tab, no cookies or storage, default window size)."""
    yield from chromium.lend()


def stale(element):
    """WebDriverWait condition: ``element``'s document has been replaced (like EC.staleness_of, but
    Chromium's transient "unhandled inspector error" while a page is being swapped means "ask again",
    not a failure)."""
    from selenium.common.exceptions import StaleElementReferenceException, WebDriverException

    def predicate(driver):
        try:
            element.is_enabled()
            return False
        except StaleElementReferenceException:
            return True
        except WebDriverException:
            return False

    return predicate


@pytest.fixture
def learned_offline(monkeypatch, tmp_path):
    """Nothing downloaded, an empty Hugging Face cache under ``tmp_path`` (tests.learned_models.offline),
    for the tests of learned metrics (``pytestmark = pytest.mark.usefixtures("learned_offline")``)."""
    from tests import learned_models

    learned_models.offline(monkeypatch, tmp_path)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item, nextitem):
    """Before a test's fixtures are torn down (its database flushed or rolled back), wait up to 30 s
    for the background jobs it started (:func:`metrics.jobs.in_background` threads, named
    ``captioneval-*``: reports a live-server page asked for) to finish. A job still running then
    would touch a database that is being emptied; the stop CI of c8bb42a had one such teardown
    error (tests/test_dashboard_browser.py::test_live_progress_percentage, a scatter report still
    computing)."""
    import threading
    import time

    deadline = time.monotonic() + 30.0
    for thread in threading.enumerate():
        if thread.name.startswith("captioneval-") and thread is not threading.current_thread():
            thread.join(max(0.0, deadline - time.monotonic()))


@pytest.fixture(autouse=True)
def _celery_join_allowed():
    """Each test starts with Celery's process-wide "a join would block" flag off.

    Celery's eager ``delay()`` (``task_always_eager``, celery/app/task.py ``apply_async``) runs
    inside ``denied_join_result()``, which saves and restores one module global
    (celery/_state.py ``_task_join_will_block``) without a lock. Two eager calls in two threads of
    a live server that overlap can restore it in the wrong order and leave it on for the rest of
    the process; every later ``task.apply().get()`` in the test thread then raises "Never call
    result.get() within a task!" (the stop CI of f59af49 failed three tests of
    tests/test_mturk_claims.py so). The product never joins a result, so only tests see it."""
    from celery._state import _set_task_join_will_block

    _set_task_join_will_block(False)
    yield


@pytest.fixture(autouse=True)
def _exports_in_tmp(settings, tmp_path):
    """Each test stores dataset exports (crowd.export_store) in its own folder: test databases reuse ids."""
    settings.EXPORTS_ROOT = tmp_path / "exports"


@pytest.fixture(autouse=True)
def _reports_inside_the_request(settings):
    """Tests read a page's report in the response that asked for it: without a broker they compute it
    inside the request (``REPORTS_IN_THREAD`` off), unless they set ``settings.REPORTS_IN_THREAD``
    themselves (tests/test_report_thread.py checks the quick start's thread)."""
    settings.REPORTS_IN_THREAD = False


@pytest.fixture(autouse=True)
def _no_rate_limit_unless_asked(settings):
    """Simulated raters act much faster than people: tests switch the rater rate limit off unless
    they set ``settings.RATER_RATE_LIMIT`` (``API_RATE_LIMIT`` for the REST API, ``REPORT_RATE_LIMIT`` for
    the report pages and resources) themselves (tests/test_security.py does). For the same
    reason the speed check's default floor is 0 (off) in tests; campaigns with the option
    ``min_seconds_per_task`` and tests that set ``settings.CROWD_MIN_SECONDS_PER_TASK`` check speed
    (tests/test_rater_flow.py)."""
    settings.RATER_RATE_LIMIT = "0"
    settings.API_RATE_LIMIT = "0"  # the REST API's limit likewise (tests/test_api_base.py sets its own)
    settings.REPORT_RATE_LIMIT = "0"  # the report requests' limit likewise (tests/test_report_limits.py sets its own)
    settings.CROWD_MIN_SECONDS_PER_TASK = 0


#: the image source every dataset created in a test gets (tests marked ``real_image_sources`` excepted):
#: campaigns of kinds that show images are published only with pictures (crowd.images), and tests
#: about other things publish them. Port 9 (discard) on the loopback refuses at once, so a browser
#: asking for such a picture neither waits nor reaches the network.
TEST_IMAGE_URL = "http://127.0.0.1:9/test-images/{key}"


def pytest_configure(config):
    config.addinivalue_line("markers", "real_image_sources: datasets get no test image source (tests/test_image_sources.py)")


@pytest.fixture(autouse=True)
def _test_image_source(request):
    """Give every dataset created during the test the image URL template :data:`TEST_IMAGE_URL`,
    unless the test is marked ``real_image_sources``."""
    if request.node.get_closest_marker("real_image_sources"):
        yield
        return
    from django.db.models.signals import pre_save

    from crowd.models import Dataset

    def give(sender, instance, **kwargs):
        if instance.pk is None and not instance.image_source:
            instance.image_source, instance.image_location = "url", TEST_IMAGE_URL

    pre_save.connect(give, sender=Dataset, dispatch_uid="test-image-source")
    yield
    pre_save.disconnect(sender=Dataset, dispatch_uid="test-image-source")


# The test files that take longest (minutes each in a full run on a 2-core machine, from
# --durations), heaviest first. Under pytest-xdist with --dist loadfile a worker takes whole files
# in collection order, and pytest-django puts every transactional test (live servers, real
# workers: most of the heavy ones) last: the run then ended with one worker still busy for
# minutes on a file it had started late. Starting the heavy files first (longest processing time
# first) lets the short ones fill in around them.
HEAVY_FIRST = (
    "test_celery_worker.py", "test_meteor_python.py", "test_meteor_pool.py", "test_library.py", "test_campaign_pages.py",
    "test_report_speed_paths.py", "test_judges_end_to_end.py", "test_campaign_loop.py", "test_chart_layout_browser.py",
    "test_acceptance_sqlite.py", "test_campaign_concurrency.py", "test_benchmark_importers.py", "test_api_schema.py",
    "test_metric_scale_script.py", "test_diversity_campaign_metrics.py", "test_security.py",
    "test_corpus_statistics.py", "test_diversity_pipeline.py", "test_explorer.py", "test_sqlite_concurrency.py",
    "test_faults.py", "test_simulate_rate_limit.py", "test_rater_load.py", "test_xss_browser.py",
    "test_csv_injection.py", "test_leaderboard.py", "test_user_metrics.py", "test_import_limits.py",
    "test_layering.py", "test_fuzz_forms.py", "test_benchmarks.py", "test_blockpairs.py",
)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items):
    """Under pytest-xdist only: move the files of :data:`HEAVY_FIRST` to the front, in that order,
    keeping every file's own test order (a stable sort after pytest-django's). A run in one process
    keeps pytest-django's order (all non-transactional tests first), as Django's runner has it."""
    if not _XDIST_WORKER:
        return
    rank = {name: n for n, name in enumerate(HEAVY_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))
