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
import reprlib
from pathlib import Path

from django.db import transaction

from ..models import Caption, Dataset, HumanJudgment, Image, System
from .base import (
    MAX_KEY_CHARS,
    DatasetFormatError,
    ImportSummary,
    check_existing,
    check_text,
    fingerprint,
    read_lines,
    refresh_statistics,
)
from .coco import image_key, parse_json

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
        raise DatasetFormatError(path, f"missing field {field!r}", lineno)
    value = obj[field]
    try:
        number = float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else math.nan
    except OverflowError:  # an integer beyond the float range
        number = math.inf
    if not math.isfinite(number):
        raise DatasetFormatError(path, f"{field} must be a finite number, got {reprlib.repr(value)}", lineno)
    return number


def _text(obj: dict, field: str, path: Path, lineno: int, **limit) -> str:
    """The whitespace-normalised non-empty string ``obj[field]`` (see :func:`check_text` for ``limit``)."""
    if field not in obj:
        raise DatasetFormatError(path, f"missing field {field!r}", lineno)
    value = obj[field]
    if not isinstance(value, str) or not " ".join(value.split()):
        raise DatasetFormatError(path, f"{field} must be a non-empty string, got {reprlib.repr(value)}", lineno)
    return check_text(" ".join(value.split()), path, field, lineno, **limit)


def parse_references(path: Path) -> dict[str, tuple[int, list[str]]]:
    """Parse ``mscoco_references.json`` (JSON lines) into {image key: (set_id, [reference, ...])}.

    Raises DatasetFormatError (file, line, problem) for invalid JSON, a missing field, an empty or
    non-string reference, a malformed id or a duplicated image.
    """
    refs: dict[str, tuple[int, list[str]]] = {}
    for lineno, obj in _load_json_lines(path):
        if "seg_id" not in obj:
            raise DatasetFormatError(path, "missing field 'seg_id'", lineno)
        key = image_key(obj["seg_id"], path, f"line {lineno}")
        set_id = obj.get("set_id")
        if isinstance(set_id, bool) or not isinstance(set_id, int):
            raise DatasetFormatError(path, f"set_id must be an integer, got {set_id!r}", lineno)
        texts = obj.get("refs")
        if not isinstance(texts, list) or not texts:
            raise DatasetFormatError(path, "refs must be a non-empty list of captions", lineno)
        clean = []
        for k, text in enumerate(texts):
            if not isinstance(text, str) or not text.strip():
                raise DatasetFormatError(path, f"refs[{k}] must be a non-empty string, got {reprlib.repr(text)}", lineno)
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
    twice. Raises DatasetFormatError (file, line, problem).
    """
    rows, seen = [], set()
    for lineno, obj in _load_json_lines(path):
        system = _text(obj, "SYS", path, lineno, max_chars=100)
        hyp = _text(obj, "hyp", path, lineno)
        if "seg_id" not in obj:
            raise DatasetFormatError(path, "missing field 'seg_id'", lineno)
        key = image_key(obj["seg_id"], path, f"line {lineno}")
        if len(system) + 1 + len(key) > MAX_KEY_CHARS:
            raise DatasetFormatError(path, f"SYS and seg_id together exceed the {MAX_KEY_CHARS} characters of a caption key", lineno)
        file_key = image_key(_text(obj, "image", path, lineno), path, f"line {lineno}")
        if file_key != key:
            raise DatasetFormatError(path, f"image {obj['image']!r} is not COCO image {key} (seg_id)", lineno)
        set_id = obj.get("set_id")
        if isinstance(set_id, bool) or not isinstance(set_id, int):
            raise DatasetFormatError(path, f"set_id must be an integer, got {set_id!r}", lineno)
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
            raise DatasetFormatError(path, f"duplicate caption of image {key} by system {system!r}", lineno)
        seen.add((key, system))
        rows.append({"line": lineno, "image": key, "set_id": set_id, "system": system, "hyp": hyp,
                     "human_score": score, "P": p, "R": r})
    return rows


def import_thumb(directory: Path | str, name: str) -> ImportSummary:
    """Import THumB 1.0 (MSCOCO) from ``directory`` as dataset ``name``, all or nothing.

    Rows written: one Image per judged COCO image (key = the COCO id, e.g. ``"974"``, as the COCO
    importer names images); the reference system ``coco-references`` with each image's 4
    references; one System per ``SYS`` value (``Human`` of kind human, the others models) with one
    Caption per line (key ``"<SYS>:<seg_id>"``); per caption three HumanJudgment rows by rater
    ``thumb``: criteria ``human_score``, ``precision`` (P) and ``recall`` (R). The penalties are
    checked (human_score = (P+R)/2 + Fl + Con + Inc) but not stored separately.
    The dataset's protocol is :data:`PROTOCOL` (Pearson headline, instance and system level).

    Raises
    ------
    DatasetFormatError
        missing or malformed file (message: file, line, problem).
    DatasetExistsError
        ``name`` is taken by a dataset with other contents.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise DatasetFormatError(directory, "directory not found")
    judgments_path, refs_path = directory / JUDGMENTS_FILE, directory / REFERENCES_FILE
    references = parse_references(refs_path)
    rows = parse_judgments(judgments_path, references, refs_path)
    digest = fingerprint(judgments_path, refs_path)
    images = sorted({row["image"] for row in rows}, key=lambda k: (len(k), k))
    systems = list(dict.fromkeys(row["system"] for row in rows))
    same_as_ref: dict[str, int] = {}
    for row in rows:
        if row["hyp"] in references[row["image"]][1]:
            same_as_ref[row["system"]] = same_as_ref.get(row["system"], 0) + 1

    with transaction.atomic():
        existing = Dataset.objects.select_for_update().filter(name=name).first()
        if check_existing(existing, KIND, digest):
            return ImportSummary(name, False, _counts(existing))
        dataset = Dataset.objects.create(
            name=name, kind=KIND, fingerprint=digest, citation=CITATION,
            description="THumB 1.0: rubric-based precision/recall scores and penalties for 5 systems' captions "
            "of 500 MSCOCO images (Kasai et al. 2022).",
            criterion="human_score", scale_min=None, scale_max=5, protocol=dict(PROTOCOL),
        )
        refs = System.objects.create(
            dataset=dataset, name=REFERENCE_SYSTEM, kind=System.HUMAN,
            description="4 MSCOCO reference captions per image (the fifth is the Human system's caption).",
        )
        dataset.reference_system = refs
        dataset.save(update_fields=["reference_system"])
        system_rows = {
            sys_name: System.objects.create(
                dataset=dataset, name=sys_name, kind=System.HUMAN if sys_name == HUMAN_SYSTEM else System.MODEL,
                description="the image's fifth MSCOCO caption" if sys_name == HUMAN_SYSTEM else "captioning model",
            )
            for sys_name in systems
        }
        Image.objects.bulk_create([Image(dataset=dataset, key=key) for key in images])
        image_ids = dict(Image.objects.filter(dataset=dataset).values_list("key", "id"))
        Caption.objects.bulk_create(
            [
                Caption(image_id=image_ids[key], system=refs, key=f"{key}-ref{k}", text=text)
                for key in images
                for k, text in enumerate(references[key][1], start=1)
            ]
            + [
                Caption(image_id=image_ids[row["image"]], system=system_rows[row["system"]],
                        key=f"{row['system']}:{row['image']}", text=row["hyp"])
                for row in rows
            ],
            batch_size=2000,
        )
        caption_ids = {
            (image_id, system_id): pk
            for pk, image_id, system_id in Caption.objects.filter(image__dataset=dataset)
            .exclude(system=refs).values_list("id", "image_id", "system_id")
        }
        judgments = []
        for row in rows:
            image_id, system = image_ids[row["image"]], system_rows[row["system"]]
            for field, criterion in CRITERIA.items():
                judgments.append(HumanJudgment(
                    caption_id=caption_ids[(image_id, system.id)], image_id=image_id, system=system,
                    criterion=criterion, rater=RATER, score=row[field], source="thumb-1.0",
                ))
        HumanJudgment.objects.bulk_create(judgments, batch_size=5000)
    refresh_statistics(Image, Caption, HumanJudgment)
    summary = ImportSummary(name, True, _counts(dataset))
    summary.notes.append(
        f"{len(systems)} systems ({', '.join(systems)}), {len(images):,} images; criteria human_score, precision, "
        "recall (one rating each, rater 'thumb')"
    )
    if same_as_ref:
        per_system = ", ".join(f"{k} {v}" for k, v in sorted(same_as_ref.items(), key=lambda kv: -kv[1]))
        summary.notes.append(
            f"{sum(same_as_ref.values())} captions are word for word one of their image's 4 references ({per_system}); "
            "kept as published (such a caption gets a near-maximal reference-based score)"
        )
    return summary


def _counts(dataset: Dataset) -> dict[str, int]:
    return {
        "images": dataset.images.count(),
        "systems": dataset.systems.exclude(pk=dataset.reference_system_id).count(),
        "reference captions": dataset.references().count(),
        "candidate captions": dataset.candidates().count(),
        "judgments": HumanJudgment.objects.filter(image__dataset=dataset).count(),
    }
