"""Flickr8k-Expert and Flickr8k-CrowdFlower (Hodosh, Young & Hockenmaier 2013, JAIR 47:853-899).

Files (as in the original Flickr8k_text.zip):

``Flickr8k.token.txt``
    ``<image>.jpg#<k>`` TAB caption, five reference captions per image.
``ExpertAnnotations.txt``
    image TAB candidate caption id TAB expert 1 TAB expert 2 TAB expert 3; the candidate is a
    caption of some Flickr8k image, rated by three experts on a 1-4 scale (4 = describes the image
    without errors, 1 = unrelated).
``CrowdFlowerAnnotations.txt``
    image TAB candidate caption id TAB fraction of "yes" TAB #yes TAB #no: crowd workers answered
    whether the caption describes the image (possibly with minor mistakes); at least 3 votes a pair.

Flickr8k-Expert protocol (Anderson et al. 2016 SPICE; Hessel et al. 2021 CLIPScore): a pair whose
candidate is one of the judged image's own references is excluded, which leaves 5,664 pairs and
16,992 ratings; the image's five captions are its references; every rating is a correlation row
(Kendall tau-c).

Flickr8k-CrowdFlower protocol (Hessel et al. 2021, appendix A, and its preprocessing script
``flickr8k_example/download.py``): every one of the 47,830 pairs is kept, also those whose candidate
is one of the image's own captions; instead, going through the pairs in file order, a judged
candidate whose text is among the image's remaining references removes that reference (its first
occurrence), and all pairs of the image share the reduced list. The human score of a pair is its
fraction of yes votes; one correlation row per pair (Kendall tau-b).
"""
from __future__ import annotations

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

EXPERT_FILE = "ExpertAnnotations.txt"
CROWDFLOWER_FILE = "CrowdFlowerAnnotations.txt"
TOKEN_FILE = "Flickr8k.token.txt"
CITATION = (
    'M. Hodosh, P. Young and J. Hockenmaier (2013). "Framing Image Description as a Ranking Task: '
    'Data, Models and Evaluation Metrics". Journal of Artificial Intelligence Research 47:853-899.'
)
REFERENCE_SYSTEM = "flickr8k-references"
CANDIDATE_SYSTEM = "expert-candidates"
CROWDFLOWER_SYSTEM = "crowdflower-candidates"
CROWDFLOWER_CRITERION = "describes"
PERCENT_TOLERANCE = 1e-6  # the file rounds the fraction to 15 significant digits
#: Most votes one CrowdFlower pair may have (the file has 3 to 6); each vote is a row, so an absurd
#: count is refused rather than written a billion times.
MAX_VOTES_PER_PAIR = 1000

EXPERT_PROTOCOL = {
    "task": "rating",
    "rows": "rating",
    "headline": "kendall_tau_c",
    "criteria": ["quality"],
    "summary": (
        "Flickr8k-Expert (Hodosh et al. 2013): 3 expert ratings (1-4) per image-caption pair. Standard "
        "protocol (Anderson et al. 2016; Hessel et al. 2021, appendix A): pairs whose candidate is one of "
        "the image's own five captions are excluded (5,664 pairs remain); the image's five captions are "
        "the references; every one of the 16,992 expert ratings is a correlation row paired with its "
        "candidate's metric score; Kendall tau-c is the headline statistic."
    ),
    "source": "Hessel et al. 2021 (CLIPScore, EMNLP), Table 1 and appendix A",
}

CROWDFLOWER_PROTOCOL = {
    "task": "rating",
    "rows": "mean",
    "headline": "kendall_tau_b",
    "criteria": [CROWDFLOWER_CRITERION],
    "summary": (
        "Flickr8k-CrowdFlower (Hodosh et al. 2013): 47,830 image-caption pairs, each judged by at least "
        "3 crowd workers who answered whether the caption describes the image (yes/no). Protocol of "
        "Hessel et al. 2021 (appendix A and its preprocessing code): all pairs are kept, also those "
        "whose candidate is one of the image's own captions; for each image the references are its five "
        "captions minus every judged candidate of that image that is one of them (matched by text), the "
        "same reduced list for all of the image's pairs; the human score of a pair is its fraction of "
        "yes votes (one correlation row per caption, the mean of its 0/1 votes); Kendall tau-b is the "
        "headline statistic. Published (x100): BLEU-4 16.9, CIDEr-D 24.6."
    ),
    "source": "Hessel et al. 2021 (CLIPScore, EMNLP), Table 1 and appendix A",
}


def _split_caption_id(caption_id: str) -> tuple[str, int] | None:
    image, sep, index = caption_id.rpartition("#")
    if not sep or not image or not (index.isascii() and index.isdigit()) or len(caption_id) > MAX_KEY_CHARS:
        return None
    return image, int(index)


def parse_tokens(path: Path) -> dict[str, list[tuple[str, str]]]:
    """Parse ``Flickr8k.token.txt`` into {image key: [(caption id, caption), ...]}.

    Raises DatasetFormatError (file, line, problem) for a line without a TAB, a malformed caption
    id (``<image>#<k>``, at most 255 characters, ``k`` ASCII digits), an empty caption, a caption
    longer than :data:`~crowd.importers.base.MAX_CAPTION_CHARS` characters, a NUL character or a
    duplicated caption id. Ids and captions are stripped of surrounding whitespace; the rest of a
    caption is kept exactly (any Unicode).
    """
    captions: dict[str, list[tuple[str, str]]] = {}
    seen: set[str] = set()
    for lineno, line in enumerate(read_lines(path), start=1):
        if not line.strip():
            continue
        caption_id, sep, text = line.partition("\t")
        if not sep:
            raise DatasetFormatError(path, "expected '<image>#<k> TAB caption', found no TAB", lineno)
        caption_id, text = caption_id.strip(), text.strip()
        parsed = _split_caption_id(caption_id)
        if parsed is None:
            raise DatasetFormatError(
                path, f"malformed caption id {caption_id[:300]!r} (expected <image>#<k>, at most {MAX_KEY_CHARS} "
                "characters)", lineno,
            )
        if not text:
            raise DatasetFormatError(path, f"empty caption for {caption_id!r}", lineno)
        check_text(text, path, f"caption of {caption_id!r}", lineno)
        if caption_id in seen:
            raise DatasetFormatError(path, f"duplicate caption id {caption_id!r}", lineno)
        seen.add(caption_id)
        captions.setdefault(parsed[0], []).append((caption_id, text))
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
    under an existing name raises :class:`DatasetExistsError`. The dataset's ``protocol`` is
    :data:`EXPERT_PROTOCOL` (every rating a row, Kendall tau-c).

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
        if check_existing(existing, "flickr8k-expert", digest):
            return ImportSummary(name, False, _counts(existing))
        dataset = Dataset.objects.create(
            name=name, kind="flickr8k-expert", fingerprint=digest, citation=CITATION,
            description="Flickr8k-Expert: 3 expert ratings (1-4) of image-caption pairs (Hodosh et al. 2013).",
            criterion="quality", scale_min=1, scale_max=4, protocol=dict(EXPERT_PROTOCOL),
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
    refresh_statistics(Image, Caption, HumanJudgment)
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


def parse_crowdflower(path: Path, captions: dict[str, list[tuple[str, str]]], token_path: Path):
    """Parse ``CrowdFlowerAnnotations.txt`` into [(line number, image, caption id, n_yes, n_no), ...].

    Each line is image TAB caption id TAB fraction of yes TAB #yes TAB #no. Raises
    DatasetFormatError (file, line, problem) for a line without five TAB-separated fields, a vote
    count that is not a non-negative integer, a pair without votes or with more than
    :data:`MAX_VOTES_PER_PAIR`, a fraction that is not a number
    or disagrees with #yes / (#yes + #no) by more than 1e-6, an image or caption id missing from the
    token file, a duplicated pair, or a file without pairs.
    """
    known_ids = {cid for caps in captions.values() for cid, _ in caps}
    rows, seen = [], set()
    for lineno, line in enumerate(read_lines(path), start=1):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) != 5:
            raise DatasetFormatError(
                path, f"expected 5 TAB-separated fields (image, caption id, fraction yes, #yes, #no), found {len(fields)}",
                lineno,
            )
        image, caption_id, raw_fraction, raw_yes, raw_no = (f.strip() for f in fields)
        counts = []
        for label, value in (("#yes", raw_yes), ("#no", raw_no)):
            if not (value.isascii() and value.isdigit()):
                raise DatasetFormatError(path, f"{label} {value[:50]!r} is not a non-negative integer", lineno)
            counts.append(int(value) if len(value) <= 12 else MAX_VOTES_PER_PAIR + 1)
        n_yes, n_no = counts
        if n_yes + n_no == 0:
            raise DatasetFormatError(path, "a pair without votes (#yes + #no = 0)", lineno)
        if n_yes + n_no > MAX_VOTES_PER_PAIR:
            raise DatasetFormatError(path, f"more than {MAX_VOTES_PER_PAIR} votes for one pair", lineno)
        try:
            fraction = float(raw_fraction)
        except ValueError:
            raise DatasetFormatError(path, f"fraction of yes {raw_fraction!r} is not a number", lineno) from None
        expected = n_yes / (n_yes + n_no)
        if not abs(fraction - expected) <= PERCENT_TOLERANCE:  # also rejects nan
            raise DatasetFormatError(
                path, f"fraction of yes {raw_fraction} disagrees with #yes/(#yes+#no) = {n_yes}/{n_yes + n_no} = {expected:.6g}",
                lineno,
            )
        if image not in captions:
            raise DatasetFormatError(path, f"image {image!r} has no reference captions in {token_path.name}", lineno)
        if caption_id not in known_ids:
            raise DatasetFormatError(path, f"caption id {caption_id!r} not found in {token_path.name}", lineno)
        if (image, caption_id) in seen:
            raise DatasetFormatError(path, f"duplicate pair ({image}, {caption_id})", lineno)
        seen.add((image, caption_id))
        rows.append((lineno, image, caption_id, n_yes, n_no))
    if not rows:
        raise DatasetFormatError(path, "no judgments found (empty file)")
    return rows


def crowdflower_references(rows, captions: dict[str, list[tuple[str, str]]], path: Path):
    """The reduced reference lists of the CrowdFlower protocol.

    ``rows`` as returned by :func:`parse_crowdflower`; ``captions`` as by :func:`parse_tokens`.
    Going through the pairs in file order, a candidate whose text equals one of its image's
    remaining references removes that reference (the first such one), as the CLIPScore preprocessing
    (Hessel et al. 2021, ``flickr8k_example/download.py``) does with ``list.remove``.

    Returns ``(references, removed)``: image -> [(caption id, text), ...] kept, in token-file order,
    for every judged image; image -> number of references removed (only images that lost some).
    Raises DatasetFormatError (naming the line of the pair that removed the last reference) when an
    image would be left without references: the metrics need at least one, so such data is refused
    rather than imported with a silently changed protocol.
    """
    text_by_id = {cid: text for caps in captions.values() for cid, text in caps}
    references: dict[str, list[tuple[str, str]]] = {}
    removed: dict[str, int] = {}
    for lineno, image, caption_id, _, _ in rows:
        refs = references.setdefault(image, list(captions[image]))
        text = text_by_id[caption_id]
        for k, (_, ref_text) in enumerate(refs):
            if ref_text == text:
                del refs[k]
                removed[image] = removed.get(image, 0) + 1
                if not refs:
                    raise DatasetFormatError(
                        path, f"image {image!r} has no reference caption left once its judged candidates are removed "
                        "(the protocol removes every judged candidate from its image's references; metrics need at "
                        "least one reference)", lineno,
                    )
                break
    return references, removed


def import_flickr8k_crowdflower(directory: Path | str, name: str) -> ImportSummary:
    """Import Flickr8k-CrowdFlower from ``directory`` (``CrowdFlowerAnnotations.txt`` and
    ``Flickr8k.token.txt``) as dataset ``name``, all or nothing, following the protocol of Hessel et
    al. 2021 (CLIPScore, appendix A; see the module docstring and :data:`CROWDFLOWER_PROTOCOL`).

    Rows written: one Image per judged image (1,000); the reference system ``flickr8k-references``
    holds each image's reduced reference list (:func:`crowdflower_references`); the candidate system
    ``crowdflower-candidates`` one Caption per pair (47,830, key = caption id); every vote is one
    HumanJudgment (criterion ``describes``, raters ``vote_1`` .. ``vote_n`` of the pair, score 1.0
    for the #yes first votes and 0.0 for the rest: the file only has counts, so rater labels are
    positions, not workers), so that a caption's mean score is its fraction of yes votes.

    Everything is validated before the first row is written, in one transaction; identical files
    under the same name change nothing.

    Raises
    ------
    DatasetFormatError
        missing or malformed file, a fraction column that disagrees with the counts, an unknown
        image or caption id, an image left without references (message: file, line, problem).
    DatasetExistsError
        ``name`` is taken by a dataset with other contents.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise DatasetFormatError(directory, "directory not found")
    token_path, cf_path = directory / TOKEN_FILE, directory / CROWDFLOWER_FILE
    captions = parse_tokens(token_path)
    rows = parse_crowdflower(cf_path, captions, token_path)
    references, removed = crowdflower_references(rows, captions, cf_path)
    text_by_id = {cid: text for caps in captions.values() for cid, text in caps}
    digest = fingerprint(cf_path, token_path)
    kind = "flickr8k-crowdflower"

    with transaction.atomic():
        existing = Dataset.objects.select_for_update().filter(name=name).first()
        if check_existing(existing, kind, digest):
            return ImportSummary(name, False, _crowdflower_counts(existing))
        dataset = Dataset.objects.create(
            name=name, kind=kind, fingerprint=digest, citation=CITATION,
            description="Flickr8k-CrowdFlower: yes/no crowd votes on whether a caption describes the image "
            "(Hodosh et al. 2013); human score = fraction of yes votes.",
            criterion=CROWDFLOWER_CRITERION, scale_min=0, scale_max=1, protocol=dict(CROWDFLOWER_PROTOCOL),
        )
        refs = System.objects.create(
            dataset=dataset, name=REFERENCE_SYSTEM, kind=System.HUMAN,
            description="The Flickr8k reference captions of each judged image, minus those that are judged "
            "candidates of the same image (CrowdFlower protocol, Hessel et al. 2021).",
        )
        cands = System.objects.create(
            dataset=dataset, name=CROWDFLOWER_SYSTEM, kind=System.RETRIEVAL,
            description="Flickr8k captions (of the judged image or of another one) shown with an image to "
            "CrowdFlower workers, who voted whether the caption describes the image.",
        )
        dataset.reference_system = refs
        dataset.save(update_fields=["reference_system"])

        judged_images = sorted(references)
        Image.objects.bulk_create([Image(dataset=dataset, key=key) for key in judged_images])
        image_ids = dict(Image.objects.filter(dataset=dataset).values_list("key", "id"))
        Caption.objects.bulk_create(
            [
                Caption(image_id=image_ids[image], system=refs, key=cid, text=text)
                for image in judged_images
                for cid, text in references[image]
            ],
            batch_size=2000,
        )
        Caption.objects.bulk_create(
            [Caption(image_id=image_ids[image], system=cands, key=cid, text=text_by_id[cid]) for _, image, cid, _, _ in rows],
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
                    criterion=CROWDFLOWER_CRITERION, rater=f"vote_{k}", score=1.0 if k <= n_yes else 0.0,
                    source=kind,
                )
                for _, image, cid, n_yes, n_no in rows
                for k in range(1, n_yes + n_no + 1)
            ],
            batch_size=5000,
        )
    refresh_statistics(Image, Caption, HumanJudgment)
    summary = ImportSummary(name, True, _crowdflower_counts(dataset))
    own = sum(1 for _, image, cid, _, _ in rows if cid.startswith(image + "#"))
    left: dict[int, int] = {}
    for image in removed:
        left[len(references[image])] = left.get(len(references[image]), 0) + 1
    kept = ", ".join(f"{n:,} keep {k}" for k, n in sorted(left.items(), reverse=True))
    summary.notes.append(
        f"kept all {len(rows):,} pairs ({own:,} of them have one of the image's own captions as candidate); "
        f"{sum(removed.values()):,} references equal to a judged candidate's text were removed from "
        f"{len(removed):,} of {len(references):,} images ({kept or 'none'} references); no image is left without "
        "references (protocol of Hessel et al. 2021, appendix A)"
    )
    return summary


def _crowdflower_counts(dataset: Dataset) -> dict[str, int]:
    return {
        "images": dataset.images.count(),
        "reference captions": dataset.references().count(),
        "candidate captions": dataset.candidates().count(),
        "votes": HumanJudgment.objects.filter(image__dataset=dataset).count(),
    }
