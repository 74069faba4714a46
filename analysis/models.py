"""Cached reports: dataset correlation reports and the reports computed by Celery tasks.

Bootstrap confidence intervals take seconds to compute, so a report is stored under a key that
changes whenever its inputs change (the metric runs, their completion, the judgments, the bootstrap
settings): :class:`CorrelationReport` for a dataset's correlations, :class:`Report` for a campaign's
report and a per-image diversity view (computed by :mod:`analysis.tasks`).
"""
import json

from django.db import models
from django.utils import timezone

from crowd.models import Dataset


class CorrelationReport(models.Model):
    dataset = models.ForeignKey(Dataset, on_delete=models.CASCADE, related_name="correlation_reports")
    key = models.CharField(max_length=64, help_text="SHA-256 of the report's inputs")
    payload = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["dataset", "key"], name="correlationreport_unique")]
        ordering = ["-created_at"]

    def __str__(self):
        return f"correlations for {self.dataset} ({self.created_at:%Y-%m-%d %H:%M})"


class Report(models.Model):
    """A report computed once by a Celery task (:mod:`analysis.tasks`) and read by pages.

    ``key`` is the SHA-256 of the report's kind and of everything it depends on (for a campaign:
    its counted judgments, the metric runs of its dataset and the bootstrap settings, see
    :func:`analysis.cached_reports.campaign_key`; for a dataset's correlation or benchmark report and
    the cross-benchmark comparison: the runs, judgments and query settings), so a change of inputs
    means a new key and the old row is simply never read again (and is deleted when its successor
    is stored).
    ``status`` goes pending -> running -> done (``payload`` holds the report as JSON text, read it
    with :attr:`data`) or failed (``error``). ``used_at`` is when a request last read the row (kept
    to the hour): a benchmark, comparison or leaderboard report of settings other than the pages'
    defaults that nobody read for ``REPORT_UNUSED_DAYS`` is deleted (:func:`analysis.limits.expire_unused`).
    """

    CAMPAIGN, IMAGE = "campaign", "image"
    CORRELATIONS, BENCHMARK, COMPARISON = "correlations", "benchmark", "comparison"
    EXPLORER, SCATTER, LEADERBOARD = "explorer", "scatter", "leaderboard"
    PENDING, RUNNING, DONE, FAILED = "pending", "running", "done", "failed"
    STATES = [(s, s) for s in (PENDING, RUNNING, DONE, FAILED)]

    kind = models.CharField(max_length=30, choices=[
        (CAMPAIGN, "campaign report"), (IMAGE, "per-image diversity"), (CORRELATIONS, "dataset correlation report"),
        (BENCHMARK, "benchmark meta-evaluation"), (COMPARISON, "cross-benchmark comparison"),
        (EXPLORER, "example explorer table"), (SCATTER, "metric-vs-human scatter"),
        (LEADERBOARD, "system leaderboard")])
    key = models.CharField(max_length=64, unique=True, help_text="SHA-256 of the report's kind and inputs")
    campaign = models.ForeignKey("crowd.Campaign", null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    dataset = models.ForeignKey(Dataset, null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    image = models.ForeignKey("crowd.Image", null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    params = models.JSONField(default=dict, blank=True, help_text="arguments of the computation (n_resamples, m...)")
    status = models.CharField(max_length=10, choices=STATES, default=PENDING)
    payload = models.TextField(
        blank=True, help_text="the report as JSON text (text, not jsonb: keeps the documented key order)")
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    used_at = models.DateTimeField(
        default=timezone.now, db_index=True,
        help_text="last time a request read it (to the hour): unused reports of other settings expire (analysis.limits)")

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["kind", "campaign", "status"])]

    def __str__(self):
        return f"{self.kind} report {self.key[:12]} ({self.status})"

    @property
    def data(self) -> dict | None:
        """The stored report (a dict in its original key order), or None until it is done."""
        return json.loads(self.payload) if self.status == self.DONE and self.payload else None

    @property
    def seconds(self) -> float | None:
        """Wall-clock seconds of the computation (None until it finished)."""
        if self.started_at and self.finished_at:
            return (self.finished_at - self.started_at).total_seconds()
        return None
