"""Time the group bootstrap of captioneval.stats.correlate against the naive approach.

Synthetic data shaped like the main dataset: 16,992 rows in 1,000 groups (images), metric score
x continuous, human score y in {1, 2, 3, 4}, all four statistics, 1,000 resamples.
The naive approach materialises every resample (concatenates the drawn groups' rows) and calls
scipy.stats for each statistic; it is timed on a few resamples and extrapolated.

Run: .venv/bin/python benchmarks/bootstrap_speed.py [--resamples 1000] [--naive 20]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from captioneval.stats import STATISTICS, correlate  # noqa: E402
from captioneval.stats.correlation import (  # noqa: E402
    _bootstrap_distribution,
    _bootstrap_draws,
    _encode_groups,
    _scipy_statistic,
)


def synthetic(n_rows: int = 16_992, n_groups: int = 1_000, seed: int = 0):
    rng = np.random.default_rng(seed)
    groups = np.sort(rng.integers(0, n_groups, size=n_rows))
    quality = rng.normal(size=n_rows) + rng.normal(size=n_groups)[groups]
    x = quality + rng.normal(scale=1.0, size=n_rows)
    y = np.clip(np.round(2.5 + quality), 1, 4)
    return x, y, groups


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--resamples", type=int, default=1000)
    ap.add_argument("--naive", type=int, default=20, help="resamples timed for the naive approach")
    args = ap.parse_args()

    x, y, groups = synthetic()
    codes, labels = _encode_groups(groups, x.size)
    print(f"rows={x.size} groups={len(labels)} distinct y={np.unique(y).size} statistics={len(STATISTICS)}")

    t0 = time.perf_counter()
    result = correlate(x, y, groups, n_resamples=args.resamples, seed=0)
    fast = time.perf_counter() - t0
    print(f"correlate, {args.resamples} resamples: {fast:.2f} s")
    for s in STATISTICS:
        lo, hi = result.ci95[s]
        print(f"  {s:14s} {result.values[s]:+.4f}  [{lo:+.4f}, {hi:+.4f}]")

    draws = _bootstrap_draws(len(labels), args.naive, seed=0)
    rows = [np.flatnonzero(codes == g) for g in range(len(labels))]
    t0 = time.perf_counter()
    naive = {s: np.empty(args.naive) for s in STATISTICS}
    for b in range(args.naive):
        idx = np.concatenate([rows[g] for g in draws[b]])
        xb, yb = x[idx], y[idx]
        for s in STATISTICS:
            naive[s][b] = _scipy_statistic(xb, yb, s)
    per = (time.perf_counter() - t0) / args.naive
    naive_total = per * args.resamples
    print(f"naive materialise + scipy: {per * 1000:.1f} ms/resample -> {naive_total:.1f} s "
          f"for {args.resamples} (extrapolated from {args.naive})")
    fast_dist = _bootstrap_distribution(x, y, codes, len(labels), draws, STATISTICS)
    diff = max(float(np.max(np.abs(fast_dist[s] - naive[s]))) for s in STATISTICS)
    print(f"max |fast - naive| on the {args.naive} timed resamples: {diff:.2e}")
    print(f"speed-up (naive / fast): {naive_total / fast:.1f}x")


if __name__ == "__main__":
    main()
