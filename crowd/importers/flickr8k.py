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
    read_lines,
    shorten,
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

    Raises DatasetFormatError (file, line, problem) for a file over the import caps
    (``IMPORT_MAX_FILE_BYTES``, ``IMPORT_MAX_CAPTIONS`` lines), a line without a TAB, a malformed caption
    id (``<image>#<k>``, at most 255 characters, ``k`` ASCII digits), an empty caption, a caption
    longer than :data:`~crowd.importers.base.MAX_CAPTION_CHARS` characters, a NUL character or a
    duplicated caption id. Ids and captions are stripped of surrounding whitespace; the rest of a
    caption is kept exactly (any Unicode).
    """
    captions: dict[str, list[tuple[str, str]]] = {}
    seen: set[str] = set()
    counter = CaptionCounter(path)
    for lineno, line in enumerate(read_lines(path), start=1):
        if not line.strip():
            continue
        counter.add(1, lineno)
        caption_id, sep, text = line.partition("\t")
        if not sep:
            raise DatasetFormatError(path, "expected '<image>#<k> TAB caption', found no TAB", lineno)
        caption_id, text = caption_id.strip(), text.strip()
        parsed = _split_caption_id(caption_id)
        if parsed is None:
            raise DatasetFormatError(
                path, f"malformed caption id {shorten(caption_id)} (expected <image>#<k>, at most {MAX_KEY_CHARS} "
                "characters)", lineno,
            )
        if not text:
            raise DatasetFormatError(path, f"empty caption for {shorten(caption_id)}", lineno)
        check_text(text, path, f"caption of {shorten(caption_id)}", lineno)
        if caption_id in seen:
            raise DatasetFormatError(path, f"duplicate caption id {shorten(caption_id)}", lineno)
        seen.add(caption_id)
        captions.setdefault(parsed[0], []).append((caption_id, text))
    if not captions:
        raise DatasetFormatError(path, "no captions found")
    return captions


def parse_expert(path: Path, captions: dict[str, list[tuple[str, str]]], token_path: Path):
    """Parse ``ExpertAnnotations.txt`` into [(image, caption id, [r1, r2, r3]), ...].

    Raises DatasetFormatError for a file over the import caps (``IMPORT_MAX_FILE_BYTES``,
    ``IMPORT_MAX_CAPTIONS`` pairs), a line without five TAB-separated fields, a rating that is not
    an integer 1-4, an image or caption id missing from the token file, or a duplicated pair.
    """
    text_by_id = {cid: text for caps in captions.values() for cid, text in caps}
    rows, seen = [], set()
    counter = CaptionCounter(path)  # each pair is a candidate caption
    for lineno, line in enumerate(read_lines(path), start=1):
        if not line.strip():
            continue
        counter.add(1, lineno)
        fields = line.split("\t")
        if len(fields) != 5:
            raise DatasetFormatError(
                path, f"expected 5 TAB-separated fields (image, caption id, 3 ratings), found {len(fields)}", lineno
            )
        image, caption_id, *raw = (f.strip() for f in fields)
        ratings = []
        for k, value in enumerate(raw, start=1):
            if value not in {"1", "2", "3", "4"}:
                raise DatasetFormatError(path, f"expert {k} rating {shorten(value)} is not an integer from 1 to 4", lineno)
            ratings.append(int(value))
        if image not in captions:
            raise DatasetFormatError(path, f"image {shorten(image)} has no reference captions in {token_path.name}", lineno)
        if caption_id not in text_by_id:
            raise DatasetFormatError(path, f"caption id {shorten(caption_id)} not found in {token_path.name}", lineno)
        if (image, caption_id) in seen:
            raise DatasetFormatError(path, f"duplicate pair ({image}, {caption_id})", lineno)
        seen.add((image, caption_id))
        rows.append((image, caption_id, ratings))
    if not rows:
        raise DatasetFormatError(path, "no judgments found (empty file)")
    return rows, text_by_id


class Flickr8kExpertImporter(Importer):
    """Flickr8k-Expert (``import_dataset flickr8k-expert``): the standard protocol of
    :data:`EXPERT_PROTOCOL` (the module docstring).

    Parsed rows: one image per judged image (sorted keys); the reference system
    ``flickr8k-references`` with each judged image's five captions (token-file order); the
    candidate system ``expert-candidates`` with one caption per kept pair (key = caption id, file
    order); three ratings per candidate (criterion ``quality``, raters ``expert_1`` .. ``expert_3``,
    scores 1-4). Pairs whose candidate is one of the judged image's own captions are left out.
    """

    format = "flickr8k-expert"
    files = (EXPERT_FILE, TOKEN_FILE)
    counts = {"images": "images", "reference captions": "references", "candidate captions": "candidates",
              "ratings": "judgments"}

    def parse(self, paths, **options) -> ParsedDataset:
        token_path, expert_path = paths[TOKEN_FILE], paths[EXPERT_FILE]
        captions = parse_tokens(token_path)
        rows, text_by_id = parse_expert(expert_path, captions, token_path)
        kept = [r for r in rows if not r[1].startswith(r[0] + "#")]
        excluded = len(rows) - len(kept)
        judged_images = sorted({image for image, _, _ in kept})
        return ParsedDataset(
            source=expert_path,
            description="Flickr8k-Expert: 3 expert ratings (1-4) of image-caption pairs (Hodosh et al. 2013).",
            citation=CITATION, criterion="quality", scale_min=1, scale_max=4, protocol=dict(EXPERT_PROTOCOL),
            images=judged_images,
            systems=[
                SystemSpec(REFERENCE_SYSTEM, System.HUMAN,
                           "The five Flickr8k reference captions of each image (crowd-written)."),
                SystemSpec(CANDIDATE_SYSTEM, System.RETRIEVAL,
                           "Captions of Flickr8k images retrieved for another image by the ranking systems "
                           "of Hodosh et al. (2013) and rated by three experts."),
            ],
            reference_system=REFERENCE_SYSTEM,
            references=[
                CaptionSpec(image, REFERENCE_SYSTEM, cid, text) for image in judged_images for cid, text in captions[image]
            ],
            captions=[CaptionSpec(image, CANDIDATE_SYSTEM, cid, text_by_id[cid]) for image, cid, _ in kept],
            judgments=[
                JudgmentSpec(image, CANDIDATE_SYSTEM, cid, "quality", f"expert_{k}", float(score), "flickr8k-expert")
                for image, cid, ratings in kept
                for k, score in enumerate(ratings, start=1)
            ],
            notes=[f"excluded {excluded:,} pairs whose candidate is one of the image's own references (standard protocol)"],
        )


def parse_crowdflower(path: Path, captions: dict[str, list[tuple[str, str]]], token_path: Path):
    """Parse ``CrowdFlowerAnnotations.txt`` into [(line number, image, caption id, n_yes, n_no), ...].

    Each line is image TAB caption id TAB fraction of yes TAB #yes TAB #no. Raises
    DatasetFormatError (file, line, problem) for a file over the import caps
    (``IMPORT_MAX_FILE_BYTES``, ``IMPORT_MAX_CAPTIONS`` pairs), a line without five TAB-separated fields, a vote
    count that is not a non-negative integer, a pair without votes or with more than
    :data:`MAX_VOTES_PER_PAIR`, a fraction that is not a number
    or disagrees with #yes / (#yes + #no) by more than 1e-6, an image or caption id missing from the
    token file, a duplicated pair, or a file without pairs.
    """
    known_ids = {cid for caps in captions.values() for cid, _ in caps}
    rows, seen = [], set()
    counter = CaptionCounter(path)  # each pair is a candidate caption
    for lineno, line in enumerate(read_lines(path), start=1):
        if not line.strip():
            continue
        counter.add(1, lineno)
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
                raise DatasetFormatError(path, f"{label} {shorten(value)} is not a non-negative integer", lineno)
            counts.append(int(value) if len(value) <= 12 else MAX_VOTES_PER_PAIR + 1)
        n_yes, n_no = counts
        if n_yes + n_no == 0:
            raise DatasetFormatError(path, "a pair without votes (#yes + #no = 0)", lineno)
        if n_yes + n_no > MAX_VOTES_PER_PAIR:
            raise DatasetFormatError(path, f"more than {MAX_VOTES_PER_PAIR} votes for one pair", lineno)
        try:
            fraction = float(raw_fraction)
        except ValueError:
            raise DatasetFormatError(path, f"fraction of yes {shorten(raw_fraction)} is not a number", lineno) from None
        expected = n_yes / (n_yes + n_no)
        if not abs(fraction - expected) <= PERCENT_TOLERANCE:  # also rejects nan
            raise DatasetFormatError(
                path, f"fraction of yes {shorten(raw_fraction, quote=False)} disagrees with #yes/(#yes+#no) = {n_yes}/{n_yes + n_no} = {expected:.6g}",
                lineno,
            )
        if image not in captions:
            raise DatasetFormatError(path, f"image {shorten(image)} has no reference captions in {token_path.name}", lineno)
        if caption_id not in known_ids:
            raise DatasetFormatError(path, f"caption id {shorten(caption_id)} not found in {token_path.name}", lineno)
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
                        path, f"image {shorten(image)} has no reference caption left once its judged candidates are removed "
                        "(the protocol removes every judged candidate from its image's references; metrics need at "
                        "least one reference)", lineno,
                    )
                break
    return references, removed


class Flickr8kCrowdFlowerImporter(Importer):
    """Flickr8k-CrowdFlower (``import_dataset flickr8k-crowdflower``), following the protocol of
    Hessel et al. 2021 (CLIPScore, appendix A; see the module docstring and
    :data:`CROWDFLOWER_PROTOCOL`).

    Parsed rows: one image per judged image (sorted keys, 1,000); the reference system
    ``flickr8k-references`` holds each image's reduced reference list (:func:`crowdflower_references`);
    the candidate system ``crowdflower-candidates`` one caption per pair (47,830, key = caption id);
    every vote is one judgment (criterion ``describes``, raters ``vote_1`` .. ``vote_n`` of the pair,
    score 1.0 for the #yes first votes and 0.0 for the rest: the file only has counts, so rater
    labels are positions, not workers), so that a caption's mean score is its fraction of yes votes.
    """

    format = "flickr8k-crowdflower"
    files = (CROWDFLOWER_FILE, TOKEN_FILE)
    counts = {"images": "images", "reference captions": "references", "candidate captions": "candidates",
              "votes": "judgments"}

    def parse(self, paths, **options) -> ParsedDataset:
        token_path, cf_path = paths[TOKEN_FILE], paths[CROWDFLOWER_FILE]
        captions = parse_tokens(token_path)
        rows = parse_crowdflower(cf_path, captions, token_path)
        references, removed = crowdflower_references(rows, captions, cf_path)
        text_by_id = {cid: text for caps in captions.values() for cid, text in caps}
        judged_images = sorted(references)
        own = sum(1 for _, image, cid, _, _ in rows if cid.startswith(image + "#"))
        left: dict[int, int] = {}
        for image in removed:
            left[len(references[image])] = left.get(len(references[image]), 0) + 1
        kept = ", ".join(f"{n:,} keep {k}" for k, n in sorted(left.items(), reverse=True))
        return ParsedDataset(
            source=cf_path,
            description="Flickr8k-CrowdFlower: yes/no crowd votes on whether a caption describes the image "
            "(Hodosh et al. 2013); human score = fraction of yes votes.",
            citation=CITATION, criterion=CROWDFLOWER_CRITERION, scale_min=0, scale_max=1,
            protocol=dict(CROWDFLOWER_PROTOCOL),
            images=judged_images,
            systems=[
                SystemSpec(REFERENCE_SYSTEM, System.HUMAN,
                           "The Flickr8k reference captions of each judged image, minus those that are judged "
                           "candidates of the same image (CrowdFlower protocol, Hessel et al. 2021)."),
                SystemSpec(CROWDFLOWER_SYSTEM, System.RETRIEVAL,
                           "Flickr8k captions (of the judged image or of another one) shown with an image to "
                           "CrowdFlower workers, who voted whether the caption describes the image."),
            ],
            reference_system=REFERENCE_SYSTEM,
            references=[
                CaptionSpec(image, REFERENCE_SYSTEM, cid, text) for image in judged_images for cid, text in references[image]
            ],
            captions=[CaptionSpec(image, CROWDFLOWER_SYSTEM, cid, text_by_id[cid]) for _, image, cid, _, _ in rows],
            judgments=[
                JudgmentSpec(image, CROWDFLOWER_SYSTEM, cid, CROWDFLOWER_CRITERION, f"vote_{k}",
                             1.0 if k <= n_yes else 0.0, self.kind)
                for _, image, cid, n_yes, n_no in rows
                for k in range(1, n_yes + n_no + 1)
            ],
            notes=[
                f"kept all {len(rows):,} pairs ({own:,} of them have one of the image's own captions as candidate); "
                f"{sum(removed.values()):,} references equal to a judged candidate's text were removed from "
                f"{len(removed):,} of {len(references):,} images ({kept or 'none'} references); no image is left "
                "without references (protocol of Hessel et al. 2021, appendix A)"
            ],
        )
