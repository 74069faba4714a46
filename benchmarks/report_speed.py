"""Report speed (issue 35, "reports at the speed of the hardware"): every bundled benchmark report and
the cross-benchmark comparison, today's reference code path against the vectorised one, in the same
run on the same data, with the numbers compared for equality and the ratios printed.

* Benchmark reports: :func:`analysis.benchmarks.benchmark_report` (every level, the significance
  tests and the human ceiling, ``use_cache=False``) of Flickr8k-CrowdFlower (47,830 rows),
  Flickr8k-Expert, THumB (each of its three criteria) and PASCAL-50S, first inside
  :func:`captioneval.stats.engine.reference_path` (the per-resample and per-group loops, scipy on
  each sample: the code path before this change), then with the vectorised statistics. The two
  reports must be equal, every number (``==`` on the JSON dicts, no tolerance).
* The comparison (``correlate --compare``): before, :func:`analysis.benchmarks.comparison` with
  ``reuse=False`` in the reference path, computing each column's item-level report again (any such
  report stored by an earlier run is deleted first); after, ``reuse=True``, reading the benchmark
  reports the vectorised runs above stored. Equal matrices required.

The datasets are the ones ``./run demo`` imports (``flickr8k-cf``, ``flickr8k-expert``, ``thumb``,
``pascal50s``, with BLEU-4, ROUGE-L and CIDEr-D); missing ones are imported and scored first (a few
minutes) in the database of ``DATABASE_URL``. The acceptance line is Flickr8k-CrowdFlower's ratio
(issue 35: at least 10x with 1,000 resamples and permutations). Exit status 1 if any pair of reports
differs.

Run: DATABASE_URL=postgres://... .venv/bin/python benchmarks/report_speed.py [--resamples 1000]
     [--permutations 1000] [--seed 0] [--only flickr8k-cf ...] [--skip-comparison]
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "evalsite.settings")

#: (dataset name, importer, folder) as ``./run demo`` imports them
BUNDLED = [
    ("flickr8k-cf", "flickr8k-crowdflower", "data/flickr8k"),
    ("flickr8k-expert", "flickr8k-expert", "data/flickr8k"),
    ("thumb", "thumb", "data/thumb"),
    ("pascal50s", "pascal50s", "data/pascal50s"),
]
METRICS = ["bleu_4", "rouge_l", "cider_d"]


def ensure_datasets(names: list[str]) -> None:
    from django.core.management import call_command

    from crowd.models import Dataset
    from metrics.models import MetricRun

    for name, importer, folder in BUNDLED:
        if name not in names:
            continue
        if not Dataset.objects.filter(name=name).exists():
            print(f"importing {name} ...", flush=True)
            call_command("import_dataset", importer, str(ROOT / folder), "--name", name)
        done = set(MetricRun.objects.filter(dataset__name=name, status=MetricRun.DONE).values_list("metric", flat=True))
        missing = [m for m in METRICS if m not in done]
        if missing:
            print(f"computing {', '.join(missing)} on {name} ...", flush=True)
            call_command("compute_metrics", "--dataset", name, "--metric", *missing, "--wait")


def timed(fn):
    t0 = time.perf_counter()
    result = fn()
    return time.perf_counter() - t0, result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--resamples", type=int, default=1000)
    ap.add_argument("--permutations", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", nargs="*", help="dataset names (default: every bundled one)")
    ap.add_argument("--skip-comparison", action="store_true")
    args = ap.parse_args()

    import django

    django.setup()
    from analysis.benchmarks import benchmark_columns, benchmark_report, comparison
    from analysis.models import CorrelationReport
    from captioneval.stats.engine import reference_path
    from crowd.models import Dataset

    names = args.only or [b[0] for b in BUNDLED]
    ensure_datasets(names)
    settings = {"n_resamples": args.resamples, "n_permutations": args.permutations, "seed": args.seed}
    # warm-up (imports, scipy's lazy modules) outside the timings
    with reference_path():
        benchmark_report("thumb" if "thumb" in names else names[0], n_resamples=5, n_permutations=5, use_cache=False)
    benchmark_report("thumb" if "thumb" in names else names[0], n_resamples=5, n_permutations=5, use_cache=False)

    print(f"{args.resamples} bootstrap resamples, {args.permutations} permutations, seed {args.seed}; "
          f"metrics {', '.join(METRICS)}; wall seconds, one run each")
    print(f"{'report':34s} {'rows':>7s} {'reference s':>12s} {'vectorised s':>13s} {'ratio':>7s}  equal")
    failures = 0
    total_old = total_new = 0.0
    cf_ratio = None
    for name in names:
        dataset = Dataset.objects.get(name=name)
        for criterion in dict.fromkeys(c["criterion"] for c in benchmark_columns(dataset)):
            def run():
                return benchmark_report(name, criterion=criterion, use_cache=False, **settings)

            with reference_path():
                t_old, old = timed(run)
            t_new, new = timed(run)
            equal = old == new
            failures += not equal
            total_old += t_old
            total_new += t_new
            rows = (new.get("counts") or {}).get("rows") or (new.get("counts") or {}).get("pairs")
            label = name + (f" ({criterion})" if criterion and criterion != dataset.criterion else "")
            print(f"{label:34s} {rows:7d} {t_old:12.2f} {t_new:13.2f} {t_old / t_new:6.1f}x  {'yes' if equal else 'NO'}",
                  flush=True)
            if name == "flickr8k-cf":
                cf_ratio = t_old / t_new
    if not args.skip_comparison:
        # before: the item-level-only report of every column computed again (none left stored)
        CorrelationReport.objects.filter(payload__settings__levels=["item"]).delete()
        with reference_path():
            t_old, old = timed(lambda: comparison(names, **settings, reuse=False))
        t_new, new = timed(lambda: comparison(names, **settings))
        equal = old == new
        failures += not equal
        total_old += t_old
        total_new += t_new
        print(f"{'comparison (correlate --compare)':34s} {'':7s} {t_old:12.2f} {t_new:13.2f} {t_old / t_new:6.1f}x  "
              f"{'yes' if equal else 'NO'}")
    print(f"{'all of the above':34s} {'':7s} {total_old:12.2f} {total_new:13.2f} {total_old / total_new:6.1f}x")
    if cf_ratio is not None:
        print(f"Flickr8k-CrowdFlower benchmark report: {cf_ratio:.1f}x faster (target: at least 10x)")
    if failures:
        print(f"{failures} report(s) differ between the two paths")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
