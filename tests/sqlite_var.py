"""The quick start's embedded SQLite database, migrated once per test session.

Tests of the SQLite default (tests/test_acceptance_sqlite.py, test_pipeline_bulk.py,
test_sqlite_concurrency.py) drive ``manage.py`` in subprocesses against a var folder of their own.
``manage.py migrate`` on an empty file is the slowest of those commands (a fresh interpreter applying
every migration), so it runs once, into a template folder, and :func:`migrated_var` gives each test a
copy of it: the same file a migrate of its own would have written.
"""
from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_TEMPLATE: list[Path] = []
_LOCK = threading.Lock()


def sqlite_env(var: Path) -> dict:
    """This process's environment without a database or broker URL (the quick start's defaults: the
    embedded SQLite file in ``var``, tasks in-process) and with ``EVALSITE_VAR_DIR=var``."""
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CELERY_BROKER_URL")}
    env["EVALSITE_VAR_DIR"] = str(var)
    return env


def _template() -> Path:
    with _LOCK:
        if not _TEMPLATE:
            parent = Path(tempfile.mkdtemp(prefix="captioneval-sqlite-"))
            atexit.register(shutil.rmtree, parent, True)
            var = parent / "var"
            done = subprocess.run([sys.executable, "manage.py", "migrate", "-v", "0"], cwd=ROOT, env=sqlite_env(var),
                                  capture_output=True, text=True, timeout=900)
            assert done.returncode == 0, done.stderr[-3000:]
            assert (var / "captioneval.sqlite3").is_file()
            _TEMPLATE.append(var)
        return _TEMPLATE[0]


def migrated_var(target: Path) -> Path:
    """Create ``target`` as a var folder holding a fully migrated embedded SQLite database (a copy of
    the session's template). Returns ``target``."""
    shutil.copytree(_template(), target)
    return target
