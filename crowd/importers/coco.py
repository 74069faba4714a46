"""COCO-format caption sets, references and object labels.

Files understood (all JSON unless said otherwise):

* **COCO annotation JSON** (``captions_val2014.json`` and friends): ``{"images": [{"id", "file_name",
  ...}], "annotations": [{"id", "image_id", "caption"}]}``. Its captions become the dataset's reference
  system (``--references-name``, default ``coco-references``); every image listed is created.
* **COCO results JSON**, the format of the COCO evaluation server: a list of ``{"image_id", "caption"}``,
  here allowed to hold *several entries per image* (a caption set; their order in the file is kept).
* **Multi-caption results**, the input of the official Self-CIDEr code (Wang & Chan 2019,
  ``results/merge_results.json`` of qingzwang/DiversityMetrics): a list of ``{"image_id", "captions":
  [...]}``.
* **Object labels** per image (for VIFIDEL, Madhyastha et al. 2019), see :func:`read_object_labels`.

Image ids are COCO's integers (or any string); file names such as ``COCO_val2014_000000310196.jpg``
are read as id ``310196`` so that files of different origins match. Everything is validated before
anything is written, and written in one transaction: an error leaves the database unchanged.
"""
from __future__ import annotations

import csv
import io
import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from ..models import System
from .base import (
    MAX_KEY_CHARS,
    CaptionCounter,
    CaptionSpec,
    DatasetFormatError,
    DuplicateKeyError,
    ImportSummary,
    Importer,
    ObjectLabelSpec,
    ParsedDataset,
    SystemSpec,
    check_text,
    decode_text,
    image_key,
    json_loads,
    load_json,
    parse_json,
    read_file_bytes,
    shorten,
)

_MAX_LABEL = 100
_MAX_COUNT = 2**31 - 1  # ObjectLabel.count
_NAME = re.compile(r"[-A-Za-z0-9_.+]{1,100}")
__all__ = [
    "CocoImporter", "SystemFile", "import_coco", "image_key", "parse_json", "parse_system_file",
    "read_coco_annotations", "read_coco_results", "read_object_labels",
]


def _annotation_id(value, path: Path, where: str) -> str:
    """An annotation id (an integer or a non-empty string of at most 255 characters) as a caption key."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value).bit_length() <= 840:
        return str(value)
    if isinstance(value, str) and value.strip() and len(value) <= MAX_KEY_CHARS:
        return check_text(value, path, f"{where}: id")
    raise DatasetFormatError(
        path, f"{where}: id must be an integer or a non-empty string of at most {MAX_KEY_CHARS} characters, "
        f"got {shorten(value)}"
    )


def _caption(value, path: Path, where: str) -> str:
    if not isinstance(value, str):
        raise DatasetFormatError(path, f"{where}: caption must be a string, got {type(value).__name__}")
    text = " ".join(value.split())
    if not text:
        raise DatasetFormatError(path, f"{where}: empty caption")
    return check_text(text, path, f"{where}: caption")


def read_coco_annotations(path: Path | str) -> tuple[dict[str, str], dict[str, list[tuple[str, str]]]]:
    """Read a COCO caption annotation file.

    Returns ``(images, captions)``: ``images`` maps image key -> file name (``""`` if none);
    ``captions`` maps image key -> list of (annotation id, caption) in file order.
    Raises DatasetFormatError (a file over ``IMPORT_MAX_FILE_BYTES``, invalid JSON or a key given
    twice in an object, missing keys, wrong types, duplicate annotation ids, a caption of an image
    not listed in ``images``, more than ``IMPORT_MAX_CAPTIONS`` annotations).
    """
    path = Path(path)
    data = load_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("annotations"), list):
        raise DatasetFormatError(path, 'not a COCO annotation file: expected {"images": [...], "annotations": [...]}')
    CaptionCounter(path).add(len(data["annotations"]))
    images: dict[str, str] = {}
    listed = data.get("images")
    if listed is not None:
        if not isinstance(listed, list):
            raise DatasetFormatError(path, '"images" must be a list')
        for i, img in enumerate(listed):
            if not isinstance(img, dict) or "id" not in img:
                raise DatasetFormatError(path, f"images[{i}]: expected an object with an id")
            images[image_key(img["id"], path, f"images[{i}]")] = str(img.get("file_name", ""))[:255]
    captions: dict[str, list[tuple[str, str]]] = defaultdict(list)
    seen_ids: set[str] = set()
    for i, ann in enumerate(data["annotations"]):
        where = f"annotations[{i}]"
        if not isinstance(ann, dict) or "image_id" not in ann or "caption" not in ann:
            raise DatasetFormatError(path, f"{where}: expected an object with image_id and caption")
        key = image_key(ann["image_id"], path, where)
        if listed is not None and key not in images:
            raise DatasetFormatError(path, f"{where}: image_id {key} is not in \"images\"")
        ann_id = _annotation_id(ann["id"], path, where) if "id" in ann else f"{key}-{len(captions[key])}"
        if ann_id in seen_ids:
            raise DatasetFormatError(path, f"{where}: duplicate annotation id {ann_id}")
        seen_ids.add(ann_id)
        captions[key].append((ann_id, _caption(ann["caption"], path, where)))
    for key in captions:
        images.setdefault(key, "")
    if not captions:
        raise DatasetFormatError(path, "no caption annotations")
    return images, dict(captions)


def read_coco_results(path: Path | str) -> dict[str, list[str]]:
    """Read caption sets from a COCO results file (one caption per entry, several entries per image)
    or a multi-caption file (``{"image_id", "captions": [...]}`` per entry); the form is detected per
    file (mixing both in one file is an error).

    Returns image key -> list of captions (file order). Raises DatasetFormatError (also for a file
    over ``IMPORT_MAX_FILE_BYTES`` or with more than ``IMPORT_MAX_CAPTIONS`` captions).
    """
    path = Path(path)
    data = load_json(path)
    if not isinstance(data, list) or not data:
        raise DatasetFormatError(path, 'expected a non-empty JSON list of {"image_id", "caption"} or {"image_id", "captions"}')
    counter = CaptionCounter(path)
    sets: dict[str, list[str]] = defaultdict(list)
    form = None
    for i, entry in enumerate(data):
        where = f"entry {i}"
        if not isinstance(entry, dict) or "image_id" not in entry:
            raise DatasetFormatError(path, f"{where}: expected an object with image_id")
        this = "captions" if "captions" in entry else "caption" if "caption" in entry else None
        if this is None:
            raise DatasetFormatError(path, f"{where}: needs \"caption\" (COCO results) or \"captions\" (a list)")
        if form is None:
            form = this
        elif this != form:
            raise DatasetFormatError(path, f"{where}: mixes \"{this}\" with the \"{form}\" form of the earlier entries")
        key = image_key(entry["image_id"], path, where)
        if form == "caption":
            counter.add()
            sets[key].append(_caption(entry["caption"], path, where))
        else:
            caps = entry["captions"]
            if not isinstance(caps, list) or not caps:
                raise DatasetFormatError(path, f"{where}: \"captions\" must be a non-empty list")
            counter.add(len(caps))
            if key in sets:
                raise DatasetFormatError(path, f"{where}: image_id {key} appears twice")
            sets[key] = [_caption(c, path, f"{where} caption {j}") for j, c in enumerate(caps)]
    return dict(sets)


def read_object_labels(path: Path | str) -> dict[str, Counter]:
    """Read object labels per image; returns image key -> Counter(label -> instances).

    Formats (by content):

    * CSV with a header containing ``image_id`` and ``label`` (optional ``count``, default 1; rows of the
      same (image, label) add up);
    * JSON ``{"<image_id>": {"label": count, ...}}`` or ``{"<image_id>": ["label", ...]}``;
    * JSON list of ``{"image_id", "label", "count"?}``;
    * COCO instance annotations ``{"annotations": [{"image_id", "category_id"}], "categories": [{"id",
      "name"}]}`` (each annotation is one instance);
    * POPE question files (JSON lines ``{"image", "text": "Is there a X in the image?", "label": "yes"|"no"}``):
      the objects answered "yes", count 1.

    Labels are lower-cased and whitespace-normalised (``"Tennis  Racket"`` -> ``"tennis racket"``).
    Raises DatasetFormatError naming the file and the entry (or line), also for a file over
    ``IMPORT_MAX_FILE_BYTES`` (refused before it is read) and a JSON key given twice in an object.
    """
    path = Path(path)
    text = decode_text(path, read_file_bytes(path))
    out: dict[str, Counter] = defaultdict(Counter)

    def add(key, label, count, where):
        if not isinstance(label, str) or not " ".join(label.split()):
            raise DatasetFormatError(path, f"{where}: label must be a non-empty string")
        label = check_text(" ".join(label.lower().split()), path, f"{where}: label", max_chars=_MAX_LABEL)
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= _MAX_COUNT:
            raise DatasetFormatError(path, f"{where}: count must be a positive integer up to {_MAX_COUNT}, got {shorten(count)}")
        bag = out[image_key(key, path, where)]
        if bag[label] + count > _MAX_COUNT:
            raise DatasetFormatError(path, f"{where}: the counts of {shorten(label)} add up to more than {_MAX_COUNT}")
        bag[label] += count

    stripped = text.lstrip()
    if stripped.startswith("{") or stripped.startswith("["):
        try:
            data = json_loads(text)
        except DuplicateKeyError as exc:  # not a JSON-lines (POPE) file either: its first object has it
            raise DatasetFormatError(path, f"not valid JSON: {exc.msg}", exc.lineno) from None
        except (ValueError, RecursionError):  # JSONDecodeError is a ValueError
            data = None
            if stripped.startswith("{"):
                _read_pope(text, path, add)
                return _non_empty(out, path)
            parse_json(path, text)  # raises DatasetFormatError with the reason
        if isinstance(data, dict) and "annotations" in data and "categories" in data:
            if not isinstance(data["categories"], list) or not isinstance(data["annotations"], list):
                raise DatasetFormatError(path, '"categories" and "annotations" must be lists')
            names = {}
            for i, c in enumerate(data["categories"]):
                if not isinstance(c, dict) or "id" not in c or "name" not in c or not _hashable(c["id"]):
                    raise DatasetFormatError(path, f"categories[{i}]: expected an object with id and name")
                names[c["id"]] = c["name"]
            for i, a in enumerate(data["annotations"]):
                if (not isinstance(a, dict) or "image_id" not in a or not _hashable(a.get("category_id"))
                        or a.get("category_id") not in names):
                    raise DatasetFormatError(path, f"annotations[{i}]: expected image_id and a known category_id")
                add(a["image_id"], names[a["category_id"]], 1, f"annotations[{i}]")
        elif isinstance(data, dict) and "question_id" in data:  # a one-line POPE file
            _read_pope(text, path, add)
        elif isinstance(data, dict):
            for key, labels in data.items():
                where = f"image {shorten(key, quote=False)}"
                if isinstance(labels, dict):
                    for label, count in labels.items():
                        add(key, label, count, where)
                elif isinstance(labels, list):
                    for label in labels:
                        add(key, label, 1, where)
                else:
                    raise DatasetFormatError(path, f"{where}: expected a {{label: count}} object or a list of labels")
        elif isinstance(data, list):
            for i, row in enumerate(data):
                if not isinstance(row, dict) or "image_id" not in row or "label" not in row:
                    raise DatasetFormatError(path, f"entry {i}: expected an object with image_id and label")
                add(row["image_id"], row["label"], row.get("count", 1), f"entry {i}")
        else:
            raise DatasetFormatError(path, "unrecognised JSON object-label format")
        return _non_empty(out, path)
    reader = csv.DictReader(io.StringIO(text, newline=""))
    try:
        fields = [f.strip().lower() for f in (reader.fieldnames or [])]
        if "image_id" not in fields or "label" not in fields:
            raise DatasetFormatError(path, "CSV needs a header with image_id and label (and optionally count)", 1)
        reader.fieldnames = fields
        for row in reader:
            line = reader.line_num
            count = row.get("count")
            try:
                count = 1 if count in (None, "") else int(count) if count.strip().isascii() else None
            except ValueError:
                count = None
            if count is None:
                raise DatasetFormatError(path, f"count {shorten(row.get('count'))} is not an integer", line)
            add(row["image_id"], row["label"], count, f"line {line}")
    except csv.Error as exc:
        raise DatasetFormatError(path, f"not valid CSV ({exc})", reader.line_num or 1) from None
    return _non_empty(out, path)


def _hashable(value) -> bool:
    return isinstance(value, (str, int, float, bool)) or value is None


_POPE_Q = re.compile(r"^is there an? (.+?) in the image\??$", re.IGNORECASE)


def _read_pope(text: str, path: Path, add) -> None:
    for line, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        row = parse_json(path, raw, line)
        m = _POPE_Q.match(str(row.get("text", "")).strip()) if isinstance(row, dict) else None
        if not m or "image" not in row or row.get("label") not in ("yes", "no"):
            raise DatasetFormatError(path, 'expected a POPE line {"image", "text": "Is there a X in the image?", "label"}', line)
        if row["label"] == "yes":
            add(row["image"], m.group(1), 1, f"line {line}")


def _non_empty(out, path):
    if not out:
        raise DatasetFormatError(path, "no object labels")
    return {k: Counter(v) for k, v in out.items()}


# ---------------------------------------------------------------------------------------------
@dataclass
class SystemFile:
    """A caption-set file for one system: ``name=path`` on the command line."""

    name: str
    path: Path


def parse_system_file(spec: str) -> SystemFile:
    """``"name=path"`` -> SystemFile; ValueError for a malformed spec."""
    name, sep, path = spec.partition("=")
    if not sep or not re.fullmatch(r"[-A-Za-z0-9_.+]{1,100}", name) or not path:
        raise ValueError(f"expected SYSTEM=FILE with a system name of letters, digits, -_.+ (got {shorten(spec)})")
    return SystemFile(name, Path(path))


class CocoImporter(Importer):
    """COCO-format caption sets, references and object labels (``manage.py import_coco``; not an
    ``import_dataset`` format). ``mode = "extend"``: each import adds systems and object labels to
    dataset ``name`` (created if new, kind ``coco``); see :meth:`Importer._extend` for the rules.

    Parsed rows: the images of the annotations and results (sorted keys); the references (system
    ``references_name``, kind human, caption keys = annotation ids) and one system per results file
    (kind model, caption keys ``000``, ``001``... = position in the set, so that key order is file
    order, "the first m captions"); object labels (source = the file's name).
    """

    kind = "coco"
    mode = "extend"
    nothing_to_create = "a new dataset needs --annotations or --results, not only --objects"

    def parse(
        self, annotations: Path | str | None = None, results: Sequence[SystemFile] = (),
        objects: Path | str | None = None, references_name: str = "coco-references", description: str = "",
    ) -> ParsedDataset:
        """Read the files (see :func:`import_coco`) into a ParsedDataset; raises ValueError for a bad
        ``references_name`` and DatasetFormatError for a file's problem or nothing to import."""
        if not isinstance(references_name, str) or not _NAME.fullmatch(references_name):
            raise ValueError(f"invalid references name {shorten(references_name)}: use 1-100 letters, digits, -_.+")
        refs_images, refs = read_coco_annotations(annotations) if annotations else ({}, {})
        sets_by_system = {}
        for sf in results:
            if sf.name == references_name:
                raise DatasetFormatError(sf.path, f"system name {shorten(sf.name)} is the references' name")
            if sf.name in sets_by_system:
                raise DatasetFormatError(sf.path, f"system {shorten(sf.name)} given twice")
            sets_by_system[sf.name] = read_coco_results(sf.path)
        labels = read_object_labels(objects) if objects else {}
        if not refs and not sets_by_system and not labels:
            raise DatasetFormatError(Path("."), "nothing to import: give --annotations, --results or --objects")
        systems = [SystemSpec(name, System.MODEL) for name in sets_by_system]
        if refs:
            systems.insert(0, SystemSpec(references_name, System.HUMAN))
        source = Path(str(objects)).name[:255] if objects else ""
        return ParsedDataset(
            # named by errors about the whole import, e.g. the references-per-image cap
            source=Path(str(annotations)) if annotations else Path(str(objects)) if objects else Path("."),
            description=description or "COCO-format caption sets",
            citation="Lin et al., Microsoft COCO: Common Objects in Context, ECCV 2014",
            images=sorted(set(refs_images) | {k for s in sets_by_system.values() for k in s}),
            systems=systems,
            reference_system=references_name if refs else None,
            references=[
                CaptionSpec(key, references_name, ann_id, text) for key, caps in refs.items() for ann_id, text in caps
            ],
            captions=[
                CaptionSpec(key, name, f"{j:03d}", text)
                for name, sets in sets_by_system.items()
                for key, caps in sets.items()
                for j, text in enumerate(caps)
            ],
            object_labels=[
                ObjectLabelSpec(key, label, n, source) for key, bag in labels.items() for label, n in bag.items()
            ],
        )


def import_coco(
    name: str,
    annotations: Path | str | None = None,
    results: Sequence[SystemFile] = (),
    objects: Path | str | None = None,
    references_name: str = "coco-references",
    description: str = "",
) -> ImportSummary:
    """Create dataset ``name`` (or add to it) from COCO files; see the module docstring and
    :class:`CocoImporter`.

    A new dataset needs ``annotations`` or ``results``. On an existing dataset, systems that already
    exist with exactly the same captions are left alone ("nothing changed"); a system with different
    captions, or different references, raises DatasetExistsError: import under a new system name.
    Everything is validated first and written in one transaction.

    Raises DatasetFormatError (a file's problem, naming the file and the entry or line),
    DatasetExistsError, or ValueError for a ``references_name`` that is not 1-100 letters, digits
    and ``-_.+``.
    """
    importer = CocoImporter()
    return importer.save(name, importer.parse(annotations, results, objects, references_name, description))
