"""What the REST API stores of its own: the responses of writes sent with an ``Idempotency-Key``
header (:func:`api.base.idempotent`) and the dataset uploads imported in the background
(:class:`ImportJob`). API tokens are django-rest-knox's ``AuthToken`` (api/account.py)."""
from django.conf import settings
from django.db import models


class IdempotencyRecord(models.Model):
    """One write sent with ``Idempotency-Key: <key>`` by ``user``.

    ``request_hash`` is the SHA-256 (hex) of the method, path, query and body
    (:func:`api.base.request_digest`); ``status`` is None while the first request is being
    processed, then the HTTP status of its response, whose JSON body and replayed headers
    (``Location``) are kept in ``body`` and ``headers``. Records older than
    ``settings.API_IDEMPOTENCY_SECONDS`` are forgotten (a user's expired records are deleted when
    they next send a key)."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=255)
    method = models.CharField(max_length=10)
    path = models.CharField(max_length=2000)
    request_hash = models.CharField(max_length=64)
    status = models.PositiveSmallIntegerField(null=True, blank=True)
    body = models.JSONField(null=True, blank=True)
    headers = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "key"], name="idempotency_user_key")]

    def __str__(self):
        return f"{self.method} {self.path} [{self.key}] -> {self.status}"


class ImportJob(models.Model):
    """A dataset upload of the API imported by a background job instead of inside the request
    (:mod:`api.imports`): uploads whose files together exceed ``settings.API_INLINE_IMPORT_BYTES``.

    As the score uploads' :class:`metrics.models.UploadJob`: the request stores the files' bytes
    (:class:`ImportFile` chunks, so that a Celery worker on another host reads them; emptied when
    the job ends) with the form's other fields (``fields``), queues the job and answers 202; ``status`` goes
    pending -> running -> done or failed; ``result`` is the answer an inline import gives
    (``{"dataset", "created", "summary", ...}``) and ``result_status`` its HTTP status (201 or 200);
    ``message`` the importer's one-line reason when nothing was imported."""

    PENDING, RUNNING, DONE, FAILED = "pending", "running", "done", "failed"
    STATUS_CHOICES = [(s, s) for s in (PENDING, RUNNING, DONE, FAILED)]

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    name = models.CharField(max_length=100, help_text="the dataset's name")
    format = models.CharField(max_length=50)
    fields = models.JSONField(default=dict, help_text="the form's fields other than files")
    size = models.PositiveBigIntegerField(default=0, help_text="bytes of the uploaded files together")
    status = models.CharField(max_length=10, choices=STATUS_CHOICES, default=PENDING)
    message = models.TextField(blank=True)
    result = models.JSONField(null=True, blank=True)
    result_status = models.PositiveSmallIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-pk"]

    def __str__(self):
        return f"import {self.format} {self.name} ({self.status})"


class ImportFile(models.Model):
    """One chunk (at most :data:`api.importing.JOB_CHUNK_BYTES`) of an uploaded file of an
    :class:`ImportJob`: the form field, the name the file was uploaded under, the chunk's size and
    its bytes until the job ends. A file is its field's chunks in ``pk`` order; it is written and
    read back a chunk at a time, so that no process holds a whole upload in memory."""

    job = models.ForeignKey(ImportJob, on_delete=models.CASCADE, related_name="files")
    field = models.CharField(max_length=50)
    filename = models.CharField(max_length=255)
    size = models.PositiveBigIntegerField()
    content = models.BinaryField(default=b"")
