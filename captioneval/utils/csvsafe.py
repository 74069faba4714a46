"""CSV cells a spreadsheet will not run as formulas (OWASP "CSV Injection"), with an exact way back.

Excel, LibreOffice and Google Sheets treat a cell whose text starts with ``=``, ``+``, ``-``, ``@``,
a tab or a carriage return as a formula (``=HYPERLINK(...)``, ``=cmd|' /C calc'!A0``). Every CSV the
platform writes passes its cells through :func:`neutralise`: such a text cell gets a leading single
quote, which spreadsheets take as "this is text" and do not display. Genuine numbers stay as they are
so numeric columns stay numeric: int / float / Decimal values, and strings that are plain decimal
numbers (``-0.25``, ``+3``, ``1e-3``, ``-.5``).

Round trip: :func:`restore` undoes :func:`neutralise` exactly, ``restore(neutralise(s)) == s`` for
every string. To make that hold, a text that already starts with quotes followed by a trigger
(``'=x``) gets one more quote too (``''=x``, which a spreadsheet shows as ``'=x``). Use :func:`restore`
only on files the platform wrote itself (the atoms CSV of ``visual_atoms``, the ``Input.*`` columns of
an MTurk batch results file, which echo our input CSV); a file someone wrote by hand is read as is.

No Django, no Celery (the package :mod:`captioneval.utils` imports nothing of the platform):
``from captioneval.utils.csvsafe import writer, neutralise, restore``.
"""
from __future__ import annotations

import csv
import io
import re

#: first characters that make a spreadsheet evaluate a cell (OWASP)
TRIGGERS = frozenset("=+-@\t\r")
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")


def is_number_text(text: str) -> bool:
    """Whether ``text`` is a plain decimal number (``-0.25``, ``+3``, ``1e-3``): no spaces, no
    ``inf`` / ``nan``, no thousands separators."""
    return _NUMBER.fullmatch(text) is not None


def needs_quote(text: str) -> bool:
    """Whether :func:`neutralise` prefixes the string ``text`` with a quote: after any leading
    quotes it starts with a trigger character and is not a plain number."""
    rest = text.lstrip("'")
    return rest[:1] in TRIGGERS and not is_number_text(rest)


def neutralise(value):
    """The cell to write for ``value``: a string that :func:`needs_quote` gets a leading ``'``;
    anything else (numbers, None, other strings) is returned unchanged."""
    if isinstance(value, str) and needs_quote(value):
        return "'" + value
    return value


def restore(cell: str) -> str:
    """The original text of a cell :func:`neutralise` wrote (the inverse: drops one leading quote
    when what follows is a text neutralise would have quoted; other cells are unchanged)."""
    if cell[:1] == "'" and needs_quote(cell[1:]):
        return cell[1:]
    return cell


def restore_row(row):
    """:func:`restore` applied to every cell of a row (a list of strings)."""
    return [restore(c) for c in row]


class SafeWriter:
    """``csv.writer`` (same arguments, ``writerow`` / ``writerows``) whose cells are
    :func:`neutralise` d, and whose text cells containing a CR or LF are always quoted: the csv
    module quotes only the characters of its ``lineterminator``, so with ``lineterminator="\\n"`` a
    CR inside a cell would end the row for a reader (and could start the next one with ``=``)."""

    def __init__(self, fileobj, dialect="excel", **fmtparams):
        self._file = fileobj
        self._line = io.StringIO()
        self._end = csv.writer(self._line, dialect, **fmtparams).dialect.lineterminator
        self._writer = csv.writer(self._line, dialect, **{**fmtparams, "lineterminator": "\r\n"})

    def writerow(self, row):
        self._line.seek(0)
        self._line.truncate()
        self._writer.writerow([neutralise(v) for v in row])
        return self._file.write(self._line.getvalue()[:-2] + self._end)

    def writerows(self, rows):
        for row in rows:
            self.writerow(row)


def writer(fileobj, dialect="excel", **fmtparams) -> SafeWriter:
    """A :class:`SafeWriter` on ``fileobj`` (arguments as for ``csv.writer``)."""
    return SafeWriter(fileobj, dialect, **fmtparams)


class DictWriter(csv.DictWriter):
    """``csv.DictWriter`` writing through a :class:`SafeWriter` (values and header cells neutralised)."""

    def __init__(self, f, fieldnames, restval="", extrasaction="raise", dialect="excel", **fmtparams):
        super().__init__(f, fieldnames, restval, extrasaction, dialect, **fmtparams)
        self.writer = SafeWriter(f, dialect, **fmtparams)
