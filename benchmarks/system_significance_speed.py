"""Time paired_bootstrap and approximate_randomization against sacrebleu 2.6.0 in the same run.

Synthetic BLEU sufficient statistics (k = 10: hypothesis length, reference length, matches and
totals of 1-4 grams) for two systems on 5,000 units. Ours: a vectorised corpus BLEU score_fn
(sacrebleu's formula with its default "exp" smoothing). sacrebleu: its own ``_paired_bs_test`` /
``_paired_ar_test`` on a BLEU whose statistics extraction returns the same per-unit statistics.
Same seed, so the p-values must agree (printed).

Run: .venv/bin/python benchmarks/system_significance_speed.py [--units 5000] [--resamples 1000] [--trials 10000]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from sacrebleu.metrics import BLEU
from sacrebleu.significance import Result, _paired_ar_test, _paired_bs_test

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from captioneval.stats import approximate_randomization, paired_bootstrap  # noqa: E402


def bleu_stats(rng: np.random.Generator, n: int, quality: float) -> np.ndarray:
    hyp = rng.integers(6, 16, n)
    ref = np.clip(hyp + rng.integers(-3, 4, n), 1, None)
    rows = [hyp, ref]
    totals = [np.clip(hyp - k, 0, None) for k in range(4)]
    correct = [rng.binomial(t, quality ** (k + 1)) for k, t in enumerate(totals)]
    return np.stack(rows + correct + totals, axis=1).astype(np.float64)


def bleu_score_fn(sums: np.ndarray) -> np.ndarray:
    """sacrebleu BLEU (smooth "exp", order 4) from summed statistics, (b, 10) -> (b,)."""
    s = np.asarray(sums, dtype=np.float64)
    sys_len, ref_len, c, t = s[:, 0], s[:, 1], s[:, 2:6], s[:, 6:10]
    with np.errstate(divide="ignore", invalid="ignore"):
        bp = np.where(sys_len < ref_len, np.where(sys_len > 0, np.exp(1 - ref_len / sys_len), 0.0), 1.0)
        zero = c == 0
        prec = np.where(zero, 100.0 / (2.0 ** np.cumsum(zero, axis=1) * t), 100.0 * c / t)
        prec = np.where(np.cumprod(t > 0, axis=1).astype(bool), prec, 0.0)
        logs = np.where(prec > 0, np.log(np.where(prec > 0, prec, 1.0)), -9999999999.0)
    return np.where(c.any(axis=1), bp * np.exp(logs.mean(axis=1)), 0.0)


class StatsBLEU(BLEU):
    """BLEU whose 'extraction' returns precomputed statistics, keyed by the first hypothesis."""

    def __init__(self, table):
        super().__init__()
        self.table = table

    def _extract_corpus_statistics(self, hypotheses, references):
        return self.table[hypotheses[0]]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--units", type=int, default=5000)
    ap.add_argument("--resamples", type=int, default=1000)
    ap.add_argument("--trials", type=int, default=10000)
    ap.add_argument("--seed", type=int, default=12345)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    a, b = bleu_stats(rng, args.units, 0.50), bleu_stats(rng, args.units, 0.505)
    table = {"a": a.astype(int).tolist(), "b": b.astype(int).tolist()}
    metric = StatsBLEU(table)
    bl_score = metric._aggregate_and_compute(table["a"])
    info = {bl_score.name: (table["a"], Result(bl_score.score))}
    hyps = ["b"] * args.units
    print(f"{args.units} units, k = 10 statistics; BLEU a = {bl_score.score:.3f}, b = {bleu_score_fn(b.sum(0)[None])[0]:.3f}")
    for name, ours, ref_fn, n in (
        ("paired_bootstrap", lambda: paired_bootstrap(a, b, bleu_score_fn, args.resamples, args.seed), _paired_bs_test, args.resamples),
        ("approximate_randomization", lambda: approximate_randomization(a, b, bleu_score_fn, args.trials, args.seed), _paired_ar_test, args.trials),
    ):
        t0 = time.perf_counter()
        res = ours()
        t_ours = time.perf_counter() - t0
        t0 = time.perf_counter()
        _, out = ref_fn(info, "b", hyps, None, {bl_score.name: metric}, n, -1, args.seed)
        t_ref = time.perf_counter() - t0
        p_ref = out[bl_score.name].p_value
        print(
            f"{name:26s} n={n:6d}: ours {t_ours:7.3f} s, sacrebleu {t_ref:7.3f} s, ratio {t_ref / t_ours:6.1f}x; "
            f"p ours {res.p_value:.4f}, sacrebleu {p_ref:.4f} ({'equal' if res.p_value == p_ref else 'DIFFERENT'})"
        )


if __name__ == "__main__":
    main()
