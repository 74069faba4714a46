"""THumB 1.0 for MSCOCO (Kasai et al., NAACL 2022, "Transparent Human Evaluation for Image Captioning").

Files (byte copies of ``mscoco/`` in github.com/jungokasai/THumB, see ``data/thumb/SOURCE.txt``):

``mscoco_THumB-1.0.jsonl``
    one JSON object a line: ``SYS`` (system), ``seg_id`` (COCO image id, a string), ``set_id``
    (index in the Karpathy test split), ``hyp`` (the caption), ``image`` (``COCO_val2014_<id>.jpg``),
    ``P`` and ``R`` (precision and recall, 1-5), ``Fl``, ``Con``, ``Inc`` (fluency, conciseness and
    inclusive-language penalties, <= 0) and ``human_score`` = (P + R) / 2 + Fl + Con + Inc.
    2,500 lines: 500 images x 5 systems (Up-Down, Unified-VLP, VinVL-base, VinVL-large, Human).
``mscoco_references.json``
    JSON lines ``{"seg_id", "set_id", "refs": [4 COCO captions]}``; the image's fifth COCO caption
    is the hypothesis of the ``Human`` system, so it is a candidate here, not a reference.

Protocol (Kasai et al. 2022, Sec. 4): metrics are scored against the 4 references and correlated
(Pearson) with human_score and with P and R separately, per caption (instance level) and per
system (system level: one mean per system, computed with and without the Human system, since
human captions score highest with people and low with most reference-based metrics).
"""
from __future__ import annotations

import math
from pathlib import Path

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
    image_key,
    parse_json,
    read_lines,
    shorten,
)

JUDGMENTS_FILE = "mscoco_THumB-1.0.jsonl"
REFERENCES_FILE = "mscoco_references.json"
KIND = "thumb"
REFERENCE_SYSTEM = "coco-references"
HUMAN_SYSTEM = "Human"
RATER = "thumb"
CRITERIA = {"human_score": "human_score", "P": "precision", "R": "recall"}  # field -> criterion
PENALTIES = ("Fl", "Con", "Inc")
SCORE_TOLERANCE = 1e-6
CITATION = (
    "J. Kasai, K. Sakaguchi, L. Dunagan, J. Morrison, R. Le Bras, Y. Choi and N. A. Smith (2022). "
    '"Transparent Human Evaluation for Image Captioning". Proc. of NAACL, pages 3464-3478.'
)
PROTOCOL = {
    "task": "rating",
    "rows": "rating",
    "headline": "pearson",
    "criteria": ["human_score", "precision", "recall"],
    "system_level": True,
    "human_system": HUMAN_SYSTEM,
    "summary": (
        "THumB 1.0 (Kasai et al. 2022): 500 MSCOCO Karpathy-test images, each captioned by 5 systems "
        "(Up-Down, Unified-VLP, VinVL-base, VinVL-large and Human, the image's fifth COCO caption). "
        "Trained annotators scored every caption with a rubric: precision P and recall R (1-5) plus "
        "penalties for fluency, conciseness and inclusive language; human_score = (P+R)/2 + penalties. "
        "Metrics use the image's 4 COCO references of mscoco_references.json. The paper reports Pearson "
        "correlations with human_score, P and R at the instance level (one row per caption, one rating "
        "each) and at the system level (system means, with and without the Human system): people rate "
        "the Human captions best, above all in recall, while most automatic metrics rank them below the "
        "machines; CLIPScore, which is more sensitive to recall, correlates better."
    ),
    "source": "Kasai et al. 2022 (NAACL), Sec. 4 (instance- and system-level correlations)",
}


def _load_json_lines(path: Path) -> list[tuple[int, dict]]:
    out = []
    for lineno, line in enumerate(read_lines(path), start=1):
        if not line.strip():
            continue
        obj = parse_json(path, line, lineno)
        if not isinstance(obj, dict):
            raise DatasetFormatError(path, "expected a JSON object on each line", lineno)
        out.append((lineno, obj))
    if not out:
        raise DatasetFormatError(path, "no entries found (empty file)")
    return out


def _number(obj: dict, field: str, path: Path, lineno: int) -> float:
    if field not in obj:
        raise DatasetFormatError(path, f"missing field {shorten(field)}", lineno)
    value = obj[field]
    try:
        number = float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else math.nan
    except OverflowError:  # an integer beyond the float range
        number = math.inf
    if not math.isfinite(number):
        raise DatasetFormatError(path, f"{field} must be a finite number, got {shorten(value)}", lineno)
    return number


def _text(obj: dict, field: str, path: Path, lineno: int, **limit) -> str:
    """The whitespace-normalised non-empty string ``obj[field]`` (see :func:`check_text` for ``limit``)."""
    if field not in obj:
        raise DatasetFormatError(path, f"missing field {shorten(field)}", lineno)
    value = obj[field]
    if not isinstance(value, str) or not " ".join(value.split()):
        raise DatasetFormatError(path, f"{field} must be a non-empty string, got {shorten(value)}", lineno)
    return check_text(" ".join(value.split()), path, field, lineno, **limit)


def parse_references(path: Path) -> dict[str, tuple[int, list[str]]]:
    """Parse ``mscoco_references.json`` (JSON lines) into {image key: (set_id, [reference, ...])}.

    Raises DatasetFormatError (file, line, problem) for a file over the import caps
    (``IMPORT_MAX_FILE_BYTES``, ``IMPORT_MAX_CAPTIONS`` references), invalid JSON (also a key given
    twice), a missing field, an empty or non-string reference, a malformed id or a duplicated image.
    """
    refs: dict[str, tuple[int, list[str]]] = {}
    counter = CaptionCounter(path)
    for lineno, obj in _load_json_lines(path):
        if "seg_id" not in obj:
            raise DatasetFormatError(path, "missing field 'seg_id'", lineno)
        key = image_key(obj["seg_id"], path, f"line {lineno}")
        set_id = obj.get("set_id")
        if isinstance(set_id, bool) or not isinstance(set_id, int):
            raise DatasetFormatError(path, f"set_id must be an integer, got {shorten(set_id)}", lineno)
        texts = obj.get("refs")
        if not isinstance(texts, list) or not texts:
            raise DatasetFormatError(path, "refs must be a non-empty list of captions", lineno)
        counter.add(len(texts), lineno)
        clean = []
        for k, text in enumerate(texts):
            if not isinstance(text, str) or not text.strip():
                raise DatasetFormatError(path, f"refs[{k}] must be a non-empty string, got {shorten(text)}", lineno)
            clean.append(check_text(" ".join(text.split()), path, f"refs[{k}]", lineno))
        if key in refs:
            raise DatasetFormatError(path, f"duplicate seg_id {key}", lineno)
        refs[key] = (set_id, clean)
    return refs


def parse_judgments(path: Path, references: dict[str, tuple[int, list[str]]], refs_path: Path) -> list[dict]:
    """Parse ``mscoco_THumB-1.0.jsonl`` into a list of {"line", "image", "set_id", "system", "hyp",
    "human_score", "P", "R"} (file order).

    Checks per line: every field present; SYS at most 100 characters, hyp at most
    :data:`~crowd.importers.base.MAX_CAPTION_CHARS`, no NUL characters; P and R in [1, 5]; penalties Fl, Con, Inc <= 0;
    human_score = (P + R) / 2 + Fl + Con + Inc (within 1e-6); ``image`` names the same COCO id as
    ``seg_id``; the image has references in ``refs_path`` with the same set_id; no (image, system)
    twice; at most ``IMPORT_MAX_CAPTIONS`` lines, each a caption, and ``IMPORT_MAX_FILE_BYTES``
    bytes. Raises DatasetFormatError (file, line, problem).
    """
    rows, seen = [], set()
    counter = CaptionCounter(path)
    for lineno, obj in _load_json_lines(path):
        counter.add(1, lineno)
        system = _text(obj, "SYS", path, lineno, max_chars=100)
        hyp = _text(obj, "hyp", path, lineno)
        if "seg_id" not in obj:
            raise DatasetFormatError(path, "missing field 'seg_id'", lineno)
        key = image_key(obj["seg_id"], path, f"line {lineno}")
        if len(system) + 1 + len(key) > MAX_KEY_CHARS:
            raise DatasetFormatError(path, f"SYS and seg_id together exceed the {MAX_KEY_CHARS} characters of a caption key", lineno)
        file_key = image_key(_text(obj, "image", path, lineno), path, f"line {lineno}")
        if file_key != key:
            raise DatasetFormatError(path, f"image {shorten(obj['image'])} is not COCO image {key} (seg_id)", lineno)
        set_id = obj.get("set_id")
        if isinstance(set_id, bool) or not isinstance(set_id, int):
            raise DatasetFormatError(path, f"set_id must be an integer, got {shorten(set_id)}", lineno)
        p, r = _number(obj, "P", path, lineno), _number(obj, "R", path, lineno)
        for name, value in (("P", p), ("R", r)):
            if not 1 <= value <= 5:
                raise DatasetFormatError(path, f"{name} = {value:g} is outside the 1-5 scale", lineno)
        penalties = [_number(obj, name, path, lineno) for name in PENALTIES]
        for name, value in zip(PENALTIES, penalties):
            if value > 0:
                raise DatasetFormatError(path, f"penalty {name} = {value:g} must be <= 0", lineno)
        score = _number(obj, "human_score", path, lineno)
        expected = (p + r) / 2 + sum(penalties)
        if abs(score - expected) > SCORE_TOLERANCE:
            raise DatasetFormatError(
                path, f"human_score {score:g} disagrees with (P+R)/2 + Fl + Con + Inc = {expected:g}", lineno
            )
        if key not in references:
            raise DatasetFormatError(path, f"image {key} has no references in {refs_path.name}", lineno)
        if references[key][0] != set_id:
            raise DatasetFormatError(
                path, f"set_id {set_id} of image {key} differs from {references[key][0]} in {refs_path.name}", lineno
            )
        if (key, system) in seen:
            raise DatasetFormatError(path, f"duplicate caption of image {key} by system {shorten(system)}", lineno)
        seen.add((key, system))
        rows.append({"line": lineno, "image": key, "set_id": set_id, "system": system, "hyp": hyp,
                     "human_score": score, "P": p, "R": r})
    return rows


class ThumbImporter(Importer):
    """THumB 1.0 for MSCOCO (``import_dataset thumb``); protocol :data:`PROTOCOL` (Pearson
    headline, instance and system level).

    Parsed rows: one image per judged COCO image (key = the COCO id, e.g. ``"974"``, as the COCO
    importer names images; sorted by number); the reference system ``coco-references`` with each
    image's 4 references (keys ``<id>-ref1`` ..); one system per ``SYS`` value in file order
    (``Human`` of kind human, the others models) with one caption per line (key
    ``"<SYS>:<seg_id>"``); per caption three judgments by rater ``thumb``: criteria
    ``human_score``, ``precision`` (P) and ``recall`` (R). The penalties are checked
    (human_score = (P+R)/2 + Fl + Con + Inc) but not stored separately.
    """

    format = KIND
    files = (JUDGMENTS_FILE, REFERENCES_FILE)
    counts = {"images": "images", "systems": "systems", "reference captions": "references",
              "candidate captions": "candidates", "judgments": "judgments"}

    def parse(self, paths, **options) -> ParsedDataset:
        judgments_path, refs_path = paths[JUDGMENTS_FILE], paths[REFERENCES_FILE]
        references = parse_references(refs_path)
        rows = parse_judgments(judgments_path, references, refs_path)
        images = sorted({row["image"] for row in rows}, key=lambda k: (len(k), k))
        systems = list(dict.fromkeys(row["system"] for row in rows))
        same_as_ref: dict[str, int] = {}
        for row in rows:
            if row["hyp"] in references[row["image"]][1]:
                same_as_ref[row["system"]] = same_as_ref.get(row["system"], 0) + 1
        notes = [
            f"{len(systems)} systems ({', '.join(systems)}), {len(images):,} images; criteria human_score, precision, "
            "recall (one rating each, rater 'thumb')"
        ]
        if same_as_ref:
            per_system = ", ".join(f"{k} {v}" for k, v in sorted(same_as_ref.items(), key=lambda kv: -kv[1]))
            notes.append(
                f"{sum(same_as_ref.values())} captions are word for word one of their image's 4 references "
                f"({per_system}); kept as published (such a caption gets a near-maximal reference-based score)"
            )
        return ParsedDataset(
            source=judgments_path,
            description="THumB 1.0: rubric-based precision/recall scores and penalties for 5 systems' captions "
            "of 500 MSCOCO images (Kasai et al. 2022).",
            citation=CITATION, criterion="human_score", scale_min=None, scale_max=5, protocol=dict(PROTOCOL),
            images=images,
            systems=[
                SystemSpec(REFERENCE_SYSTEM, System.HUMAN,
                           "4 MSCOCO reference captions per image (the fifth is the Human system's caption)."),
                *(
                    SystemSpec(sys_name, System.HUMAN, "the image's fifth MSCOCO caption") if sys_name == HUMAN_SYSTEM
                    else SystemSpec(sys_name, System.MODEL, "captioning model")
                    for sys_name in systems
                ),
            ],
            reference_system=REFERENCE_SYSTEM,
            references=[
                CaptionSpec(key, REFERENCE_SYSTEM, f"{key}-ref{k}", text)
                for key in images
                for k, text in enumerate(references[key][1], start=1)
            ],
            captions=[
                CaptionSpec(row["image"], row["system"], f"{row['system']}:{row['image']}", row["hyp"]) for row in rows
            ],
            judgments=[
                JudgmentSpec(row["image"], row["system"], f"{row['system']}:{row['image']}", criterion, RATER,
                             row[field], "thumb-1.0")
                for row in rows
                for field, criterion in CRITERIA.items()
            ],
            notes=notes,
        )


def import_thumb(directory: Path | str, name: str) -> ImportSummary:
    """Import THumB 1.0 (MSCOCO) from ``directory`` as dataset ``name``, all or nothing
    (:class:`ThumbImporter`; the rules are those of :class:`~crowd.importers.base.Importer`).

    Raises
    ------
    DatasetFormatError
        missing or malformed file (message: file, line, problem).
    DatasetExistsError
        ``name`` is taken by a dataset with other contents.
    """
    return ThumbImporter()(directory, name)
