"""Celery tasks that compute metric runs.

``start_run(run_id)`` tokenises the dataset's captions (once, shared by all metrics) and fans the
run's unscored units (captions, caption sets or systems, by the metric's level) out as
``score_chunk`` tasks of ``METRICS_CHUNK_SIZE`` units. A chunk
that raises is retried (``max_retries`` times, with back-off); one that still fails marks the run
``failed`` with the error, and re-running ``compute_metrics`` resumes with only the missing
units. Tasks are acknowledged late, so a chunk whose worker dies is delivered again.
"""
from celery import shared_task

from .models import MetricRun
from . import pipeline

MAX_RETRIES = 3


def _retry_or_fail(task, run_id: int, exc: Exception):
    if task.request.retries >= task.max_retries:
        pipeline.mark_failed(run_id, f"{type(exc).__name__}: {exc}")
        raise exc
    raise task.retry(exc=exc, countdown=2 ** task.request.retries)


@shared_task(bind=True, max_retries=MAX_RETRIES, acks_late=True)
def start_run(self, run_id: int) -> int:
    """Tokenise, then queue one ``score_chunk`` per chunk of unscored units; returns #chunks."""
    run = MetricRun.objects.select_related("dataset").get(pk=run_id)
    try:
        pipeline.tokenize_dataset(run.dataset)
        missing = pipeline.missing_units(run)
    except Exception as exc:  # noqa: BLE001 - any failure is retried, then recorded on the run
        _retry_or_fail(self, run_id, exc)
    parts = list(pipeline.chunks(missing))
    for part in parts:
        score_chunk.delay(run_id, part)
    if not parts:
        pipeline.report_progress(run)
    return len(parts)


@shared_task(bind=True, max_retries=MAX_RETRIES, acks_late=True)
def score_chunk(self, run_id: int, units: list) -> int:
    """Score one chunk of units and store them; returns how many scores were new."""
    run = MetricRun.objects.select_related("dataset", "dataset__reference_system").get(pk=run_id)
    try:
        created = pipeline.score_units(run, units)
    except Exception as exc:  # noqa: BLE001
        _retry_or_fail(self, run_id, exc)
    pipeline.report_progress(run)
    return created
