"""Speed and equality check of our CIDEr-D against pycocoevalcap's Cider on Flickr8k-Expert.

Run from the repository root (no Django needed)::

    .venv/bin/python benchmarks/cider_d_speed.py

Loads the 5,664 Flickr8k-Expert pairs (data/flickr8k), PTB-tokenises them once, then times
``captioneval.kernels.cider.cider_d`` and ``pycocoevalcap.cider.cider.Cider`` on the same tokenised
input (best of 3 runs each; items keyed per pair). Exits with status 1 if a per-caption score
differs by more than 1e-6.
"""
from __future__ import annotations

import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import numpy as np  # noqa: E402

from benchmarks.timing import best_time  # noqa: E402
from captioneval.kernels.cider import cider_d  # noqa: E402
from tests.flickr8k_data import load_flickr8k_expert_tokenized  # noqa: E402

TOLERANCE = 1e-6
REPEATS = 3




def main() -> int:
    from pycocoevalcap.cider.cider import Cider

    pairs = load_flickr8k_expert_tokenized()
    candidates = [p.candidate for p in pairs]
    references = [list(p.references) for p in pairs]
    gts = {i: references[i] for i in range(len(pairs))}
    res = {i: [candidates[i]] for i in range(len(pairs))}

    t_ref, (_, ref_scores) = best_time(lambda: Cider().compute_score(gts, res), REPEATS)
    t_ours, our_scores = best_time(lambda: cider_d(candidates, references), REPEATS)
    max_diff = float(np.max(np.abs(np.asarray(our_scores) - np.asarray(ref_scores))))

    print(
        f"CIDEr-D on Flickr8k-Expert ({len(pairs):,} pairs): pycocoevalcap {t_ref:.2f} s, "
        f"ours {t_ours:.3f} s, {t_ref / t_ours:.1f}x faster, max |diff| {max_diff:.1e}"
    )
    if not max_diff <= TOLERANCE:
        print(f"FAIL: per-caption scores differ by {max_diff:.3g} > {TOLERANCE:g}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
