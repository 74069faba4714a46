"""Celery tasks that compute metric runs.

``start_run(run_id)`` tokenises the dataset's captions (once, shared by all metrics), gives the run
its document-frequency table when its metric needs one (built once, stored with the run:
:meth:`metrics.pipeline.Level.prepare_document_frequency`) and fans the run's unscored units (captions,
caption sets or systems: the run's level object, :func:`metrics.pipeline.level_of`) out as
``score_chunk`` tasks of :func:`metrics.pipeline.chunk_size` units (at most ``METRICS_CHUNK_SIZE``).
A chunk that raises is retried (``max_retries`` times, with back-off); one that still fails marks the run
``failed`` with the error, and re-running ``compute_metrics`` resumes with only the missing
units. Tasks are acknowledged late, so a chunk whose worker dies is delivered again; with Redis
that happens only after the broker's visibility timeout, so ``resume_runs`` (queued by every
worker when it connects to the broker, and by Celery beat) re-dispatches unfinished runs sooner.

A run of a metric that wants an accelerator (:attr:`captioneval.metrics.base.Metric.accelerator`: the
learned metrics) goes, ``start_run`` and its chunks, to the queue ``CELERY_GPU_QUEUE`` names when it
names one (:func:`metrics.learned.queue_for`), else to the default queue like every run. A chunk that
fails for a reason a retry cannot mend (pictures or weights that are missing or unreadable:
:data:`metrics.pipeline.PERMANENT_ERRORS`) fails its run at once, naming each picture.

Dispatch lives here too: :func:`start` queues one run, :func:`start_runs` several (what
``compute_metrics`` calls), :func:`resume_unfinished_runs` every unfinished one. The dependency
points one way: this module imports :mod:`metrics.pipeline`, never the reverse.
"""
import io
import logging
from typing import Sequence

from celery import current_app, shared_task
from django.utils import timezone
from kombu.exceptions import ChannelError
from kombu.exceptions import OperationalError as BrokerUnavailable

from crowd.models import Dataset

from .models import MetricRun, UploadJob
from . import learned, pipeline
from captioneval.metrics import base, registry
from captioneval.kernels import meteor

log = logging.getLogger("metrics.pipeline")

MAX_RETRIES = 3


def _retry_or_fail(task, run_id: int, exc: Exception):
    if isinstance(exc, pipeline.PERMANENT_ERRORS):  # missing pictures or weights: a retry finds them missing again
        pipeline.mark_failed(run_id, pipeline.failure_text(exc))
        raise exc
    if task.request.retries >= task.max_retries:
        pipeline.mark_failed(run_id, f"{type(exc).__name__}: {exc}")
        raise exc
    raise task.retry(exc=exc, countdown=2 ** task.request.retries)


@shared_task(bind=True, max_retries=MAX_RETRIES, acks_late=True)
def start_run(self, run_id: int) -> int:
    """Tokenise, then queue one ``score_chunk`` per chunk of unscored units; returns #chunks."""
    run = MetricRun.objects.select_related("dataset", "dataset__reference_system").get(pk=run_id)
    try:
        level = pipeline.level_of(run)
        pipeline.tokenize_dataset(run.dataset)
        missing = level.missing()
        if missing and not current_app.conf.task_always_eager and level.reads_token_cache \
                and not learned.queue_for(level.metric):
            # the other worker processes read the dataset's tokens while this one builds the table
            for _ in range(pipeline.metric_workers() - 1):
                warm_dataset.delay(run.dataset_id)
        if missing:
            level.prepare_document_frequency()
        size = len(missing) or 1 if level.one_chunk else pipeline.chunk_size(len(missing))
    except Exception as exc:  # noqa: BLE001 - any failure is retried, then recorded on the run
        _retry_or_fail(self, run_id, exc)
    parts = list(pipeline.chunks(missing, size))
    queue = learned.queue_for(level.metric)
    for part in parts:
        if queue:  # a metric that wants an accelerator, on the GPU workers' queue
            score_chunk.apply_async((run_id, part), queue=queue)
        else:
            score_chunk.delay(run_id, part)
    if not parts:
        pipeline.report_progress(run.refresh_progress())
    return len(parts)


@shared_task(name="metrics.warm_dataset", ignore_result=True)
def warm_dataset(dataset_id: int) -> int:
    """Read a dataset's tokens, images and references into this worker process's cache
    (:func:`metrics.pipeline.dataset_tokens`) ahead of its chunks; returns the number of captions.

    ``start_run`` queues one per other worker process (``METRICS_WORKERS - 1``) before it builds the
    run's document-frequency table, so that idle workers load the dataset meanwhile instead of on
    their first chunk. Best effort: a failure is logged, never retried (the chunk loads what it needs)."""
    try:
        return len(pipeline.dataset_tokens(Dataset.objects.get(pk=dataset_id)).tokens)
    except Exception:  # noqa: BLE001 - an optimisation only
        log.exception("warming the token cache of dataset %s failed", dataset_id)
        return 0


@shared_task(bind=True, max_retries=MAX_RETRIES, acks_late=True)
def score_chunk(self, run_id: int, units: list) -> int:
    """Score one chunk of units and store them (:meth:`metrics.pipeline.Level.score` of the run's
    level); returns how many scores were new. The run's progress counter grows with the rows stored
    (no recount; :func:`metrics.pipeline.report_progress`)."""
    run = MetricRun.objects.select_related("dataset", "dataset__reference_system").get(pk=run_id)
    try:
        created = pipeline.level_of(run).score(units)
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


def start(run: MetricRun) -> bool:
    """Queue the run on Celery (in-process when no broker is configured) unless it is done.

    Returns True when the run was queued (or, in-process, computed). Returns False when the broker
    could not be reached within the publish limits of ``CELERY_BROKER_TRANSPORT_OPTIONS`` and
    ``CELERY_TASK_PUBLISH_RETRY_POLICY`` (seconds, never minutes): the run is then left ``pending``
    (recorded, not started) and the workers start it when they (re)connect to the broker
    (:func:`resume_unfinished_runs`). Other errors propagate."""
    if not MetricRun.objects.filter(pk=run.pk).exclude(status=MetricRun.DONE).update(
        status=MetricRun.RUNNING, error="", finished_at=None
    ):
        return True  # done (perhaps since ``run`` was read)
    stamped = MetricRun.objects.filter(pk=run.pk, started_at__isnull=True).update(started_at=timezone.now())
    queue = learned.queue_for(registry.METRICS.get(run.metric))
    try:
        if queue:  # the run of a metric that wants an accelerator: on the GPU workers' queue (CELERY_GPU_QUEUE)
            start_run.apply_async((run.pk,), queue=queue)
        else:
            start_run.delay(run.pk)
    except BrokerUnavailable as exc:
        log.warning("broker unreachable, metric run %s left pending: %s", run.pk, exc)
        undo = {"status": MetricRun.PENDING} | ({"started_at": None} if stamped else {})
        MetricRun.objects.filter(pk=run.pk, status=MetricRun.RUNNING).update(**undo)
        return False
    return True


def start_runs(runs: Sequence[MetricRun]) -> list[MetricRun]:
    """:func:`start` each run; returns the runs left ``pending`` because the broker is unreachable.

    After the first failed publish the other runs are not tried (each try can take seconds) but
    recorded as pending too, so the workers start them all once the broker is back. An in-process
    run whose task fails for good is marked failed with the error.

    In-process (no broker: the runs are computed here, one after the other) a run needing a JVM
    (METEOR 1.5) goes last and this process's METEOR JVM is started in the background first
    (:func:`captioneval.kernels.meteor.prestart`), so that its 4-8 s of start-up overlap the other
    metrics instead of adding to them."""
    pending: list[MetricRun] = []
    if current_app.conf.task_always_eager:
        runs = _jvm_runs_last(runs)
    for run in runs:
        if pending:
            MetricRun.objects.filter(pk=run.pk).exclude(status=MetricRun.DONE).update(
                status=MetricRun.PENDING, error="", finished_at=None)
            pending.append(run)
            continue
        try:
            if not start(run):
                pending.append(run)
        except Exception as exc:  # noqa: BLE001 - in-process run: the task's final error lands here
            pipeline.mark_failed(run.pk, pipeline.failure_text(exc))
    return pending


def _jvm_runs_last(runs: Sequence[MetricRun]) -> list[MetricRun]:
    """``runs`` with those whose metric needs a JVM moved to the end (order otherwise kept); starts
    this process's METEOR JVM in the background when there is such a run still to compute."""
    needs_jvm = [base.JVM in registry.METRICS[r.metric].needs if r.metric in registry.METRICS else False
                 for r in runs]
    if any(j and r.status != MetricRun.DONE for r, j in zip(runs, needs_jvm)):
        meteor.prestart()
    return [r for r, j in zip(runs, needs_jvm) if not j] + [r for r, j in zip(runs, needs_jvm) if j]


def resume_unfinished_runs() -> list[int]:
    """Queue every unfinished run again (``pending`` or ``running``, i.e. neither done nor failed);
    returns the ids of those queued (none when the broker is unreachable: they stay pending).

    Workers call this each time they connect to the broker (:mod:`evalsite.celery`, through the
    ``metrics.resume_runs`` task), and Celery beat every five minutes: a run recorded while the
    broker was down, or whose chunks were lost with a killed worker (a SIGKILLed worker's messages
    stay unacknowledged until the broker's visibility timeout), then completes without anyone
    running ``compute_metrics`` again. A run whose chunks are still queued or in progress is
    harmlessly queued once more: ``start_run`` dispatches only units without a score, and scores are
    unique per (run, unit) and written with conflicts ignored, so a repeated chunk finds its units
    done and never duplicates a score."""
    runs = list(MetricRun.objects.filter(status__in=(MetricRun.PENDING, MetricRun.RUNNING)).order_by("pk"))
    pending = {r.pk for r in start_runs(runs)}
    resumed = [r.pk for r in runs if r.pk not in pending]
    if resumed:
        log.info("resumed unfinished metric runs %s", resumed)
    return resumed


@shared_task(bind=True, name="metrics.resume_runs")
def resume_runs(self, deferrals: int = 0) -> list[int]:
    """Queue every unfinished metric run again (:func:`resume_unfinished_runs`); returns their ids.

    While other messages wait in the queue (say the chunks of a run that was just started) the task
    puts itself back at the end of the queue instead, at most ``MAX_DEFERRALS`` times: by the time it
    acts, every chunk queued before it has been delivered, so it re-dispatches what was lost (and
    what is still being computed), not the whole run a second time."""
    if deferrals < MAX_DEFERRALS and _waiting(self.app):
        resume_runs.apply_async(kwargs={"deferrals": deferrals + 1})
        return []
    return resume_unfinished_runs()


def run_upload(job_id: int) -> str:
    """Store the upload of job ``job_id`` (:func:`metrics.uploads.upload_scores`); returns the job's
    final status. Only a pending job is claimed (a job delivered twice is stored once). An
    :class:`metrics.uploads.UploadError` (or any other error) fails the job with its message and
    stores nothing, as the upload function guarantees."""
    from .uploads import UploadError, upload_scores

    if not UploadJob.objects.filter(pk=job_id, status=UploadJob.PENDING).update(
            status=UploadJob.RUNNING, started_at=timezone.now()):
        return UploadJob.objects.get(pk=job_id).status
    job = UploadJob.objects.select_related("dataset").get(pk=job_id)
    try:
        summary = upload_scores(job.dataset.name, io.BytesIO(bytes(job.content)), job.name, higher=job.higher,
                                filename=job.filename)
    except UploadError as exc:
        fields = {"status": UploadJob.FAILED, "message": str(exc)}
    except Exception as exc:  # noqa: BLE001 - recorded on the job, shown on the page
        log.exception("upload job %s failed", job_id)
        fields = {"status": UploadJob.FAILED, "message": f"{type(exc).__name__}: {exc}"}
    else:
        text = str(summary)
        fields = {"status": UploadJob.DONE, "message": text[:1].upper() + text[1:] + ".",
                  "run": MetricRun.objects.filter(pk=summary.run).first()}
    UploadJob.objects.filter(pk=job_id).update(content=b"", finished_at=timezone.now(), **fields)
    return fields["status"]


@shared_task(name="metrics.upload_scores_job", acks_late=True)
def upload_scores_job(job_id: int) -> str:
    """Store a score upload recorded by the web page (:func:`run_upload`); returns the job's status."""
    return run_upload(job_id)
