"""Speed and equality of our BLEU-1..4 and ROUGE-L against pycocoevalcap 1.2 on Flickr8k-CrowdFlower, and of
BLEU-1..4, ROUGE-L and CIDEr-D on distinct captions (``--distinct``).

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

``--distinct N [N ...]`` times instead the usual COCO case, where every image has its own captions
(no text repeats, so the kernels' shared-text shortcut does not help): first the 5,000 real images of
data/coco_multicaption_selfcider_example (candidate = caption 0, references = captions 1-5, already
lower-case words, used as tokenised), then synthetic batches of N candidates with 5 references each,
8-14 words drawn from that file's word frequencies with a fixed seed. BLEU-1..4, ROUGE-L and CIDEr-D
(with the batch's own document frequencies) each; pycocoevalcap only up to ``--reference-max``
candidates (default 200,000; it grows linearly, about 40-55 s for BLEU at 200k on one core of the
2-core machine). It prints the ratio per size and the exponent b of a least-squares fit time ~ N^b of ours
(1.0 is linear). Measured 2026-11-28 on an idle 2-core machine (``--distinct 10000 50000 200000
--reference-max 200000 --repeats 3``; equal numbers: BLEU and ROUGE-L bit for bit, CIDEr-D within
1.7e-16), ours against pycocoevalcap, BLEU-1..4 / ROUGE-L / CIDEr-D: COCO example 23.7x / 24.1x /
38.6x; 10,000 28.4x / 28.9x / 39.4x; 50,000 32.8x / 29.8x / 39.0x; 200,000 41.2x / 30.6x / 31.8x
(pycocoevalcap 31.0 / 19.0 / 115.1 s). Ours alone at 10k / 50k / 200k / 1M (``--reference-max 1
--memory 1000000``): CIDEr-D 0.11 / 0.63 / 3.74 / 25.11 s, fitted exponents 1.04 / 1.06 / 1.16 (CIDEr-D
costs more per item above ``ONE_PASS_ITEMS``: two passes), peak memory at 1M 1.38 / 1.39 / 2.53 GiB.
Earlier measurements, on other machines: docs/metrics.md. With
``--memory N`` it then runs each of our three metrics on ``synthetic(N)`` in a child process of its
own and prints its peak resident memory (``VmHWM``, reset after the input is built) and how much
of it the process already had with the input lists.

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
from itertools import chain
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import numpy as np  # noqa: E402

from benchmarks.timing import best_time  # noqa: E402
from captioneval.kernels.bleu import bleu_scores  # noqa: E402
from captioneval.kernels.cider import cider_d  # noqa: E402
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


COCO_EXAMPLE = REPO_ROOT / "data" / "coco_multicaption_selfcider_example" / "merge_results.json"


def coco_example() -> tuple[list[str], list[list[str]]]:
    """The 5,000 images of the bundled COCO example: (caption 0 of each, captions 1-5 of each)."""
    rows = json.loads(COCO_EXAMPLE.read_text(encoding="utf-8"))
    return [r["captions"][0] for r in rows], [list(r["captions"][1:6]) for r in rows]


def synthetic(n: int, seed: int = 0) -> tuple[list[str], list[list[str]]]:
    """``n`` distinct-image items: a candidate and 5 references of 8-14 words each, drawn with the
    word frequencies of the bundled COCO example (numpy's default_rng(seed))."""
    words = [w for c in chain.from_iterable(coco_example()[1]) for w in c.split()]
    vocab, counts = np.unique(words, return_counts=True)
    rng = np.random.default_rng(seed)
    lengths = rng.integers(8, 15, size=6 * n)
    tokens = vocab[rng.choice(len(vocab), size=int(lengths.sum()), p=counts / counts.sum())].tolist()
    ends = np.cumsum(lengths).tolist()
    texts = [" ".join(tokens[a:b]) for a, b in zip([0, *ends[:-1]], ends)]
    return texts[:n], [texts[n + 5 * i:n + 5 * i + 5] for i in range(n)]


def run_distinct(sizes: list[int], repeats: int, reference_max: int) -> dict:
    """Ours against pycocoevalcap on distinct captions (the module docstring); the JSON report."""
    from pycocoevalcap.bleu.bleu import Bleu
    from pycocoevalcap.cider.cider import Cider
    from pycocoevalcap.rouge.rouge import Rouge

    ours_fn = {"bleu": lambda c, r: bleu_scores(c, r, 4), "rouge_l": rouge_l, "cider_d": cider_d}
    theirs_fn = {"bleu": lambda g, s: Bleu(4).compute_score(g, s, verbose=0), "rouge_l": lambda g, s: Rouge().compute_score(g, s),
                 "cider_d": lambda g, s: Cider().compute_score(g, s)}
    rows = []
    print(f"{'input':>18} {'metric':8} {'pycocoevalcap s':>16} {'ours s':>8} {'ratio':>7} {'max |diff|':>11}")
    for label, (cands, refs) in [("coco-example 5000", coco_example()),
                                 *((f"synthetic {n}", synthetic(n)) for n in sizes)]:
        gts = {i: r for i, r in enumerate(refs)}
        res = {i: [c] for i, c in enumerate(cands)}
        for metric in ours_fn:
            t_ours, ours = best_time(lambda: ours_fn[metric](cands, refs), repeats)
            row = {"input": label, "n": len(cands), "metric": metric, "ours_s": t_ours, "reference_s": None,
                   "ratio": None, "max_abs_diff": None}
            if len(cands) <= reference_max:
                t_ref, (_, theirs) = best_time(lambda: theirs_fn[metric](gts, res), 1 if len(cands) > 50_000 else repeats)
                mine = ours.per_caption if metric == "bleu" else ours
                diff = float(np.max(np.abs(np.asarray(mine, dtype=np.float64) - np.asarray(theirs, dtype=np.float64)), initial=0.0))
                row.update(reference_s=t_ref, ratio=t_ref / t_ours, max_abs_diff=diff)
            rows.append(row)
            ref = "-" if row["reference_s"] is None else f"{row['reference_s']:.2f}"
            ratio = "-" if row["ratio"] is None else f"{row['ratio']:.1f}x"
            diff = "-" if row["max_abs_diff"] is None else f"{row['max_abs_diff']:.1e}"
            print(f"{label:>18} {metric:8} {ref:>16} {t_ours:8.2f} {ratio:>7} {diff:>11}", flush=True)
    exponents = {}
    for metric in ours_fn:
        pts = [(r["n"], r["ours_s"]) for r in rows if r["metric"] == metric and r["input"].startswith("synthetic")]
        if len(pts) >= 2:
            x, y = np.log([p[0] for p in pts]), np.log([p[1] for p in pts])
            exponents[metric] = float(np.polyfit(x, y, 1)[0])
            print(f"{metric}: our time grows as N^{exponents[metric]:.2f} over the synthetic sizes")
    return {"distinct": rows, "exponents": exponents}


def _status_gib(field: str) -> float:
    """A ``VmRSS`` / ``VmHWM`` line of /proc/self/status, in GiB (Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 2 ** 20
    raise RuntimeError(f"no {field} in /proc/self/status")


def peak_memory(metric: str, n: int) -> tuple[float, float]:
    """In this process (meant to be a fresh one): build ``synthetic(n)``, then reset the peak resident
    set size (``echo 5 > /proc/self/clear_refs``, Linux) so that the generator's temporaries do not
    count, run our ``metric`` on it and read the peak (``VmHWM``). Returns (resident size with the
    input lists before the call, peak during it), in GiB."""
    import ctypes
    import gc

    cands, refs = synthetic(n)
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    Path("/proc/self/clear_refs").write_text("5")
    before = _status_gib("VmRSS")
    {"bleu": lambda: bleu_scores(cands, refs, 4), "rouge_l": lambda: rouge_l(cands, refs),
     "cider_d": lambda: cider_d(cands, refs)}[metric]()
    return before, _status_gib("VmHWM")


def run_memory(n: int) -> dict:
    """Peak memory of each of our metrics on ``synthetic(n)``, each in its own child process."""
    import subprocess

    out = {}
    print(f"peak resident memory, synthetic {n} (candidates + 5 references each), one process per metric:")
    for metric in ("bleu", "rouge_l", "cider_d"):
        line = subprocess.run([sys.executable, __file__, "--peak-memory", metric, str(n)], check=True,
                              capture_output=True, text=True).stdout.split()
        inputs, peak = float(line[0]), float(line[1])
        out[metric] = {"inputs_gib": inputs, "peak_gib": peak}
        print(f"  {metric:8} {peak:5.2f} GiB peak ({inputs:.2f} GiB of it the process with its input lists)", flush=True)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", choices=DATASETS, default=DATASETS[0])
    parser.add_argument("--quick", action="store_true", help=f"only the first {QUICK_CAPTIONS:,} candidates")
    parser.add_argument("--repeats", type=int, default=REPEATS, help="runs per implementation (the best is kept)")
    parser.add_argument("--json", type=Path, help="write the report to this file")
    parser.add_argument("--distinct", type=int, nargs="+", metavar="N",
                        help="time distinct captions instead: the COCO example, then N synthetic candidates each")
    parser.add_argument("--reference-max", type=int, default=200_000,
                        help="with --distinct: run pycocoevalcap only up to this many candidates")
    parser.add_argument("--memory", type=int, metavar="N",
                        help="with --distinct: also the peak memory of ours on N synthetic candidates (child processes)")
    parser.add_argument("--peak-memory", nargs=2, metavar=("METRIC", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.peak_memory:
        print(*peak_memory(args.peak_memory[0], int(args.peak_memory[1])))
        return 0
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    if args.distinct and min(args.distinct) < 1:
        parser.error("--distinct sizes must be positive")
    report = run_distinct(args.distinct, args.repeats, args.reference_max) if args.distinct else \
        run(args.dataset, args.quick, args.repeats)
    if args.distinct and args.memory:
        report["memory"] = run_memory(args.memory)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    diffs = [r["max_abs_diff"] for r in report["distinct"]] if args.distinct else \
        [m["max_abs_diff"] for m in report["metrics"].values()]
    worst = max((d for d in diffs if d is not None), default=0.0)
    if not worst <= TOLERANCE:
        print(f"FAIL: a score differs from pycocoevalcap by {worst:.3g} > {TOLERANCE:g}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
