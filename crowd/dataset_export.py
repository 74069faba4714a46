"""Export a rating dataset in the format of ``import_dataset judgments``, so that it round-trips.

``manage.py export_dataset <name> --format jsonl|csv [--output FILE]`` writes any dataset of graded
human judgments (Flickr8k-Expert, Flickr8k-CrowdFlower, THumB, an imported judgments file, a COCO
caption set without judgments) as one file of rows that :mod:`crowd.importers.judgments` reads
back, and :func:`import_command` gives the ``import_dataset judgments`` line that does it.

What the re-import must reproduce for the reports (:mod:`analysis.reports`,
:mod:`analysis.benchmarks`) to give the same numbers, to the last digit:

* every rating with its rater: one row per (candidate caption, rater), a field per criterion
  (``rater`` field; an empty score = that rater gave none on that criterion), so ``rows: "rating"``
  (every rating a correlation row, Flickr8k-Expert) and ``rows: "mean"`` (the mean of a caption's
  ratings, Flickr8k-CrowdFlower's fraction of yes votes) and the human ceilings see the same ratings;
  scores are written with ``repr`` (shortest text that reads back as the same float);
* the protocol's ``rows``, ``headline``, criteria (the dataset's main criterion first),
  ``human_system`` (THumB's system-level figures without the Human system) and ``published_as``;
* the order of rows: captions in id order, so the re-import creates captions, images and systems
  in the same relative order (the reports order rows by caption id and the bootstrap draws images
  in id order); a dataset whose images (or systems) do not first appear in id order gets a note;
* each image's references in the order the metrics read them (by caption key), caption ids (``id``
  field), system names (``system`` field) and the references' system name (a metric run's
  ``references`` parameter).

Not exportable (ValueError, one line): forced-choice benchmarks (PASCAL-50S), judgments of caption
sets rather than captions, a dataset without references, names the importer would read otherwise
(an image key such as ``007`` that it would read as COCO id ``7``).
Images without candidate captions are left out (a note says so: CIDEr-D's document frequencies,
taken over the dataset's references, can then differ). Layering: imports :mod:`crowd.models`,
:mod:`crowd.importers` and :mod:`captioneval.utils.csvsafe` only.
"""
from __future__ import annotations

import json
import shlex
from collections import defaultdict
from typing import TextIO

from captioneval.utils import csvsafe

from .importers.base import image_key, shorten
from .importers.judgments import HEADLINES, PUBLISHED_BY_KIND, REFERENCE_SYSTEM, JudgmentMapping
from .models import Dataset, HumanJudgment, PairwiseJudgment

EXPORT_FORMATS = ("jsonl", "csv")
#: Field names of the exported rows (the scores are named after their criteria).
FIELDS = {"image": "image", "key": "id", "system": "system", "candidate": "candidate", "rater": "rater",
          "references": "references"}


def _criteria(dataset: Dataset, judged: list[str], proto: dict) -> list[str]:
    """The judged criteria, the dataset's main criterion first, then the protocol's order."""
    order = [dataset.criterion] if dataset.criterion else []
    order += [c for c in proto.get("criteria") or [] if isinstance(c, str)]
    order += sorted(judged)
    return [c for c in dict.fromkeys(order) if c in judged]


def export_dataset(dataset: Dataset, fmt: str, out: TextIO, notes: list[str] | None = None) -> JudgmentMapping:
    """Write ``dataset`` to ``out`` in format ``fmt`` (``"jsonl"`` or ``"csv"``, see
    :data:`EXPORT_FORMATS`) and return the :class:`JudgmentMapping` that re-imports it.

    Rows: one per (candidate caption, rater) in caption-id order (a caption without ratings: one
    row with empty rater and scores); fields ``image``, ``id`` (caption key), ``system``,
    ``candidate``, ``rater``, one field per criterion (``score_<criterion>`` if a criterion's name
    is one of these) and the references (JSON list; CSV: columns ``references.1`` ...). A dataset
    without judgments has no rater and score fields. CSV cells go through
    :func:`captioneval.utils.csvsafe.neutralise` (the importer restores them). ``notes`` (a list) receives
    warnings (images left out, ids out of order).

    Raises ValueError (one line) for a format not in :data:`EXPORT_FORMATS` or a dataset this
    format cannot hold (module docstring); nothing is written then.
    """
    if fmt not in EXPORT_FORMATS:
        raise ValueError(f"unknown export format {shorten(fmt)}; known: {', '.join(EXPORT_FORMATS)}")
    notes = notes if notes is not None else []
    proto = dict(dataset.protocol or {})
    if proto.get("task", Dataset.TASK_RATING) != Dataset.TASK_RATING or PairwiseJudgment.objects.filter(
        caption_b__image__dataset=dataset
    ).exists():
        raise ValueError(f"dataset {dataset.name!r} is a forced-choice benchmark: the judgments format holds graded ratings only")
    imported = HumanJudgment.objects.filter(image__dataset=dataset, campaign__isnull=True)
    if imported.filter(caption__isnull=True).exists():
        raise ValueError(f"dataset {dataset.name!r} has judgments of caption sets, not of captions: the judgments format cannot hold them")
    if dataset.reference_system_id is None or not dataset.references().exists():
        raise ValueError(f"dataset {dataset.name!r} has no reference captions: the judgments format needs them")
    rows_mode = proto.get("rows", Dataset.ROWS_RATING)
    headline = proto.get("headline", "kendall_tau_c")
    if rows_mode not in (Dataset.ROWS_RATING, Dataset.ROWS_MEAN) or headline not in HEADLINES:
        raise ValueError(f"dataset {dataset.name!r} has a protocol the judgments format cannot state "
                         f"(rows {shorten(rows_mode)}, headline {shorten(headline)})")

    candidates = list(
        dataset.candidates().order_by("id").values_list("id", "image_id", "image__key", "system_id", "system__name", "key", "text")
    )
    if not candidates:
        raise ValueError(f"dataset {dataset.name!r} has no candidate captions to export")
    refs: dict[int, list[str]] = defaultdict(list)
    for image_id, text in dataset.references().order_by("image_id", "key").values_list("image_id", "text"):
        refs[image_id].append(text)
    judged = sorted(set(imported.values_list("criterion", flat=True).distinct()))
    criteria = _criteria(dataset, judged, proto)
    ratings: dict[int, dict[str, dict[str, float]]] = defaultdict(lambda: defaultdict(dict))
    for caption_id, rater, criterion, score in imported.order_by("caption_id", "rater", "criterion").values_list(
        "caption_id", "rater", "criterion", "score"
    ):
        ratings[caption_id][rater][criterion] = score

    # checks: everything the importer would read otherwise
    for cid, image_id, key, _, system, ckey, text in candidates:
        if image_key(key, dataset.name, "image") != key:
            raise ValueError(f"image key {shorten(key)} would be read back as {image_key(key, dataset.name, 'image')!r}")
        if not refs.get(image_id):
            raise ValueError(f"image {shorten(key)} has no reference captions: the judgments format needs them")
        if text != text.strip() or any(r != r.strip() for r in refs[image_id]):
            notes.append(f"caption text with surrounding spaces (image {key}) is stripped on re-import")
    for rater_map in ratings.values():
        for rater in rater_map:
            if not rater.strip() or rater != rater.strip():
                raise ValueError(f"rater name {shorten(rater)} would not be read back (empty or surrounding spaces)")
    fixed = set(FIELDS.values())
    score_fields = [c if c not in fixed and not c.startswith("references.") else f"score_{c}" for c in criteria]
    image_order = list(dict.fromkeys(c[1] for c in candidates))
    if image_order != sorted(image_order):
        notes.append("images do not first appear in id order: bootstrap intervals of the re-import may differ")
    system_order = list(dict.fromkeys(c[3] for c in candidates))
    if system_order != sorted(system_order):
        notes.append("systems do not first appear in id order: system-level figures of the re-import may be ordered differently")
    all_images = dataset.images.count()
    if all_images > len(image_order):
        notes.append(f"{all_images - len(image_order):,} image(s) without candidate captions are left out (their references "
                     "too: CIDEr-D's document frequencies may differ)")

    def records():
        for cid, image_id, key, _, system, ckey, text in candidates:
            base = {"image": key, "id": ckey, "system": system, "candidate": text}
            by_rater = ratings.get(cid)
            if not criteria:
                yield base, None, {}, refs[image_id]
            elif not by_rater:
                yield base, "", {}, refs[image_id]
            else:
                for rater, scores in by_rater.items():
                    yield base, rater, scores, refs[image_id]

    if fmt == "jsonl":
        for base, rater, scores, references in records():
            obj = dict(base)
            if criteria:
                obj["rater"] = rater or None
                for criterion, name in zip(criteria, score_fields):
                    obj[name] = scores.get(criterion)
            obj["references"] = references
            out.write(json.dumps(obj, ensure_ascii=False) + "\n")
    else:
        width = max(len(refs[c[1]]) for c in candidates)
        header = ["image", "id", "system", "candidate"] + (["rater", *score_fields] if criteria else [])
        header += [f"references.{k}" for k in range(1, width + 1)]
        writer = csvsafe.writer(out, lineterminator="\n")
        writer.writerow(header)
        for base, rater, scores, references in records():
            row = [base["image"], base["id"], base["system"], base["candidate"]]
            if criteria:
                row += [rater or ""] + [repr(scores[c]) if c in scores else "" for c in criteria]
            row += references + [""] * (width - len(references))
            writer.writerow(row)
    published = proto.get("published_as") or PUBLISHED_BY_KIND.get(dataset.kind)
    human = proto.get("human_system")
    return JudgmentMapping(
        image="image", candidate="candidate", references="references",
        scores=tuple(score_fields), criteria=tuple(criteria) if score_fields != criteria else (),
        system="system", rater="rater" if criteria else None, key="id",
        rows="ratings" if rows_mode == Dataset.ROWS_RATING else "mean", headline=headline, format=fmt,
        human_system=human if isinstance(human, str) and human else None,
        published_as=published if isinstance(published, str) and published else None,
        reference_system=None if dataset.reference_system.name == REFERENCE_SYSTEM else dataset.reference_system.name,
    )


def import_command(dataset_name: str, path: str, mapping: JudgmentMapping) -> str:
    """The ``python manage.py import_dataset judgments ...`` line that imports file ``path`` with
    ``mapping`` as dataset ``dataset_name`` (options only where the mapping differs from the
    defaults; arguments quoted for a POSIX shell)."""
    default = JudgmentMapping()
    args = ["python", "manage.py", "import_dataset", "judgments", path, "--name", dataset_name]
    for attr, option in (("image", "--image-field"), ("candidate", "--candidate-field"),
                         ("references", "--references-field"), ("system", "--system-field"),
                         ("rater", "--rater-field"), ("key", "--key-field")):
        if getattr(mapping, attr) != getattr(default, attr):
            args += [option, getattr(mapping, attr)]
    if not mapping.scores:
        args.append("--no-scores")
    elif mapping.scores != default.scores:
        for name in mapping.scores:
            args += ["--score-field", name]
    for name in mapping.criteria:
        args += ["--criterion", name]
    for attr, option in (("references_file", "--references-file"), ("rows", "--rows"), ("headline", "--headline"),
                         ("format", "--format"), ("human_system", "--human-system"), ("published_as", "--published-as"),
                         ("reference_system", "--reference-system")):
        value = getattr(mapping, attr)
        if value is not None and value != getattr(default, attr):
            args += [option, "ratings" if attr == "rows" and value == "rating" else value]
    return " ".join(shlex.quote(a) for a in args)
