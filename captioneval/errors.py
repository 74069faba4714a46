"""The errors of the library and the command line.

Everything the ``captioneval`` command reports as ``captioneval: error: FILE: problem`` (exit code
2) is an :class:`InputError`: a file that is missing or unreadable, not JSON or CSV, a field that is
missing or of the wrong type, results for image ids the annotations do not have... The Python API
raises the same class (a :class:`ValueError`), so a script can catch it; its ``source`` names the
file (or ``"candidates"``, ``"references"``... for in-memory arguments) and ``problem`` says what is
wrong in one line.
"""
from __future__ import annotations

import sys


class InputError(ValueError):
    """Bad input: ``source`` (a file name or argument name) and ``problem`` (one line).

    ``str(error)`` is ``"source: problem"``."""

    def __init__(self, source: str, problem: str):
        self.source = str(source)
        self.problem = " ".join(str(problem).split())
        super().__init__(f"{self.source}: {self.problem}")


class MetricError(ValueError):
    """A metric that is unknown, of the wrong kind for the call, or cannot run in this installation
    (missing Java, a missing optional package); the message says which and how to fix it."""


def report(message: str) -> int:
    """Print ``captioneval: error: message`` as one line on stderr (whitespace runs, newlines
    included, become one space); return 2, the command's exit code for bad input."""
    print(f"captioneval: error: {' '.join(str(message).split())}", file=sys.stderr)
    return 2
