"""Flickr8k-Expert (Hodosh, Young & Hockenmaier 2013, JAIR 47:853-899).

Files (as in the original Flickr8k_text.zip):

``Flickr8k.token.txt``
    ``<image>.jpg#<k>`` TAB caption, five reference captions per image.
``ExpertAnnotations.txt``
    image TAB candidate caption id TAB expert 1 TAB expert 2 TAB expert 3; the candidate is a
    caption of some Flickr8k image, rated by three experts on a 1-4 scale (4 = describes the image
    without errors, 1 = unrelated).

Standard protocol (Anderson et al. 2016 SPICE; Hessel et al. 2021 CLIPScore): a pair whose
candidate is one of the judged image's own references is excluded, which leaves 5,664 pairs and
16,992 ratings; the image's five captions are its references.
"""
from __future__ import annotations

from pathlib import Path

from django.db import transaction

from ..models import Caption, Dataset, HumanJudgment, Image, System
from .base import (
    DatasetExistsError,
    DatasetFormatError,
    ImportSummary,
    fingerprint,
    read_lines,
)

EXPERT_FILE = "ExpertAnnotations.txt"
TOKEN_FILE = "Flickr8k.token.txt"
CITATION = (
    'M. Hodosh, P. Young and J. Hockenmaier (2013). "Framing Image Description as a Ranking Task: '
    'Data, Models and Evaluation Metrics". Journal of Artificial Intelligence Research 47:853-899.'
)
REFERENCE_SYSTEM = "flickr8k-references"
CANDIDATE_SYSTEM = "expert-candidates"


def _split_caption_id(caption_id: str) -> tuple[str, int] | None:
    image, sep, index = caption_id.rpartition("#")
    if not sep or not image or not index.isdigit():
        return None
    return image, int(index)


def parse_tokens(path: Path) -> dict[str, list[tuple[str, str]]]:
    """Parse ``Flickr8k.token.txt`` into {image key: [(caption id, caption), ...]}.

    Raises DatasetFormatError (file, line, problem) for a line without a TAB, a malformed caption
    id (``<image>#<k>``), an empty caption or a duplicated caption id.
    """
    captions: dict[str, list[tuple[str, str]]] = {}
    seen: set[str] = set()
    for lineno, line in enumerate(read_lines(path), start=1):
        if not line.strip():
            continue
        caption_id, sep, text = line.partition("\t")
        if not sep:
            raise DatasetFormatError(path, "expected '<image>#<k> TAB caption', found no TAB", lineno)
        parsed = _split_caption_id(caption_id.strip())
        if parsed is None:
            raise DatasetFormatError(path, f"malformed caption id {caption_id!r} (expected <image>#<k>)", lineno)
        if not text.strip():
            raise DatasetFormatError(path, f"empty caption for {caption_id!r}", lineno)
        if caption_id in seen:
            raise DatasetFormatError(path, f"duplicate caption id {caption_id!r}", lineno)
        seen.add(caption_id)
        captions.setdefault(parsed[0], []).append((caption_id.strip(), text.strip()))
    if not captions:
        raise DatasetFormatError(path, "no captions found")
    return captions


def parse_expert(path: Path, captions: dict[str, list[tuple[str, str]]], token_path: Path):
    """Parse ``ExpertAnnotations.txt`` into [(image, caption id, [r1, r2, r3]), ...].

    Raises DatasetFormatError for a line without five TAB-separated fields, a rating that is not
    an integer 1-4, an image or caption id missing from the token file, or a duplicated pair.
    """
    text_by_id = {cid: text for caps in captions.values() for cid, text in caps}
    rows, seen = [], set()
    for lineno, line in enumerate(read_lines(path), start=1):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) != 5:
            raise DatasetFormatError(
                path, f"expected 5 TAB-separated fields (image, caption id, 3 ratings), found {len(fields)}", lineno
            )
        image, caption_id, *raw = (f.strip() for f in fields)
        ratings = []
        for k, value in enumerate(raw, start=1):
            if value not in {"1", "2", "3", "4"}:
                raise DatasetFormatError(path, f"expert {k} rating {value!r} is not an integer from 1 to 4", lineno)
            ratings.append(int(value))
        if image not in captions:
            raise DatasetFormatError(path, f"image {image!r} has no reference captions in {token_path.name}", lineno)
        if caption_id not in text_by_id:
            raise DatasetFormatError(path, f"caption id {caption_id!r} not found in {token_path.name}", lineno)
        if (image, caption_id) in seen:
            raise DatasetFormatError(path, f"duplicate pair ({image}, {caption_id})", lineno)
        seen.add((image, caption_id))
        rows.append((image, caption_id, ratings))
    if not rows:
        raise DatasetFormatError(path, "no judgments found (empty file)")
    return rows, text_by_id


def import_flickr8k_expert(directory: Path | str, name: str) -> ImportSummary:
    """Import Flickr8k-Expert from ``directory`` as dataset ``name``, all or nothing.

    Everything is parsed and validated before the first row is written; the writes run in one
    transaction. Re-importing identical files under the same name changes nothing; different data
    under an existing name raises :class:`DatasetExistsError`.

    Raises
    ------
    DatasetFormatError
        missing or malformed file (the message names file, line and problem).
    DatasetExistsError
        ``name`` is taken by a dataset with other contents.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise DatasetFormatError(directory, "directory not found")
    token_path, expert_path = directory / TOKEN_FILE, directory / EXPERT_FILE
    captions = parse_tokens(token_path)
    rows, text_by_id = parse_expert(expert_path, captions, token_path)
    digest = fingerprint(expert_path, token_path)

    kept = [r for r in rows if not r[1].startswith(r[0] + "#")]
    excluded = len(rows) - len(kept)

    with transaction.atomic():
        existing = Dataset.objects.select_for_update().filter(name=name).first()
        if existing is not None:
            if existing.kind == "flickr8k-expert" and existing.fingerprint == digest:
                return ImportSummary(name, False, _counts(existing))
            raise DatasetExistsError(
                f"dataset {name!r} already exists with different data; choose another --name"
            )
        dataset = Dataset.objects.create(
            name=name, kind="flickr8k-expert", fingerprint=digest, citation=CITATION,
            description="Flickr8k-Expert: 3 expert ratings (1-4) of image-caption pairs (Hodosh et al. 2013).",
            criterion="quality", scale_min=1, scale_max=4,
        )
        refs = System.objects.create(
            dataset=dataset, name=REFERENCE_SYSTEM, kind=System.HUMAN,
            description="The five Flickr8k reference captions of each image (crowd-written).",
        )
        cands = System.objects.create(
            dataset=dataset, name=CANDIDATE_SYSTEM, kind=System.RETRIEVAL,
            description="Captions of Flickr8k images retrieved for another image by the ranking systems "
            "of Hodosh et al. (2013) and rated by three experts.",
        )
        dataset.reference_system = refs
        dataset.save(update_fields=["reference_system"])

        judged_images = sorted({image for image, _, _ in kept})
        Image.objects.bulk_create([Image(dataset=dataset, key=key) for key in judged_images])
        image_ids = dict(Image.objects.filter(dataset=dataset).values_list("key", "id"))

        Caption.objects.bulk_create(
            [
                Caption(image_id=image_ids[image], system=refs, key=cid, text=text)
                for image in judged_images
                for cid, text in captions[image]
            ],
            batch_size=2000,
        )
        Caption.objects.bulk_create(
            [Caption(image_id=image_ids[image], system=cands, key=cid, text=text_by_id[cid]) for image, cid, _ in kept],
            batch_size=2000,
        )
        caption_ids = {
            (image_id, key): pk
            for pk, image_id, key in Caption.objects.filter(system=cands).values_list("id", "image_id", "key")
        }
        HumanJudgment.objects.bulk_create(
            [
                HumanJudgment(
                    caption_id=caption_ids[(image_ids[image], cid)], image_id=image_ids[image], system=cands,
                    criterion="quality",
                    rater=f"expert_{k}", score=float(score), source="flickr8k-expert",
                )
                for image, cid, ratings in kept
                for k, score in enumerate(ratings, start=1)
            ],
            batch_size=5000,
        )
    summary = ImportSummary(name, True, _counts(dataset))
    summary.notes.append(
        f"excluded {excluded:,} pairs whose candidate is one of the image's own references (standard protocol)"
    )
    return summary


def _counts(dataset: Dataset) -> dict[str, int]:
    return {
        "images": dataset.images.count(),
        "reference captions": dataset.references().count(),
        "candidate captions": dataset.candidates().count(),
        "ratings": HumanJudgment.objects.filter(image__dataset=dataset).count(),
    }
