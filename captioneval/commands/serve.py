"""``captioneval serve``: start the platform's web site with one command.

Runs the database migrations, then Django's web server on ``--host``/``--port`` (default
127.0.0.1:8000), without reloading, until Ctrl-C. With no other settings in the environment this is
the embedded default: a SQLite file in the data folder (``--data-dir``, else ``$EVALSITE_VAR_DIR``,
else ``~/.local/share/captioneval`` for the installed ``captioneval-server``, ``var/`` in a source
checkout), Celery tasks in-process, no Redis. ``DATABASE_URL``, ``CELERY_BROKER_URL`` and the other
variables of ``evalsite/settings.py`` are honoured as by ``captioneval manage``. The platform is found
the way ``manage`` finds it (:func:`captioneval.commands.manage.prepare_platform`); without it the
command says ``pip install captioneval-server`` in one line. Django is imported by
:mod:`captioneval.commands.manage` only (:func:`~captioneval.commands.manage.django_command`), never
by this module.
"""
from __future__ import annotations

import os
import sys

from .manage import database, django_command, prepare_platform

LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")
WILDCARD_HOSTS = ("0.0.0.0", "::", "")


def add_parser(sub) -> None:
    """Register the subcommand."""
    p = sub.add_parser("serve", help="start the platform's web site (SQLite, tasks in-process): "
                                     "pip install captioneval-server",
                       description=__doc__.split("\n\n")[1])
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1; 0.0.0.0 for every "
                   "interface, then list the names clients use in DJANGO_ALLOWED_HOSTS)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    p.add_argument("--data-dir", default=None, metavar="DIR",
                   help="folder of the SQLite database and uploaded pictures, created if missing (default "
                        "$EVALSITE_VAR_DIR, else ~/.local/share/captioneval; var/ in a source checkout)")
    p.set_defaults(run=run_serve)


def address(host: str, port: int) -> str:
    """``host:port`` as Django's ``runserver`` takes it (an IPv6 address in brackets)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def run_serve(args) -> int:
    """Migrate the platform's database and serve it until interrupted; return the exit code (2 with
    one line when the platform or Django is missing, Django's code when a command fails)."""
    failed = prepare_platform("serve", args.data_dir)
    if failed is not None:
        return failed
    if args.host not in LOCAL_HOSTS + WILDCARD_HOSTS and not os.environ.get("DJANGO_ALLOWED_HOSTS"):
        os.environ["DJANGO_ALLOWED_HOSTS"] = ",".join((*LOCAL_HOSTS[:2], args.host))
    print(f"captioneval: database {database()}; migrating", file=sys.stderr, flush=True)
    code = django_command(["migrate", "--no-input", "--verbosity", "0"])
    if code:
        return code
    where = address(args.host, args.port)
    print(f"captioneval: serving http://{where}/ (Ctrl-C to stop)", file=sys.stderr, flush=True)
    return django_command(["runserver", "--noreload", *(["--ipv6"] if ":" in args.host else []), where])
