"""Celery tasks that compute metric runs.

``start_run(run_id)`` tokenises the dataset's captions (once, shared by all metrics) and fans the
run's unscored units (captions, caption sets or systems, by the metric's level) out as
``score_chunk`` tasks of ``METRICS_CHUNK_SIZE`` units. A chunk
that raises is retried (``max_retries`` times, with back-off); one that still fails marks the run
``failed`` with the error, and re-running ``compute_metrics`` resumes with only the missing
units. Tasks are acknowledged late, so a chunk whose worker dies is delivered again; with Redis
that happens only after the broker's visibility timeout, so ``resume_runs`` (queued by every
worker when it connects to the broker, and by Celery beat) re-dispatches unfinished runs sooner.
"""
from celery import shared_task
from kombu.exceptions import ChannelError

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


#: how often ``resume_runs`` may put itself back at the end of the queue before acting anyway
MAX_DEFERRALS = 100


def _waiting(app) -> int:
    """Messages waiting in the default queue (not counting those already delivered to workers)."""
    with app.connection_for_write() as conn:
        try:
            return conn.default_channel.queue_declare(queue=app.conf.task_default_queue, passive=True).message_count
        except ChannelError:  # no such queue: with Redis, an empty queue does not exist
            return 0


@shared_task(bind=True, name="metrics.resume_runs")
def resume_runs(self, deferrals: int = 0) -> list[int]:
    """Queue every unfinished metric run again (:func:`metrics.pipeline.resume_runs`); returns their ids.

    While other messages wait in the queue (say the chunks of a run that was just started) the task
    puts itself back at the end of the queue instead, at most ``MAX_DEFERRALS`` times: by the time it
    acts, every chunk queued before it has been delivered, so it re-dispatches what was lost (and
    what is still being computed), not the whole run a second time."""
    if deferrals < MAX_DEFERRALS and _waiting(self.app):
        resume_runs.apply_async(kwargs={"deferrals": deferrals + 1})
        return []
    return pipeline.resume_runs()
