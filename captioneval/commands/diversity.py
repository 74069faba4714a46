"""``captioneval diversity --results MULTI.json``: diversity of each image's caption set.

MULTI.json is a COCO results file with several entries per image (``[{"image_id", "caption"}]``,
the captions of one image in file order form its set) or the Self-CIDEr code's form
(``[{"image_id", "captions": [...]}]``). With ``--annotations ANN.json`` the references add set
accuracy and give the CIDEr-D document frequencies (else each set is a document). Prints the
measures over the corpus (set level: the mean over sets of 2 or more captions); per-set values
with ``--out`` / ``--json`` / ``--csv`` (CSV columns: ``image_id``, ``n_captions``, one column per
set-level measure; empty where undefined).
"""
from __future__ import annotations

from collections.abc import Mapping

from ..coco import COCO, read_json
from ..diversity import diversity
from ..errors import InputError
from . import _io


def add_parser(sub) -> None:
    """Register the subcommand."""
    p = sub.add_parser("diversity", help="diversity measures of caption sets (Self-CIDEr, LSA, mBLEU...)",
                       description=__doc__.split("\n\n")[1])
    p.add_argument("--results", required=True, metavar="MULTI.json", help="several captions per image_id")
    p.add_argument("--annotations", metavar="ANN.json", help="COCO annotations: references of the images (optional)")
    p.add_argument("--metric", nargs="+", action="extend", metavar="KEY", help="measures (default: the diversity group)")
    p.add_argument("-m", type=int, default=None, metavar="M", help="use the first M captions of each set (default all)")
    _io.add_output_options(p)
    p.set_defaults(run=run)


def load_sets(path: str) -> dict:
    """image id -> list of captions, in file order. Raises :class:`InputError`."""
    data = read_json(path)
    if not isinstance(data, list):
        raise InputError(path, "must be a JSON list of {\"image_id\", \"caption\"} (or {\"image_id\", \"captions\"})")
    if not data:
        raise InputError(path, "has no result")
    if all(isinstance(e, Mapping) and "captions" in e for e in data):
        sets: dict = {}
        for i, e in enumerate(data):
            caps = e["captions"]
            if "image_id" not in e:
                raise InputError(path, f"entry {i} has no \"image_id\"")
            if not isinstance(caps, list) or not caps or not all(isinstance(c, str) for c in caps):
                raise InputError(path, f"entry {i}: \"captions\" must be a non-empty list of strings")
            if isinstance(e["image_id"], (dict, list, bool, float)) or e["image_id"] is None:
                raise InputError(path, f"entry {i}: image_id must be an integer or a string")
            sets.setdefault(e["image_id"], []).extend(caps)
        return sets
    res = COCO(data, name=path)
    return {k: [a["caption"] for a in anns] for k, anns in res.imgToAnns.items()}


def run(args) -> int:
    """Compute, print the table, write the per-set values; return 0."""
    _io.check_output(args.out)
    sets = load_sets(args.results)
    references = None
    if args.annotations:
        coco = COCO(args.annotations)
        if coco.kind != "annotations":
            raise InputError(args.annotations, "is a results list, not a COCO annotation file")
        unknown = [k for k in sets if k not in coco.imgs]
        if unknown:
            raise InputError(args.results, f"{len(unknown)} image id(s) the annotations do not have, e.g. "
                             + ", ".join(repr(k) for k in unknown[:5]))
        references = {k: [a["caption"] for a in coco.imgToAnns.get(k, [])] for k in sets}
        empty = [k for k, r in references.items() if not r]
        if empty:
            raise InputError(args.annotations, f"image {empty[0]!r} has no reference caption")
    if args.m is not None and args.m < 2:
        raise InputError("-m", f"must be at least 2 (diversity of fewer captions is undefined), got {args.m}")
    result = diversity(sets, metrics=args.metric, references=references, m=args.m,
                       progress=_io.progress_enabled(args))
    _io.emit_items(args, result, "sets", "per-set values")
    return 0
