"""COCO-format test files built from the bundled real data (see data/*/SOURCE.txt).

The 30 images that are both in the official Self-CIDEr example (merge_results.json, 10 sampled
model captions each) and in THumB (4 COCO references each, and the captions of 4 models):
``captions.json`` (COCO annotations: the references), ``merge.json`` ({image_id, captions} form),
``thumb_models.json`` (COCO results form, 4 entries per image: the THumB models' captions as one
set), ``merge_as_results.json`` (the merge sets in COCO results form), and ``objects.csv``: the COCO
categories named in each image's references (a stand-in for instance annotations, which THumB lacks).
"""
import json
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data"
MERGE = DATA / "coco_multicaption_selfcider_example" / "merge_results.json"
THUMB_REFS = DATA / "thumb" / "mscoco_references.json"
THUMB = DATA / "thumb" / "mscoco_THumB-1.0.jsonl"
POPE = DATA / "pope_coco_objects" / "coco_pope_random.json"

COCO_CATEGORIES = (
    "person bicycle car motorcycle airplane bus train truck boat bench bird cat dog horse sheep cow elephant bear "
    "zebra giraffe backpack umbrella handbag tie suitcase frisbee skis snowboard kite skateboard surfboard bottle "
    "cup fork knife spoon bowl banana apple sandwich orange broccoli carrot pizza donut cake chair couch bed toilet "
    "tv laptop mouse remote keyboard microwave oven toaster sink refrigerator book clock vase scissors"
).split()


def thumb_refs() -> dict[int, list[str]]:
    return {int(r["seg_id"]): r["refs"] for r in map(json.loads, THUMB_REFS.read_text().splitlines())}


def write_coco_files(d: Path) -> Path:
    refs = thumb_refs()
    merge = [e for e in json.loads(MERGE.read_text()) if e["image_id"] in refs]
    assert len(merge) == 30
    ids = [e["image_id"] for e in merge]
    ann = {
        "images": [{"id": i, "file_name": f"COCO_val2014_{i:012d}.jpg"} for i in ids],
        "annotations": [{"id": i * 10 + k, "image_id": i, "caption": c} for i in ids for k, c in enumerate(refs[i])],
    }
    (d / "captions.json").write_text(json.dumps(ann))
    (d / "merge.json").write_text(json.dumps(merge))
    models = defaultdict(list)
    for row in map(json.loads, THUMB.read_text().splitlines()):
        if int(row["seg_id"]) in ids and row["SYS"] != "Human":
            models[int(row["seg_id"])].append(row["hyp"])
    (d / "thumb_models.json").write_text(json.dumps([{"image_id": i, "caption": c} for i in ids for c in models[i]]))
    (d / "merge_as_results.json").write_text(
        json.dumps([{"image_id": e["image_id"], "caption": c} for e in merge for c in e["captions"]])
    )
    lines = ["image_id,label,count"]
    for i in ids:
        words = set(" ".join(refs[i]).lower().replace(".", " ").split())
        lines += [f"{i},{c},1" for c in COCO_CATEGORIES if c in words or c + "s" in words]
    (d / "objects.csv").write_text("\n".join(lines) + "\n")
    return d
