"""Time Krippendorff's alpha against NLTK's AnnotationTask (the reference) in the same run.

Synthetic campaign-shaped data: units rated by 5 of 300 coders on a 1-20 scale (ratings of one
campaign), as (unit, coder, value) triples. NLTK's AnnotationTask.alpha is pure Python and
quadratic in the coders per unit; it is timed on a smaller prefix of units and the two results
are compared on that prefix. Our implementation is then timed on the full size for every level.

Run: .venv/bin/python benchmarks/agreement_speed.py [--units 20000] [--nltk-units 2000]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from captioneval.stats.agreement import (  # noqa: E402
    ALPHA_LEVELS,
    krippendorff_alpha_from_triples,
    split_half_reliability,
)


def synthetic(n_units: int, n_coders: int = 300, per_unit: int = 5, seed: int = 0):
    rng = np.random.default_rng(seed)
    units = np.repeat(np.arange(n_units), per_unit)
    coders = np.concatenate([rng.choice(n_coders, per_unit, replace=False) for _ in range(n_units)])
    truth = rng.integers(1, 21, n_units)
    values = np.clip(truth[units] + rng.integers(-2, 3, units.size), 1, 20)
    return list(zip(units.tolist(), coders.tolist(), values.tolist()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--units", type=int, default=20_000)
    ap.add_argument("--nltk-units", type=int, default=2_000)
    args = ap.parse_args()

    from nltk.metrics.agreement import AnnotationTask
    from nltk.metrics.distance import interval_distance

    small = synthetic(args.nltk_units)
    t0 = time.perf_counter()
    ref = AnnotationTask(data=[(c, u, v) for (u, c, v) in small], distance=interval_distance).alpha()
    t_ref = time.perf_counter() - t0
    t0 = time.perf_counter()
    ours = krippendorff_alpha_from_triples(small, "interval")
    t_ours = time.perf_counter() - t0
    print(f"{len(small)} triples, interval: NLTK {t_ref:.2f} s alpha={ref:.6f}; "
          f"ours {t_ours * 1000:.1f} ms alpha={ours:.6f}; |diff|={abs(ref - ours):.1e}")
    print(f"speed-up (NLTK / ours): {t_ref / t_ours:.0f}x")

    full = synthetic(args.units)
    for level in ALPHA_LEVELS:
        t0 = time.perf_counter()
        alpha = krippendorff_alpha_from_triples(full, level)
        print(f"{len(full)} triples, {level:8s}: {time.perf_counter() - t0:.2f} s  alpha={alpha:.4f}")

    rng = np.random.default_rng(0)
    n_items = 4000
    items = np.repeat(np.arange(n_items), 5)
    raters = np.concatenate([rng.choice(500, 5, replace=False) for _ in range(n_items)])
    scores = rng.normal(size=n_items)[items] + rng.normal(size=items.size)
    t0 = time.perf_counter()
    res = split_half_reliability(items, raters, scores, n_splits=200)
    print(f"split-half, {res.n_ratings} ratings x 200 splits: {time.perf_counter() - t0:.2f} s "
          f"(pearson of halves {res.pearson:.3f})")


if __name__ == "__main__":
    main()
