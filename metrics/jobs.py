"""Metric runs and score uploads started from the web, as background jobs (issue 15).

Who: :func:`can_compute` -- an active staff user or superuser (datasets have no owner of their
own, and anyone logged in may own a campaign on any dataset, so campaign ownership is no licence to
change a dataset's public scores).

What: :func:`metric_choices` lists the metrics whose inputs exist for a dataset (references,
object labels, word vectors, candidate captions, caption sets, systems: what each metric declares in
:attr:`captioneval.metrics.base.Metric.needs`), and one reason for each metric it does not offer.

How: :func:`start_from_web` plans the runs (:func:`metrics.pipeline.plan_runs`) and starts them
(:func:`metrics.tasks.start_runs`); :func:`queue_upload` stores an upload's bytes in an
:class:`metrics.models.UploadJob` and queues ``metrics.upload_scores_job``. Both return at once:

* with a broker (``CELERY_BROKER_URL``) the Celery workers do the work;
* without one (the quick start, ``CELERY_TASK_ALWAYS_EAGER``) a Celery task would run inside the
  request, so the work runs in a daemon thread of the web process instead (:func:`in_background`).
  Progress is in the database either way, so the pages show it the same way. A quick-start server
  stopped mid-run leaves its runs unfinished; starting them again from the page computes only the
  missing units (scores are unique per unit).
"""
from __future__ import annotations

import logging
import threading
from typing import Callable

from celery import current_app
from django.db import close_old_connections, connection
from django.utils import timezone

from crowd.models import Dataset, ObjectLabel, System

from . import judges, learned, pipeline
from .models import MetricRun, UploadJob
from captioneval.metrics import base, registry

log = logging.getLogger("metrics.jobs")

#: uploads up to this size (bytes) are stored inside the request; larger ones by a background job
INLINE_UPLOAD_BYTES = 256 * 1024


def can_compute(user, dataset: Dataset) -> bool:
    """True when ``user`` may start metric runs and uploads on ``dataset``: an active staff user or
    superuser. Datasets have no owner of their own, and a campaign's owners are not the dataset's:
    any logged-in user may create a campaign on any dataset, while scores change every report of the
    dataset, which all visitors see (``tests/test_security.py`` holds campaign owners out)."""
    return bool(user and user.is_authenticated and user.is_active and (user.is_staff or user.is_superuser))


def in_process() -> bool:
    """True when Celery tasks run in-process (no broker configured: ``task_always_eager``)."""
    return bool(current_app.conf.task_always_eager)


_active_lock = threading.Lock()
#: ids of the metric runs a background thread of this process is computing
_active_runs: set[int] = set()


def in_background(target: Callable, *args) -> threading.Thread:
    """Run ``target(*args)`` in a daemon thread with its own database connection (closed at the
    end); exceptions are logged, never raised. Returns the started thread."""

    def body():
        close_old_connections()
        try:
            target(*args)
        except Exception:  # noqa: BLE001 - a background job must not die silently
            log.exception("background job %s failed", getattr(target, "__name__", target))
        finally:
            connection.close()

    thread = threading.Thread(target=body, name=f"captioneval-{getattr(target, '__name__', 'job')}", daemon=True)
    thread.start()
    return thread


def metric_choices(dataset: Dataset) -> tuple[list[dict], list[dict]]:
    """(offered, refused) metrics for ``dataset``, in registry order.

    offered: ``{"key", "name", "level", "description", "status"}`` for each metric whose inputs exist;
    ``status`` is the state of its newest run (``"done"``, ``"running"``...) or None.
    refused: ``{"key", "name", "reason"}`` (one line) for each metric this installation cannot run
    (:data:`captioneval.metrics.registry.UNAVAILABLE`; METEOR without Java on this server:
    :func:`captioneval.metrics.registry.unavailable_now`) or whose inputs the dataset lacks.
    """
    has_refs = dataset.reference_system_id is not None and dataset.references().exists()
    has = {"candidates": dataset.candidates().exists(), "systems": System.objects.filter(dataset=dataset).exists()}
    has_labels = ObjectLabel.objects.filter(image__dataset=dataset).exists()
    vectors_problem = None
    newest = {}
    for run in MetricRun.objects.filter(dataset=dataset).order_by("created_at").only("metric", "status"):
        newest[run.metric] = run.status
    offered, refused = [], []
    not_now = registry.unavailable_now(list(registry.METRICS))  # METEOR without Java on this server
    for key, metric in registry.METRICS.items():
        reason = None
        if key in not_now:
            reason = not_now[key].split(": ", 1)[-1]  # "Java is not installed; install a JRE (...)"
        elif metric.needs_references() and not has_refs:
            reason = f"needs reference captions and {dataset.name} has none"
        elif not has[pipeline.LEVELS[metric.level].requires]:  # no units at the metric's level
            reason = pipeline.LEVELS[metric.level].lacking.format(dataset=dataset.name)
        elif base.OBJECTS in metric.needs and not has_labels:
            reason = f"needs object labels of the images and {dataset.name} has none"
        elif judges.is_judge(metric) and base.IMAGES in metric.needs:  # FLEUR, RefFLEUR: shown the pictures
            reason = learned.images_problem(dataset)
        elif learned.is_learned(metric):
            reason = (learned.wants_pictures(metric) and learned.images_problem(dataset)) or learned.weights_problem(key)
            if reason and reason.startswith(metric.name + " "):
                reason = reason[len(metric.name) + 1:]
        elif base.WORD_VECTORS in metric.needs:
            if vectors_problem is None:
                try:
                    pipeline.vectors_identity(None)
                    vectors_problem = ""
                except pipeline.PipelineError as exc:
                    vectors_problem = str(exc)
            reason = vectors_problem or None
        if reason:
            refused.append({"key": key, "name": metric.name, "reason": reason})
        else:
            offered.append({"key": key, "name": metric.name, "level": metric.level,
                            "description": metric.description, "status": newest.get(key)})
    for key, why in registry.UNAVAILABLE.items():
        refused.append({"key": key, "name": display_name(key), "reason": why})
    return offered, refused


def display_name(key: str) -> str:
    """The field's name of a metric this installation cannot run: the learned metrics' and LLM judges'
    own (CLIP-S, RefCLIP-S, PAC-S, RefPAC-S, BERTScore, CLAIR, FLEUR, RefFLEUR), else the key upper-cased
    (SPICE, a broken plugin's name)."""
    from captioneval.metrics.builtin.learned import LEARNED

    from captioneval.metrics.builtin.judges import JUDGES

    if key in JUDGES:
        return JUDGES[key][0]
    return LEARNED[key][0] if key in LEARNED else key.upper()


class JobError(ValueError):
    """A web request for a job that cannot be honoured (nothing chosen, a metric not offered)."""


def _compute(run_ids: list[int]) -> None:
    """Body of the in-process background thread: start (and so compute) the runs in turn."""
    try:
        tasks_module().start_runs(list(MetricRun.objects.filter(pk__in=run_ids).order_by("pk")))
    finally:
        with _active_lock:
            _active_runs.difference_update(run_ids)


def tasks_module():
    """:mod:`metrics.tasks` (imported when first needed, so importing this module stays light;
    :mod:`metrics.tasks` never imports this module)."""
    from . import tasks

    return tasks


def start_from_web(dataset: Dataset, keys: list[str]) -> tuple[list[MetricRun], list[MetricRun], list[MetricRun]]:
    """Plan and start runs of ``keys`` (metric keys among :func:`metric_choices`' offered ones) on
    ``dataset``; returns at once with (started, up_to_date, pending).

    ``started``: runs queued on Celery or, in-process, handed to a background thread; ``up_to_date``:
    runs already done (nothing to do); ``pending``: runs recorded but not queued because the broker
    is unreachable (workers start them when they reconnect). Raises JobError for an empty or unknown
    choice and :class:`metrics.pipeline.PipelineError` for what :func:`metrics.pipeline.plan_runs` refuses."""
    offered = {m["key"] for m in metric_choices(dataset)[0]}
    keys = list(dict.fromkeys(keys))
    if not keys:
        raise JobError("choose at least one metric")
    unknown = [k for k in keys if k not in offered]
    if unknown:
        raise JobError(f"not offered for {dataset.name}: {', '.join(unknown)}")
    runs = pipeline.plan_runs(dataset.name, keys)
    done = [r for r in runs if r.status == MetricRun.DONE]
    todo = [r for r in runs if r.status != MetricRun.DONE]
    if not todo:
        return [], done, []
    if in_process():
        with _active_lock:
            fresh = [r.pk for r in todo if r.pk not in _active_runs]
            _active_runs.update(fresh)
        if fresh:
            in_background(_compute, fresh)
        return todo, done, []
    pending = tasks_module().start_runs(todo)
    started = [r for r in todo if r not in pending]
    return started, done, pending


# --- uploads --------------------------------------------------------------------------------------

def queue_upload(dataset: Dataset, user, name: str, higher: str, filename: str, content: bytes) -> UploadJob:
    """Record an upload job with the file's bytes and start it (Celery task, or a background thread
    in-process); returns the job at once. A broker that cannot be reached marks the job failed with
    that reason (nothing stored)."""
    job = UploadJob.objects.create(dataset=dataset, user=user if user and user.is_authenticated else None,
                                   name=name, higher=higher, filename=filename, size=len(content), content=content)
    if in_process():
        in_background(tasks_module().run_upload, job.pk)
        return job
    from kombu.exceptions import OperationalError as BrokerUnavailable

    try:
        tasks_module().upload_scores_job.delay(job.pk)
    except BrokerUnavailable as exc:
        log.warning("broker unreachable, upload job %s not queued: %s", job.pk, exc)
        UploadJob.objects.filter(pk=job.pk).update(
            status=UploadJob.FAILED, content=b"", finished_at=timezone.now(),
            message="the task queue (CELERY_BROKER_URL) is unreachable; nothing was stored, upload again later")
    job.refresh_from_db()
    return job


def upload_job_dict(job: UploadJob) -> dict:
    """What ``jobs.json`` and the upload page show of a job: ``{"id", "name", "file", "bytes",
    "status", "message", "seconds"}`` (seconds since queued, to the end or now)."""
    return {"id": job.pk, "name": job.name, "file": job.filename, "bytes": job.size, "status": job.status,
            "message": job.message, "seconds": round(job.elapsed, 1)}
