"""Requests per second of the LLM judges' client (captioneval.kernels.judges.client) against the
tests' fake OpenAI-compatible server on 127.0.0.1 (tests/fake_openai.py) with a fixed per-request
latency, at concurrency 1, 8 and 32; then the same CLAIR run again over its filled cache (the ratio
of the two wall times is the cache's effect on a rerun). Nothing leaves the machine.

The fake server answers every request after ``--latency`` seconds (default 0.05, a fast local
model's time for a short answer); the numbers measure the client (thread pool, httpx, request
hashing, cache writes), not a model. With a latency L the ideal is min(c, server threads) / L requests
per second at concurrency c.

Run: .venv/bin/python benchmarks/judge_throughput.py [--captions 200] [--latency 0.05] [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from captioneval.metrics.base import Batch  # noqa: E402
from captioneval.metrics.judges.clair import Clair  # noqa: E402
from tests.fake_openai import Answer, Delay, FakeOpenAI  # noqa: E402


def run(captions: int, latency: float, levels=(1, 8, 32)) -> dict:
    texts = [f"a dog number {i} runs on the grass" for i in range(captions)]
    refs = [["a dog runs across a field", "a brown dog on grass"]] * captions
    out = {"captions": captions, "latency_s": latency, "concurrency": {}}
    answer = Delay(latency, Answer('{"score": 72, "reason": "same scene"}'))
    with FakeOpenAI(lambda body, n: answer) as server, tempfile.TemporaryDirectory() as tmp:
        for c in levels:
            metric = Clair(server.url, "judge-model", cache_dir=Path(tmp) / f"c{c}", concurrency=c)
            start = time.perf_counter()
            metric.score(Batch(texts=texts, reference_texts=refs))
            wall = time.perf_counter() - start
            out["concurrency"][c] = {"wall_s": round(wall, 3), "requests": metric.report["requests"]["sent"],
                                     "requests_per_s": round(metric.report["requests"]["sent"] / wall, 1),
                                     "ideal_per_s": round(c / latency, 1)}
        c = levels[-1]
        metric = Clair(server.url, "judge-model", cache_dir=Path(tmp) / f"c{c}", concurrency=c)
        start = time.perf_counter()
        metric.score(Batch(texts=texts, reference_texts=refs))
        rerun = time.perf_counter() - start
        first = out["concurrency"][c]["wall_s"]
        out["rerun"] = {"concurrency": c, "wall_s": round(rerun, 3), "requests": metric.report["requests"]["sent"],
                        "cached": metric.report["requests"]["cached"], "first_over_rerun": round(first / rerun, 1)}
        if server.problems:
            raise SystemExit(f"the fake server refused requests: {server.problems[:3]}")
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--captions", type=int, default=200)
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args(argv)
    result = run(args.captions, args.latency)
    print(f"{args.captions} CLAIR captions, fake server latency {args.latency * 1000:.0f} ms")
    print(f"{'concurrency':>11} {'wall s':>8} {'req/s':>8} {'ideal':>8}")
    for c, r in result["concurrency"].items():
        print(f"{c:>11} {r['wall_s']:>8.2f} {r['requests_per_s']:>8.1f} {r['ideal_per_s']:>8.1f}")
    r = result["rerun"]
    print(f"rerun over the cache (concurrency {r['concurrency']}): {r['wall_s']:.3f} s, {r['requests']} requests sent, "
          f"{r['cached']} read from the cache; first run / rerun = {r['first_over_rerun']}x")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
