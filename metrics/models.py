"""Stored metric runs and their scores.

A :class:`MetricRun` is one metric (at one implementation version, with one set of parameters)
computed over one dataset. It stores status, progress and timings, and owns one score per unit of
the metric's level (:attr:`captioneval.metrics.registry.Metric.level`): a :class:`MetricScore` per
candidate caption (BLEU, CIDEr-D, VIFIDEL), a :class:`SetScore` per caption set (Self-CIDEr, LSA,
mBLEU diversity, set accuracy) or a :class:`SystemScore` per system (vocabulary, lexical diversity
and the Lexical Gap). A run is ``done`` only when every unit has a score. :class:`CaptionTokens` caches tokenised captions, shared by all metrics.
"""
import hashlib
import json

from django.conf import settings
from django.db import models
from django.db.models import F
from django.utils import timezone

from crowd.models import Caption, Dataset, Image, System


class NaNFloatField(models.FloatField):
    """A float column that keeps NaN ("undefined for this unit") on every database backend.

    PostgreSQL stores NaN in ``double precision`` as it is. SQLite has no NaN: it turns NaN into NULL,
    so a NOT NULL column refuses the row and ``bulk_create(ignore_conflicts=True)`` (``INSERT OR
    IGNORE``) then drops it without a word -- a run with one undefined score never completed on the
    SQLite quick start. This field is nullable, writes NaN as NULL on SQLite only, and reads NULL back
    as NaN everywhere, so callers always see a float.
    """

    def __init__(self, *args, **kwargs):
        kwargs["null"] = True
        super().__init__(*args, **kwargs)

    def deconstruct(self):
        name, path, args, kwargs = super().deconstruct()
        kwargs.pop("null", None)
        return name, path, args, kwargs

    def get_db_prep_value(self, value, connection, prepared=False):
        value = super().get_db_prep_value(value, connection, prepared)
        if connection.vendor == "sqlite" and isinstance(value, float) and value != value:
            return None
        return value

    def from_db_value(self, value, expression, connection):
        return float("nan") if value is None else value


def params_key(params: dict) -> str:
    """Stable SHA-256 of a parameter dict (canonical JSON), used in the run's unique key."""
    return hashlib.sha256(json.dumps(params, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


class MetricRun(models.Model):
    PENDING, RUNNING, DONE, FAILED = "pending", "running", "done", "failed"
    STATUS_CHOICES = [(s, s) for s in (PENDING, RUNNING, DONE, FAILED)]

    dataset = models.ForeignKey(Dataset, on_delete=models.CASCADE, related_name="metric_runs")
    metric = models.CharField(max_length=50)
    version = models.CharField(max_length=100)
    params = models.JSONField(default=dict)
    params_key = models.CharField(max_length=64)
    status = models.CharField(max_length=10, choices=STATUS_CHOICES, default=PENDING)
    total = models.PositiveIntegerField(
        default=0, help_text="number of units to score: captions, caption sets or systems (the metric's level)"
    )
    completed = models.PositiveIntegerField(default=0, help_text="number of units scored so far")
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    compute_seconds = models.FloatField(default=0.0, help_text="time spent scoring, summed over chunks")
    document_frequency = models.ForeignKey(
        "DocumentFrequencyTable", null=True, blank=True, on_delete=models.SET_NULL, related_name="+",
        help_text="the CIDEr-D document-frequency table every chunk of the run uses (metrics needing one): the "
        "supplied table, or the one start_run built from the dataset; None until the run is started",
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["dataset", "metric", "version", "params_key"], name="metricrun_unique"),
        ]
        ordering = ["dataset", "metric", "-created_at"]

    def __str__(self):
        return f"{self.metric} on {self.dataset} ({self.status}, {self.completed}/{self.total})"

    @property
    def progress(self) -> float:
        """Fraction of captions scored, in [0, 1]."""
        return self.completed / self.total if self.total else 0.0

    @property
    def wall_seconds(self) -> float | None:
        """Seconds from start to finish (or to now while running)."""
        if self.started_at is None:
            return None
        return ((self.finished_at or timezone.now()) - self.started_at).total_seconds()

    def refresh_progress(self) -> "MetricRun":
        """Recount the stored scores; mark the run done when all are there. Returns the fresh row.

        The count comes from the score table itself, so a run can never be marked done with
        missing scores, whatever order chunks finish in or however often they are retried. Chunks
        keep ``completed`` as a counter (:func:`metrics.pipeline.store_progress`) and call this once,
        when the counter reaches ``total``, to verify it.
        """
        n = self.scores.count() + self.set_scores.count() + self.system_scores.count()
        MetricRun.objects.filter(pk=self.pk).update(completed=n)
        if n >= self.total:
            MetricRun.objects.filter(pk=self.pk).exclude(status=self.DONE).update(
                status=self.DONE, finished_at=timezone.now(), error=""
            )
        self.refresh_from_db()
        return self

    def add_compute_time(self, seconds: float) -> None:
        MetricRun.objects.filter(pk=self.pk).update(compute_seconds=F("compute_seconds") + seconds)


class MetricScore(models.Model):
    run = models.ForeignKey(MetricRun, on_delete=models.CASCADE, related_name="scores")
    caption = models.ForeignKey(Caption, on_delete=models.CASCADE, related_name="metric_scores")
    value = NaNFloatField(help_text="NaN when undefined for this caption (VIFIDEL: no known word or no objects)")
    raw = models.FloatField(
        null=True, blank=True,
        help_text="the untransformed quantity where the value is derived from one (VIFIDEL: the word "
        "mover's distance; value = the similarity correlations use)",
    )

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "caption"], name="metricscore_unique")]

    def __str__(self):
        return f"{self.run.metric}={self.value:.4f}"


class SetScore(models.Model):
    """A set-level metric value: one per caption set (image, system), e.g. Self-CIDEr diversity.

    ``n_captions`` is the number of captions the value was computed from (the run's ``m``, or the
    set's size when smaller or when all captions are used).
    """

    run = models.ForeignKey(MetricRun, on_delete=models.CASCADE, related_name="set_scores")
    image = models.ForeignKey(Image, on_delete=models.CASCADE, related_name="+")
    system = models.ForeignKey(System, on_delete=models.CASCADE, related_name="+")
    value = NaNFloatField(help_text="NaN when undefined for this set (see the run's notes)")
    n_captions = models.PositiveIntegerField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "image", "system"], name="setscore_unique")]

    def __str__(self):
        return f"{self.run.metric}[{self.image_id}, {self.system_id}]={self.value:.4f}"


class SystemScore(models.Model):
    """A system-level value, e.g. the MTLD of a system's caption corpus, with details.

    ``details`` holds what goes with it: for lexical diversity the reference corpus's value, the
    lexical diversity ratio ``ldr`` and the Lexical Gap ``lexical_gap`` (Kershaw & Bober 2019); for
    the vocabulary the word-frequency curve.
    """

    run = models.ForeignKey(MetricRun, on_delete=models.CASCADE, related_name="system_scores")
    system = models.ForeignKey(System, on_delete=models.CASCADE, related_name="+")
    value = NaNFloatField(help_text="NaN when undefined for this system (a corpus too short for HD-D)")
    details = models.JSONField(default=dict)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "system"], name="systemscore_unique")]

    def __str__(self):
        return f"{self.run.metric}[{self.system_id}]={self.value:.4f}"


class DocumentFrequencyTable(models.Model):
    """A CIDEr-D document-frequency table: supplied (e.g. from COCO train2014 references), or built once
    per run from the dataset by ``metrics.tasks.start_run`` (``name`` ``dataset:<name>``) so that every
    worker uses the same table instead of building its own (:attr:`MetricRun.document_frequency`).

    ``packed`` is the table in the binary form of ``captioneval.kernels.cider.DocumentFrequency.to_packed``
    (sorted vocabulary and per-order sorted key/count arrays), which workers load without parsing JSON
    or building a look-up index. A supplied table also has ``counts`` (space-joined n-gram -> number of
    documents containing it) and is identified by the SHA-256 of its canonical JSON (sorted keys, no
    spaces), which is what a run's parameters name; its ``packed`` form is added by
    ``metrics.pipeline.Level.prepare_document_frequency`` when a run first uses it. A table built from a
    dataset is stored packed only (``counts`` NULL) and identified by the SHA-256 of its packed bytes.
    """

    sha256 = models.CharField(max_length=64, unique=True)
    name = models.CharField(max_length=255, help_text="file it was loaded from")
    n_documents = models.PositiveIntegerField()
    counts = models.JSONField(null=True, blank=True)
    packed = models.BinaryField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self):
        size = f"{len(self.counts):,} n-grams" if self.counts is not None else "packed"
        return f"{self.name} ({self.n_documents:,} documents, {size})"


class CaptionTokens(models.Model):
    """A caption after tokenisation (space-separated tokens), per tokenizer version."""

    caption = models.ForeignKey(Caption, on_delete=models.CASCADE, related_name="tokenizations")
    tokenizer = models.CharField(max_length=100)
    tokens = models.TextField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["caption", "tokenizer"], name="captiontokens_unique")]


class UploadJob(models.Model):
    """A score upload (:func:`metrics.uploads.upload_scores`) stored by a background job instead of
    inside the request (issue 15: a large upload took 34 s in the request).

    The web page keeps the file's bytes in ``content`` (so a Celery worker on another host can read
    them; emptied when the job ends), queues the job (:mod:`metrics.jobs`) and answers at once; the
    upload page then shows ``status`` and the seconds elapsed, polled from ``jobs.json``. ``message``
    is the stored summary (done) or the reason nothing was stored (failed); ``run`` the stored run.
    """

    PENDING, RUNNING, DONE, FAILED = "pending", "running", "done", "failed"
    STATUS_CHOICES = [(s, s) for s in (PENDING, RUNNING, DONE, FAILED)]

    dataset = models.ForeignKey(Dataset, on_delete=models.CASCADE, related_name="+")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    name = models.CharField(max_length=100, help_text="the metric's display name as typed")
    higher = models.CharField(max_length=10, help_text='"better" or "worse"')
    filename = models.CharField(max_length=255)
    size = models.PositiveBigIntegerField(help_text="bytes of the uploaded file")
    content = models.BinaryField(default=b"", help_text="the file's bytes until the job ends")
    status = models.CharField(max_length=10, choices=STATUS_CHOICES, default=PENDING)
    message = models.TextField(blank=True)
    run = models.ForeignKey(MetricRun, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self):
        return f"upload {self.name!r} on {self.dataset_id} ({self.status})"

    @property
    def elapsed(self) -> float:
        """Seconds since the job was queued, up to its end (or now while it is not finished)."""
        return ((self.finished_at or timezone.now()) - self.created_at).total_seconds()


class ImageFeature(models.Model):
    """The image features of one picture under one learned model, computed once and kept, so that a
    new system's captions (or another run with the same model) cost only text encoding
    (:class:`metrics.learned.DatabaseFeatureCache`, the platform's
    :class:`captioneval.kernels.learned.clip_score.FeatureCache`).

    ``key`` is :func:`captioneval.kernels.learned.clip_score.feature_key`: the sha256 of the model
    signature (model, weights sha256, device, dtype, preprocessing;
    :meth:`captioneval.metrics.learned._clip.ClipFamily.model_signature`) and the sha256 of the
    picture file's bytes; ``vector`` the features' raw bytes (``dim`` values of ``dtype``, the
    machine's byte order; not normalised). Not tied to a dataset: the same picture in two datasets is
    encoded once."""

    key = models.CharField(max_length=64, unique=True)
    dtype = models.CharField(max_length=10, help_text='"float32" or "float16"')
    dim = models.PositiveIntegerField()
    vector = models.BinaryField()
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self):
        return f"image features {self.key[:12]} ({self.dim} x {self.dtype})"


# LLM judges (issue 34): every caption's raw replies, parse outcome and score; a run's requests and budget.
class JudgeReply(models.Model):
    """One caption of an LLM-judge run (CLAIR, FLEUR, RefFLEUR, a user-defined judge): how its answer
    was parsed and every raw reply the model gave, so a reader can audit its score
    (:mod:`metrics.judges`). Written in the transaction that writes its :class:`MetricScore`.

    ``outcome``: ``ok`` (parsed from the first answer), ``retried`` (parsed after asking the model
    again: CLAIR's further tries; HTTP retries are counted on the run, :class:`JudgeUsage`), ``failed`` (no score: ``status`` says why, e.g. ``failed``,
    ``out_of_range``, ``no_number``, ``no_digit_token``). ``status``: the parser's own status (CLAIR
    ``json``/``number``...; FLEUR ``ok``...). ``score``: the stored score (NaN when failed, or the
    reference's fallback with ``failure="reference"``). ``details``: the metric's per-caption record
    (``replies``: each reply's cache key, HTTP status, text cut at 4,000 characters and its length).
    The replies are untrusted text: pages escape them."""

    OK, RETRIED, FAILED = "ok", "retried", "failed"
    run = models.ForeignKey(MetricRun, on_delete=models.CASCADE, related_name="judge_replies")
    caption = models.ForeignKey(Caption, on_delete=models.CASCADE, related_name="+")
    outcome = models.CharField(max_length=10)
    status = models.CharField(max_length=30)
    score = NaNFloatField()
    details = models.JSONField(default=dict)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "caption"], name="judgereply_unique")]


class JudgeUsage(models.Model):
    """What an LLM-judge run spent and may spend: HTTP requests sent (retries included), requests read
    from the reply cache, tokens the server reported (``usage.total_tokens``), and the budget
    (``max_requests``, ``max_tokens``; None: unlimited) set by ``compute_metrics --judge-max-requests /
    --judge-max-tokens``. The budget is not part of the run's identity: it changes how far a run gets,
    never its numbers."""

    run = models.OneToOneField(MetricRun, on_delete=models.CASCADE, related_name="judge_usage")
    requests = models.PositiveBigIntegerField(default=0)
    cached = models.PositiveBigIntegerField(default=0)
    tokens = models.PositiveBigIntegerField(default=0)
    max_requests = models.PositiveBigIntegerField(null=True, blank=True)
    max_tokens = models.PositiveBigIntegerField(null=True, blank=True)
