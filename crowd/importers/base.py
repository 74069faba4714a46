"""Shared pieces of the dataset importers: errors, summary, file reading."""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path


class DatasetFormatError(ValueError):
    """A source file is missing or malformed. The message names the file, the line and the problem
    (a problem quoting a huge value is cut after :data:`MAX_PROBLEM_CHARS` characters)."""

    MAX_PROBLEM_CHARS = 1000

    def __init__(self, path: Path | str, problem: str, line: int | None = None):
        if len(problem) > self.MAX_PROBLEM_CHARS:
            problem = problem[: self.MAX_PROBLEM_CHARS] + " [...]"
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


#: Longest caption (in characters, after the importer's whitespace normalisation) an importer
#: accepts; longer ones are refused with DatasetFormatError. Real captions have at most a few
#: hundred characters (Flickr8k: 199, COCO: about 250).
MAX_CAPTION_CHARS = 5000
#: Longest image key, caption key or id (the width of ``Image.key`` and ``Caption.key``).
MAX_KEY_CHARS = 255
_BOMS = {
    b"\xff\xfe\x00\x00": "UTF-32", b"\x00\x00\xfe\xff": "UTF-32",
    b"\xff\xfe": "UTF-16", b"\xfe\xff": "UTF-16",
}
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")  # NUL, and lone surrogates (from JSON "\\ud800" or .mat chars)


def decode_text(path: Path, data: bytes) -> str:
    """Decode the bytes of text file ``path`` as UTF-8 (a leading UTF-8 byte-order mark is dropped).

    Raises DatasetFormatError naming the file (and the line) for a UTF-16/UTF-32 byte-order mark,
    UTF-16 text without one (a NUL byte next to every character), bytes that are not UTF-8 (e.g.
    a Latin-1 file) or a NUL character (PostgreSQL cannot store it).
    """
    for bom, encoding in _BOMS.items():
        if data.startswith(bom):
            raise DatasetFormatError(path, f"the file is {encoding} encoded (byte-order mark); save it as UTF-8", 1)
    head = data[:4096]
    if head and max(head[0::2].count(0), head[1::2].count(0)) > len(head) // 4:
        raise DatasetFormatError(
            path, "the file looks UTF-16 encoded (a NUL byte next to every character); save it as UTF-8", 1
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise DatasetFormatError(
            path, f"not valid UTF-8 text ({exc.reason}: byte 0x{data[exc.start]:02x}); save the file as UTF-8", line
        ) from None
    if text.startswith("\ufeff"):
        text = text[1:]
    nul = text.find("\x00")
    if nul >= 0:
        line = text.count("\n", 0, nul) + 1
        raise DatasetFormatError(path, "contains a NUL character (U+0000), which cannot be stored", line)
    return text


def read_lines(path: Path) -> list[str]:
    """Read a UTF-8 text file into lines without their line endings (``\\n``, ``\\r\\n`` or ``\\r``;
    other Unicode line separators stay inside their line, so line numbers are an editor's).

    Raises DatasetFormatError if the file is missing, is not a file, or is not UTF-8 text without
    NUL characters (see :func:`decode_text`; the message names the line of the first bad byte).
    """
    if not path.is_file():
        raise DatasetFormatError(path, "file not found")
    lines = _LINE_BREAK.split(decode_text(path, path.read_bytes()))
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def check_text(value: str, path: Path, what: str, line: int | None = None, max_chars: int = MAX_CAPTION_CHARS) -> str:
    """Return ``value`` if it can be stored as a caption or key: at most ``max_chars`` characters,
    no NUL character and no lone UTF-16 surrogate (U+D800-U+DFFF, which JSON ``"\\ud83d"`` escapes
    or MATLAB char arrays can hold but UTF-8 cannot encode); else raise DatasetFormatError naming
    ``path``, ``line`` and ``what`` (e.g. ``"caption of 'x.jpg#1'"``). Any other Unicode (emoji,
    combining marks, right-to-left text, zero-width joiners) is kept exactly."""
    bad = _UNSTORABLE.search(value)
    if bad:
        char = "a NUL character (U+0000)" if bad.group() == "\x00" else f"a lone surrogate (U+{ord(bad.group()):04X})"
        raise DatasetFormatError(path, f"{what} contains {char}, which cannot be stored", line)
    if len(value) > max_chars:
        raise DatasetFormatError(path, f"{what} is longer than {max_chars:,} characters ({len(value):,})", line)
    return value


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
