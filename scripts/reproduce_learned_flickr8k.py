"""Reproduce the published Flickr8k-Expert correlations of the learned metrics (CLIP-S, RefCLIP-S, PAC-S,
RefPAC-S, BERTScore) with the real weights and the Flickr8k images; prints ours beside the published
values bundled in data/published_correlations/ (Kendall tau-b / tau-c x 100).

It cannot run on the project's development machines: they hold neither the Flickr8k images nor the
real weights (no package registry ships them; see docs/metrics.md). What it needs:

* ``--images DIR``: the Flickr8k images (``Flicker8k_Dataset/``, 8,091 JPEGs, from the Flickr8k
  distribution of Hodosh et al. 2013), file names as in data/flickr8k_expert_coco;
* CLIP ViT-B/32: OpenAI's ``ViT-B-32.pt`` in ``$CAPTIONEVAL_MODELS_DIR`` or ``~/.cache/clip`` (or fetched
  from OpenAI's URL, sha256-checked, when downloads are allowed);
* PAC-S's ``clip_ViT-B-32.pth`` (aimagelab/pacscore's README links it; not on any hub) in
  ``$CAPTIONEVAL_MODELS_DIR`` or given with ``--pac FILE``;
* roberta-large: its Hugging Face folder in ``$CAPTIONEVAL_MODELS_DIR/roberta-large`` or the Hugging
  Face cache (or fetched from the hub when allowed).

The protocol is the CLIP-S paper's (Hessel et al. 2021, Sec. 4): 5,664 candidate captions of 1,000
images, each rated by 3 experts (16,992 ratings, one row each), references = the image's other
captions (data/flickr8k_expert_coco); Kendall tau-c (and tau-b) of the metric against the ratings.

    python scripts/reproduce_learned_flickr8k.py --images DIR [--pac FILE] [--metric clip_s ...]
        [--device auto] [--limit N]

tests/test_learned_availability.py runs it on tiny stand-ins (seeded models under the real file names,
generated images under the first Flickr8k file names, ``--limit``): that checks the code path, not
the published numbers.
"""
from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the checkout's captioneval
COCO = ROOT / "data/flickr8k_expert_coco"
PUBLISHED = ROOT / "data/published_correlations/expected"
#: our key -> the published table's folder (None: not in the bundled table)
PUBLISHED_NAMES = {"clip_s": "clipscore", "ref_clip_s": "refclipscore", "pac_s": "pacscore",
                   "ref_pac_s": "refpacscore", "bert_score": None}


def load_rows(limit: int | None = None):
    """(file names, candidates, references, human ratings by row) of the bundled Flickr8k-Expert COCO
    files, in image id order; ``limit`` keeps the first ``limit`` items."""
    ann = json.loads((COCO / "captions_flickr8k_expert.json").read_text("utf-8"))
    res = {r["image_id"]: r["caption"] for r in json.loads((COCO / "results_flickr8k_expert.json").read_text("utf-8"))}
    refs: dict = {}
    for a in ann["annotations"]:
        refs.setdefault(a["image_id"], []).append(a["caption"])
    images = sorted(ann["images"], key=lambda i: i["id"])[:limit]
    human: dict = {}
    with open(COCO / "human_flickr8k_expert.csv", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            human.setdefault(int(row["image_id"]), []).append(float(row["score"]))
    ids = [i["id"] for i in images]
    return ids, [i["file_name"] for i in images], [res[i] for i in ids], [refs[i] for i in ids], human


def make_metric(key: str, args):
    """The library's metric object for ``key`` with the published settings."""
    if key == "clip_s":
        from captioneval.metrics.learned.clip_s import ClipS
        return ClipS(model="ViT-B/32", device=args.device)
    if key == "ref_clip_s":
        from captioneval.metrics.learned.ref_clip_s import RefClipS
        return RefClipS(model="ViT-B/32", device=args.device)
    if key in ("pac_s", "ref_pac_s"):
        from captioneval.metrics.learned.pac_s import PAC_S_FILE, PacS
        from captioneval.metrics.learned.ref_pac_s import RefPacS
        return (PacS if key == "pac_s" else RefPacS)(model=args.pac or PAC_S_FILE, device=args.device)
    from captioneval.metrics.learned.bert_score import BertScore
    return BertScore(num_layers=args.bert_layer, device=args.device)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--images", required=True, help="the Flickr8k image folder")
    ap.add_argument("--pac", help="PAC-S checkpoint (default: clip_ViT-B-32.pth in $CAPTIONEVAL_MODELS_DIR)")
    ap.add_argument("--bert-layer", type=int, default=17, help="roberta-large's layer (17, bert-score's default)")
    ap.add_argument("--metric", nargs="+", default=list(PUBLISHED_NAMES), choices=list(PUBLISHED_NAMES))
    ap.add_argument("--device", default="auto")
    ap.add_argument("--limit", type=int, help="only the first N items (a quick check; not the published protocol)")
    args = ap.parse_args(argv)
    images = Path(args.images)
    ids, files, cands, refs, human = load_rows(args.limit)
    absent = [f for f in files if not (images / f).is_file()]
    if absent:
        print(f"error: {len(absent)} of {len(files)} Flickr8k images are not in {images} (e.g. {absent[0]}): "
              "give the Flickr8k image folder with --images", file=sys.stderr)
        return 2
    import captioneval
    from captioneval.metrics.base import Batch

    batch = Batch(texts=cands, images=[str(images / f) for f in files], reference_texts=refs)
    print(f"{'metric':12} {'ours tau-b':>10} {'ours tau-c':>10} {'published tau-b':>16} {'published tau-c':>16}")
    for key in args.metric:
        metric = make_metric(key, args)
        values = metric.score(batch).values
        corr = captioneval.correlate({key: dict(zip(ids, values.tolist()))}, {i: human[i] for i in ids},
                                     statistics=["kendall_tau_b", "kendall_tau_c"], n_resamples=0)
        est = corr.results[key].estimates
        folder = PUBLISHED_NAMES[key]
        pub = {}
        if folder and (PUBLISHED / folder / "flickr8k-ex.json").is_file():
            pub = json.loads((PUBLISHED / folder / "flickr8k-ex.json").read_text("utf-8"))["correlations"]
        show = lambda v: "-" if v is None else f"{v:.1f}"  # noqa: E731
        print(f"{metric.name:12} {100 * est['kendall_tau_b'].value:10.1f} {100 * est['kendall_tau_c'].value:10.1f} "
              f"{show(pub.get('kendall_tau_b')):>16} {show(pub.get('kendall_tau_c')):>16}")
        print(f"  signature: {metric.signature_string()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
