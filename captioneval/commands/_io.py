"""Files in and out for the subcommands: COCO files, CSV tables, atomic output."""
from __future__ import annotations

import csv
import io
import json
import os
import sys
import tempfile
from pathlib import Path

from ..coco import read_text
from ..errors import InputError


def check_output(path: str | None) -> None:
    """Fail early (before any work) when ``--out``'s folder does not exist: :class:`InputError`."""
    if path is None:
        return
    folder = Path(path).parent if str(Path(path).parent) else Path(".")
    if not folder.is_dir():
        raise InputError(path, f"cannot write: folder {folder} does not exist")
    if Path(path).is_dir():
        raise InputError(path, "is a directory; --out names a file")


def write_output(path: str, text: str) -> None:
    """Write ``text`` to ``path`` all at once: a temporary file in the same folder renamed over it,
    so an interrupted run leaves no half-written file. Raises :class:`InputError` when the folder
    does not exist or cannot be written."""
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        raise InputError(path, f"cannot write: folder {folder} does not exist")
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{target.name}.", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
        os.replace(tmp, target)
    except OSError as exc:
        raise InputError(path, f"cannot write ({exc.strerror or exc})") from None


def csv_text(header: list[str], rows: list[list]) -> str:
    """CSV text (UTF-8, ``\\r\\n`` rows as the csv module writes) with formula-like text cells
    neutralised (:mod:`captioneval.utils.csvsafe`); None is written as an empty cell."""
    from captioneval.utils.csvsafe import writer

    buf = io.StringIO()
    out = writer(buf)
    out.writerow(header)
    for row in rows:
        out.writerow(["" if v is None else (repr(v) if isinstance(v, float) else v) for v in row])
    return buf.getvalue()


def json_text(data) -> str:
    """Indented JSON (NaN never appears: callers pass None)."""
    return json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def output_format(args) -> str | None:
    """``"json"``, ``"csv"`` or None (no per-caption output to stdout) from ``--json`` / ``--csv`` /
    ``--out``'s suffix (``.json`` -> json, anything else -> csv)."""
    if args.json:
        return "json"
    if args.csv:
        return "csv"
    if args.out:
        return "json" if args.out.lower().endswith(".json") else "csv"
    return None


def add_output_options(parser) -> None:
    """``--json`` / ``--csv`` (mutually exclusive) and ``--out FILE``."""
    fmt = parser.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="per-item scores as JSON (to --out, else to stdout)")
    fmt.add_argument("--csv", action="store_true", help="per-item scores as CSV (to --out, else to stdout)")
    parser.add_argument("--out", metavar="FILE", help="write the per-item scores here (format from --json/--csv, "
                        "else from the suffix: .json or CSV); the corpus table still goes to stdout")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars on stderr")


def read_csv(path: str) -> tuple[list[str], list[tuple[int, dict]]]:
    """``(header, [(line number, row dict)])`` of a CSV file (TSV when the name ends in ``.tsv``).
    Raises :class:`InputError` for a missing or unreadable file, non-UTF-8 bytes, no header row,
    duplicate or empty column names, rows with more cells than the header."""
    source = str(path)
    text = read_text(path)
    delimiter = "\t" if source.lower().endswith(".tsv") else ","
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    try:
        header = next(reader, None)
        if not header or not any(h.strip() for h in header):
            raise InputError(source, "is empty: a header row naming the columns is expected")
        header = [h.strip() for h in header]
        if "" in header:
            raise InputError(source, "the header has an empty column name")
        dupes = sorted({h for h in header if header.count(h) > 1})
        if dupes:
            raise InputError(source, f"the header names column(s) {', '.join(dupes)} twice")
        rows = []
        for row in reader:
            if not row or not any(c.strip() for c in row):
                continue
            if len(row) > len(header):
                raise InputError(source, f"line {reader.line_num}: {len(row)} cells but the header has {len(header)} columns")
            rows.append((reader.line_num, dict(zip(header, (c.strip() for c in row)))))
    except csv.Error as exc:
        raise InputError(source, f"is not valid CSV: {exc} (line {reader.line_num})") from None
    return header, rows


def progress_enabled(args) -> bool:
    """Progress bars unless ``--no-progress``."""
    return not getattr(args, "no_progress", False)


def deliver(path: str | None, text: str, to_stdout: bool, table: str, what: str) -> None:
    """Where a command's output goes: with ``--out`` ``text`` is written to ``path`` (atomically,
    :func:`write_output`) and ``table`` and ``"<what>: <path>"`` printed; else ``text`` goes to stdout
    when ``to_stdout`` (``--json`` / ``--csv``), otherwise only ``table`` is printed. Raises
    :class:`InputError` when ``path`` cannot be written."""
    if path:
        write_output(path, text)
        print(table)
        print(f"{what}: {path}")
    elif to_stdout:
        sys.stdout.write(text)
    else:
        print(table)


def emit_items(args, result, rows_key: str, what: str) -> None:
    """Output of ``evaluate`` and ``diversity``: ``result`` (a :class:`captioneval.evaluate.ScoredItems`)
    as JSON (``result.to_dict()`` with each row's ``id`` named ``image_id``; the rows are under
    ``rows_key``) or CSV (columns ``image_id``, the result's ``item_columns`` and the per-item
    scores), in the format of
    :func:`output_format`, delivered by :func:`deliver` (``what`` names the file in the message)."""
    fmt = output_format(args)
    text = ""
    if fmt == "json":
        data = result.to_dict()
        for row in data[rows_key]:
            row["image_id"] = row.pop("id")
        text = json_text(data)
    elif fmt == "csv":
        columns = [name for name, _ in result.item_columns] + [k for k in result.metrics if k in result.scores]
        text = csv_text(["image_id", *columns], [[r["id"], *(r[c] for c in columns)] for r in result.rows()])
    deliver(args.out, text, fmt is not None, result.table(), what)
