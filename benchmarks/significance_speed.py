"""Time the meta-evaluation statistics against naive scipy references measured in the same run.

Synthetic data shaped like Flickr8k-CrowdFlower: 47,830 rows, human score = share of "yes" votes
(mostly 3 votes per pair, some 4-5: a dozen distinct values), 8 metrics = shared latent quality plus
noise of different sizes, two of them tie-heavy (rounded, BLEU-like zeros).

* pair_counts (O(n log n)) vs scipy.stats.kendalltau on 50,000 rows.
* permutation_test, one pair, 1,000 draws, vs the naive loop: materialise each draw's swapped
  z-scores and call scipy (kendalltau / spearmanr / pearsonr) twice; the naive loop is timed on a
  few draws and extrapolated. The same draws are compared value by value.
* compare_metrics on the 8 metrics (28 pairs, kendall_tau_b, 1,000 draws) vs 28 x the naive pair.
* tie_calibrated_accuracy on the 47,830 rows.

Run: .venv/bin/python benchmarks/significance_speed.py [--resamples 1000] [--naive 10] [--jobs 1]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import scipy.stats as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from captioneval.stats import (  # noqa: E402
    compare_metrics,
    pair_counts,
    permutation_test,
    tie_calibrated_accuracy,
)
from captioneval.stats.significance import _mixed_distribution, _SwapDraws, _zscore  # noqa: E402

N_ROWS = 47_830


def synthetic(n: int = N_ROWS, seed: int = 0):
    rng = np.random.default_rng(seed)
    votes = np.where(rng.random(n) < 0.9, 3, rng.integers(4, 6, size=n))
    latent = rng.normal(size=n)
    p_yes = 1.0 / (1.0 + np.exp(-2.0 * latent))
    y = rng.binomial(votes, p_yes) / votes
    metrics = {}
    for k in range(8):
        x = latent + rng.normal(scale=0.8 + 0.15 * k, size=n)
        if k == 3:
            x = np.round(x, 1)  # coarse metric: many ties
        if k == 5:
            x = np.where(x < -0.5, 0.0, x)  # BLEU-like block of zeros
        metrics[f"metric_{k}"] = x
    return metrics, y


def naive_scipy(x1, x2, y, statistic, swaps):
    fn = {
        "kendall_tau_b": lambda a, b: st.kendalltau(a, b).statistic,
        "spearman": lambda a, b: st.spearmanr(a, b).statistic,
        "pearson": lambda a, b: st.pearsonr(a, b).statistic,
    }[statistic]
    z1, z2 = st.zscore(x1), st.zscore(x2)
    out = np.empty(swaps.shape[0])
    for i, s in enumerate(swaps):
        out[i] = fn(np.where(s, z2, z1), y) - fn(np.where(s, z1, z2), y)
    return out


def timed(fn, *args, **kwargs):
    t0 = time.perf_counter()
    result = fn(*args, **kwargs)
    return result, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--resamples", type=int, default=1000)
    ap.add_argument("--naive", type=int, default=10, help="draws timed for the naive loop")
    ap.add_argument("--jobs", type=int, default=1, help="threads for compare_metrics")
    args = ap.parse_args()

    metrics, y = synthetic()
    names = list(metrics)
    print(f"rows={y.size} metrics={len(names)} distinct human scores={np.unique(y).size} "
          f"resamples={args.resamples}")

    # pair counts ---------------------------------------------------------------------------------
    rng = np.random.default_rng(1)
    xb = np.round(rng.normal(size=50_000), 2)
    yb = rng.integers(1, 5, size=50_000).astype(float)
    pc, t_fast = timed(pair_counts, xb, yb)
    ref, t_scipy = timed(st.kendalltau, xb, yb)
    print(f"pair_counts n=50000: {t_fast:.3f} s; scipy.stats.kendalltau: {t_scipy:.3f} s; "
          f"ratio fast/scipy {t_fast / t_scipy:.1f}; |tau_b - scipy| = {abs(pc.tau_b() - ref.statistic):.1e}")

    # one pair ------------------------------------------------------------------------------------
    a, b = metrics[names[0]], metrics[names[3]]
    per_pair_naive = {}
    for statistic in ("kendall_tau_b", "spearman", "pearson"):
        res, t_fast = timed(permutation_test, a, b, y, statistic, n_resamples=args.resamples, seed=0)
        swaps = _SwapDraws(y.size, 0).next(args.naive)
        naive, t_naive = timed(naive_scipy, a, b, y, statistic, swaps)
        _, fast_draws = _mixed_distribution(_zscore(a), _zscore(b), y, statistic, args.naive, 0)
        per_draw = t_naive / args.naive
        per_pair_naive[statistic] = per_draw * args.resamples
        print(f"permutation_test {statistic:13s} 1 pair x {args.resamples} draws: {t_fast:.2f} s; naive scipy "
              f"{per_draw * 1000:.0f} ms/draw -> {per_draw * args.resamples:.0f} s (extrapolated from "
              f"{args.naive}); speed-up {per_draw * args.resamples / t_fast:.0f}x; "
              f"max |fast - naive| {np.max(np.abs(fast_draws - naive)):.1e}; p={res.p_value:.4f}")

    # full comparison -----------------------------------------------------------------------------
    cmp, t_cmp = timed(compare_metrics, metrics, y, "kendall_tau_b", n_resamples=args.resamples, seed=0, n_jobs=args.jobs)
    n_pairs = len(names) * (len(names) - 1) // 2
    naive_total = n_pairs * per_pair_naive["kendall_tau_b"]
    print(f"compare_metrics {len(names)} metrics ({n_pairs} pairs, kendall_tau_b, {args.resamples} draws, "
          f"n_jobs={args.jobs}): {t_cmp:.1f} s; naive {naive_total / 60:.0f} min (extrapolated); "
          f"speed-up {naive_total / t_cmp:.0f}x")
    print("  ranks: " + ", ".join(f"{n}={cmp.ranks[n]} ({cmp.values[n]:.4f})" for n in cmp.names))

    # tie calibration -----------------------------------------------------------------------------
    tc, t_tc = timed(tie_calibrated_accuracy, metrics[names[3]], y)
    print(f"tie_calibrated_accuracy n={y.size}: {t_tc:.2f} s ({tc.n_candidates} candidates, "
          f"acc_eq={tc.accuracy:.4f} at epsilon={tc.epsilon:.3g})")


if __name__ == "__main__":
    main()
