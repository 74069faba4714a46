"""Write Flickr8k-Expert (``data/flickr8k``) as COCO-format files, one "image" per judged pair.

``python scripts/flickr8k_expert_as_coco.py [OUT_DIR]`` (default ``data/flickr8k_expert_coco``) writes

``captions_flickr8k_expert.json``
    a COCO caption annotation file: ``images`` = the 5,664 judged (image, candidate) pairs of
    Flickr8k-Expert in ``ExpertAnnotations.txt`` order (pairs whose candidate is one of the image's own
    captions skipped, the CLIPScore protocol; see ``tests/flickr8k_data.py``), ``id`` 1..5664,
    ``file_name`` the Flickr8k picture and ``candidate_id`` the Flickr8k caption id of the candidate;
    ``annotations`` = the picture's 5 captions (``Flickr8k.token.txt``, caption-number order) for
    every pair, ``id`` = 5 x (pair id - 1) + caption number + 1.
``results_flickr8k_expert.json``
    a COCO results file (``[{"image_id", "caption"}]``, what ``COCO.loadRes`` reads): the candidate
    caption of each pair.
``human_flickr8k_expert.csv``
    the expert ratings in the CSV form ``captioneval correlate --human`` reads: columns ``image_id``
    (the pair), ``score`` (one of its 3 expert ratings, 1..4; one row per rating) and ``group`` (the
    Flickr8k picture, the unit the bootstrap resamples).

Each pair is its own COCO image because COCO results hold one caption per image while a Flickr8k
picture has several judged candidates; scored with pycocoevalcap's ``COCOEvalCap`` the per-image
numbers are then the per-pair numbers of the published evaluations (Hessel et al. 2021, Table 1).
The texts are byte for byte those of ``data/flickr8k`` (Hodosh et al. 2013; ``data/flickr8k/SOURCE.txt``
for provenance and licence). Standard library only; the output is deterministic (the test suite
checks that the bundled files are what this script writes).
"""
from __future__ import annotations

import csv
import io
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FLICKR8K = ROOT / "data" / "flickr8k"
DEFAULT_OUT = ROOT / "data" / "flickr8k_expert_coco"
ANNOTATIONS = "captions_flickr8k_expert.json"
RESULTS = "results_flickr8k_expert.json"
HUMAN = "human_flickr8k_expert.csv"


def build(flickr8k: Path = FLICKR8K) -> dict[str, str]:
    """The three files' contents: ``{file name: text}``. Raises FileNotFoundError when
    ``flickr8k`` lacks ``Flickr8k.token.txt`` or ``ExpertAnnotations.txt``."""
    captions: dict[str, str] = {}
    for line in (flickr8k / "Flickr8k.token.txt").read_text("utf-8").splitlines():
        if line:
            cap_id, text = line.split("\t", 1)
            captions[cap_id] = text
    refs_of: dict[str, list[tuple[int, str]]] = {}
    for cap_id, text in captions.items():
        picture, _, k = cap_id.rpartition("#")
        refs_of.setdefault(picture, []).append((int(k), text))
    images, annotations, results = [], [], []
    human = io.StringIO()
    writer = csv.writer(human, lineterminator="\n")
    writer.writerow(["image_id", "score", "group"])
    for line in (flickr8k / "ExpertAnnotations.txt").read_text("utf-8").splitlines():
        if not line:
            continue
        picture, cand_id, *ratings = line.split("\t")
        if cand_id.startswith(picture + "#"):
            continue
        pair = len(images) + 1
        images.append({"id": pair, "file_name": picture, "candidate_id": cand_id})
        for k, text in sorted(refs_of[picture]):
            annotations.append({"id": 5 * (pair - 1) + k + 1, "image_id": pair, "caption": text})
        results.append({"image_id": pair, "caption": captions[cand_id]})
        for rating in ratings:
            writer.writerow([pair, int(rating), picture])
    return {
        ANNOTATIONS: json.dumps({"images": images, "annotations": annotations}, ensure_ascii=False, separators=(",", ":")) + "\n",
        RESULTS: json.dumps(results, ensure_ascii=False, separators=(",", ":")) + "\n",
        HUMAN: human.getvalue(),
    }


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else DEFAULT_OUT
    out.mkdir(parents=True, exist_ok=True)
    for name, text in build().items():
        (out / name).write_text(text, "utf-8")
        print(out / name)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
