"""Write THumB 1.0 (``data/thumb``) as the COCO-format files a researcher evaluating a model has.

``python scripts/thumb_as_coco.py OUT_DIR`` writes

``OUT_DIR/captions_thumb.json``
    a COCO caption annotation file (``images``, ``annotations``): the 4 references of each of
    THumB's 500 MSCOCO images (``mscoco_references.json``), with the COCO image ids;
``OUT_DIR/results_<SYSTEM>.json``
    one COCO results file per THumB system (``[{"image_id", "caption"}, ...]``, the format
    pycocoevalcap's ``COCO.loadRes`` reads): Up-Down, Unified-VLP, VinVL-base, VinVL-large and Human.

These are the files of the README's "evaluate my model" walk-through (``import_coco --annotations
... --results NAME=FILE``, ``compute_metrics``, ``leaderboard``): a model's outputs and its baselines
on the same images, references from COCO annotations, no human judgments needed. The captions are
byte for byte those of THumB 1.0 (Kasai et al. 2022, NAACL; data/thumb/SOURCE.txt for the licence).
Prints one line per file written. Uses only the standard library.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

THUMB = Path(__file__).resolve().parent.parent / "data" / "thumb"


def write_files(out: Path) -> list[Path]:
    """Write the annotation file and one results file per system into ``out`` (created if
    missing); return the paths written, annotations first. Raises FileNotFoundError when
    ``data/thumb`` is missing."""
    out.mkdir(parents=True, exist_ok=True)
    refs = [json.loads(line) for line in (THUMB / "mscoco_references.json").read_text("utf-8").splitlines() if line.strip()]
    rows = [json.loads(line) for line in (THUMB / "mscoco_THumB-1.0.jsonl").read_text("utf-8").splitlines() if line.strip()]
    images = [{"id": int(r["seg_id"]), "file_name": f"COCO_val2014_{int(r['seg_id']):012d}.jpg"} for r in refs]
    annotations = [
        {"id": len(refs) * k + i + 1, "image_id": int(r["seg_id"]), "caption": text}
        for i, r in enumerate(refs) for k, text in enumerate(r["refs"])
    ]
    written = [out / "captions_thumb.json"]
    written[0].write_text(json.dumps({"images": images, "annotations": annotations}, ensure_ascii=False), "utf-8")
    systems: dict[str, list[dict]] = {}
    for row in rows:
        systems.setdefault(row["SYS"], []).append({"image_id": int(row["seg_id"]), "caption": row["hyp"]})
    for name, results in systems.items():
        path = out / f"results_{name}.json"
        path.write_text(json.dumps(results, ensure_ascii=False), "utf-8")
        written.append(path)
    return written


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python scripts/thumb_as_coco.py OUT_DIR", file=sys.stderr)
        return 2
    for path in write_files(Path(argv[0])):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
