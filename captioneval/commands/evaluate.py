"""``captioneval evaluate --annotations ANN.json --results RES.json``: the COCO caption metrics of a
model's results, with pycocoevalcap's numbers.

Reads a COCO caption annotation file (the references) and a COCO results file (``[{"image_id",
"caption"}]``, one caption per image), scores every image that has a result (as pycocoevalcap's
``COCOEvalCap`` with ``params['image_id'] = cocoRes.getImgIds()``), prints the corpus table with each
metric's signature, and writes the per-caption scores (``--out FILE``, or ``--json`` / ``--csv`` to
stdout). CSV columns: ``image_id``, ``caption``, one column per metric key.
"""
from __future__ import annotations

import sys

from ..coco import COCO
from ..errors import InputError
from ..evaluate import COCO_METRICS, evaluate
from . import _io


def add_parser(sub) -> None:
    """Register the subcommand."""
    p = sub.add_parser("evaluate", help="COCO caption metrics of a results file (pycocoevalcap's numbers)",
                       description=__doc__.split("\n\n")[1])
    p.add_argument("--annotations", required=True, metavar="ANN.json", help="COCO caption annotations (references)")
    p.add_argument("--results", required=True, metavar="RES.json", help="COCO results: [{image_id, caption}]")
    p.add_argument("--metric", nargs="+", action="extend", metavar="KEY",
                   help=f"metric keys or groups (default: {' '.join(COCO_METRICS)}; METEOR is skipped with the "
                        "reason when Java or pycocoevalcap is missing, unless named here)")
    p.add_argument("--tokenizer", choices=("python", "java"), default=None,
                   help="PTB tokenizer implementation (default python: same output as the Java one, no Java needed)")
    _io.add_output_options(p)
    p.set_defaults(run=run)


def load(annotations: str, results: str) -> tuple[list, list[str], list[list[str]], int]:
    """``(image ids, captions, references, images without a result)`` from the two files.
    Raises :class:`InputError` (``FILE: problem``) for anything wrong in them."""
    coco = COCO(annotations)
    if coco.kind != "annotations":
        raise InputError(annotations, "is a results list, not a COCO annotation file {\"images\", \"annotations\"}")
    res = coco.loadRes(results)
    if not res.imgs:
        raise InputError(results, "has no result")
    ids, captions, references = [], [], []
    for img_id, anns in res.imgToAnns.items():
        if len(anns) != 1:
            raise InputError(results, f"image_id {img_id!r} has {len(anns)} results; a results file has one caption "
                             "per image (caption sets: captioneval diversity)")
        refs = coco.imgToAnns.get(img_id, [])
        if not refs:
            raise InputError(annotations, f"image {img_id!r} has no reference caption")
        ids.append(img_id)
        captions.append(anns[0]["caption"])
        references.append([a["caption"] for a in refs])
    return ids, captions, references, len(coco.imgs) - len(ids)


def run(args) -> int:
    """Evaluate, print the table, write the per-caption scores; return 0."""
    _io.check_output(args.out)
    ids, captions, references, without = load(args.annotations, args.results)
    result = evaluate(captions, references, metrics=args.metric, ids=ids, tokenizer=args.tokenizer,
                      progress=_io.progress_enabled(args))
    if without:
        print(f"captioneval: {without} image(s) of {args.annotations} have no result; scored the {len(ids)} that "
              "have one", file=sys.stderr)
    for reason in result.skipped.values():
        print(f"captioneval: {reason}", file=sys.stderr)
    _io.emit_items(args, result, "captions", "per-caption scores")
    return 0
