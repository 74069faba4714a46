"""The ``captioneval`` command: ``evaluate``, ``diversity``, ``correlate``, ``serve`` and ``manage``.

One module per subcommand in :mod:`captioneval.commands`, each with ``add_parser(subparsers)`` and
``run(args) -> exit code``. Errors in the input are one line on stderr, ``captioneval: error:
FILE: problem``, with exit code 2 and no traceback (:class:`captioneval.errors.InputError`; a
metric that cannot run is reported as ``--metric: reason``). Progress bars (tqdm) go to stderr;
results to stdout or ``--out``. Nothing of Django, Celery or a database is imported, except by
``serve`` and ``manage`` (the platform: ``pip install captioneval-server``), inside their functions.
"""
from __future__ import annotations

import argparse
import os
import sys

from . import __version__
from .commands import correlate, diversity, evaluate, manage, serve
from .errors import InputError, MetricError, report

COMMANDS = (evaluate, diversity, correlate, serve, manage)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand."""
    parser = argparse.ArgumentParser(
        prog="captioneval",
        description="Caption metrics (pycocoevalcap's numbers, faster), diversity measures and metric-human "
                    "correlations. Guide: docs/library.md.")
    parser.add_argument("--version", action="version", version=f"captioneval {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in COMMANDS:
        command.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line ``argv`` (default ``sys.argv[1:]``); return the exit code (0 success,
    2 bad input or usage, 1 an unexpected failure, 130 interrupted)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["manage"]:  # everything after "manage" belongs to Django's own parser
        return manage.run_manage(argv[1:])
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except InputError as exc:
        return report(str(exc))
    except MetricError as exc:
        return report(f"--metric: {exc}")
    except KeyboardInterrupt:
        print("captioneval: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # a failure of a metric's own machinery (the METEOR JVM...): one line too
        if os.environ.get("CAPTIONEVAL_DEBUG"):
            raise
        name = type(exc).__name__
        if name in ("JavaMissingError", "MeteorError", "WeightsMissing"):  # one line saying what to install or put where
            return report(str(exc))
        print(f"captioneval: failed: {name}: {' '.join(str(exc).split())} (set CAPTIONEVAL_DEBUG=1 for the traceback)",
              file=sys.stderr)
        return 1
