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


def combined_fingerprint(*parts: str) -> str:
    """SHA-256 (hex) over already computed fingerprints and option strings, e.g. the files'
    fingerprint plus ``"references=5;seed=0"`` for an importer whose output depends on options."""
    return hashlib.sha256("\0".join(parts).encode("utf-8")).hexdigest()


def check_existing(dataset, kind: str, digest: str) -> bool:
    """Decide what an import under an existing name does.

    ``dataset`` is the row locked for update (or None). Returns True when the same kind of data with
    the same fingerprint is already there (the import must change nothing), False when the name is
    free. Raises :class:`DatasetExistsError` when the name holds other data.
    """
    if dataset is None:
        return False
    if dataset.kind == kind and dataset.fingerprint == digest:
        return True
    raise DatasetExistsError(f"dataset {dataset.name!r} already exists with different data; choose another --name")


def refresh_statistics(*models) -> None:
    """Refresh the query planner's statistics of the tables of ``models`` after a bulk import
    (PostgreSQL ``ANALYZE``; nothing on other databases).

    Without it, queries right after an import (reports, metric runs; autovacuum analyses only
    later) may be planned on statistics of the empty tables, e.g. a nested loop over 44,000
    pairwise votes that takes a minute instead of a fraction of a second.
    """
    from django.db import connection

    if connection.vendor != "postgresql" or not models:
        return
    tables = ", ".join(connection.ops.quote_name(m._meta.db_table) for m in models)
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {tables}")
