"""REST API: background imports of large dataset uploads (``/api/imports/``).

``POST /api/datasets/`` answers 202 with an import job when the upload's files together exceed
``settings.API_INLINE_IMPORT_BYTES`` (default 1 MiB): the files are stored with the job
(:func:`api.importing.create_job`) and imported by a Celery worker (without a broker, by a
background thread of the web process, as :func:`metrics.jobs.queue_upload` does for score uploads).

``GET /api/imports/`` (the user's own jobs; staff: all), ``GET /api/imports/{id}/``
    ``{"id", "url", "dataset", "format", "status", "message", "size", "created_at", "started_at",
    "finished_at", "result", "result_status"}``: ``status`` pending, running, done or failed;
    ``result`` is, once done, the body an inline upload answers (``{"dataset", "created", "summary",
    ...}``) and ``result_status`` its status (201 imported, 200 nothing changed); ``message`` the
    first line of the summary, or the importer's one-line reason when the job failed (nothing written).
    A job is its uploader's and staff's; anyone else gets 404, anonymous clients 401.
"""
from __future__ import annotations

import logging

from django.urls import reverse
from django.utils import timezone
from rest_framework import exceptions, mixins, permissions, serializers, viewsets

from metrics import jobs

from . import base, importing, tasks
from .models import ImportJob

log = logging.getLogger("api.imports")


class ImportJobSerializer(serializers.ModelSerializer):
    """An import job and, once done, what it imported."""

    dataset = serializers.CharField(source="name")
    url = serializers.SerializerMethodField()
    result = serializers.JSONField(allow_null=True, help_text="once done: the inline upload's answer")

    class Meta:
        model = ImportJob
        fields = ["id", "url", "dataset", "format", "status", "message", "size", "created_at", "started_at",
                  "finished_at", "result", "result_status"]

    def get_url(self, job) -> str:
        return reverse("api:import-detail", args=[job.pk])


def queue_job(job: ImportJob) -> ImportJob:
    """Start ``job``: a Celery task, or without a broker a background thread of this process
    (:func:`metrics.jobs.in_background`). A broker that cannot be reached fails the job with that
    reason (nothing imported). Returns the job as stored now."""
    if jobs.in_process():
        jobs.in_background(importing.run_job, job.pk)
    else:
        from kombu.exceptions import OperationalError as BrokerUnavailable

        try:
            tasks.import_dataset_job.delay(job.pk)
        except BrokerUnavailable as exc:
            log.warning("broker unreachable, import job %s not queued: %s", job.pk, exc)
            ImportJob.objects.filter(pk=job.pk).update(
                status=ImportJob.FAILED, finished_at=timezone.now(),
                message="the task queue (CELERY_BROKER_URL) is unreachable; nothing was imported, upload again later")
    job.refresh_from_db()
    return job


class ImportJobViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Import jobs: each user sees their own, staff all (module docstring)."""

    serializer_class = ImportJobSerializer
    permission_classes = [permissions.IsAuthenticated]
    queryset = ImportJob.objects.none()

    def get_queryset(self):
        user = self.request.user if self.request is not None else None
        if not (user and user.is_authenticated):
            return ImportJob.objects.none()
        qs = ImportJob.objects.all()
        return qs if base.is_staff(user) else qs.filter(user=user)

    def permission_denied(self, request, message=None, code=None):
        if not (request.user and request.user.is_authenticated):
            raise exceptions.NotAuthenticated()
        super().permission_denied(request, message, code)


def register(router) -> None:
    """Add ``imports`` to the API router."""
    router.register("imports", ImportJobViewSet, basename="import")
