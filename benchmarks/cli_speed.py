"""Speed of ``captioneval.COCOEvalCap`` against pycocoevalcap 1.2's ``COCOEvalCap``, same numbers.

Run from the repository root (Java for pycocoevalcap's tokenizer and both METEORs)::

    .venv/bin/python benchmarks/cli_speed.py                  # Flickr8k-Expert as COCO, 5,664 images
    .venv/bin/python benchmarks/cli_speed.py --quick          # the first 1,000 images
    .venv/bin/python benchmarks/cli_speed.py --no-meteor --json out.json

Reads data/flickr8k_expert_coco (Flickr8k-Expert written as COCO files by
scripts/flickr8k_expert_as_coco.py) with pycocotools' ``COCO`` / ``loadRes`` (as pycocoevalcap's README
does), then times, each in the same process and on the same objects, one full ``evaluate()`` of

* pycocoevalcap's ``COCOEvalCap``: Java PTB tokenizer, ``Bleu(4)``, ``Meteor()`` (starts its JVM),
  ``Rouge()``, ``Cider()``; SPICE replaced by a stub returning nothing (its jar downloads Stanford
  CoreNLP at start-up);
* ``captioneval.COCOEvalCap``: the pure-Python PTB tokenizer, vectorised BLEU / ROUGE-L / CIDEr-D and
  METEOR through the platform's persistent JVM pool in one pass (each caption's statistics, then one
  ``EVAL`` for the per-caption and corpus scores; the JVM's start-up is inside the first timed run).

Everything is timed: reading nothing (the COCO objects are built before), tokenising, scoring, the
corpus aggregates. ``--repeats N`` (default 1) keeps the fastest of N runs of each; with N > 1 our
METEOR JVM is warm after the first run while pycocoevalcap starts a new one each time (as it does for
every ``evaluate()`` call), so the default reports cold runs of both. ``--no-meteor`` leaves METEOR
out of both (pycocoevalcap's replaced by a stub, ours not asked for). Prints the two times, their ratio
(pycocoevalcap / captioneval: the speed-up) and the largest absolute difference of any corpus or
per-image score; ``--json FILE`` writes ``{"dataset", "images", "metrics", "reference_s", "ours_s",
"ratio", "max_abs_diff", "repeats"}``. Exit status 1 if a difference exceeds 1e-12.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from benchmarks.timing import best_time  # noqa: E402

DATA = REPO_ROOT / "data" / "flickr8k_expert_coco"
ANN = DATA / "captions_flickr8k_expert.json"
RES = DATA / "results_flickr8k_expert.json"
QUICK_IMAGES = 1000
TOLERANCE = 1e-12


class _Stub:
    """Stands in for a pycocoevalcap scorer that cannot or should not run (SPICE; METEOR with --no-meteor)."""

    def __init__(self, name: str):
        self.name = name

    def method(self):
        return self.name

    def compute_score(self, gts, res):
        return math.nan, [math.nan] * len(gts)


def run(quick: bool, meteor: bool, repeats: int) -> dict:
    """Time both implementations; return the JSON-ready summary (see the module docstring)."""
    import pycocoevalcap.eval as pe
    from pycocotools.coco import COCO

    import captioneval

    with contextlib.redirect_stdout(io.StringIO()):
        coco = COCO(str(ANN))
        res = coco.loadRes(str(RES))
    images = res.getImgIds()[:QUICK_IMAGES] if quick else res.getImgIds()

    def theirs():
        saved = pe.Spice, pe.Meteor
        pe.Spice = lambda: _Stub("SPICE")
        if not meteor:
            pe.Meteor = lambda: _Stub("METEOR")
        try:
            ev = pe.COCOEvalCap(coco, res)
            ev.params["image_id"] = images
            with contextlib.redirect_stdout(io.StringIO()):
                ev.evaluate()
        finally:
            pe.Spice, pe.Meteor = saved
        return ev

    keys = list(captioneval.COCO_METRICS) if meteor else [k for k in captioneval.COCO_METRICS if k != "meteor"]

    def ours():
        ev = captioneval.COCOEvalCap(coco, res, metrics=keys, verbose=False)
        ev.params["image_id"] = images
        ev.evaluate()
        return ev

    reference_s, ref = best_time(theirs, repeats)
    ours_s, mine = best_time(ours, repeats)
    diff = 0.0
    for name, value in mine.eval.items():
        diff = max(diff, abs(value - ref.eval[name]))
        for img in images:
            diff = max(diff, abs(mine.imgToEval[img][name] - ref.imgToEval[img][name]))
    return {"dataset": "flickr8k-expert-coco", "images": len(images), "metrics": sorted(mine.eval),
            "reference_s": reference_s, "ours_s": ours_s, "ratio": reference_s / ours_s, "max_abs_diff": diff,
            "repeats": repeats}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help=f"the first {QUICK_IMAGES} images only")
    parser.add_argument("--no-meteor", action="store_true", help="leave METEOR out of both")
    parser.add_argument("--repeats", type=int, default=1, help="best of N runs each (default 1: cold runs)")
    parser.add_argument("--json", metavar="FILE", help="write the summary as JSON")
    args = parser.parse_args(argv)
    summary = run(args.quick, not args.no_meteor, args.repeats)
    print(f"{summary['images']} images, metrics {', '.join(summary['metrics'])}")
    print(f"pycocoevalcap COCOEvalCap  {summary['reference_s']:8.2f} s")
    print(f"captioneval.COCOEvalCap    {summary['ours_s']:8.2f} s")
    print(f"ratio (pycocoevalcap / captioneval): {summary['ratio']:.1f}x; largest difference "
          f"{summary['max_abs_diff']:.1e}")
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return 0 if summary["max_abs_diff"] <= TOLERANCE else 1


if __name__ == "__main__":
    sys.exit(main())
