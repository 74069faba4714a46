"""Evaluate a captioning model against baselines over captioneval's REST API (docs/api.md).

    python docs/examples/api_end_to_end.py --url http://127.0.0.1:8000 --token "$CAPTIONEVAL_TOKEN" \\
        --dataset my-eval --annotations captions_val2014.json \\
        --results my-model=my_results.json --results baseline=baseline_results.json \\
        --metric bleu_4 --metric cider_d --out leaderboard.json

1. uploads the COCO annotation file (the references) and each model's COCO results file
   (``POST /api/datasets/``, ``format=coco``; one request per system, each with an Idempotency-Key,
   so a retried request never imports twice; a large upload answers 202 with an import job, which
   the script follows until it is done);
2. starts the metric runs (``POST /api/runs/``) and waits until every run is done
   (``GET /api/runs/{id}/``, printing progress);
3. downloads the system leaderboard (``GET /api/reports/leaderboard/{dataset}/``; while the report
   is being computed the API answers 202 with ``Retry-After``: the script waits that long and asks
   again), writes it to ``--out`` and prints each system's score and rank per metric.

A 429 (rate limit) and a 503 ``busy`` (the server computes as many reports as it may at once) are
waited out as their ``Retry-After`` says. Any other error stops the script with
the API's problem document (``detail``). Needs only httpx (``pip install httpx``); the token comes
from the account page (*API token*) or ``python manage.py api_token create --user NAME``.
Exit status 0 on success, 1 on an error.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

import httpx


class ApiError(RuntimeError):
    """The API refused a request; the message is the problem document's ``detail``."""


def call(client: httpx.Client, method: str, path: str, **kwargs) -> httpx.Response:
    """Send a request; wait out 429s and busy 503s (``Retry-After``); raise ApiError for any other error."""
    while True:
        response = client.request(method, path, **kwargs)
        busy = response.status_code == 503 and response.headers.get("Content-Type", "").startswith(
            "application/problem+json") and response.json().get("type", "").endswith(":busy")
        if response.status_code == 429 or busy:
            time.sleep(float(response.headers.get("Retry-After", "1")))
            continue
        if response.status_code >= 400:
            try:
                problem = response.json()
                detail = problem.get("detail") or problem.get("title")
            except ValueError:
                detail = response.text[:200]
            raise ApiError(f"{method} {path}: {response.status_code} {detail}")
        return response


def upload(client, dataset: str, annotations: Path | None, system: str, results: Path) -> dict:
    """Import one model's COCO results (and the references with the first one) into ``dataset``."""
    files = {"results": (results.name, results.read_bytes(), "application/json")}
    if annotations is not None:
        files["annotations"] = (annotations.name, annotations.read_bytes(), "application/json")
    digest = hashlib.sha256(b"".join(f[1] for f in files.values()) + system.encode()).hexdigest()[:32]
    response = call(client, "POST", "/api/datasets/", data={"format": "coco", "name": dataset, "system": system},
                    files=files, headers={"Idempotency-Key": f"upload-{dataset}-{digest}"})
    if response.status_code != 202:
        return response.json()
    # a large upload is imported by a background job: follow it until it is done
    job = response.json()
    while job["status"] not in ("done", "failed"):
        time.sleep(1)
        job = call(client, "GET", job["url"]).json()
    if job["status"] == "failed":
        raise ApiError(f"import of {results.name} failed: {job['message']}")
    return job["result"]


def start_runs(client, dataset: str, metrics: list[str]) -> list[int]:
    """Plan and start the metric runs; returns the ids of every run to wait for."""
    body = call(client, "POST", "/api/runs/", json={"dataset": dataset, "metrics": metrics}).json()
    for skipped in body["skipped"]:
        print(f"skipped {skipped['metric']}: {skipped['reason']}", file=sys.stderr)
    return [run["id"] for run in body["runs"]]


def wait_for_runs(client, run_ids: list[int], timeout: float) -> list[dict]:
    """Poll each run until it is done (ApiError if one failed or the time is up)."""
    deadline = time.monotonic() + timeout
    while True:
        runs = [call(client, "GET", f"/api/runs/{run_id}/").json() for run_id in run_ids]
        print("  ".join(f"{r['metric']} {r['percent']:.0f}%" for r in runs), file=sys.stderr)
        failed = [r for r in runs if r["status"] == "failed"]
        if failed:
            raise ApiError("; ".join(f"{r['metric']} failed: {r['error']}" for r in failed))
        if all(r["status"] == "done" for r in runs):
            return runs
        if time.monotonic() > deadline:
            raise ApiError(f"runs not done after {timeout:g} s")
        time.sleep(1)


def leaderboard(client, dataset: str, metrics: list[str], timeout: float) -> dict:
    """The leaderboard JSON of ``dataset`` over ``metrics``, waiting while it is computed (202)."""
    deadline = time.monotonic() + timeout
    while True:
        response = call(client, "GET", f"/api/reports/leaderboard/{dataset}/", params={"metric": metrics})
        if response.status_code == 200:
            return response.json()
        if time.monotonic() > deadline:
            raise ApiError(f"leaderboard not ready after {timeout:g} s")
        time.sleep(float(response.headers.get("Retry-After", "1")))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True, help="the site, e.g. http://127.0.0.1:8000")
    parser.add_argument("--token", required=True, help="API token (Authorization: Token ...)")
    parser.add_argument("--dataset", required=True, help="dataset name (created if new)")
    parser.add_argument("--annotations", type=Path, required=True, help="COCO caption annotations (references)")
    parser.add_argument("--results", action="append", required=True, metavar="SYSTEM=FILE",
                        help="a model's COCO results file (repeat: at least two systems for a leaderboard)")
    parser.add_argument("--metric", action="append", dest="metrics", help="metric key (repeat; default bleu_4 cider_d)")
    parser.add_argument("--out", type=Path, default=Path("leaderboard.json"), help="where to write the leaderboard")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds to wait for runs and the report")
    args = parser.parse_args(argv)
    metrics = args.metrics or ["bleu_4", "cider_d"]
    systems = []
    for spec in args.results:
        name, sep, path = spec.partition("=")
        if not sep:
            parser.error(f"--results {spec!r}: expected SYSTEM=FILE")
        systems.append((name, Path(path)))
    headers = {"Authorization": f"Token {args.token}", "Accept": "application/json"}
    with httpx.Client(base_url=args.url, headers=headers, timeout=120) as client:
        try:
            for i, (name, path) in enumerate(systems):
                result = upload(client, args.dataset, args.annotations if i == 0 else None, name, path)
                print(result["summary"].splitlines()[0], file=sys.stderr)
            runs = wait_for_runs(client, start_runs(client, args.dataset, metrics), args.timeout)
            print(f"{len(runs)} metric run(s) done", file=sys.stderr)
            board = leaderboard(client, args.dataset, metrics, args.timeout)
        except ApiError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
    args.out.write_text(json.dumps(board, indent=1))
    for metric in board["metrics"]:
        print(metric["name"])
        ranked = sorted(board["systems"].items(), key=lambda kv: kv[1]["metrics"][metric["key"]]["rank"] or 1e9)
        for name, system in ranked:
            cell = system["metrics"][metric["key"]]
            print(f"  {cell['rank']}  {name:<20} {cell['score']:.4f}  [{cell['ci95'][0]:.4f}, {cell['ci95'][1]:.4f}]")
    print(f"leaderboard written to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
