"""``captioneval manage ...``: Django's ``manage.py`` of the platform (``evalsite.settings``).

The platform (the web pages, campaigns, Celery workers) runs either from a source checkout or from
the installed ``captioneval-server`` distribution (``pip install captioneval-server``). A checkout is
found first: ``$CAPTIONEVAL_HOME``, else the current folder or one of its parents holding
``manage.py``, ``evalsite/settings.py`` and ``templates/``; it goes first on ``sys.path`` and keeps
its ``var/`` folder. Without one, the installed platform runs, its SQLite file and run-time state in
``$EVALSITE_VAR_DIR`` (default ``~/.local/share/captioneval``). With neither, or without Django, it
says so in one line. Django is imported inside :func:`django_command` and :func:`database` only
(``serve`` runs through them too), never when the module is imported.
"""
from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

from ..errors import report

INSTALL = "pip install captioneval-server"


def add_parser(sub) -> None:
    """Register the subcommand (its arguments are Django's: ``captioneval manage help``)."""
    p = sub.add_parser("manage", help="the platform's Django commands (manage.py)",
                       description=__doc__.split("\n\n")[1], add_help=False)
    p.add_argument("django_args", nargs="*", metavar="ARGS", help="a Django command and its arguments")
    p.set_defaults(run=lambda args: run_manage(args.django_args))


def is_checkout(folder: Path) -> bool:
    """Whether ``folder`` holds the platform's source: ``manage.py``, ``evalsite/settings.py``, ``templates/``."""
    return (folder / "manage.py").is_file() and (folder / "evalsite" / "settings.py").is_file() \
        and (folder / "templates").is_dir()


def find_checkout(start: Path | None = None) -> Path | None:
    """``$CAPTIONEVAL_HOME`` if set (None unless it is a checkout), else the first of ``start``
    (default the current folder) and its parents that is a checkout, else None."""
    home = os.environ.get("CAPTIONEVAL_HOME")
    if home:
        return Path(home).resolve() if is_checkout(Path(home)) else None
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if is_checkout(folder):
            return folder
    return None


def prepare_platform(command: str, data_dir: str | None = None) -> int | None:
    """Make ``evalsite.settings`` importable for ``command`` (``"manage"``, ``"serve"``): the checkout
    first on ``sys.path`` when there is one, else the installed ``captioneval-server``;
    ``DJANGO_SETTINGS_MODULE`` defaulted and, with ``data_dir``, ``EVALSITE_VAR_DIR`` set to it.
    Return None when the platform can run, else 2 after a one-line error (``$CAPTIONEVAL_HOME`` not a
    checkout, no platform, no Django)."""
    root = find_checkout()
    if root is None and os.environ.get("CAPTIONEVAL_HOME"):
        return report(f"CAPTIONEVAL_HOME={os.environ['CAPTIONEVAL_HOME']}: not a captioneval source checkout (a folder "
                      "with manage.py, evalsite/ and templates/); unset it to run the installed platform")
    if root is None and importlib.util.find_spec("evalsite") is None:
        return report(f"{command}: the platform is not installed: {INSTALL} (or run it from a source checkout)")
    if importlib.util.find_spec("django") is None:
        return report(f"{command}: Django is not installed; the platform needs {INSTALL}")
    if root is not None:
        sys.path.insert(0, str(root))
    if data_dir is not None:
        os.environ["EVALSITE_VAR_DIR"] = str(Path(data_dir).expanduser().resolve())
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "evalsite.settings")
    return None


def django_command(argv: list[str]) -> int:
    """Run one Django command line ``argv`` (``["migrate", "--no-input"]``) on the prepared platform
    (:func:`prepare_platform` first); return its exit code."""
    from django.core.management import execute_from_command_line

    try:
        execute_from_command_line(["captioneval manage", *argv])
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return 0


def database() -> str:
    """The prepared platform's database as ``"ENGINE NAME"``, e.g. ``"sqlite3 /home/me/.local/share/
    captioneval/captioneval.sqlite3"`` (loads the settings)."""
    from django.conf import settings

    default = settings.DATABASES["default"]
    return f"{default['ENGINE'].rsplit('.', 1)[-1]} {default['NAME']}"


def run_manage(argv: list[str]) -> int:
    """Run Django's command line with ``argv`` on the platform; return its exit code (2 with a
    one-line error when :func:`prepare_platform` finds no platform or no Django)."""
    failed = prepare_platform("manage")
    return failed if failed is not None else django_command(argv)
