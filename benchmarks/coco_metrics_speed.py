"""Speed and equality of our BLEU-1..4 and ROUGE-L against pycocoevalcap 1.2 on Flickr8k-CrowdFlower.

Run from the repository root (no Django needed; Java for the PTB tokeniser)::

    .venv/bin/python benchmarks/coco_metrics_speed.py            # all 47,830 CrowdFlower pairs
    .venv/bin/python benchmarks/coco_metrics_speed.py --quick    # the first 5,000 pairs
    .venv/bin/python benchmarks/coco_metrics_speed.py --dataset flickr8k-expert --json out.json

Loads the dataset (data/flickr8k; CrowdFlower with the reference protocol of the importer
``import_dataset flickr8k-crowdflower``: a judged candidate equal to one of its image's references
removes that reference, Hessel et al. 2021; Flickr8k-Expert as :mod:`tests.flickr8k_data`),
PTB-tokenises every distinct caption once with :func:`captioneval.text.tokenizer.ptb_tokenize` (not
timed), then times, best of ``--repeats`` runs each, on the same tokenised input:

* BLEU: ``pycocoevalcap.bleu.bleu.Bleu(4).compute_score`` against
  :func:`captioneval.kernels.bleu.bleu_scores`. Both produce BLEU-1..4 in one call, so the time of that
  one call is reported for each of bleu_1 .. bleu_4 (the output says so);
* ROUGE-L: ``pycocoevalcap.rouge.rouge.Rouge().compute_score`` against
  :func:`captioneval.kernels.rouge.rouge_l`.

Prints per metric the pycocoevalcap time, ours, their ratio (pycocoevalcap / ours, the speed-up) and
the largest absolute difference per caption (for BLEU also of the corpus score). ``--json FILE``
writes ``{"dataset": name, "metrics": {"bleu_1": {"reference_s", "ours_s", "ratio",
"max_abs_diff"}, ..., "rouge_l": {...}}}`` where a BLEU's ``max_abs_diff`` is the largest of its
per-caption and corpus differences. Exit status 1 if any difference exceeds 1e-12.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import numpy as np  # noqa: E402

from benchmarks.timing import best_time  # noqa: E402
from captioneval.kernels.bleu import bleu_scores  # noqa: E402
from captioneval.kernels.rouge import rouge_l  # noqa: E402

FLICKR8K = REPO_ROOT / "data" / "flickr8k"
DATASETS = ("flickr8k-crowdflower", "flickr8k-expert")
QUICK_CAPTIONS = 5000
TOLERANCE = 1e-12
REPEATS = 3


def load_crowdflower(data_dir: Path = FLICKR8K) -> tuple[list[str], list[list[str]]]:
    """Flickr8k-CrowdFlower as the importer reads it: the 47,830 candidates in file order and, for each,
    its image's reference list (one list object per image, shared by the image's candidates). Going
    through the pairs in file order, a candidate whose text equals one of its image's remaining
    references removes the first such reference (crowd.importers.flickr8k.crowdflower_references)."""
    captions: dict[str, str] = {}
    by_image: dict[str, list[str]] = {}
    for line in (data_dir / "Flickr8k.token.txt").read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        cap_id, _, text = line.partition("\t")
        cap_id, text = cap_id.strip(), text.strip()
        captions[cap_id] = text
        by_image.setdefault(cap_id.rpartition("#")[0], []).append(text)
    pairs = []
    for line in (data_dir / "CrowdFlowerAnnotations.txt").read_text(encoding="utf-8").splitlines():
        if line.strip():
            image, cap_id = (f.strip() for f in line.split("\t")[:2])
            pairs.append((image, captions[cap_id]))
    references: dict[str, list[str]] = {}
    for image, text in pairs:
        refs = references.setdefault(image, list(by_image[image]))
        if text in refs:
            refs.remove(text)
    return [text for _, text in pairs], [references[image] for image, _ in pairs]


def load_expert() -> tuple[list[str], list[list[str]]]:
    """The 5,664 Flickr8k-Expert pairs (tests.flickr8k_data), raw texts."""
    from tests.flickr8k_data import load_flickr8k_expert

    pairs = load_flickr8k_expert()
    return [p.candidate for p in pairs], [list(p.references) for p in pairs]


def tokenized(candidates: list[str], references: list[list[str]]) -> tuple[list[str], list[list[str]]]:
    """PTB-tokenise every distinct caption once; reference lists shared before stay shared."""
    from captioneval.text.tokenizer import ptb_tokenize

    texts = list(dict.fromkeys([*candidates, *(r for refs in references for r in refs)]))
    tok = dict(zip(texts, ptb_tokenize(texts)))
    lists: dict[int, list[str]] = {}
    out_refs = []
    for refs in references:
        if id(refs) not in lists:
            lists[id(refs)] = [tok[r] for r in refs]
        out_refs.append(lists[id(refs)])
    return [tok[c] for c in candidates], out_refs




def run(dataset: str, quick: bool, repeats: int) -> dict:
    """Time both implementations; returns the JSON report (see the module docstring)."""
    from pycocoevalcap.bleu.bleu import Bleu
    from pycocoevalcap.rouge.rouge import Rouge

    candidates, references = load_crowdflower() if dataset == "flickr8k-crowdflower" else load_expert()
    name = dataset
    if quick:
        candidates, references = candidates[:QUICK_CAPTIONS], references[:QUICK_CAPTIONS]
        name = f"{dataset}:{len(candidates)}"
    t0 = time.perf_counter()
    candidates, references = tokenized(candidates, references)
    n_refs = sum(map(len, references))
    print(f"{name}: {len(candidates):,} candidates, {n_refs:,} (candidate, reference) pairs; "
          f"PTB-tokenised in {time.perf_counter() - t0:.1f} s (not timed below); best of {repeats} runs")
    gts = {i: list(refs) for i, refs in enumerate(references)}
    res = {i: [c] for i, c in enumerate(candidates)}

    t_ref_bleu, (ref_corpus, ref_bleu) = best_time(lambda: Bleu(4).compute_score(gts, res, verbose=0), repeats)
    t_our_bleu, ours = best_time(lambda: bleu_scores(candidates, references, 4), repeats)
    t_ref_rouge, (_, ref_rouge) = best_time(lambda: Rouge().compute_score(gts, res), repeats)
    t_our_rouge, our_rouge = best_time(lambda: rouge_l(candidates, references), repeats)

    report = {"dataset": name, "metrics": {}}
    ref_bleu = np.asarray(ref_bleu, dtype=np.float64)
    print("BLEU: one call computes BLEU-1..4 in both implementations; its time is shown for each order.")
    print(f"{'metric':8} {'pycocoevalcap s':>16} {'ours s':>9} {'ratio':>7} {'max |diff| caption':>19} {'corpus':>9}")
    for k in range(4):
        caption_diff = float(np.max(np.abs(ours.per_caption[k] - ref_bleu[k]), initial=0.0))
        corpus_diff = abs(float(ours.corpus[k]) - ref_corpus[k])
        key = f"bleu_{k + 1}"
        report["metrics"][key] = {"reference_s": t_ref_bleu, "ours_s": t_our_bleu, "ratio": t_ref_bleu / t_our_bleu,
                                  "max_abs_diff": max(caption_diff, corpus_diff)}
        print(f"{key:8} {t_ref_bleu:16.3f} {t_our_bleu:9.3f} {t_ref_bleu / t_our_bleu:6.1f}x "
              f"{caption_diff:19.1e} {corpus_diff:9.1e}")
    rouge_diff = float(np.max(np.abs(our_rouge - np.asarray(ref_rouge, dtype=np.float64)), initial=0.0))
    report["metrics"]["rouge_l"] = {"reference_s": t_ref_rouge, "ours_s": t_our_rouge,
                                    "ratio": t_ref_rouge / t_our_rouge, "max_abs_diff": rouge_diff}
    print(f"{'rouge_l':8} {t_ref_rouge:16.3f} {t_our_rouge:9.3f} {t_ref_rouge / t_our_rouge:6.1f}x {rouge_diff:19.1e}")
    return report


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", choices=DATASETS, default=DATASETS[0])
    parser.add_argument("--quick", action="store_true", help=f"only the first {QUICK_CAPTIONS:,} candidates")
    parser.add_argument("--repeats", type=int, default=REPEATS, help="runs per implementation (the best is kept)")
    parser.add_argument("--json", type=Path, help="write the report to this file")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    report = run(args.dataset, args.quick, args.repeats)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    worst = max(m["max_abs_diff"] for m in report["metrics"].values())
    if not worst <= TOLERANCE:
        print(f"FAIL: a score differs from pycocoevalcap by {worst:.3g} > {TOLERANCE:g}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
