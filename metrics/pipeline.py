"""Planning and executing metric runs over a dataset (the Django side of :mod:`metrics.scorers`).

``plan_runs`` validates a request and gets or creates one :class:`MetricRun` per metric;
``start`` queues a run's work on Celery; the tasks in :mod:`metrics.tasks` call
``tokenize_dataset``, ``missing_caption_ids`` and ``score_captions``. Every write is idempotent:
scores are unique per (run, caption) and inserted with conflicts ignored, tokenisations likewise, so
a retried or duplicated chunk never duplicates a score.
"""
from __future__ import annotations

import hashlib
import json
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from crowd.models import Caption, Dataset

from .models import CaptionTokens, DocumentFrequencyTable, MetricRun, MetricScore, params_key
from .scorers import registry
from .scorers.tokenizer import TOKENIZER_NAME, TOKENIZER_VERSION, ptb_tokenize
from .signals import run_progress

TOKENIZER = f"{TOKENIZER_NAME}/{TOKENIZER_VERSION}"


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
    """Metric keys to run, defaulting to all available ones; PipelineError for unknown/unavailable keys."""
    keys = list(dict.fromkeys(keys or registry.DEFAULT_METRICS))
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


def run_params(dataset: Dataset, metric: str, document_frequency: SuppliedDocumentFrequency | None = None) -> dict:
    """Parameters that determine a run's numbers; stored with it and part of its identity.

    CIDEr-D's ``document_frequency`` is ``"dataset"`` (df over the evaluated candidates' reference
    sets, the COCO default) or ``{"table": sha256}`` for a supplied table.
    """
    params = {"tokenizer": TOKENIZER, "references": dataset.reference_system.name}
    if registry.METRICS[metric].needs_corpus:
        params["document_frequency"] = (
            "dataset" if document_frequency is None else {"table": document_frequency.sha256, "name": document_frequency.name}
        )
    return params


def run_identity(params: dict) -> str:
    """The part of the parameters that decides the numbers (a table's file name does not)."""
    ident = dict(params)
    if isinstance(ident.get("document_frequency"), dict):
        ident["document_frequency"] = {"table": ident["document_frequency"]["table"]}
    return params_key(ident)


def plan_runs(
    dataset_name: str, metrics: Sequence[str] | None, force: bool = False, cider_df: str | None = None
) -> list[MetricRun]:
    """Validate and get or create one run per metric; nothing is written if validation fails.

    ``force`` deletes the scores of existing runs so they are computed again. ``cider_df`` is the
    path of a document-frequency JSON file for CIDEr-D (default: the dataset's own references).

    Raises PipelineError for an unknown dataset, an unknown or unavailable metric, a bad
    document-frequency file, or a dataset without reference captions or candidates.
    """
    dataset = get_dataset(dataset_name)
    keys = validate_metrics(metrics)
    supplied = read_document_frequency(cider_df) if cider_df else None
    if dataset.reference_system_id is None or not dataset.references().exists():
        raise PipelineError(f"dataset {dataset.name!r} has no reference captions")
    total = dataset.candidates().count()
    if total == 0:
        raise PipelineError(f"dataset {dataset.name!r} has no candidate captions to score")
    runs = []
    with transaction.atomic():
        if supplied is not None:
            DocumentFrequencyTable.objects.get_or_create(
                sha256=supplied.sha256,
                defaults={"name": supplied.name, "n_documents": supplied.data["n_documents"], "counts": supplied.data["counts"]},
            )
        for key in keys:
            metric = registry.METRICS[key]
            params = run_params(dataset, key, supplied)
            run, _ = MetricRun.objects.get_or_create(
                dataset=dataset, metric=key, version=metric.version, params_key=run_identity(params),
                defaults={"params": params, "total": total},
            )
            if force:
                run.scores.all().delete()
            if run.total != total or force:
                run.total = total
                run.status = MetricRun.PENDING
                run.save(update_fields=["total", "status"])
            runs.append(run)
    return [r.refresh_progress() if r.status != MetricRun.DONE else r for r in runs]


def start(run: MetricRun) -> None:
    """Queue the run on Celery (in-process when no broker is configured) unless it is done."""
    from .tasks import start_run

    if run.status == MetricRun.DONE and run.completed >= run.total:
        return
    MetricRun.objects.filter(pk=run.pk).update(status=MetricRun.RUNNING, error="", finished_at=None)
    MetricRun.objects.filter(pk=run.pk, started_at__isnull=True).update(started_at=timezone.now())
    start_run.delay(run.pk)


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


def missing_caption_ids(run: MetricRun) -> list[int]:
    """Ids of the run's candidate captions that have no score yet, in id order."""
    scored = MetricScore.objects.filter(run=run).values("caption_id")
    return list(run.dataset.candidates().exclude(id__in=scored).order_by("id").values_list("id", flat=True))


def chunks(ids: Sequence[int], size: int | None = None) -> Iterable[list[int]]:
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

    Default: dataset-wide, one document per candidate, as pycocoevalcap counts them when the whole
    dataset is scored at once. With a supplied table: that table, from the database."""
    from .scorers.cider import DocumentFrequency

    source = run.params.get("document_frequency", "dataset")
    key = (run.pk, run.total, json.dumps(source, sort_keys=True))
    if key not in _df_cache:
        _df_cache.clear()
        if isinstance(source, dict):
            table = DocumentFrequencyTable.objects.get(sha256=source["table"])
            _df_cache[key] = DocumentFrequency.from_json({"n_documents": table.n_documents, "counts": table.counts})
        else:
            image_ids = run.dataset.candidates().order_by("id").values_list("image_id", flat=True)
            refs_by_image = _references_by_image(run.dataset)
            _df_cache[key] = DocumentFrequency.from_references([refs_by_image[i] for i in image_ids])
    return _df_cache[key]


def score_captions(run: MetricRun, caption_ids: Sequence[int]) -> int:
    """Score ``caption_ids`` with the run's metric and store the scores; returns how many were new.

    Already-scored captions are skipped, so calling this twice for the same chunk is harmless.
    """
    done = set(MetricScore.objects.filter(run=run, caption_id__in=caption_ids).values_list("caption_id", flat=True))
    todo = [cid for cid in caption_ids if cid not in done]
    if not todo:
        return 0
    t0 = time.perf_counter()
    dataset = run.dataset
    rows = dict(Caption.objects.filter(id__in=todo).values_list("id", "image_id"))
    cand_tokens = _tokens({"caption_id__in": todo})
    if len(cand_tokens) != len(todo):
        tokenize_dataset(dataset)
        cand_tokens = _tokens({"caption_id__in": todo})
    refs_by_image = _references_by_image(dataset, rows.values())
    df = _document_frequency(run) if registry.METRICS[run.metric].needs_corpus else None
    values = registry.score(
        run.metric, [cand_tokens[c] for c in todo], [refs_by_image[rows[c]] for c in todo], document_frequency=df
    )
    created = MetricScore.objects.bulk_create(
        [MetricScore(run=run, caption_id=c, value=float(v)) for c, v in zip(todo, values)],
        ignore_conflicts=True,
        batch_size=5000,
    )
    run.add_compute_time(time.perf_counter() - t0)
    return len(created)


def report_progress(run: MetricRun) -> MetricRun:
    run = run.refresh_progress()
    run_progress.send(sender=MetricRun, run=run)
    return run


def mark_failed(run_id: int, error: str) -> None:
    MetricRun.objects.filter(pk=run_id).exclude(status=MetricRun.DONE).update(
        status=MetricRun.FAILED, error=error[:2000], finished_at=timezone.now()
    )
