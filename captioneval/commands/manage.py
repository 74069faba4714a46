"""``captioneval manage ...``: Django's ``manage.py`` of the platform (``evalsite.settings``).

The platform (the web pages, campaigns, Celery workers) runs from a source checkout: its settings
read ``templates/``, ``data/`` and ``var/`` beside the ``evalsite`` package. This command finds the
checkout (``$CAPTIONEVAL_HOME``, else the current folder or one of its parents holding
``manage.py``, ``evalsite/settings.py`` and ``templates/``), puts it first on ``sys.path`` and runs
Django's command line there, with the platform's packages installed (``pip install
'captioneval[server]'``). Outside a checkout it says so in one line. This is the only subcommand that
imports Django.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

from ..errors import report


def add_parser(sub) -> None:
    """Register the subcommand (its arguments are Django's: ``captioneval manage help``)."""
    p = sub.add_parser("manage", help="the platform's Django commands (manage.py), from a source checkout",
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


def run_manage(argv: list[str]) -> int:
    """Run Django's command line with ``argv`` in the checkout; return its exit code (2 with a
    one-line error when there is no checkout or Django is not installed)."""
    root = find_checkout()
    if root is None:
        where = f"CAPTIONEVAL_HOME={os.environ['CAPTIONEVAL_HOME']}" if os.environ.get("CAPTIONEVAL_HOME") else \
            f"{Path.cwd()}"
        return report(f"{where}: not a captioneval source checkout (a folder with manage.py, evalsite/ and templates/); "
                     "captioneval manage runs the platform from its checkout: cd into it or set CAPTIONEVAL_HOME")
    try:
        import django  # noqa: F401
    except ImportError:
        return report("manage: Django is not installed; the platform needs pip install 'captioneval[server]'")
    sys.path.insert(0, str(root))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "evalsite.settings")
    from django.core.management import execute_from_command_line

    try:
        execute_from_command_line(["captioneval manage", *argv])
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return 0
