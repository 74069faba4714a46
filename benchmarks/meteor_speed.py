"""Speed, memory and equality of the pure-Python METEOR 1.5 against pycocoevalcap's jar.

Run from the repository root (no Django needed; needs Java for the jar side)::

    .venv/bin/python benchmarks/meteor_speed.py                  # Flickr8k-Expert and Flickr8k-CrowdFlower
    .venv/bin/python benchmarks/meteor_speed.py --sets ptb/flickr8k-expert --limit 2000

Caption sets: tests/meteor_inputs.py (default: both Flickr8k sets PTB-tokenised, as COCOEvalCap feeds
METEOR). For each set, in this order:

* **jar, cold**: a new ``meteor-1.5.jar -l en -norm`` JVM (:class:`captioneval.kernels.meteor.MeteorPool`,
  pipelined requests, pycocoevalcap's wire lines) started, every caption's ``SCORE`` request and one
  ``EVAL`` request: the JVM's start (loading the paraphrase table) is inside the time;
* **jar, warm**: the same JVM again on the same captions (its JIT warm);
* **python**: a fresh Python process (``captioneval.kernels.meteor_py``, the paraphrase index already
  cached) loading its data and scoring the set, then scoring it again (warm);

and prints the number of captions whose statistics line or score differ (must be 0), the corpus
values, the times, the ratios (jar time / Python time: > 1 means Python is faster) and the peak
resident memory of the JVM (VmHWM) and of the Python process (ru_maxrss), with their ratio. Exit
status 1 if any caption differs or the corpus values are more than one ulp apart.

Targets (issue 33): Python at least as fast as the warm jar, and its peak memory at most a quarter of
the JVM's. Measured 2026-11-28 on two shared cores, three runs (08:59, 09:07 and 09:15 UTC, load
average 2.5-4.7; the first two before the cyclic collector was paused during alignment): warm ratio 2.15x, 1.08x, 3.00x on Expert and 2.54x, 2.41x, 2.28x on CrowdFlower,
cold 4.95x, 2.67x, 5.26x and 3.10x, 2.82x, 3.08x; memory 0.17-0.18 and 0.20 of the JVM's. The first:

    ptb/flickr8k-expert: 5,664 captions; statistics differing 0, scores differing 0; corpus jar 0.10663295950916585 python 0.10663295950916585 (0 ulp)
      jar cold (JVM start included) 28.75 s (5.076 ms/caption), warm 7.58 s (1.338 ms/caption)
      python first (data load included) 5.80 s (1.025 ms/caption), again 3.53 s (0.624 ms/caption)
      time ratio jar/python: cold 4.95x, warm 2.15x
      peak memory: JVM 1455 MiB, python 246 MiB (python/JVM 0.17)
    ptb/flickr8k-crowdflower: 47,830 captions; statistics differing 0, scores differing 0; corpus jar 0.12991401260468363 python 0.12991401260468363 (0 ulp)
      jar cold (JVM start included) 72.84 s (1.523 ms/caption), warm 51.46 s (1.076 ms/caption)
      python first (data load included) 23.48 s (0.491 ms/caption), again 20.22 s (0.423 ms/caption)
      time ratio jar/python: cold 3.10x, warm 2.54x
      peak memory: JVM 1472 MiB, python 290 MiB (python/JVM 0.20)

"again" recomputes every caption, sentence index and alignment; what a process keeps between
batches is its loaded data, the last batch's paraphrase table, the per-word cache (hash, stem,
synsets) and the shared match objects.
"""
from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from tests import meteor_inputs  # noqa: E402

DEFAULT_SETS = ("ptb/flickr8k-expert", "ptb/flickr8k-crowdflower")

_CHILD = r"""
import json, resource, sys, time
sys.path.insert(0, sys.argv[1])
pairs = json.load(open(sys.argv[2], encoding="utf-8"))
c = [p[0] for p in pairs]; r = [p[1] for p in pairs]
t0 = time.perf_counter()
from captioneval.kernels import meteor_py
stats = meteor_py.statistics(c, r)
scores, corpus = meteor_py.evaluate(stats)
cold = time.perf_counter() - t0
t0 = time.perf_counter()
stats2 = meteor_py.statistics(c, r)
meteor_py.evaluate(stats2)
warm = time.perf_counter() - t0
assert stats2 == stats
print(json.dumps({"stats": stats, "scores": [repr(s) for s in scores], "corpus": repr(corpus), "cold": cold,
                  "warm": warm, "peak_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


def _vm_hwm_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def jar(candidates, references) -> dict:
    from captioneval.kernels.meteor import MeteorPool

    pool = MeteorPool(1)
    try:
        t0 = time.perf_counter()
        stats = pool.statistics(candidates, references)
        scores, corpus = pool._jvms[0].evaluate(stats)
        cold = time.perf_counter() - t0
        t0 = time.perf_counter()
        stats2 = pool.statistics(candidates, references)
        pool._jvms[0].evaluate(stats2)
        warm = time.perf_counter() - t0
        peak = _vm_hwm_kib(pool.processes[0].pid)
    finally:
        pool.close()
    return {"stats": stats, "scores": [repr(float(s)) for s in scores], "corpus": repr(float(corpus)),
            "cold": cold, "warm": warm, "peak_kib": peak}


def python(pairs, tmp: Path) -> dict:
    tmp.write_text(json.dumps(pairs, ensure_ascii=False), encoding="utf-8")
    out = subprocess.run([sys.executable, "-c", _CHILD, str(REPO_ROOT), str(tmp)], capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sets", nargs="+", default=list(DEFAULT_SETS))
    parser.add_argument("--limit", type=int, default=0, help="first N captions of each set (0: all)")
    args = parser.parse_args(argv)
    # the paraphrase index is built once per table (about a minute): not part of any timing
    from captioneval.kernels import meteor_py

    meteor_py.get_scorer()
    failed = False
    import tempfile

    with tempfile.TemporaryDirectory() as tmpdir:
        for name in args.sets:
            pairs = meteor_inputs.pairs(name)
            if args.limit:
                pairs = pairs[:args.limit]
            candidates, references = [c for c, _ in pairs], [r for _, r in pairs]
            j = jar(candidates, references)
            p = python(pairs, Path(tmpdir) / "pairs.json")
            n = len(pairs)
            stats_differ = sum(a != b for a, b in zip(j["stats"], p["stats"]))
            scores_differ = sum(a != b for a, b in zip(j["scores"], p["scores"]))
            jc, pc = float(j["corpus"]), float(p["corpus"])
            ulp = 0 if jc == pc else abs(jc - pc) / math.ulp(max(jc, pc))
            failed |= bool(stats_differ or scores_differ or ulp > 1)
            print(f"{name}: {n:,} captions; statistics differing {stats_differ}, scores differing {scores_differ}; "
                  f"corpus jar {j['corpus']} python {p['corpus']} ({ulp:.0f} ulp)")
            print(f"  jar cold (JVM start included) {j['cold']:.2f} s ({1000 * j['cold'] / n:.3f} ms/caption), "
                  f"warm {j['warm']:.2f} s ({1000 * j['warm'] / n:.3f} ms/caption)")
            print(f"  python first (data load included) {p['cold']:.2f} s ({1000 * p['cold'] / n:.3f} ms/caption), "
                  f"again {p['warm']:.2f} s ({1000 * p['warm'] / n:.3f} ms/caption)")
            print(f"  time ratio jar/python: cold {j['cold'] / p['cold']:.2f}x, warm {j['warm'] / p['warm']:.2f}x")
            print(f"  peak memory: JVM {j['peak_kib'] / 1024:.0f} MiB, python {p['peak_kib'] / 1024:.0f} MiB "
                  f"(python/JVM {p['peak_kib'] / max(j['peak_kib'], 1):.2f})", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
