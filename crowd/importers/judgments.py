"""Your own benchmark: human judgments of image captions from one JSON, JSON Lines, CSV or TSV file.

``manage.py import_dataset judgments <file> --name N [options]`` (and the upload page) read one
file of rows, each naming an image, a candidate caption, its reference captions and one or more
human scores; :class:`JudgmentMapping` says which field holds what. Formats (by the file's
extension, ``.json``/``.jsonl``/``.csv``/``.tsv``, or ``mapping.format``):

``json``
    a list of objects, e.g. the Polaris / Nebula style ``[{"imgid": ..., "mt": ..., "refs": [...],
    "score": 0.75}, ...]`` (fields renamed with the mapping).
``jsonl``
    one such object a line.
``csv`` / ``tsv``
    a header row then one row per line (RFC 4180 quoting); the references are a column holding a
    JSON list (``["a dog", "a cat"]``) or several columns ``references.1``, ``references.2``, ...
    (empty cells skipped); a score cell holds a number or a JSON list of numbers. A cell the
    platform's CSV writer protected against spreadsheet formulas (a leading ``'`` before ``=``,
    ``+``, ``-``, ``@``: :mod:`captioneval.utils.csvsafe`) is read back without that quote.

References come from the rows or, when the rows have none, from ``mapping.references_file``: a
COCO caption annotation file (``{"images": [...], "annotations": [{"image_id", "caption"}]}``,
references by image id; image keys such as ``COCO_val2014_000000310196.jpg`` read as ``310196``).

Scores: one criterion per score field (names: ``mapping.criteria``, default the field names); a
single number is one rating, a JSON list of numbers one rating per rater (raters ``r1``, ``r2``,
...). With a rater field every row is one rating and a candidate has several rows (an empty score
there means "this rater gave no rating on that criterion"). With a system field the candidates
belong to several systems (default: one system, ``candidates``). With a key field (``mapping.key``)
each candidate has its own id (several candidates of an image may then share a text).

Everything is parsed and checked before the first row is written (one transaction; the base
:class:`~crowd.importers.base.Importer` does the writing and its name rules: re-importing the same
file with the same mapping under the same name changes nothing, other data under a taken name is
refused). Refused, with ``file:line: field ...: problem``: an unknown extension, a missing field, an
empty caption, a score that is not a finite number, an image without references, references of an
image that differ between rows, the same (image, candidate, system) twice without a rater field
(the same rater twice with one), and *mixed scales*: a criterion some of whose values lie strictly
between 0 and 1 while others are greater than 1 and every value outside [0, 1] is an integer --
fractions of 1 (0.75) mixed with ratings or percentages on an integer scale (3, 75). A scale with
fractional steps above 1 (THumB's (P+R)/2 + penalties, means of 1-5 ratings) is not flagged.

The protocol stored with the dataset (``Dataset.protocol``, read by :mod:`analysis.reports`):
``{"task": "rating", "rows": "mean" | "rating", "headline", "criteria", "summary", "source",
"file", "sha256", "mapping", "human_system" (when given), "published_as" (when given)}``.
"""
from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import re
import statistics
from dataclasses import asdict, dataclass, field
from dataclasses import fields as dataclass_fields
from pathlib import Path
from typing import Any

from captioneval.utils.csvsafe import restore

from ..models import System
from .base import (
    MAX_KEY_CHARS,
    CaptionCounter,
    CaptionSpec,
    DatasetFormatError,
    ImportSummary,
    Importer,
    JudgmentSpec,
    ParsedDataset,
    SystemSpec,
    check_text,
    combined_fingerprint,
    decode_text,
    image_key,
    load_json,
    parse_json,
    read_file_bytes,
    shorten,
)

#: ``Dataset.kind`` of a dataset made by this importer.
JUDGMENTS_KIND = "judgments"
#: The formats, by file extension.
FORMATS = {".json": "json", ".jsonl": "jsonl", ".csv": "csv", ".tsv": "tsv"}
#: Statistics a protocol may name as its headline (:data:`captioneval.stats.STATISTICS`).
HEADLINES = ("kendall_tau_c", "kendall_tau_b", "pearson", "spearman")
#: Published values a dataset may be compared with (the benchmarks of the bundled table
#: data/published_correlations, read by the benchmark pages): Composite, Nebula and Polaris for a
#: benchmark you bring; flickr8k-ex and flickr8k-cf keep the published values of an exported and
#: re-imported Flickr8k-Expert or CrowdFlower set (export_dataset writes them).
PUBLISHED_AS = ("composite", "nebula", "polaris", "flickr8k-ex", "flickr8k-cf")
#: The benchmark of the published table each bundled importer's datasets are (export_dataset
#: carries it as ``published_as``; analysis.published maps the kinds the same way).
PUBLISHED_BY_KIND = {"flickr8k-expert": "flickr8k-ex", "flickr8k-crowdflower": "flickr8k-cf"}
ROWS = {"mean": "mean", "ratings": "rating", "rating": "rating"}
DEFAULT_SYSTEM = "candidates"
REFERENCE_SYSTEM = "references"
MAX_NAME_CHARS = {"system": 100, "rater": 100, "criterion": 50}
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
#: JudgmentMapping fields that hold a list of strings, and those that must hold a string
_STRING_LISTS = ("scores", "criteria")
_REQUIRED_STRINGS = ("image", "candidate", "references", "rows", "headline")


@dataclass(frozen=True)
class JudgmentMapping:
    """Which field of a row holds what, and how the dataset is evaluated.

    ``image``, ``candidate``, ``references``: field names of the image id, the candidate caption and
    its references (a JSON list; in CSV/TSV also the columns ``<references>.1``, ``.2``, ...).
    ``scores``: one field per criterion (``()``: captions without judgments); ``criteria``: their
    names (default the field names; same length as ``scores``). ``system``/``rater``/``key``:
    optional fields naming the system, the rater (each row is then one rating) and the candidate's
    id. ``rows``: ``"mean"`` (one correlation row per caption, the mean of its ratings) or
    ``"ratings"`` (every rating a row, protocol rows ``"rating"``). ``headline``: one of
    :data:`HEADLINES`. ``format``: ``json|jsonl|csv|tsv`` (None: by extension).
    ``references_file``: a COCO caption annotation file giving the references by image id.
    ``human_system``: the system of human-written candidates (system-level reports are then also
    given without it, as THumB's Human). ``key``: field of the candidate's id. ``reference_system``:
    the name of the references' system (default ``references``; part of a metric run's parameters). ``published_as``: :data:`PUBLISHED_AS` (stored as
    ``protocol["published_as"]`` only when given).
    """

    image: str = "image"
    candidate: str = "candidate"
    references: str = "references"
    scores: tuple[str, ...] = ("score",)
    criteria: tuple[str, ...] = ()
    system: str | None = None
    rater: str | None = None
    rows: str = "mean"
    headline: str = "kendall_tau_c"
    format: str | None = None
    references_file: str | None = None
    published_as: str | None = None
    key: str | None = None
    human_system: str | None = None
    reference_system: str | None = None

    def reference_name(self) -> str:
        """Name of the system holding the references (default :data:`REFERENCE_SYSTEM`)."""
        return self.reference_system or REFERENCE_SYSTEM

    def criterion_names(self) -> tuple[str, ...]:
        """The criterion of each score field, in order."""
        return tuple(self.criteria) if self.criteria else tuple(self.scores)

    def check(self) -> None:
        """Raise ValueError (one line) for an inconsistent mapping: a value of the wrong type (every
        field is checked: :meth:`check_types`), empty or repeated field names, criteria not
        matching the score fields, unknown rows/headline/format/published_as."""
        self.check_types()
        fields = [("image", self.image), ("candidate", self.candidate)]
        if not self.references_file:
            fields.append(("references", self.references))
        fields += [("score", s) for s in self.scores]
        fields += [(n, v) for n, v in (("system", self.system), ("rater", self.rater), ("key", self.key)) if v is not None]
        seen: dict[str, str] = {}
        for role, name in fields:
            if not isinstance(name, str) or not name.strip():
                raise ValueError(f"the {role} field name must be a non-empty string, got {shorten(name)}")
            if name in seen:
                raise ValueError(f"field {shorten(name)} is given as both the {seen[name]} and the {role} field")
            seen[name] = role
        criteria = self.criterion_names()
        if self.criteria and len(self.criteria) != len(self.scores):
            raise ValueError(f"{len(self.criteria)} criterion name(s) for {len(self.scores)} score field(s); give one per score field")
        if len(set(criteria)) != len(criteria):
            raise ValueError("two score fields have the same criterion name")
        for c in criteria:
            if not c or len(c) > MAX_NAME_CHARS["criterion"]:
                raise ValueError(f"criterion name {shorten(c)} is empty or longer than {MAX_NAME_CHARS['criterion']} characters")
        if self.rows not in ROWS:
            raise ValueError(f"rows must be 'mean' or 'ratings', got {shorten(self.rows)}")
        if self.headline not in HEADLINES:
            raise ValueError(f"headline must be one of {', '.join(HEADLINES)}, got {shorten(self.headline)}")
        if self.format is not None and self.format not in FORMATS.values():
            raise ValueError(f"format must be one of {', '.join(FORMATS.values())}, got {shorten(self.format)}")
        if self.published_as is not None and self.published_as not in PUBLISHED_AS:
            raise ValueError(f"published_as must be one of {', '.join(PUBLISHED_AS)}, got {shorten(self.published_as)}")
        name = self.reference_name()
        if not name.strip() or len(name) > MAX_NAME_CHARS["system"] or name != name.strip():
            raise ValueError(f"reference system name {shorten(name)} must be 1-100 characters without surrounding spaces")
        if self.human_system is not None and self.human_system == name:
            raise ValueError("the human system cannot be the reference system")

    def check_types(self) -> None:
        """Raise ValueError (one line, naming the mapping field and the value given) unless every
        field has its type: a string for ``image``, ``candidate``, ``references``, ``rows`` and
        ``headline``; a string or None for the optional fields; a list or tuple of strings for
        ``scores`` and ``criteria``. A mapping read from JSON (the API's ``mapping``) can hold any
        JSON value in any field; the later checks compare, hash and measure strings."""
        for name, value in ((f.name, getattr(self, f.name)) for f in dataclass_fields(self)):
            if name in _STRING_LISTS:
                if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
                    raise ValueError(f"mapping field {name!r} must be a list of strings, got {shorten(value)}")
            elif name in _REQUIRED_STRINGS:
                if not isinstance(value, str):
                    raise ValueError(f"mapping field {name!r} must be a string, got {shorten(value)}")
            elif value is not None and not isinstance(value, str):
                raise ValueError(f"mapping field {name!r} must be a string or left out, got {shorten(value)}")

    def to_json(self) -> dict:
        """The mapping as stored in the protocol (lists for tuples)."""
        data = asdict(self)
        data["scores"], data["criteria"] = list(self.scores), list(self.criteria)
        return data


# ---------------------------------------------------------------------------------------------
# Reading rows
# ---------------------------------------------------------------------------------------------


def file_format(path: Path, mapping: JudgmentMapping) -> str:
    """``mapping.format`` or the format of ``path``'s extension; DatasetFormatError otherwise."""
    if mapping.format:
        return mapping.format
    fmt = FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise DatasetFormatError(
            path, f"unknown extension {shorten(path.suffix or '(none)')}: expected .json, .jsonl, .csv or .tsv "
            "(or give the format)"
        )
    return fmt


def read_rows(path: Path, fmt: str, data: bytes) -> list[tuple[int, dict]]:
    """The rows of the file as ``[(line, {field: value}), ...]``: JSON values for json/jsonl,
    strings (``None`` for a cell past a short row) for csv/tsv. DatasetFormatError for bad
    encoding, invalid JSON, a JSON value that is not a list of objects, a CSV header with an empty
    or repeated column, a row with more cells than the header, or no rows."""
    text = decode_text(path, data)
    rows: list[tuple[int, dict]] = []
    if fmt == "json":
        value = parse_json(path, text)
        if not isinstance(value, list):
            raise DatasetFormatError(path, f"expected a JSON list of objects, found a {type(value).__name__}", 1)
        starts = _json_positions(text)
        line, pos = 1, 0
        for k, item in enumerate(value):
            start = starts[k] if k < len(starts) else pos
            line += text.count("\n", pos, start)
            pos = start
            if not isinstance(item, dict):
                raise DatasetFormatError(path, f"entry {k + 1} is a {type(item).__name__}, expected an object", line)
            rows.append((line, item))
    elif fmt == "jsonl":
        for lineno, line_text in enumerate(text.splitlines(), start=1):
            if not line_text.strip():
                continue
            item = parse_json(path, line_text, lineno)
            if not isinstance(item, dict):
                raise DatasetFormatError(path, f"expected a JSON object on each line, found a {type(item).__name__}", lineno)
            rows.append((lineno, item))
    else:
        reader = csv.reader(io.StringIO(text, newline=""), delimiter="," if fmt == "csv" else "\t")
        header: _Header | None = None
        previous = 0
        try:
            for record in reader:
                start, previous = previous + 1, reader.line_num
                if not any(cell.strip() for cell in record):
                    continue
                if header is None:
                    header = _Header(path, [cell.strip() for cell in record], start)
                    continue
                if len(record) > len(header.names):
                    raise DatasetFormatError(
                        path, f"{len(record)} cells but the header has {len(header.names)} columns", start
                    )
                rows.append((start, _Cells(header, [restore(cell) for cell in record])))
        except csv.Error as exc:
            raise DatasetFormatError(path, f"malformed {fmt.upper()}: {exc}", reader.line_num) from None
    if not rows:
        raise DatasetFormatError(path, "no rows found (empty file)")
    return rows


class _Header:
    """The column names of a CSV/TSV header row, checked in one pass (time linear in the number of
    columns): DatasetFormatError for a column without a name or a name given twice."""

    def __init__(self, path: Path, names: list[str], line: int):
        self.names = names
        self.positions: dict[str, int] = {}
        for i, name in enumerate(names):
            if not name:
                raise DatasetFormatError(path, f"column {i + 1} of the header has no name", line)
            if name in self.positions:
                raise DatasetFormatError(path, f"column {shorten(name)} is named twice in the header", line)
            self.positions[name] = i
        self._numbered: dict[str, dict[str, int]] = {}

    def numbered(self, name: str) -> dict[str, int]:
        """The columns ``name.1``, ``name.2``, ... -> their rank by number (found once per name,
        not once per row)."""
        if name not in self._numbered:
            columns = _numbered_columns(dict.fromkeys(self.names), name)
            self._numbered[name] = {c: k for k, c in enumerate(columns)}
        return self._numbered[name]


class _Cells(dict):
    """The cells of one CSV/TSV row by column name. Only the cells the row has are stored; a column
    of the header past the end of a short row is ``in`` the row and reads None. A row costs memory
    and time for its own cells, not for the header's width (a wide header followed by many short
    rows would otherwise grow as rows x columns)."""

    __slots__ = ("header",)

    def __init__(self, header: _Header, cells: list[str]):
        super().__init__(zip(header.names, cells))
        self.header = header

    def __contains__(self, name) -> bool:
        return name in self.header.positions

    def __missing__(self, name):
        if name in self.header.positions:
            return None
        raise KeyError(name)

    def numbered(self, name: str) -> list[str]:
        """The columns ``name.1``, ``name.2``, ... of the header that this row has cells for, by
        number (time bounded by the row's own cells)."""
        rank = self.header.numbered(name)
        if len(rank) <= dict.__len__(self):
            return [c for c in rank if dict.__contains__(self, c)]
        return sorted((c for c in dict.keys(self) if c in rank), key=rank.__getitem__)


def _json_positions(text: str) -> list[int]:
    """Start offsets of the elements of the (valid) top-level JSON array ``text``."""
    decoder = json.JSONDecoder()
    ws = re.compile(r"[ \t\n\r]*")
    idx = ws.match(text, 0).end() + 1  # past "["
    starts = []
    idx = ws.match(text, idx).end()
    if text[idx:idx + 1] == "]":
        return starts
    while True:
        starts.append(idx)
        _, idx = decoder.raw_decode(text, idx)
        idx = ws.match(text, idx).end()
        if text[idx:idx + 1] != ",":
            return starts
        idx = ws.match(text, idx + 1).end()


class _Row:
    """Helpers to read one row's fields with errors naming file, line and field."""

    def __init__(self, path: Path, line: int, values: dict, tabular: bool):
        self.path, self.line, self.values, self.tabular = path, line, values, tabular

    def fail(self, field_name: str | None, problem: str):
        where = f"field {shorten(field_name)}: " if field_name is not None else ""
        raise DatasetFormatError(self.path, where + problem, self.line)

    def has(self, name: str) -> bool:
        return name in self.values

    def raw(self, name: str):
        if name not in self.values:
            self.fail(name, "missing field")
        return self.values[name]

    def text(self, name: str, what: str, max_chars: int | None = None, numbers: bool = True) -> str:
        """The stripped non-empty string of field ``name`` (an integer too when ``numbers``)."""
        value = self.raw(name)
        kinds = (str, int) if numbers else (str,)
        if isinstance(value, bool) or not isinstance(value, kinds):
            self.fail(name, f"{what} must be a string, got {shorten(value)}")
        value = str(value).strip()
        if not value:
            self.fail(name, f"empty {what}")
        limit = {"max_chars": max_chars} if max_chars else {}
        return check_text(value, self.path, f"field {shorten(name)}: {what}", self.line, **limit)

    def image(self, name: str) -> str:
        value = self.raw(name)
        if isinstance(value, str):
            value = value.strip()
            if not value:
                self.fail(name, "empty image id")
        try:
            return image_key(value, self.path, f"line {self.line}: field {shorten(name)}")
        except DatasetFormatError as exc:
            raise DatasetFormatError(self.path, exc.problem, self.line) from None

    def optional_text(self, name: str) -> str | None:
        """A string cell that may be empty (None then)."""
        value = self.raw(name)
        if value is None or (isinstance(value, str) and not value.strip()):
            return None
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            self.fail(name, f"must be a string, got {shorten(value)}")
        return check_text(str(value).strip(), self.path, f"field {shorten(name)}", self.line, max_chars=MAX_NAME_CHARS["rater"])

    def number(self, name: str, value, where: str = "") -> float:
        if isinstance(value, str) and self.tabular:
            text = value.strip()
            if not _NUMBER.fullmatch(text):
                self.fail(name, f"score{where} {shorten(value)} is not a number")
            number = float(text)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            try:
                number = float(value)
            except OverflowError:
                number = math.inf
        else:
            self.fail(name, f"score{where} {shorten(value)} is not a number")
        if not math.isfinite(number):
            self.fail(name, f"score{where} {shorten(value)} is not a finite number")
        return number

    def scores(self, name: str, allow_list: bool, allow_empty: bool) -> list[float] | None:
        """The rating(s) of score field ``name``: [x] for a number, [x1, x2, ...] for a list,
        None for an empty cell when ``allow_empty``."""
        value = self.raw(name)
        if self.tabular and isinstance(value, str) and value.strip().startswith("["):
            value = parse_json(self.path, value.strip(), self.line)
        if value is None or (isinstance(value, str) and not value.strip()):
            if allow_empty:
                return None
            self.fail(name, "empty score")
        if isinstance(value, list):
            if not allow_list:
                self.fail(name, "with a rater field each row is one rating: give one number, not a list")
            if not value:
                self.fail(name, "empty list of scores")
            return [self.number(name, v, f" {k + 1} of the list") for k, v in enumerate(value)]
        return [self.number(name, value)]

    def references(self, name: str) -> list[str] | None:
        """The reference captions of the row: field ``name`` (a JSON list, in CSV a cell holding
        one) or the columns ``name.1``, ``name.2``, ... (CSV/TSV); None when the row has neither."""
        if name in self.values:
            value = self.values[name]
            if self.tabular and isinstance(value, str):
                if not value.strip():
                    self.fail(name, "no reference captions (empty cell)")
                value = parse_json(self.path, value.strip(), self.line) if value.strip().startswith("[") else None
                if value is None:
                    self.fail(name, 'references must be a JSON list of captions, e.g. ["a dog runs", "a brown dog"]')
            if not isinstance(value, list):
                self.fail(name, f"references must be a list of captions, got {shorten(value)}")
            out = []
            for k, text in enumerate(value):
                if not isinstance(text, str) or not text.strip():
                    self.fail(name, f"reference {k + 1} must be a non-empty string, got {shorten(text)}")
                out.append(check_text(text.strip(), self.path, f"field {shorten(name)}: reference {k + 1}", self.line))
            if not out:
                self.fail(name, "no reference captions (empty list)")
            return out
        if not _has_numbered_columns(self.values, name):
            return None
        out = []
        for column in _numbered_columns(self.values, name):
            text = self.values[column]
            if text is None or not str(text).strip():
                continue
            if not isinstance(text, str):
                self.fail(column, f"a reference must be a string, got {shorten(text)}")
            out.append(check_text(text.strip(), self.path, f"field {shorten(column)}", self.line))
        if not out:
            self.fail(f"{name}.1", f"no reference captions (every {name}.N cell is empty)")
        return out


def _has_numbered_columns(values: dict, name: str) -> bool:
    """Whether the row (a CSV/TSV row: its header) has fields ``name.1``, ``name.2``, ..."""
    if isinstance(values, _Cells):
        return bool(values.header.numbered(name))
    return bool(_numbered_columns(values, name))


def _numbered_columns(values: dict, name: str) -> list[str]:
    """The fields ``name.1``, ``name.2``, ... of a row, by number (of a CSV/TSV row: the columns it
    has cells for; the cells past the end of a short row are empty)."""
    if isinstance(values, _Cells):
        return values.numbered(name)
    prefix = name + "."
    found = []
    for key in values:
        if isinstance(key, str) and key.startswith(prefix) and key[len(prefix):].isascii() and key[len(prefix):].isdigit():
            found.append((int(key[len(prefix):]), key))
    return [k for _, k in sorted(found)]


def read_references_file(path: Path) -> dict[str, list[tuple[str, str]]]:
    """The references of a COCO caption annotation file (``{"images": [...], "annotations":
    [{"id", "image_id", "caption"}]}``, as ``captions_val2014.json``): image key (:func:`image_key`)
    -> [(annotation id, caption with whitespace runs collapsed), ...] in file order. Raises
    DatasetFormatError (a missing or too large file, invalid JSON, ``annotations`` not a list, an
    entry without ``image_id`` or ``caption``, an empty caption, an annotation id given twice, more
    than ``IMPORT_MAX_CAPTIONS`` annotations), naming the entry ``annotations[i]``."""
    data = load_json(path)
    annotations = data.get("annotations") if isinstance(data, dict) else None
    if not isinstance(annotations, list):
        raise DatasetFormatError(path, 'not a COCO caption annotation file: expected {"images": [...], "annotations": [...]}')
    CaptionCounter(path).add(len(annotations))
    out: dict[str, list[tuple[str, str]]] = {}
    ids: set[str] = set()
    for i, entry in enumerate(annotations):
        where = f"annotations[{i}]"
        if not isinstance(entry, dict) or "image_id" not in entry or not isinstance(entry.get("caption"), str):
            raise DatasetFormatError(path, f"{where}: expected an object with image_id and a caption string")
        key = image_key(entry["image_id"], path, where)
        text = " ".join(entry["caption"].split())
        if not text:
            raise DatasetFormatError(path, f"{where}: empty caption")
        ann = entry.get("id", f"{key}-{len(out.get(key, []))}")
        if isinstance(ann, bool) or not isinstance(ann, (int, str)) or not str(ann).strip() or len(str(ann)) > MAX_KEY_CHARS:
            raise DatasetFormatError(path, f"{where}: id must be an integer or a short string, got {shorten(ann)}")
        if str(ann) in ids:
            raise DatasetFormatError(path, f"{where}: annotation id {shorten(ann)} is given twice")
        ids.add(str(ann))
        out.setdefault(key, []).append((str(ann), check_text(text, path, f"{where}: caption")))
    if not out:
        raise DatasetFormatError(path, "no caption annotations")
    return out


# ---------------------------------------------------------------------------------------------
# The importer
# ---------------------------------------------------------------------------------------------


@dataclass
class _Candidate:
    line: int
    image: str
    system: str
    key: str
    text: str
    ratings: list[tuple[str, str, float, int]] = field(default_factory=list)  # (criterion, rater, score, line)


def check_scales(path: Path, values: dict[str, list[tuple[float, int]]]) -> None:
    """Refuse a criterion that mixes scales (see the module docstring): some value strictly between
    0 and 1, some value above 1, and every value outside [0, 1] an integer. ``values``: criterion ->
    [(score, line), ...]. Raises DatasetFormatError naming the criterion and a line of each kind."""
    for criterion, pairs in values.items():
        fraction = next(((v, ln) for v, ln in pairs if 0 < v < 1), None)
        above = [(v, ln) for v, ln in pairs if v > 1]
        outside = [v for v, _ in pairs if v < 0 or v > 1]
        if fraction and above and all(float(v).is_integer() for v in outside):
            raise DatasetFormatError(
                path,
                f"criterion {shorten(criterion)} mixes scales: {fraction[0]:g} (line {fraction[1]}) is a fraction of 1 "
                f"but {above[0][0]:g} (line {above[0][1]}) is on an integer scale above 1; put every score of a "
                "criterion on one scale",
                fraction[1],
            )


class JudgmentsImporter(Importer):
    """Generic human judgments (``import_dataset judgments <file>``): one file read with a
    :class:`JudgmentMapping` (module docstring). Use :func:`import_judgments`.

    Parsed rows: images in order of first appearance; systems in order of first appearance
    (``mapping.human_system`` of kind human, the others models); the reference system
    ``references`` with each image's references (keys ``ref01``, ``ref02``... in list order, or
    the COCO annotation ids of ``references_file``); one caption per candidate (key: the key field,
    else ``c0000001``... in file order); one judgment per rating (criterion, rater, score).
    """

    format = "judgments"
    kind = JUDGMENTS_KIND
    counts = {"images": "images", "candidate captions": "candidates", "reference captions": "references",
              "judgments": "judgments", "systems": "systems"}

    def __call__(self, path, name: str, mapping: JudgmentMapping | None = None, display_name: str | None = None,
                 **options) -> ImportSummary:
        if options:
            raise ValueError(f"{shorten(sorted(options)[0])} is not an option of format 'judgments'")
        return import_judgments(path, name, mapping or JudgmentMapping(), display_name=display_name)

    def parse_file(self, path: Path, mapping: JudgmentMapping, display_name: str | None = None) -> ParsedDataset:
        """Read and check ``path`` with ``mapping`` into a ParsedDataset (nothing written).
        Raises DatasetFormatError (file:line: field: problem)."""
        data = read_file_bytes(path)
        fmt = file_format(path, mapping)
        sha = hashlib.sha256(data).hexdigest()
        rows = read_rows(path, fmt, data)
        tabular = fmt in ("csv", "tsv")
        criteria = mapping.criterion_names()
        coco_refs: dict[str, list[tuple[str, str]]] | None = None
        refs_sha = ""
        if mapping.references_file:
            refs_path = Path(mapping.references_file)
            coco_refs = read_references_file(refs_path)
            refs_sha = hashlib.sha256(refs_path.read_bytes()).hexdigest()
        ref_system = mapping.reference_name()
        counter = CaptionCounter(path)
        candidates: dict[tuple, _Candidate] = {}
        by_key: dict[tuple[str, str, str], _Candidate] = {}
        references: dict[str, tuple[list[str], int]] = {}
        systems: dict[str, None] = {}
        images: dict[str, None] = {}
        scale_values: dict[str, list[tuple[float, int]]] = {c: [] for c in criteria}
        rated: dict[tuple, int] = {}
        for line, values in rows:
            row = _Row(path, line, values, tabular)
            image = row.image(mapping.image)
            text = row.text(mapping.candidate, "candidate caption", numbers=False)
            system = row.text(mapping.system, "system name", max_chars=MAX_NAME_CHARS["system"]) if mapping.system else DEFAULT_SYSTEM
            if system == ref_system:
                row.fail(mapping.system, f"system name {ref_system!r} is the name of the reference captions' system")
            key = row.text(mapping.key, "caption id", max_chars=MAX_KEY_CHARS) if mapping.key else None
            # references
            if coco_refs is not None:
                if row.has(mapping.references) or _has_numbered_columns(values, mapping.references):
                    row.fail(mapping.references, "the rows hold references and a references file is given: use one")
                if image not in coco_refs:
                    row.fail(mapping.image, f"image {shorten(image)} has no references in {Path(mapping.references_file).name}")
            else:
                refs = row.references(mapping.references)
                if refs is None:
                    row.fail(mapping.references, f"missing field (no {mapping.references!r} and no "
                             f"{mapping.references}.1, {mapping.references}.2... columns; or give a references file)")
                if image in references:
                    first, first_line = references[image]
                    if refs != first:
                        row.fail(mapping.references, f"references of image {shorten(image)} differ from those on line {first_line}")
                else:
                    references[image] = (refs, line)
            # the candidate
            if mapping.rater:
                ident = (image, system, key if key is not None else text)
            else:
                ident = (image, system, key if key is not None else text, line)
                dup = (image, system, key if key is not None else text)
                if dup in rated:
                    what = f"caption id {shorten(key)}" if key is not None else f"candidate {shorten(text)}"
                    row.fail(mapping.key or mapping.candidate,
                             f"{what} of image {shorten(image)} by system {shorten(system)} is also on line {rated[dup]} "
                             "(give a rater field if rows are separate ratings)")
                rated[dup] = line
            cand = candidates.get(ident)
            if cand is None:
                if key is not None:
                    other = by_key.get((image, system, key))
                    if other is not None and other.text != text:
                        row.fail(mapping.candidate, f"caption id {shorten(key)} has another text on line {other.line}")
                counter.add(1, line)
                cand = _Candidate(line, image, system, key or f"c{len(candidates) + 1:07d}", text)
                candidates[ident] = cand
                if key is not None:
                    by_key[(image, system, key)] = cand
                images.setdefault(image)
                systems.setdefault(system)
            elif cand.text != text:
                row.fail(mapping.candidate, f"caption id {shorten(key)} has another text on line {cand.line}")
            # ratings
            if mapping.rater:
                rater = row.optional_text(mapping.rater)
                got_any = False
                for score_field, criterion in zip(mapping.scores, criteria):
                    got = row.scores(score_field, allow_list=False, allow_empty=True)
                    if got is None:
                        continue
                    got_any = True
                    if rater is None:
                        row.fail(mapping.rater, "empty rater for a row with a score")
                    if any(c == criterion and r == rater for c, r, _, _ in cand.ratings):
                        first = next(ln for c, r, _, ln in cand.ratings if c == criterion and r == rater)
                        row.fail(mapping.rater, f"rater {shorten(rater)} rated this candidate on {criterion!r} also on line {first}")
                    cand.ratings.append((criterion, rater, got[0], line))
                    scale_values[criterion].append((got[0], line))
                if not got_any and rater is not None and mapping.scores:
                    row.fail(mapping.scores[0], f"rater {shorten(rater)} gives no score")
            else:
                for score_field, criterion in zip(mapping.scores, criteria):
                    got = row.scores(score_field, allow_list=True, allow_empty=False)
                    for k, score in enumerate(got, start=1):
                        cand.ratings.append((criterion, f"r{k}", score, line))
                        scale_values[criterion].append((score, line))
        if mapping.human_system and mapping.human_system not in systems:
            raise DatasetFormatError(path, f"human system {shorten(mapping.human_system)} is not among the systems "
                                     f"({', '.join(list(systems)[:5])})")
        check_scales(path, scale_values)
        image_list = list(images)
        if coco_refs is not None:
            ref_specs = [CaptionSpec(img, ref_system, ann_id, text) for img in image_list for ann_id, text in coco_refs[img]]
        else:
            ref_specs = [
                CaptionSpec(img, ref_system, f"ref{k:02d}", text)
                for img in image_list for k, text in enumerate(references[img][0], start=1)
            ]
        per_image: dict[str, int] = {}
        for spec in ref_specs:
            per_image[spec.image] = per_image.get(spec.image, 0) + 1
        refs_per_image = [per_image.get(img, 0) for img in image_list]
        cand_list = list(candidates.values())
        judgments = [
            JudgmentSpec(c.image, c.system, c.key, criterion, rater, score, "judgments")
            for c in cand_list for criterion, rater, score, _ in c.ratings
        ]
        main = criteria[0] if criteria else ""
        main_scores = [s for s, _ in scale_values.get(main, [])]
        rows_mode = ROWS[mapping.rows]
        shown = display_name or path.name
        protocol: dict[str, Any] = {
            "task": "rating",
            "rows": rows_mode,
            "headline": mapping.headline,
            "criteria": list(criteria),
            "summary": (
                f"Human judgments imported from {shown}: {len(cand_list):,} candidate captions of {len(image_list):,} "
                f"images by {len(systems)} system(s), {len(judgments):,} ratings on {', '.join(criteria) or 'no criterion'}; "
                + ("every rating is a correlation row" if rows_mode == "rating" else
                   "one correlation row per caption (the mean of its ratings)")
                + f"; headline statistic {mapping.headline}."
            ),
            "source": f"import_dataset judgments {shown}",
            "file": shown,
            "sha256": sha,
            "mapping": mapping.to_json(),
        }
        if refs_sha:
            protocol["references_sha256"] = refs_sha
        if mapping.human_system:
            protocol["system_level"] = True
            protocol["human_system"] = mapping.human_system
        if mapping.published_as:
            protocol["published_as"] = mapping.published_as
        raters = {r for c in cand_list for _, r, _, _ in c.ratings}
        notes = [
            f"references per image: min {min(refs_per_image)}, median {statistics.median(refs_per_image):g}, "
            f"max {max(refs_per_image)}; {len(systems)} system(s) ({', '.join(list(systems)[:5])}"
            f"{', ...' if len(systems) > 5 else ''}); {len(raters)} rater(s); criteria: {', '.join(criteria) or 'none'}; "
            f"correlation rows: {rows_mode}; headline {mapping.headline}"
        ]
        return ParsedDataset(
            source=path,
            description=f"Human judgments imported from {shown}.",
            criterion=main, scale_min=min(main_scores) if main_scores else None,
            scale_max=max(main_scores) if main_scores else None, protocol=protocol,
            images=image_list,
            systems=[SystemSpec(ref_system, System.HUMAN, f"reference captions of {shown}")]
            + [SystemSpec(s, System.HUMAN if s == mapping.human_system else System.MODEL, "") for s in systems],
            reference_system=ref_system,
            references=ref_specs,
            captions=[CaptionSpec(c.image, c.system, c.key, c.text) for c in cand_list],
            judgments=judgments,
            fingerprint=combined_fingerprint(sha, refs_sha, repr(sorted(mapping.to_json().items())), shown),
            notes=notes,
        )


def import_judgments(
    path: Path | str, name: str, mapping: JudgmentMapping = JudgmentMapping(), *, display_name: str | None = None,
) -> ImportSummary:
    """Import the human judgments of file ``path`` as dataset ``name`` (kind :data:`JUDGMENTS_KIND`),
    all or nothing (:class:`JudgmentsImporter`, rules in the module docstring).

    ``mapping`` names the fields and the protocol; ``display_name`` is the file's name stored in
    the protocol (the upload's original name; default ``path``'s name). Re-importing the same file
    with the same mapping and display name under ``name`` changes nothing (``created`` False).

    Raises
    ------
    ValueError
        an inconsistent mapping (:meth:`JudgmentMapping.check`).
    DatasetFormatError
        a missing, unreadable or malformed file: ``"file:line: field 'x': problem"``.
    DatasetExistsError
        ``name`` is taken by a dataset with other contents.
    """
    mapping.check()
    importer = JudgmentsImporter()
    parsed = importer.parse_file(Path(path), mapping, display_name)
    return importer.save(name, parsed)
