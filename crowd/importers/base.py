"""The importer skeleton: parse, validate everything, then write in one transaction.

Every dataset importer is a subclass of :class:`Importer` in its own module of this package that
only *parses*: :meth:`Importer.parse` turns the source files into a :class:`ParsedDataset` (images,
systems, reference and candidate captions, human judgments, pairwise judgments, object labels,
protocol) or raises :class:`DatasetFormatError` naming the file, the line (or pair, or entry) and
the problem. Everything else is done once, here, by :meth:`Importer.save`:

1. :meth:`Importer.validate` checks the parsed structure as a whole (every caption's image and
   system exist, no caption key twice, every judgment points at a caption) and the size limits
   (:meth:`Importer.check_limits`), before the first row is written;
2. the rows are written in one transaction (``transaction.atomic``), so an error leaves the
   database unchanged;
3. the name rules: ``mode = "create"`` importers (whole published datasets) are idempotent (the
   same files, and options, under the same name change nothing: :func:`check_existing` compares
   the stored fingerprint) and refuse a name taken by other data (:class:`DatasetExistsError`);
   ``mode = "extend"`` importers (COCO caption sets) add systems to a dataset of their own kind,
   leave a system that already holds exactly the same captions alone and refuse one that holds
   others;
4. the summary counts rows with one counter per quantity (:data:`COUNTERS`).

Registry: a subclass that sets :attr:`Importer.format` registers itself in :data:`REGISTRY` when
its class is defined (``__init_subclass__``), and ``crowd/importers/__init__.py`` imports every
module of this package, so adding an importer is adding one file (``manage.py import_dataset
<format> <dir> --name <name>`` then finds it).

Import caps (configurable in the settings, read from the environment; defaults admit COCO 2014,
whose caption files hold 414,113 (train) and 202,654 (val) captions, at most 7 per image): a file
larger than ``IMPORT_MAX_FILE_BYTES`` is refused before it is read (:func:`read_file_bytes`,
:func:`check_file_size`); a file with more than ``IMPORT_MAX_CAPTIONS`` captions is refused while
it is parsed (:class:`CaptionCounter`); an image with more than
``IMPORT_MAX_REFERENCES_PER_IMAGE`` reference captions is refused by :meth:`Importer.check_limits`.
Every refusal names the cap's value and its setting (:data:`LIMIT_DEFAULTS`). JSON objects with a
key given twice are refused with the key and its line and column (:func:`json_loads`). Values
quoted in error messages are cut to :data:`ECHO_CHARS` characters (:func:`shorten`).

This module also holds the file-reading helpers shared by the importers (UTF-8 decoding, lines,
JSON, storable text, COCO image ids, fingerprints). Layering: it imports :mod:`crowd.models`,
Django's settings and database layer only.
"""
from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar

from django.conf import settings
from django.db import transaction

from ..models import Caption, Dataset, HumanJudgment, Image, ObjectLabel, PairwiseJudgment, System


#: Longest quotation of a value in an error message, in characters of the value; a longer value
#: is cut there and marked with an ellipsis and its length (:func:`shorten`).
ECHO_CHARS = 60


def shorten(value: Any, limit: int = ECHO_CHARS, quote: bool = True) -> str:
    """How an error message quotes ``value``: ``repr(value)``, exactly what ``f"{value!r}"``
    gives, when that has at most ``limit`` characters (of the string's text for a string);
    otherwise the first ``limit`` characters, an ellipsis and the full length: a string of 5,000
    digits is quoted as its first 60 digits in quotes followed by ``… (5,000 characters)``.

    ``value``: any object; an integer too long for ``repr`` (more than 4,300 digits, Python's
    limit) is described by its approximate number of digits. ``quote=False``: a string without
    the quotes (its repr's inside) under the same cut. The result has no line break (``repr``
    escapes them), so a message stays one line. Every echo of a file's or a form's
    value in the importers' and the score uploads' errors goes through this function.
    """
    if isinstance(value, str):
        text = value if len(value) <= limit else value[:limit]
        text = repr(text) if quote else repr(text)[1:-1]
        return text if len(value) <= limit else f"{text}… ({len(value):,} characters)"
    try:
        text = repr(value)
    except ValueError:  # an int beyond sys.get_int_max_str_digits(), possibly nested in a list
        if isinstance(value, int):
            return f"an integer of about {int(value.bit_length() * 0.30103) + 1:,} digits"  # log10(2)
        return f"a {type(value).__name__} holding an integer too long to print"
    if len(text) <= limit:
        return text
    unit = "digits" if isinstance(value, int) and not isinstance(value, bool) else "characters"
    return f"{text[:limit]}… ({len(text):,} {unit})"


class DatasetFormatError(ValueError):
    """A source file is missing or malformed. The message names the file, the line and the problem
    (a problem quoting a huge value is cut after :data:`MAX_PROBLEM_CHARS` characters; values are
    quoted with :func:`shorten`, so this is only a backstop)."""

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


# ---------------------------------------------------------------------------------------------
# Reading files
# ---------------------------------------------------------------------------------------------

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
_COCO_FILE = re.compile(r"^(?:.*/)?COCO_[A-Za-z]+\d*_0*(\d+)\.(?:jpg|jpeg|png)$", re.IGNORECASE)


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


# ---------------------------------------------------------------------------------------------
# Import caps
# ---------------------------------------------------------------------------------------------

#: The import caps: setting name -> default. ``evalsite/settings.py`` reads each from the
#: environment variable of the same name with this default; :func:`import_limit` reads the
#: setting (this default when a settings module lacks it). Defaults admit COCO 2014 (Lin et al.
#: 2014; Chen et al. 2015, "Microsoft COCO Captions"): ``captions_train2014.json`` has 414,113
#: captions and ``captions_val2014.json`` 202,654 (616,767 together), at most 7 per image, and the
#: largest COCO annotation file (``instances_train2017.json``, about 448 MiB) fits the size cap;
#: PASCAL-50S has 50 reference sentences per image.
LIMIT_DEFAULTS: dict[str, int] = {
    "IMPORT_MAX_FILE_BYTES": 512 * 1024 * 1024,
    "IMPORT_MAX_CAPTIONS": 1_000_000,
    "IMPORT_MAX_REFERENCES_PER_IMAGE": 50,
}


def import_limit(setting: str) -> int:
    """The current value of the import cap ``setting`` (a key of :data:`LIMIT_DEFAULTS`), a
    positive integer. Raises ValueError for an unknown name or a value that is not a positive
    integer (a misconfigured setting must not silently turn a cap off)."""
    if setting not in LIMIT_DEFAULTS:
        raise ValueError(f"unknown import cap {setting!r}; known: {', '.join(LIMIT_DEFAULTS)}")
    value = getattr(settings, setting, LIMIT_DEFAULTS[setting])
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"setting {setting} must be a positive integer, got {shorten(value)}")
    return value


def over_cap(setting: str, cap: int, unit: str) -> str:
    """The end of every cap refusal: ``"the cap is 1,000,000 captions per file (setting
    IMPORT_MAX_CAPTIONS; raise it in the environment to import more)"``."""
    return f"the cap is {cap:,} {unit} (setting {setting}; raise it in the environment to import more)"


def check_file_size(path: Path) -> int:
    """Refuse ``path`` if it is larger than ``IMPORT_MAX_FILE_BYTES``, from its size on disk
    (``os.stat``), before any of it is read; return the size in bytes. Raises DatasetFormatError
    naming the file, its size, the cap and the setting, or "file not found"."""
    try:
        size = path.stat().st_size
    except OSError:
        raise DatasetFormatError(path, "file not found") from None
    cap = import_limit("IMPORT_MAX_FILE_BYTES")
    if size > cap:
        raise DatasetFormatError(
            path, f"the file has {size:,} bytes, too large: {over_cap('IMPORT_MAX_FILE_BYTES', cap, 'bytes per file')}"
        )
    return size


def read_file_bytes(path: Path) -> bytes:
    """The bytes of file ``path``, read only if its size passes :func:`check_file_size` (and never
    more than the cap plus one byte, in case the file grows meanwhile). Raises DatasetFormatError
    for a missing file, a directory or a file over ``IMPORT_MAX_FILE_BYTES``."""
    if not path.is_file():
        raise DatasetFormatError(path, "file not found")
    size = check_file_size(path)
    cap = import_limit("IMPORT_MAX_FILE_BYTES")
    with path.open("rb") as handle:
        # the size checked, plus a byte to see a file that grew (read(cap + 1) would allocate the
        # whole cap, 512 MiB by default, for every file read)
        data = handle.read(size + 1)
        if len(data) > size:
            data += handle.read(cap + 1 - len(data))
    if len(data) > cap:
        raise DatasetFormatError(
            path, f"the file grew past {cap:,} bytes while being read: {over_cap('IMPORT_MAX_FILE_BYTES', cap, 'bytes per file')}"
        )
    return data


class CaptionCounter:
    """Counts the captions an importer reads from one file and refuses the file as soon as the
    count passes ``IMPORT_MAX_CAPTIONS`` (so a huge file is refused while it is parsed, before
    more rows are built). Usage: ``counter = CaptionCounter(path)`` then ``counter.add(n, line)``
    for every ``n`` captions read (``line``: where, for the message)."""

    def __init__(self, path: Path | str):
        self.path = Path(path)
        self.cap = import_limit("IMPORT_MAX_CAPTIONS")
        self.count = 0

    def add(self, n: int = 1, line: int | None = None) -> None:
        """Count ``n`` more captions; DatasetFormatError (naming the file, ``line``, the cap and
        the setting) once there are more than the cap."""
        self.count += n
        if self.count > self.cap:
            raise DatasetFormatError(
                self.path,
                f"more than {self.cap:,} captions in one file: {over_cap('IMPORT_MAX_CAPTIONS', self.cap, 'captions per file')}",
                line,
            )


# ---------------------------------------------------------------------------------------------
# Reading files (continued)
# ---------------------------------------------------------------------------------------------


def read_lines(path: Path) -> list[str]:
    """Read a UTF-8 text file into lines without their line endings (``\\n``, ``\\r\\n`` or ``\\r``;
    other Unicode line separators stay inside their line, so line numbers are an editor's).

    Raises DatasetFormatError if the file is missing, is not a file, is larger than
    ``IMPORT_MAX_FILE_BYTES`` (:func:`read_file_bytes`, before reading it) or is not UTF-8 text
    without NUL characters (see :func:`decode_text`; the message names the line of the first bad byte).
    """
    lines = _LINE_BREAK.split(decode_text(path, read_file_bytes(path)))
    if lines and lines[-1] == "":
        lines.pop()
    return lines


class DuplicateKeyError(json.JSONDecodeError):
    """A JSON object gives a key twice (:func:`json_loads`). ``key`` is the key, ``pos`` (with
    ``lineno`` and ``colno``) the position of its second occurrence in ``doc``, ``first_pos``
    (``first_lineno``, ``first_colno``) that of the first."""

    def __init__(self, key: str, doc: str, pos: int, first_pos: int):
        self.key, self.first_pos = key, first_pos
        self.first_lineno = doc.count("\n", 0, first_pos) + 1
        self.first_colno = first_pos - doc.rfind("\n", 0, first_pos)
        lineno = doc.count("\n", 0, pos) + 1
        colno = pos - doc.rfind("\n", 0, pos)
        first = (f"line {self.first_lineno:,}, " if self.first_lineno != lineno else "") + f"column {self.first_colno:,}"
        super().__init__(f"duplicate key {shorten(key)} at column {colno:,} (also given at {first} of the same object)",
                         doc, pos)


class _Duplicate(Exception):
    """Raised by :func:`_unique_pairs` inside the C decoder, which gives no position."""

    def __init__(self, key: str):
        super().__init__(key)
        self.key = key


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict:
    """``object_pairs_hook``: the object as a dict, or _Duplicate for a key given twice (the
    standard decoder would keep the last value without a word)."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen = set()
        for key, _ in pairs:
            if key in seen:
                raise _Duplicate(key)
            seen.add(key)
    return obj


_WHITESPACE = json.decoder.WHITESPACE  # re: JSON whitespace, [ \t\n\r]*
_UNIQUE = json.JSONDecoder(object_pairs_hook=_unique_pairs)


def _skip_value(text: str, idx: int) -> tuple[tuple[str, int, int] | None, int]:
    """Decode the JSON value at ``text[idx:]`` (whitespace first); return (None, end index), or
    (the duplicate found inside it, idx) when it holds a key given twice."""
    idx = _WHITESPACE.match(text, idx).end()
    try:
        return None, _UNIQUE.raw_decode(text, idx)[1]
    except _Duplicate:
        return _find_duplicate(text, idx), idx


def _find_duplicate(text: str, idx: int) -> tuple[str, int, int] | None:
    """Where a key is given twice in the JSON value at ``text[idx:]``: ``(key, position of its
    first occurrence, position of the second)`` (positions of the opening quotes), or None.

    Walks only the path to the duplicate: the members of an object (keys read with
    ``json.decoder.scanstring``, the position of each recorded) and the elements of an array are
    decoded one by one with the C decoder; the one that raises is entered. Run only after the
    whole text was found to hold a duplicate, so the walk meets only valid JSON before it.
    """
    idx = _WHITESPACE.match(text, idx).end()
    opening = text[idx:idx + 1]
    if opening not in ("{", "["):
        return None
    closing = "}" if opening == "{" else "]"
    seen: dict[str, int] = {}
    idx = _WHITESPACE.match(text, idx + 1).end()
    if text[idx:idx + 1] == closing:
        return None
    while True:
        if opening == "{":
            key_pos = idx
            key, idx = json.decoder.scanstring(text, idx + 1)
            if key in seen:
                return key, seen[key], key_pos
            seen[key] = key_pos
            idx = _WHITESPACE.match(text, idx).end() + 1  # past the ":"
        found, idx = _skip_value(text, idx)
        if found:
            return found
        idx = _WHITESPACE.match(text, idx).end()
        if text[idx:idx + 1] != ",":
            return None
        idx = _WHITESPACE.match(text, idx + 1).end()


def json_loads(text: str):
    """``json.loads(text)``, refusing an object that gives a key twice (``json.loads`` keeps the
    last value without a word, so ``{"annotations": [...], "annotations": []}`` would lose every
    annotation): the one JSON decoder of the importers (:func:`parse_json` and the format
    detection of object-label files use it).

    Raises :class:`DuplicateKeyError` (a ``json.JSONDecodeError``) naming the key, with the line
    and column of its second occurrence (``lineno``, ``colno``) and of its first; otherwise what
    ``json.loads`` raises. The standard C decoder does the work (an ``object_pairs_hook`` checks
    each object's keys, about 20% slower); the position is found afterwards by
    :func:`_find_duplicate`, only for a text that holds a duplicate.
    """
    try:
        return json.loads(text, object_pairs_hook=_unique_pairs)
    except _Duplicate as exc:
        try:
            found = _find_duplicate(text, 0)
        except (ValueError, RecursionError):
            found = None
        if found is None:  # not expected; still refuse, at the start of the text
            found = (exc.key, 0, 0)
        raise DuplicateKeyError(found[0], text, found[2], found[1]) from None


def parse_json(path: Path, text: str, line: int | None = None):
    """``json.loads(text)`` through :func:`json_loads`; DatasetFormatError (naming ``path`` and the
    line: ``line`` when given, for one line of a JSON-lines file, else the line in ``text``) for
    invalid JSON, a key given twice in an object (the key, and the columns of both occurrences),
    an integer of more than 4,300 digits or nesting too deep for the parser. Every importer parses
    JSON through this function (the one place for rules on JSON input)."""
    try:
        return json_loads(text)
    except json.JSONDecodeError as exc:
        raise DatasetFormatError(path, f"not valid JSON: {exc.msg}", line or exc.lineno) from None
    except (ValueError, RecursionError) as exc:
        raise DatasetFormatError(path, f"not valid JSON: {type(exc).__name__}: {exc}", line) from None


def load_json(path: Path | str):
    """Read and parse the UTF-8 JSON file ``path`` (:func:`read_file_bytes`, :func:`decode_text`,
    :func:`parse_json`); DatasetFormatError for a missing file, a file over
    ``IMPORT_MAX_FILE_BYTES`` (refused before it is read), bad encoding, invalid JSON or a
    duplicate key."""
    path = Path(path)
    return parse_json(path, decode_text(path, read_file_bytes(path)))


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


def image_key(value, path: Path, where: str) -> str:
    """Normalise an image id: an int, an ASCII digit string or a COCO file name
    (``COCO_val2014_000000310196.jpg``) -> the decimal id (``"310196"``); other strings are kept
    (stripped). Raises DatasetFormatError for anything else (floats, lists, objects, negative
    numbers, ids longer than 255 characters, NUL characters)."""
    if isinstance(value, bool) or value is None:
        raise DatasetFormatError(path, f"{where}: image_id must be an integer or a string, got {shorten(value)}")
    if isinstance(value, int):
        if value < 0:
            raise DatasetFormatError(path, f"{where}: negative image_id {shorten(value)}")
        if value.bit_length() > 840:  # more than 255 decimal digits
            raise DatasetFormatError(path, f"{where}: image_id longer than {MAX_KEY_CHARS} digits")
        return str(value)
    if isinstance(value, str) and value.strip():
        text = value.strip()
        if len(text) > MAX_KEY_CHARS:
            raise DatasetFormatError(path, f"{where}: image_id longer than {MAX_KEY_CHARS} characters")
        m = _COCO_FILE.match(text)
        if m:
            return str(int(m.group(1)))
        if text.isascii() and text.isdigit():
            return str(int(text))
        return check_text(text, path, f"{where}: image_id")
    raise DatasetFormatError(path, f"{where}: image_id must be an integer or a string, got {shorten(value)}")


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


# ---------------------------------------------------------------------------------------------
# What a parser returns
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SystemSpec:
    """A system to create: ``name`` (unique in the dataset, at most 100 characters), ``kind``
    (:attr:`System.HUMAN`, :attr:`System.MODEL`, :attr:`System.RETRIEVAL`) and a description."""

    name: str
    kind: str
    description: str = ""


@dataclass(frozen=True, slots=True)
class CaptionSpec:
    """A caption: ``text`` by system ``system`` (a :class:`SystemSpec` name) of image ``image`` (an
    image key), identified within that (image, system) by ``key``."""

    image: str
    system: str
    key: str
    text: str


@dataclass(frozen=True, slots=True)
class JudgmentSpec:
    """A human rating ``score`` by ``rater`` on ``criterion`` of the caption (``image``,
    ``system``, ``caption`` = its key), stored as a :class:`~crowd.models.HumanJudgment`."""

    image: str
    system: str
    caption: str
    criterion: str
    rater: str
    score: float
    source: str = ""


@dataclass(frozen=True, slots=True)
class PairwiseSpec:
    """A forced choice by ``rater`` between captions B and C (each ``(system, image, key)``),
    ``choice`` ``"b"`` or ``"c"``, judged against the image's reference set (no reference caption),
    stored as a :class:`~crowd.models.PairwiseJudgment`."""

    caption_b: tuple[str, str, str]
    caption_c: tuple[str, str, str]
    rater: str
    choice: str
    source: str = ""


@dataclass(frozen=True, slots=True)
class ObjectLabelSpec:
    """``count`` instances of object ``label`` in image ``image`` (for VIFIDEL), from file ``source``."""

    image: str
    label: str
    count: int
    source: str = ""


@dataclass
class ParsedDataset:
    """Everything an importer read, before anything is written (plain data, no database rows).

    ``source`` is the directory or file named by errors about the data as a whole. Lists are in the
    order rows are created (the order of ids): ``images`` (keys), ``systems``, ``references``
    (captions of ``reference_system``, written first), ``captions`` (candidates), ``judgments``,
    ``pairwise``, ``object_labels``. ``fingerprint`` identifies the files (and options) for the
    idempotency rule of ``mode = "create"`` importers. ``notes`` are printed after a first import.
    The dataset fields (``description``, ``citation``, ``criterion``, ``scale_min``/``scale_max``,
    ``protocol``) are those of :class:`~crowd.models.Dataset`.
    """

    source: Path
    images: list[str] = field(default_factory=list)
    systems: list[SystemSpec] = field(default_factory=list)
    reference_system: str | None = None
    references: list[CaptionSpec] = field(default_factory=list)
    captions: list[CaptionSpec] = field(default_factory=list)
    judgments: list[JudgmentSpec] = field(default_factory=list)
    pairwise: list[PairwiseSpec] = field(default_factory=list)
    object_labels: list[ObjectLabelSpec] = field(default_factory=list)
    protocol: dict = field(default_factory=dict)
    description: str = ""
    citation: str = ""
    criterion: str = ""
    scale_min: float | None = None
    scale_max: float | None = None
    fingerprint: str = ""
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ImporterOption:
    """A keyword option of an importer (``import_dataset --<name> N``): an integer with its
    ``default``, command-line ``help``, smallest allowed value ``minimum`` (None: any) and the
    ``absent_note`` added to the error when it is given to a format without it."""

    default: int
    help: str
    minimum: int | None = None
    absent_note: str = ""


# ---------------------------------------------------------------------------------------------
# Counting
# ---------------------------------------------------------------------------------------------


def _distinct_pairs(dataset: Dataset) -> int:
    votes = PairwiseJudgment.objects.filter(caption_b__image__dataset=dataset, reference__isnull=True)
    return votes.values("caption_b_id", "caption_c_id").distinct().count()


#: Quantity -> function(dataset) -> number of rows; an importer's :attr:`Importer.counts` maps the
#: labels of its summary to these quantities.
COUNTERS: dict[str, Callable[[Dataset], int]] = {
    "images": lambda ds: ds.images.count(),
    "systems": lambda ds: ds.systems.exclude(pk=ds.reference_system_id).count(),
    "references": lambda ds: ds.references().count(),
    "candidates": lambda ds: ds.candidates().count(),
    "judgments": lambda ds: HumanJudgment.objects.filter(image__dataset=ds).count(),
    "pairs": _distinct_pairs,
    "pairwise votes": lambda ds: PairwiseJudgment.objects.filter(
        caption_b__image__dataset=ds, reference__isnull=True
    ).count(),
}


def count_rows(dataset: Dataset, counts: dict[str, str]) -> dict[str, int]:
    """``{label: COUNTERS[quantity](dataset)}`` for every ``label: quantity`` of ``counts``, in
    order (e.g. ``{"ratings": "judgments"}`` -> ``{"ratings": 16992}``)."""
    return {label: COUNTERS[quantity](dataset) for label, quantity in counts.items()}


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


# ---------------------------------------------------------------------------------------------
# The importer
# ---------------------------------------------------------------------------------------------

#: Importers of ``manage.py import_dataset``: format name -> importer instance, filled by
#: :meth:`Importer.__init_subclass__` (in the order the modules are imported).
REGISTRY: dict[str, "Importer"] = {}


class Importer:
    """Base class of the dataset importers; a subclass only parses.

    Class attributes a subclass declares:

    ``format``
        the name on the command line (``import_dataset <format> <dir>``); a subclass that sets it
        registers an instance in :data:`REGISTRY`. None: not an ``import_dataset`` format (COCO,
        which has its own command).
    ``kind``
        ``Dataset.kind`` of what it creates (default: ``format``).
    ``files``
        the files it reads from the directory, in fingerprint order.
    ``options``
        ``{name: ImporterOption}`` keyword options; they are part of the fingerprint.
    ``counts``
        ``{summary label: quantity of COUNTERS}``, the counts printed after an import.
    ``mode``
        ``"create"`` (a whole dataset, idempotent by fingerprint) or ``"extend"`` (add systems
        and object labels to a dataset of the same ``kind``, created if new).

    A subclass implements :meth:`parse` (notes for the summary go in ``ParsedDataset.notes``) and
    may override :meth:`check_options` and :meth:`check_limits` (calling ``super()``, which holds
    the base's caps). Entry points: ``importer(directory, name, **options)`` (what
    ``import_dataset`` calls) and :meth:`save` for a ParsedDataset built otherwise (COCO).
    """

    format: ClassVar[str | None] = None
    kind: ClassVar[str] = ""
    files: ClassVar[tuple[str, ...]] = ()
    options: ClassVar[dict[str, ImporterOption]] = {}
    counts: ClassVar[dict[str, str]] = {"images": "images", "reference captions": "references",
                                        "candidate captions": "candidates", "judgments": "judgments"}
    mode: ClassVar[str] = "create"
    #: DatasetFormatError problem when an ``"extend"`` import would create a dataset without captions.
    nothing_to_create: ClassVar[str] = "a new dataset needs captions"

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if not cls.kind:
            cls.kind = cls.format or ""
        if cls.format is not None:
            other = REGISTRY.get(cls.format)
            if other is not None and repr(other) != f"{cls.__module__}.{cls.__qualname__}":  # a reload is fine
                raise ValueError(f"two importers for format {cls.format!r}: {other!r} and {cls.__module__}.{cls.__qualname__}")
            REGISTRY[cls.format] = cls()

    def __repr__(self):
        return f"{type(self).__module__}.{type(self).__qualname__}"

    # -- what a subclass implements ---------------------------------------------------------------

    def parse(self, paths: dict[str, Path], **options) -> ParsedDataset:
        """Read ``paths`` (``{file name of files: path}``, not yet checked to exist) with the
        resolved ``options`` into a ParsedDataset (``fingerprint`` may stay empty: :meth:`__call__`
        fills it from the files and options). Raises DatasetFormatError naming the file, the line
        (or entry) and the problem; writes nothing."""
        raise NotImplementedError

    def check_options(self, **options) -> dict[str, Any]:
        """Return every option of :attr:`options` (given or its default), in declaration order.
        Raises ValueError for an unknown option, a value that is not an integer, or one below the
        option's minimum."""
        unknown = sorted(set(options) - set(self.options))
        if unknown:
            raise ValueError(f"{shorten(unknown[0])} is not an option of format {shorten(self.format)}")
        resolved = {}
        for name, option in self.options.items():
            value = options.get(name, option.default)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"{name} must be an integer, got {shorten(value)}")
            if option.minimum is not None and value < option.minimum:
                raise ValueError(f"{name} must be at least {option.minimum}, got {shorten(value)}")
            resolved[name] = value
        return resolved

    # -- the skeleton -------------------------------------------------------------------------------

    def __call__(self, directory: Path | str, name: str, **options) -> ImportSummary:
        """Import the :attr:`files` of ``directory`` as dataset ``name``, all or nothing.

        Raises ValueError (bad options, :meth:`check_options`), DatasetFormatError (a missing
        directory or file, malformed data: the message names file, line or entry, and problem) or
        DatasetExistsError (``name`` holds other data).
        """
        options = self.check_options(**options)
        directory = Path(directory)
        if not directory.is_dir():
            raise DatasetFormatError(directory, "directory not found")
        paths = {name_: directory / name_ for name_ in self.files}
        parsed = self.parse(paths, **options)
        if not parsed.fingerprint:
            parsed.fingerprint = self.fingerprint(paths, options)
        return self.save(name, parsed)

    def fingerprint(self, paths: dict[str, Path], options: dict[str, Any]) -> str:
        """SHA-256 of the files in :attr:`files` order, combined with ``"name=value;..."`` of the
        options when there are any (the identity the idempotency rule compares)."""
        digest = fingerprint(*(paths[name] for name in self.files))
        if options:
            digest = combined_fingerprint(digest, ";".join(f"{k}={v}" for k, v in options.items()))
        return digest

    def save(self, name: str, parsed: ParsedDataset) -> ImportSummary:
        """Validate ``parsed`` completely, then write it as dataset ``name`` in one transaction
        following :attr:`mode`'s name rules; return the summary. Raises DatasetFormatError or
        DatasetExistsError with the database unchanged."""
        self.validate(parsed)
        if self.mode == "extend":
            return self._extend(name, parsed)
        with transaction.atomic():
            existing = Dataset.objects.select_for_update().filter(name=name).first()
            if check_existing(existing, self.kind, parsed.fingerprint):
                return ImportSummary(name, False, count_rows(existing, self.counts))
            dataset = self._create(name, parsed)
        refresh_statistics(*self._tables(parsed))
        return ImportSummary(name, True, count_rows(dataset, self.counts), list(parsed.notes))

    def check_limits(self, parsed: ParsedDataset) -> None:
        """The one place for size caps on a whole import, called by :meth:`validate` before
        anything is written: no image may have more than ``IMPORT_MAX_REFERENCES_PER_IMAGE``
        reference captions (:func:`import_limit`; COCO 2014 has at most 7, PASCAL-50S 50).
        Raises DatasetFormatError naming ``parsed.source``, the image, its count, the cap and the
        setting. A subclass adding caps calls ``super().check_limits(parsed)``. The caps on one
        file are applied while it is read: ``IMPORT_MAX_FILE_BYTES`` (:func:`read_file_bytes`,
        :func:`check_file_size`) and ``IMPORT_MAX_CAPTIONS`` (:class:`CaptionCounter`); per-value
        limits are in the readers (:data:`MAX_CAPTION_CHARS`, :data:`MAX_KEY_CHARS`,
        :func:`parse_json`)."""
        if not parsed.references:
            return
        cap = import_limit("IMPORT_MAX_REFERENCES_PER_IMAGE")
        image, count = Counter(c.image for c in parsed.references).most_common(1)[0]
        if count > cap:
            raise DatasetFormatError(
                parsed.source,
                f"image {shorten(image)} has {count:,} reference captions: "
                + over_cap("IMPORT_MAX_REFERENCES_PER_IMAGE", cap, "references per image"),
            )

    def validate(self, parsed: ParsedDataset) -> None:
        """Check that ``parsed`` can be written as a whole: keys within :data:`MAX_KEY_CHARS`,
        images and systems unique, every caption's image and system listed, no caption key twice
        in an (image, system), the references all of ``reference_system``, every judgment and
        pairwise choice on a listed caption, object labels on listed images (except in
        ``"extend"`` mode, where they may name images already stored); then :meth:`check_limits`.
        Raises DatasetFormatError naming ``parsed.source``."""
        src = parsed.source

        def fail(problem):
            raise DatasetFormatError(src, problem)

        images = set(parsed.images)
        if len(images) != len(parsed.images):
            fail("an image is listed twice")
        for key in parsed.images:
            if not key or len(key) > MAX_KEY_CHARS:
                fail(f"image key {shorten(key)} is empty or longer than {MAX_KEY_CHARS} characters")
        systems = {s.name: s for s in parsed.systems}
        if len(systems) != len(parsed.systems):
            fail("a system is listed twice")
        for s in parsed.systems:
            if not s.name or len(s.name) > 100:
                fail(f"system name {shorten(s.name)} is empty or longer than 100 characters")
            if s.kind not in {k for k, _ in System.KIND_CHOICES}:
                fail(f"system {shorten(s.name)} has an unknown kind {shorten(s.kind)}")
        if parsed.reference_system is not None and parsed.reference_system not in systems:
            fail(f"reference system {shorten(parsed.reference_system)} is not among the systems")
        caption_keys: set[tuple[str, str, str]] = set()
        for is_reference, captions in ((True, parsed.references), (False, parsed.captions)):
            for c in captions:
                if (c.system == parsed.reference_system) != is_reference:
                    fail(f"caption {shorten(c.key)} of system {shorten(c.system)} is listed with the wrong side (reference/candidate)")
                if c.image not in images or c.system not in systems:
                    fail(f"caption {shorten(c.key)} names an unknown image {shorten(c.image)} or system {shorten(c.system)}")
                if not c.key or len(c.key) > MAX_KEY_CHARS:
                    fail(f"caption key {shorten(c.key)} is empty or longer than {MAX_KEY_CHARS} characters")
                ident = (c.system, c.image, c.key)
                if ident in caption_keys:
                    fail(f"caption {shorten(c.key)} of image {shorten(c.image)} by system {shorten(c.system)} is listed twice")
                caption_keys.add(ident)
        for j in parsed.judgments:
            if (j.system, j.image, j.caption) not in caption_keys:
                fail(f"a judgment names an unknown caption {shorten(j.caption)} of image {shorten(j.image)}")
        for p in parsed.pairwise:
            if p.caption_b not in caption_keys or p.caption_c not in caption_keys:
                fail(f"a pairwise judgment names an unknown caption ({p.caption_b}, {p.caption_c})")
            if p.choice not in (PairwiseJudgment.B, PairwiseJudgment.C):
                fail(f"a pairwise choice must be 'b' or 'c', got {shorten(p.choice)}")
        if self.mode == "create":
            for o in parsed.object_labels:
                if o.image not in images:
                    fail(f"object label {shorten(o.label)} names an unknown image {shorten(o.image)}")
        self.check_limits(parsed)

    # -- writing ------------------------------------------------------------------------------------

    def _create(self, name: str, parsed: ParsedDataset) -> Dataset:
        """Write a whole dataset (inside the caller's transaction); rows are created in the order
        of ``parsed``'s lists."""
        dataset = Dataset.objects.create(
            name=name, kind=self.kind, fingerprint=parsed.fingerprint, citation=parsed.citation,
            description=parsed.description, criterion=parsed.criterion, scale_min=parsed.scale_min,
            scale_max=parsed.scale_max, protocol=dict(parsed.protocol),
        )
        system_rows = {
            s.name: System.objects.create(dataset=dataset, name=s.name, kind=s.kind, description=s.description)
            for s in parsed.systems
        }
        if parsed.reference_system is not None:
            dataset.reference_system = system_rows[parsed.reference_system]
            dataset.save(update_fields=["reference_system"])
        Image.objects.bulk_create([Image(dataset=dataset, key=key) for key in parsed.images], batch_size=5000)
        image_ids = dict(Image.objects.filter(dataset=dataset).values_list("key", "id"))
        Caption.objects.bulk_create(
            [
                Caption(image_id=image_ids[c.image], system=system_rows[c.system], key=c.key, text=c.text)
                for c in (*parsed.references, *parsed.captions)
            ],
            batch_size=2000,
        )
        if parsed.judgments or parsed.pairwise:
            stored = {
                (system_id, image_id, key): pk
                for pk, system_id, image_id, key in Caption.objects.filter(image__dataset=dataset)
                .values_list("id", "system_id", "image_id", "key")
            }

            def caption_id(system: str, image: str, key: str) -> int:
                return stored[(system_rows[system].pk, image_ids[image], key)]

            HumanJudgment.objects.bulk_create(
                [
                    HumanJudgment(
                        caption_id=caption_id(j.system, j.image, j.caption), image_id=image_ids[j.image],
                        system=system_rows[j.system], criterion=j.criterion, rater=j.rater, score=j.score,
                        source=j.source,
                    )
                    for j in parsed.judgments
                ],
                batch_size=5000,
            )
            PairwiseJudgment.objects.bulk_create(
                [
                    PairwiseJudgment(
                        reference=None, caption_b_id=caption_id(*p.caption_b), caption_c_id=caption_id(*p.caption_c),
                        rater=p.rater, choice=p.choice, source=p.source,
                    )
                    for p in parsed.pairwise
                ],
                batch_size=5000,
            )
        ObjectLabel.objects.bulk_create(
            [ObjectLabel(image_id=image_ids[o.image], label=o.label, count=o.count, source=o.source)
             for o in parsed.object_labels],
            batch_size=5000,
        )
        return dataset

    @staticmethod
    def _tables(parsed: ParsedDataset) -> list:
        tables = [Image, Caption]
        if parsed.judgments:
            tables.append(HumanJudgment)
        if parsed.pairwise:
            tables.append(PairwiseJudgment)
        if parsed.object_labels:
            tables.append(ObjectLabel)
        return tables

    def _extend(self, name: str, parsed: ParsedDataset) -> ImportSummary:
        """``mode = "extend"``: add ``parsed``'s images, systems and object labels to dataset
        ``name`` (created if new), in one transaction.

        Rules: a dataset made by another importer kind is refused; a new dataset needs captions
        (:attr:`nothing_to_create`); a system that exists with exactly the same captions is left
        alone (a note says so), one with other captions is refused (DatasetExistsError); the
        references may not replace another reference system; object labels replace those of the
        images they name (labels of images not in the dataset are skipped, with a note). Summary
        counts are what was added: ``images``, ``references`` or ``captions of <system>``,
        ``object labels``, ``images with objects``; ``created`` is True when anything changed.
        """
        counts: Counter = Counter()
        notes: list[str] = []
        captions_of: dict[str, list[CaptionSpec]] = {s.name: [] for s in parsed.systems}
        for c in (*parsed.references, *parsed.captions):
            captions_of[c.system].append(c)
        with transaction.atomic():
            dataset, created = Dataset.objects.get_or_create(
                name=name, defaults={"kind": self.kind, "description": parsed.description, "citation": parsed.citation},
            )
            if not created and dataset.kind != self.kind:
                raise DatasetExistsError(f"dataset {name!r} exists and was made by the {dataset.kind!r} importer")
            if created and not parsed.systems:
                raise DatasetFormatError(parsed.source, self.nothing_to_create)
            existing = dict(Image.objects.filter(dataset=dataset).values_list("key", "id"))
            new_images = [Image(dataset=dataset, key=k) for k in parsed.images if k not in existing]
            Image.objects.bulk_create(new_images, batch_size=5000)
            counts["images"] = len(new_images)
            ids = dict(Image.objects.filter(dataset=dataset).values_list("key", "id"))
            for spec in parsed.systems:
                label = "references" if spec.name == parsed.reference_system else f"captions of {spec.name}"
                counts[label] = self._add_system(dataset, spec, captions_of[spec.name], ids, notes)
                if spec.name == parsed.reference_system:
                    ref_system = System.objects.get(dataset=dataset, name=spec.name)
                    if dataset.reference_system_id not in (None, ref_system.pk):
                        raise DatasetExistsError(f"dataset {name!r} already has references from another system")
                    dataset.reference_system = ref_system
                    dataset.save(update_fields=["reference_system"])
            if parsed.object_labels:
                labelled = list(dict.fromkeys(o.image for o in parsed.object_labels))
                missing = sorted(set(labelled) - set(ids), key=lambda k: (len(k), k))
                if missing:
                    notes.append(f"object labels of {len(missing)} image(s) not in the dataset were skipped (e.g. {missing[0]})")
                rows = [
                    ObjectLabel(image_id=ids[o.image], label=o.label, count=o.count, source=o.source)
                    for o in parsed.object_labels if o.image in ids
                ]
                touched = {ids[k] for k in labelled if k in ids}
                ObjectLabel.objects.filter(image_id__in=touched).delete()
                ObjectLabel.objects.bulk_create(rows, batch_size=5000)
                counts["object labels"] = len(rows)
                counts["images with objects"] = len(touched)
        changed = any(v for v in counts.values())
        return ImportSummary(dataset.name, changed, dict(counts), notes)

    @staticmethod
    def _add_system(dataset, spec: SystemSpec, captions: list[CaptionSpec], image_ids, notes) -> int:
        """Create system ``spec`` with ``captions``; 0 (and a note) if it exists with the same
        captions; DatasetExistsError if it exists with others."""
        system, created = System.objects.get_or_create(dataset=dataset, name=spec.name, defaults={"kind": spec.kind})
        wanted = {(image_ids[c.image], c.key): c.text for c in captions}
        if not created:
            have = {
                (img, key): text
                for img, key, text in Caption.objects.filter(system=system).values_list("image_id", "key", "text")
            }
            if have == wanted:
                notes.append(f"system {spec.name!r}: already imported with the same captions, nothing changed")
                return 0
            raise DatasetExistsError(
                f"system {spec.name!r} of dataset {dataset.name!r} exists with different captions; "
                "import under another system name"
            )
        Caption.objects.bulk_create(
            [Caption(image_id=img, system=system, key=key, text=text) for (img, key), text in wanted.items()],
            batch_size=5000,
        )
        return len(wanted)
