"""Throughput of CIDEr-D, Self-CIDEr and VIFIDEL through the Celery pipeline with 1 and 2 workers, on
datasets of 1k, 10k and 100k real captions, against the same scorers called in one process.

Data (real captions; one dataset ``scale-<N>`` per size N, imported with ``manage.py import_coco``):

* candidates: N captions = ceil(N / 10) COCO images x the 10 model captions per image of
  data/coco_multicaption_selfcider_example/merge_results.json (5,000 images). Beyond 5,000 images the
  real images are repeated under new keys (``<id>-r1``...), which the output says.
* references: 5 human captions per image, those of Flickr8k image ``i mod 8,092``
  (data/flickr8k/Flickr8k.token.txt); the bundled data has no references of the merge_results
  images, so the references describe another picture: the work is real, the score values are not.
* object labels (VIFIDEL): POPE's present objects (data/pope_coco_objects) of the same COCO image where
  POPE has it (16 of the 5,000), else of POPE image ``i mod 500``.

Per metric the units scored are: CIDEr-D and VIFIDEL one per candidate caption (N); Self-CIDEr one
per caption set, candidate sets of 10 and the reference sets of 5 (N/10 + N/10 sets, 1.5 N captions).

For every size, metric and worker count: W real ``celery -A evalsite worker --concurrency 1``
processes on a private queue (``CELERY_QUEUE``, with ``METRICS_WORKERS=W``) are started and warmed up
(an unmeasured run of each metric on a dataset of 4 chunks per worker, which loads GloVe in each
worker process); then the metric's previous run is deleted, a fresh run is planned and dispatched
(``pipeline.plan_runs`` + ``tasks.start``, what ``compute_metrics`` does), and the time from dispatch
to the moment the last score is stored (the run's ``finished_at``) is measured. This is the whole
pipeline as it runs (issue 18): ``start_run`` builds the run's document-frequency table once and
stores it, cuts the run into ``pipeline.chunk_size(units, W)`` chunks (at most ``--chunk-size``, about
4 per worker for small runs: the "chunk" column), and each worker process reads the dataset's tokens
and references and the stored table once (its first chunk of the measured dataset pays for that),
inserts each chunk's scores with one multi-row INSERT and adds them to the run's progress counter. Each row is the median of ``--repeat``
measurements (default 3, once when the first takes longer than ``--once-above`` s). Scores are
checked afterwards: one per unit, equal to the in-process reference (exit status 1 otherwise).

In-process reference: the registry's scorer called once on all units of the size, on the same
tokenised captions, no Celery, no database, after one untimed call on the warm-up dataset (CIDEr-D
and Self-CIDEr include building their document-frequency table, as the workers do; VIFIDEL's GloVe
is loaded beforehand, its load time is printed once), median of ``--repeat`` calls.

PTB tokenisation (Java) is shared by all metrics, so it is done and timed separately, before the
metric runs: ``ptb_tokenize`` in process and ``pipeline.tokenize_dataset`` (database read, Java,
insert); the workers then find every caption tokenised.

A measurement whose predicted time (from the previous size's throughput of the same metric and
worker count) exceeds ``--budget`` seconds is skipped and listed with the reason; one that runs
longer than ``--timeout`` is stopped (workers killed, queue purged) and listed. Workers are stopped
on exit, also on Ctrl-C (exit status 130) and SIGTERM.

Run: .venv/bin/python benchmarks/metric_scale.py [--sizes 1000 10000 100000 | --quick] [--workers 1 2]
     [--metrics cider_d self_cider vifidel] [--chunk-size 5000] [--repeat 3] [--budget 1200] [--timeout 1800]
     [--database-url postgres://...] [--broker redis://...] [--json FILE] [--logs DIR]
Needs PostgreSQL (default database ``captioneval_scale`` on 127.0.0.1, created if missing), Redis
and Java.
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import psycopg

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

DATA = ROOT / "data"
MERGE = DATA / "coco_multicaption_selfcider_example" / "merge_results.json"
FLICKR_TOKENS = DATA / "flickr8k" / "Flickr8k.token.txt"
POPE = DATA / "pope_coco_objects" / "coco_pope_random.json"
METRICS = ("cider_d", "self_cider", "vifidel")
SIZES = (1000, 10000, 100000)
DEFAULT_DB = "postgres://postgres@127.0.0.1:5432/captioneval_scale"
TOLERANCE = 1e-9
CAPTIONS_PER_SET = 10


def log(message: str) -> None:
    print(message, flush=True)


# --- set-up -------------------------------------------------------------------------------------
def ensure_database(url: str) -> None:
    """Create the PostgreSQL database named at the end of ``url`` if it does not exist
    (psycopg.Error when the server cannot be reached)."""
    base, _, name = url.rpartition("/")
    with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')


def setup_django(database_url: str, broker: str, queue: str, chunk_size: int) -> None:
    """Point this process at the database, broker and private queue (before Django reads its
    settings), then migrate. ValueError if the database is not PostgreSQL."""
    if not database_url.startswith(("postgres://", "postgresql://")):
        raise ValueError(f"the benchmark needs PostgreSQL (workers share the database); got {database_url!r}")
    os.environ.update(DATABASE_URL=database_url, CELERY_BROKER_URL=broker, CELERY_QUEUE=queue,
                      METRICS_CHUNK_SIZE=str(chunk_size))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "evalsite.settings")
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command

    if settings.CELERY_TASK_ALWAYS_EAGER or settings.CELERY_TASK_DEFAULT_QUEUE != queue:
        raise RuntimeError("Django settings were loaded before the benchmark could set the broker and queue")
    call_command("migrate", verbosity=0)


# --- data -------------------------------------------------------------------------------------------
@dataclass
class Source:
    """The real captions the datasets are built from (see the module docstring)."""

    sets: list[tuple[str, list[str]]]  # (COCO image id, model captions), merge_results file order
    references: list[list[str]]  # Flickr8k: the captions of each image, file order
    objects: dict[str, dict[str, int]]  # POPE: COCO image id -> {object: count}


def load_source() -> Source:
    """Read merge_results.json, Flickr8k.token.txt and the POPE file with the project's readers."""
    from crowd.importers.coco import read_coco_results, read_object_labels
    from crowd.importers.flickr8k import parse_tokens

    sets = list(read_coco_results(MERGE).items())
    references = [[text for _, text in caps] for caps in parse_tokens(FLICKR_TOKENS).values()]
    objects = {k: dict(v) for k, v in read_object_labels(POPE).items()}
    return Source(sets, references, objects)


def data_notes() -> list[str]:
    """How the datasets are made from the bundled data (printed with the table)."""
    return [
        f"candidates: {CAPTIONS_PER_SET} model captions per COCO image from merge_results.json (5,000 images); "
        "sizes above 50,000 captions repeat its images under new keys (<id>-r1)",
        "references: the 5 Flickr8k captions of Flickr8k image i mod 8,092 (human captions of another picture: "
        "real work, meaningless scores)",
        "objects: POPE present objects of the same COCO image where POPE has it, else of POPE image i mod 500",
        "Self-CIDEr scores every caption set: the candidates' sets of 10 and the reference sets of 5",
    ]


@dataclass
class DatasetInfo:
    """What was imported for one size: counts, how much of it repeats real images, import time."""

    name: str
    size: int
    images: int
    candidates: int
    references: int
    repeated_images: int
    real_object_images: int
    import_seconds: float = 0.0
    delete_seconds: float = 0.0


def write_coco_files(source: Source, size: int, directory: Path) -> tuple[dict, DatasetInfo]:
    """Write the COCO annotation, multi-caption results and object-label CSV files for ``size``
    candidate captions into ``directory``. Returns (paths by role, DatasetInfo)."""
    n_images = math.ceil(size / CAPTIONS_PER_SET)
    images, annotations, results = [], [], []
    labels = io.StringIO()
    writer = csv.writer(labels)
    writer.writerow(["image_id", "label", "count"])
    objects = list(source.objects.values())
    left, repeated, real_objects = size, 0, 0
    for i in range(n_images):
        coco_id, captions = source.sets[i % len(source.sets)]
        rep = i // len(source.sets)
        key = coco_id if rep == 0 else f"{coco_id}-r{rep}"
        repeated += rep > 0
        captions = captions[: min(CAPTIONS_PER_SET, left)]
        left -= len(captions)
        images.append({"id": key, "file_name": ""})
        for j, text in enumerate(source.references[i % len(source.references)]):
            annotations.append({"id": f"{key}#{j}", "image_id": key, "caption": text})
        results.append({"image_id": key, "captions": captions})
        own = source.objects.get(coco_id)
        real_objects += own is not None
        for label, count in (own or objects[i % len(objects)]).items():
            writer.writerow([key, label, count])
    if left:
        raise ValueError(f"size {size}: merge_results sets hold fewer than {CAPTIONS_PER_SET} captions")
    paths = {"annotations": directory / "references.json", "results": directory / "merge.json",
             "objects": directory / "objects.csv"}
    paths["annotations"].write_text(json.dumps({"images": images, "annotations": annotations}), encoding="utf-8")
    paths["results"].write_text(json.dumps(results), encoding="utf-8")
    paths["objects"].write_text(labels.getvalue(), encoding="utf-8")
    info = DatasetInfo(f"scale-{size}", size, n_images, size, len(annotations), repeated, real_objects)
    return paths, info


def build_dataset(source: Source, size: int, name: str | None = None) -> DatasetInfo:
    """(Re)create dataset ``scale-<size>`` (or ``name``) with ``manage.py import_coco``: an existing
    dataset of that name is deleted first, so the data and its tokens are new."""
    from django.core.management import call_command

    from crowd.models import Dataset

    with tempfile.TemporaryDirectory(prefix="metric-scale-") as tmp:
        paths, info = write_coco_files(source, size, Path(tmp))
        if name:
            info.name = name
        t0 = time.perf_counter()
        Dataset.objects.filter(name=info.name).delete()
        info.delete_seconds = time.perf_counter() - t0
        t0 = time.perf_counter()
        call_command("import_coco", "--name", info.name, "--annotations", str(paths["annotations"]),
                     "--results", f"merge={paths['results']}", "--objects", str(paths["objects"]),
                     stdout=io.StringIO())
        info.import_seconds = time.perf_counter() - t0
    return info


def tokenise(dataset) -> dict:
    """Time PTB tokenisation of all the dataset's captions: ``ptb_tokenize`` in process, then
    ``pipeline.tokenize_dataset`` (database read, Java, insert; the dataset's tokens are deleted
    first). Returns a row for the report."""
    from crowd.models import Caption
    from metrics import pipeline
    from metrics.models import CaptionTokens
    from captioneval.text.tokenizer import ptb_tokenize

    texts = list(Caption.objects.filter(image__dataset=dataset).order_by("id").values_list("text", flat=True))
    t0 = time.perf_counter()
    ptb_tokenize(texts)
    in_process = time.perf_counter() - t0
    CaptionTokens.objects.filter(caption__image__dataset=dataset).delete()
    t0 = time.perf_counter()
    n = pipeline.tokenize_dataset(dataset)
    stored = time.perf_counter() - t0
    if n != len(texts):
        raise RuntimeError(f"tokenize_dataset tokenised {n} captions, expected {len(texts)}")
    return {"captions": n, "in_process_seconds": in_process, "pipeline_seconds": stored,
            "in_process_captions_per_second": n / in_process, "pipeline_captions_per_second": n / stored}


# --- in-process reference -------------------------------------------------------------------------
@dataclass
class Inputs:
    """One metric's units on one dataset, in ``pipeline.Level.units`` order, with the scorer's input."""

    metric: str
    units: list
    captions: int
    args: tuple  # what in_process passes to the registry


def load_inputs(dataset, metric: str) -> Inputs:
    """Read the units of ``metric`` and their tokenised captions (or texts and objects) from the
    database, untimed, in the order the pipeline scores them."""
    from collections import defaultdict

    from crowd.models import Caption, ObjectLabel
    from metrics import pipeline
    from metrics.models import CaptionTokens

    units = pipeline.level_for(dataset, metric).units()
    rows = list(Caption.objects.filter(image__dataset=dataset).order_by("image_id", "system_id", "key")
                .values_list("id", "image_id", "system_id", "text"))
    tokens = dict(CaptionTokens.objects.filter(caption__image__dataset=dataset, tokenizer=pipeline.TOKENIZER)
                  .values_list("caption_id", "tokens"))
    by_id = {cid: (image, system, text) for cid, image, system, text in rows}
    members = defaultdict(list)
    for cid, image, system, _ in rows:
        members[(image, system)].append(tokens[cid])
    ref = dataset.reference_system_id
    if metric == "self_cider":
        sets = [members[tuple(u)] for u in units]
        reference_sets = [members[(image, system)] for image, system in units if system == ref]
        return Inputs(metric, units, sum(map(len, sets)), (sets, reference_sets))
    if metric == "cider_d":
        cands = [tokens[c] for c in units]
        refs = [members[(by_id[c][0], ref)] for c in units]
        return Inputs(metric, units, len(units), (cands, refs))
    objects = defaultdict(dict)
    for image, label, count in ObjectLabel.objects.filter(image__dataset=dataset).values_list("image_id", "label", "count"):
        objects[image][label] = count
    return Inputs(metric, units, len(units), ([by_id[c][2] for c in units], [objects[by_id[c][0]] for c in units]))


def in_process(inputs: Inputs) -> tuple[float, np.ndarray]:
    """Score ``inputs`` with the registry's scorer in this process; returns (seconds, values)."""
    from captioneval.metrics import registry
    from captioneval.kernels.cider import DocumentFrequency

    t0 = time.perf_counter()
    if inputs.metric == "cider_d":
        values = registry.score("cider_d", *inputs.args)
    elif inputs.metric == "self_cider":
        sets, reference_sets = inputs.args
        df = DocumentFrequency.from_references(reference_sets)
        values = registry.score_sets("self_cider", sets, document_frequency=df)
    else:
        values, _ = registry.score_vifidel("vifidel", *inputs.args)
    return time.perf_counter() - t0, np.asarray(values, dtype=float)


def stored_values(run, units: list) -> np.ndarray:
    """The run's stored scores in ``units`` order (NaN where a unit has none)."""
    from metrics.models import MetricScore, SetScore

    if run.metric == "self_cider":
        got = {(i, s): v for i, s, v in SetScore.objects.filter(run=run).values_list("image_id", "system_id", "value")}
        return np.array([got.get(tuple(u), np.nan) for u in units], dtype=float)
    got = dict(MetricScore.objects.filter(run=run).values_list("caption_id", "value"))
    return np.array([got.get(u, np.nan) for u in units], dtype=float)


def max_difference(a: np.ndarray, b: np.ndarray) -> float:
    """Largest |a - b| where both are finite; inf where only one of them is NaN."""
    if not np.array_equal(np.isnan(a), np.isnan(b)):
        return float("inf")
    ok = ~np.isnan(a)
    return float(np.max(np.abs(a[ok] - b[ok]))) if ok.any() else 0.0


# --- Celery workers ----------------------------------------------------------------------------------
def alive_in_group(pgid: int) -> list[int]:
    """Pids of live (not zombie) processes in process group ``pgid`` (Linux /proc)."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2:].split()  # state, ppid, pgrp, ...
        if int(fields[2]) == pgid and fields[0] != "Z":
            pids.append(int(stat.parent.name))
    return pids


class Workers:
    """``n`` ``celery -A evalsite worker --concurrency 1`` processes consuming ``env['CELERY_QUEUE']``,
    each in its own session with its log in ``logdir``. Use as a context manager: started and ready on
    entry, stopped (SIGTERM, then SIGKILL after ``grace`` s) on exit, whatever happens in between."""

    def __init__(self, n: int, env: dict, logdir: Path, ready_timeout: float = 180.0, grace: float = 15.0):
        self.n, self.env, self.logdir, self.ready_timeout, self.grace = n, env, logdir, ready_timeout, grace
        self.procs: list[subprocess.Popen] = []
        self.logs: list[Path] = []

    def __enter__(self) -> "Workers":
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        """Start the processes and wait until each logs "ready"; RuntimeError (with the log's end)
        if one exits or is not ready within ``ready_timeout`` s."""
        tag = uuid.uuid4().hex[:6]
        for i in range(self.n):
            path = self.logdir / f"worker-{tag}-{i}.log"
            with path.open("wb") as out:
                self.procs.append(subprocess.Popen(
                    [sys.executable, "-m", "celery", "-A", "evalsite", "worker", "-l", "info", "--concurrency", "1",
                     "-Q", self.env["CELERY_QUEUE"], "-n", f"scale{i}-{tag}@%h",
                     "--without-gossip", "--without-mingle", "--without-heartbeat"],
                    cwd=ROOT, env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                ))
            self.logs.append(path)
        deadline = time.monotonic() + self.ready_timeout
        waiting = set(range(self.n))
        while waiting:
            for i in list(waiting):
                if self.procs[i].poll() is not None:
                    raise RuntimeError(f"worker {i} exited with {self.procs[i].returncode}:\n{self.tail(i)}")
                if " ready." in self.logs[i].read_text(errors="replace"):
                    waiting.discard(i)
            if waiting and time.monotonic() > deadline:
                raise RuntimeError(f"worker(s) {sorted(waiting)} not ready after {self.ready_timeout:g} s")
            time.sleep(0.2)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def tail(self, i: int, chars: int = 3000) -> str:
        return self.logs[i].read_text(errors="replace")[-chars:]

    def check_alive(self) -> None:
        """RuntimeError naming a worker that has exited."""
        for i, proc in enumerate(self.procs):
            if proc.poll() is not None:
                raise RuntimeError(f"worker {i} died with {proc.returncode}:\n{self.tail(i)}")

    def chunks_done(self) -> list[int]:
        """score_chunk tasks each worker has finished so far (from its log)."""
        return [sum(1 for line in log.read_text(errors="replace").splitlines()
                    if "metrics.tasks.score_chunk[" in line and " succeeded in " in line) for log in self.logs]

    def stop(self) -> None:
        """Stop every process group (SIGTERM, SIGKILL after ``grace`` s) and reap the workers."""
        for proc in self.procs:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + self.grace
        for proc in self.procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            if alive_in_group(proc.pid):
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait()


def purge_queue() -> int:
    """Discard messages waiting on this process's Celery queue (the private one); returns how many."""
    from evalsite.celery import app

    return app.control.purge() or 0


def forget_queue(queue: str) -> None:
    """Delete the private queue's list and kombu's binding keys from Redis (they would stay forever)."""
    from evalsite.celery import app

    with app.connection_for_write() as conn:
        conn.default_channel.client.delete(queue, f"_kombu.binding.{queue}", f"_kombu.binding_permanent.{queue}")


# --- one pipeline measurement ------------------------------------------------------------------------
class Timeout(Exception):
    """A measurement ran longer than allowed."""


@dataclass
class Measurement:
    """One metric run through the workers: seconds from dispatch to the last stored score."""

    run_id: int
    units: int
    seconds: float
    compute_seconds: float
    chunks_per_worker: list[int] = field(default_factory=list)


def run_through_workers(dataset, metric: str, workers: Workers, timeout: float, label: str = "",
                        progress_every: float = 10.0) -> Measurement:
    """Delete ``metric``'s runs on ``dataset``, plan and dispatch a fresh run, and wait until every
    score is stored. Raises Timeout after ``timeout`` s, RuntimeError if the run fails, a worker dies
    or the stored scores are not one per unit."""
    from metrics import pipeline, tasks
    from metrics.models import MetricRun

    MetricRun.objects.filter(dataset=dataset, metric=metric).delete()
    (run,) = pipeline.plan_runs(dataset.name, [metric])
    before = workers.chunks_done()
    t0 = time.time()
    tasks.start(run)
    last_print = time.monotonic()
    while True:
        run.refresh_from_db()
        if run.status == MetricRun.DONE:
            break
        if run.status == MetricRun.FAILED:
            raise RuntimeError(f"{label}: run {run.pk} failed: {run.error}")
        workers.check_alive()
        if time.time() - t0 > timeout:
            raise Timeout(f"{label}: {run.completed:,}/{run.total:,} units after {timeout:g} s")
        if time.monotonic() - last_print >= progress_every:
            last_print = time.monotonic()
            log(f"    {label}: {run.completed:,}/{run.total:,} units, {time.time() - t0:.0f} s")
        time.sleep(0.1)
    seconds = run.finished_at.timestamp() - t0
    stored = run.scores.count() + run.set_scores.count()
    if not stored == run.completed == run.total:
        raise RuntimeError(f"{label}: run {run.pk} is done with {stored} stored scores for {run.total} units")
    time.sleep(0.3)  # the last chunk's "succeeded" log line follows its progress report
    done = workers.chunks_done()
    return Measurement(run.pk, run.total, seconds, run.compute_seconds, [b - a for a, b in zip(before, done)])


def warm_up(dataset, metrics, workers: Workers, timeout: float) -> None:
    """An unmeasured run of each metric (imports, GloVe in every worker process), then delete it."""
    from metrics.models import MetricRun

    for metric in metrics:
        run_through_workers(dataset, metric, workers, timeout, f"warm-up {metric}")
        MetricRun.objects.filter(dataset=dataset, metric=metric).delete()


# --- the benchmark ----------------------------------------------------------------------------------
def benchmark(args) -> dict:
    """Run every measurement (see the module docstring) and return the report (JSON-serialisable)."""
    from crowd.models import Dataset
    from captioneval.kernels import embeddings

    report = {
        "machine": {"cpus": os.cpu_count(), "loadavg_start": os.getloadavg()},
        "settings": {"sizes": args.sizes, "metrics": args.metrics, "workers": args.workers,
                     "chunk_size": args.chunk_size, "repeat": args.repeat,
                     "once_above_seconds": args.once_above, "budget_seconds": args.budget, "timeout_seconds": args.timeout,
                     "queue": os.environ["CELERY_QUEUE"]},
        "data": [], "tokenisation": [], "in_process": [], "rows": [], "worker_pids": [],
        "notes": data_notes(), "warm_up_captions": 4 * max(args.workers) * args.chunk_size,
    }
    source = load_source()
    t0 = time.perf_counter()
    kv = embeddings.load_vectors()
    report["glove_load_seconds"] = time.perf_counter() - t0
    log(f"GloVe ({len(kv.index_to_key):,} words) loaded in {report['glove_load_seconds']:.1f} s "
        "(once per process; excluded from the in-process VIFIDEL time, done by each worker in its warm-up)")
    warm_size = report["warm_up_captions"]
    log(f"building warm-up dataset ({warm_size:,} captions) ...")
    warm_info = build_dataset(source, warm_size, name="scale-warmup")
    warm = Dataset.objects.get(name=warm_info.name)
    tokenise(warm)
    for metric in args.metrics:  # the in-process reference is timed warm too (imports, caches)
        in_process(load_inputs(warm, metric))
    env = dict(os.environ)
    logdir = args.logs
    logdir.mkdir(parents=True, exist_ok=True)
    previous: dict[tuple, tuple[int, float]] = {}  # (metric, workers) -> (units, seconds) at the last size

    for size in args.sizes:
        log(f"\n== {size:,} candidate captions")
        info = build_dataset(source, size)
        report["data"].append(vars(info))
        log(f"  imported {info.name}: {info.images:,} images ({info.repeated_images:,} repeat real images under new "
            f"keys), {info.candidates:,} candidates + {info.references:,} references in {info.import_seconds:.1f} s")
        dataset = Dataset.objects.get(name=info.name)
        tok = tokenise(dataset)
        report["tokenisation"].append({"size": size, **tok})
        log(f"  PTB tokenisation of {tok['captions']:,} captions: in process {tok['in_process_seconds']:.1f} s "
            f"({tok['in_process_captions_per_second']:,.0f}/s), tokenize_dataset {tok['pipeline_seconds']:.1f} s "
            f"({tok['pipeline_captions_per_second']:,.0f}/s)")
        inputs, reference = {}, {}
        for metric in args.metrics:
            inputs[metric] = load_inputs(dataset, metric)
            times = []
            while len(times) < args.repeat and not (times and times[0] > args.once_above):
                seconds, values = in_process(inputs[metric])
                times.append(seconds)
            seconds = float(np.median(times))
            reference[metric] = (seconds, values)
            row = unit_row(size, metric, 0, inputs[metric], seconds)
            report["in_process"].append(row)
            log(f"  in process {metric}: {row['units']:,} units, {seconds:.2f} s, {row['captions_per_second']:,.0f} captions/s")
        for n_workers in args.workers:
            todo = []
            for metric in args.metrics:
                units = len(inputs[metric].units)
                if (metric, n_workers) in previous:
                    last_units, last_seconds = previous[metric, n_workers]
                    predicted = last_seconds * units / last_units
                    if predicted > args.budget:
                        row = unit_row(size, metric, n_workers, inputs[metric], None)
                        row.update(status="skipped", reason=f"predicted {predicted:.0f} s from {last_units:,} units in "
                                   f"{last_seconds:.1f} s > budget {args.budget:g} s")
                        report["rows"].append(row)
                        log(f"  skip {metric} with {n_workers} worker(s): {row['reason']}")
                        continue
                todo.append(metric)
            while todo:  # a timeout stops the workers; the metrics after it get fresh ones
                todo = measure_with_workers(report, todo, n_workers, size, dataset, warm, inputs, reference,
                                            previous, env, logdir, args)
        add_speedups(report["rows"])
    report["machine"]["loadavg_end"] = os.getloadavg()
    return report


def measure_with_workers(report, todo, n_workers, size, dataset, warm, inputs, reference, previous, env, logdir,
                         args) -> list[str]:
    """Start ``n_workers`` workers, warm them up and measure the metrics of ``todo`` in turn, adding a
    row per metric to ``report``. Returns the metrics left unmeasured after a timeout (whose row says
    so); the workers are stopped and the queue purged on the way out."""
    from metrics.models import MetricRun

    log(f"  starting {n_workers} worker(s) ...")
    todo = list(todo)
    from metrics import pipeline

    env = dict(env, METRICS_WORKERS=str(n_workers))  # start_run sizes the chunks for this many workers
    with Workers(n_workers, env, logdir) as workers:
        report["worker_pids"].extend(workers.pids)
        log(f"  workers ready: pids {' '.join(map(str, workers.pids))}")
        try:
            warm_up(warm, todo, workers, args.timeout)
            while todo:
                metric = todo.pop(0)
                label = f"{size:,} {metric} {n_workers}w"
                load = os.getloadavg()[0]
                done: list[Measurement] = []
                try:
                    while len(done) < args.repeat and not (done and done[0].seconds > args.once_above):
                        done.append(run_through_workers(dataset, metric, workers, args.timeout, label,
                                                        args.progress_every))
                except Timeout as exc:
                    row = unit_row(size, metric, n_workers, inputs[metric], None)
                    row.update(status="timeout", reason=str(exc))
                    report["rows"].append(row)
                    log(f"  {exc}: restarting the workers")
                    return todo
                m = done[-1]
                seconds = float(np.median([d.seconds for d in done]))
                run = MetricRun.objects.get(pk=m.run_id)
                diff = max_difference(stored_values(run, inputs[metric].units), reference[metric][1])
                row = unit_row(size, metric, n_workers, inputs[metric], seconds)
                row.update(status="ok", run_id=m.run_id, seconds_each=[d.seconds for d in done],
                           compute_seconds=float(np.median([d.compute_seconds for d in done])),
                           chunks=sum(m.chunks_per_worker), chunks_per_worker=m.chunks_per_worker,
                           chunk_size=pipeline.chunk_size(m.units, workers=n_workers, eager=False),
                           loadavg_1min=load, max_abs_diff_vs_in_process=diff,
                           ratio_vs_in_process=seconds / reference[metric][0])
                report["rows"].append(row)
                previous[metric, n_workers] = (m.units, seconds)
                each = ", ".join(f"{d.seconds:.2f}" for d in done)
                log(f"  {label}: {seconds:.2f} s (median of {each}), {row['captions_per_second']:,.0f} captions/s, "
                    f"chunks per worker {m.chunks_per_worker}, {row['ratio_vs_in_process']:.1f}x the in-process "
                    f"time, max |stored - in process| {diff:.1e}")
        finally:
            purge_queue()
    return todo


def unit_row(size: int, metric: str, workers: int, inputs: Inputs, seconds: float | None) -> dict:
    """A report row: units (captions or sets), captions and the rates for ``seconds``."""
    row = {"size": size, "metric": metric, "workers": workers, "units": len(inputs.units),
           "captions": inputs.captions, "seconds": seconds}
    if seconds:
        row["captions_per_second"] = inputs.captions / seconds
        if metric == "self_cider":
            row["sets_per_second"] = len(inputs.units) / seconds
    return row


def add_speedups(rows: list[dict]) -> None:
    """Set ``speedup_vs_1_worker`` (seconds with 1 worker / seconds) on the measured rows."""
    one = {(r["size"], r["metric"]): r["seconds"] for r in rows if r["workers"] == 1 and r.get("status") == "ok"}
    for r in rows:
        base = one.get((r["size"], r["metric"]))
        if r.get("status") == "ok" and base:
            r["speedup_vs_1_worker"] = base / r["seconds"]


def table(report: dict) -> str:
    """The report as a fixed-width text table (in-process rows have workers = 0)."""
    head = (f"{'size':>7} {'metric':<10} {'workers':>10} {'units':>7} {'captions':>8} {'seconds':>8} "
            f"{'captions/s':>10} {'sets/s':>8} {'vs 1w':>6} {'x in-proc':>9} {'chunk':>5} {'chunks/worker':>13}")
    lines = [head, "-" * len(head)]
    rows = sorted(report["in_process"] + report["rows"], key=lambda r: (r["size"], METRICS.index(r["metric"]), r["workers"]))

    def num(value, fmt):
        return "-" if value is None else format(value, fmt)

    for r in rows:
        who = "in-process" if r["workers"] == 0 else str(r["workers"])
        seconds = num(r["seconds"], ".2f") if r.get("status", "ok") == "ok" else r["status"]
        lines.append(
            f"{r['size']:>7,} {r['metric']:<10} {who:>10} {r['units']:>7,} {r['captions']:>8,} {seconds:>8} "
            f"{num(r.get('captions_per_second'), ',.0f'):>10} {num(r.get('sets_per_second'), ',.0f'):>8} "
            f"{num(r.get('speedup_vs_1_worker'), '.2f'):>6} {num(r.get('ratio_vs_in_process'), '.1f'):>9} "
            f"{num(r.get('chunk_size'), 'd'):>5} "
            f"{' '.join(map(str, r.get('chunks_per_worker', []))) or '-':>13}"
        )
    for t in report["tokenisation"]:
        lines.append(f"PTB tokenisation, {t['size']:,} candidates ({t['captions']:,} captions with references): "
                     f"in process {t['in_process_seconds']:.1f} s ({t['in_process_captions_per_second']:,.0f}/s), "
                     f"tokenize_dataset {t['pipeline_seconds']:.1f} s ({t['pipeline_captions_per_second']:,.0f}/s)")
    for r in report["rows"]:
        if r.get("status") != "ok":
            lines.append(f"not measured: {r['size']:,} {r['metric']} with {r['workers']} worker(s): {r['status']}, {r['reason']}")
    return "\n".join(lines)


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", metavar="N", help="candidate captions per dataset "
                    f"(default {' '.join(map(str, SIZES))}; --quick: 1000)")
    ap.add_argument("--quick", action="store_true", help="smoke run: size 1000 only (unless --sizes is given)")
    ap.add_argument("--metrics", nargs="+", choices=METRICS, default=list(METRICS))
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2], metavar="W", help="worker counts (default 1 2)")
    ap.add_argument("--chunk-size", type=int, default=5000,
                    help="METRICS_CHUNK_SIZE of the workers, the largest chunk (default 5000, as in the settings)")
    ap.add_argument("--budget", type=float, default=1200.0,
                    help="skip a measurement predicted to take longer than this many seconds (default 1200)")
    ap.add_argument("--timeout", type=float, default=1800.0, help="stop a measurement after this many seconds")
    ap.add_argument("--repeat", type=int, default=None,
                    help="measurements per row, the median is reported (default 3; --quick: 1)")
    ap.add_argument("--once-above", type=float, default=120.0,
                    help="measure only once when the first measurement takes longer than this (default 120 s)")
    ap.add_argument("--progress-every", type=float, default=10.0, help="seconds between progress lines")
    ap.add_argument("--database-url", default=DEFAULT_DB, help=f"PostgreSQL database (default {DEFAULT_DB})")
    ap.add_argument("--broker", default=os.environ.get("CELERY_BROKER_URL") or "redis://127.0.0.1:6379/0",
                    help="Redis broker URL (default $CELERY_BROKER_URL or redis://127.0.0.1:6379/0)")
    ap.add_argument("--json", type=Path, metavar="FILE", help="write the report as JSON")
    ap.add_argument("--logs", type=Path, metavar="DIR", help="keep the workers' logs here (default: deleted)")
    args = ap.parse_args(argv)
    args.sizes = args.sizes or ([1000] if args.quick else list(SIZES))
    if args.repeat is None:
        args.repeat = 1 if args.quick else 3
    if any(n < CAPTIONS_PER_SET for n in args.sizes):
        ap.error(f"--sizes: each size must be at least {CAPTIONS_PER_SET} (one caption set)")
    if not args.database_url.startswith(("postgres://", "postgresql://")):
        ap.error(f"--database-url: the workers share the database, which must be PostgreSQL (got {args.database_url!r})")
    if any(w < 1 for w in args.workers) or args.chunk_size < 1 or args.repeat < 1:
        ap.error("--workers, --chunk-size and --repeat must be positive")
    args.workers = sorted(set(args.workers))
    return args


def main(argv=None) -> int:
    args = parse_args(argv)

    interrupted = []

    def interrupt(signum, frame):
        interrupted.append(signum)
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)
    # Ctrl-C stops the run and its workers even when this process was started with SIGINT ignored or
    # blocked, which a child inherits from its parent (a background job, or a parent that ignored it
    # while it started us: a CI run once saw the script run to the end after SIGINT)
    signal.signal(signal.SIGINT, interrupt)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    queue = f"metric-scale-{uuid.uuid4().hex[:12]}"
    try:
        ensure_database(args.database_url)
        setup_django(args.database_url, args.broker, queue, args.chunk_size)
        try:
            with tempfile.TemporaryDirectory(prefix="metric-scale-logs-") as tmp:
                args.logs = args.logs or Path(tmp)
                report = benchmark(args)
        finally:
            forget_queue(queue)
    except BaseException as exc:
        # an interrupt inside a database call can surface as another error: Django's atomic() then
        # fails to restore autocommit ("connection in transaction status ACTIVE"), chained to the
        # KeyboardInterrupt (a CI run once exited 1 that way); the workers are stopped either way
        if interrupted or isinstance(exc, KeyboardInterrupt):
            print("interrupted: workers stopped", file=sys.stderr)
            return 130
        if isinstance(exc, (ValueError, RuntimeError, psycopg.Error)):
            print(f"error: {exc}", file=sys.stderr)
            return 1
        raise
    print()
    print(table(report))
    for d in report["data"]:
        print(f"{d['name']}: {d['images']:,} images, {d['repeated_images']:,} of them real images repeated under new keys; "
              f"{d['candidates']:,} candidates, {d['references']:,} references; objects of the same image for "
              f"{d['real_object_images']:,} images; imported in {d['import_seconds']:.1f} s")
    print("\n".join(f"note: {n}" for n in report["notes"]))
    print(f"\nmachine: {report['machine']['cpus']} CPUs, load average (1 min) {report['machine']['loadavg_start'][0]:.2f} at "
          f"the start, {report['machine']['loadavg_end'][0]:.2f} at the end; seconds = dispatch to last stored score, "
          f"median of {args.repeat}; 'vs 1w' = seconds with 1 worker / seconds; 'x in-proc' = seconds / in-process "
          "seconds; chunk = units per chunk (pipeline.chunk_size); chunks/worker from the workers' logs")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2), encoding="utf-8")
        print(f"report written to {args.json}")
    bad = [r for r in report["rows"] if r.get("status") == "timeout"
           or (r.get("status") == "ok" and not r["max_abs_diff_vs_in_process"] <= TOLERANCE)]
    for r in bad:
        why = r.get("reason") or f"stored scores differ from the in-process ones by {r['max_abs_diff_vs_in_process']:.3g}"
        print(f"FAIL: {r['size']} {r['metric']} with {r['workers']} worker(s): {why}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
