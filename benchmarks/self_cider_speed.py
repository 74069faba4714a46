"""Time Self-CIDEr (captioneval.kernels.diversity.self_cider) against the pycocoevalcap-based reference.

Data: the official example input of Wang & Chan's code (github.com/qingzwang/DiversityMetrics,
results/merge_results.json: 5,000 images x 10 captions), copied to
data/coco_multicaption_selfcider_example. The official COCO train2014 document
frequency table is not available; both implementations use the same table built from the 5,000
caption sets (one document per image). Table construction is timed separately and excluded.

* reference: tests/reference_self_cider.py -- pycocoevalcap 1.2's CiderScorer with the fixed table
  (CIDEr-D of caption i against the single reference caption j for i <= j, copied to K[j, i]),
  numpy SVD, -log(r)/log(m); one scorer per set (the official code even builds one per pair).
* ours: the vectorised self_cider. "cold" = first call with a new DocumentFrequency object,
  including the one-off encoding of the table into integer keys (cached afterwards); "warm" =
  median of --repeat further calls.

Both wall-clock and CPU time (time.process_time) are printed: on a shared machine the CPU time
is the steadier of the two. Everything is single-process; numpy may use BLAS threads for the
small eigenvalue problems (CPU time then counts all threads).

Run: .venv/bin/python benchmarks/self_cider_speed.py [--m 5|all|both] [--subset N] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from captioneval.kernels.cider import DocumentFrequency  # noqa: E402
from captioneval.kernels.diversity import self_cider  # noqa: E402
from tests.reference_self_cider import document_frequency_table, self_cider_reference  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "data" / "coco_multicaption_selfcider_example" / "merge_results.json"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--m", choices=["5", "all", "both"], default="both",
                    help="captions per set: the first 5 (official driver), all 10, or both (default)")
    ap.add_argument("--subset", type=int, default=0,
                    help="time the reference on the first N sets only and extrapolate (0 = all sets)")
    ap.add_argument("--repeat", type=int, default=5, help="warm runs of ours (median reported)")
    ap.add_argument("--data", type=Path, default=DATA)
    args = ap.parse_args()

    sets = [d["captions"] for d in json.loads(args.data.read_text())]
    print(f"sets={len(sets)} captions/set={sorted({len(s) for s in sets})} "
          f"captions={sum(map(len, sets))}")

    t0 = time.perf_counter()
    df = DocumentFrequency.from_references(sets)
    t_ours_df = time.perf_counter() - t0
    t0 = time.perf_counter()
    table, n_docs = document_frequency_table(sets)
    table = defaultdict(float, table)
    t_ref_df = time.perf_counter() - t0
    same = dict(df.counts) == dict(table) and df.n_documents == n_docs
    print(f"document-frequency table: {len(table)} n-grams, N={n_docs}; built in {t_ours_df:.2f} s "
          f"(DocumentFrequency) / {t_ref_df:.2f} s (pycocoevalcap); identical: {same}")

    ms = {"5": [5], "all": [None], "both": [5, None]}[args.m]
    for m in ms:
        label = "m=5 (first 5 captions)" if m == 5 else "m=all (10 captions)"
        print(f"\n== {label}")
        fresh = DocumentFrequency(counts=df.counts, n_documents=df.n_documents)  # nothing cached yet
        w0, c0 = time.perf_counter(), time.process_time()
        ours = self_cider(sets, fresh, m=m)
        cold = time.perf_counter() - w0, time.process_time() - c0
        wall, cpu = [], []
        for _ in range(max(1, args.repeat)):
            w0, c0 = time.perf_counter(), time.process_time()
            again = self_cider(sets, fresh, m=m)
            wall.append(time.perf_counter() - w0)
            cpu.append(time.process_time() - c0)
        warm = float(np.median(wall)), float(np.median(cpu))
        assert np.array_equal(ours, again)

        n_ref = len(sets) if args.subset <= 0 else min(args.subset, len(sets))
        w0, c0 = time.perf_counter(), time.process_time()
        theirs = self_cider_reference(sets[:n_ref], table, n_docs, m=m)
        scale = len(sets) / n_ref
        t_ref = (time.perf_counter() - w0) * scale, (time.process_time() - c0) * scale
        note = "" if n_ref == len(sets) else f" (timed on {n_ref} sets, extrapolated)"

        diff = np.abs(ours[:n_ref] - theirs)
        print(f"ours:      warm {warm[0]:.3f} s wall / {warm[1]:.3f} s CPU (median of {len(wall)} runs); "
              f"cold {cold[0]:.3f} s wall / {cold[1]:.3f} s CPU (first call, incl. one-off table encoding)")
        print(f"reference: {t_ref[0]:.2f} s wall / {t_ref[1]:.2f} s CPU{note}")
        print(f"mean diversity ours {ours.mean():.6f}, reference {theirs.mean():.6f}")
        print(f"max |ours - reference| = {diff.max():.2e} over {n_ref} sets "
              f"(median {np.median(diff):.1e}; {int((diff > 1e-12).sum())} sets above 1e-12)")
        print(f"speed-up (reference / ours): warm {t_ref[0] / warm[0]:.0f}x wall, {t_ref[1] / warm[1]:.0f}x CPU; "
              f"cold {t_ref[0] / cold[0]:.0f}x wall, {t_ref[1] / cold[1]:.0f}x CPU")

if __name__ == "__main__":
    main()
