"""Shared pieces of the dataset importers: errors, summary, file reading."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path


class DatasetFormatError(ValueError):
    """A source file is missing or malformed. The message names the file, the line and the problem."""

    def __init__(self, path: Path | str, problem: str, line: int | None = None):
        self.path, self.line, self.problem = Path(path), line, problem
        where = f"{self.path}:{line}" if line is not None else str(self.path)
        super().__init__(f"{where}: {problem}")


class DatasetExistsError(ValueError):
    """A dataset with this name exists and holds different data."""


@dataclass
class ImportSummary:
    """What an import did. ``created`` is False when identical data was already imported."""

    dataset: str
    created: bool
    counts: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def __str__(self):
        verb = "imported" if self.created else "already imported (identical files), nothing changed:"
        parts = ", ".join(f"{v:,} {k}" for k, v in self.counts.items())
        text = f"dataset {self.dataset!r} {verb} {parts}"
        return "\n".join([text, *self.notes])


def read_lines(path: Path) -> list[str]:
    """Read a UTF-8 text file into lines without their line endings.

    Raises DatasetFormatError if the file is missing, is not a file, or is not valid UTF-8 (naming
    the line of the first bad byte).
    """
    if not path.is_file():
        raise DatasetFormatError(path, "file not found")
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise DatasetFormatError(path, f"not valid UTF-8 text ({exc.reason})", line) from None
    return text.splitlines()


def fingerprint(*paths: Path) -> str:
    """SHA-256 over the contents of ``paths`` in order (hex, 64 characters)."""
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()
