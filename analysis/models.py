"""Cached correlation reports.

Bootstrap confidence intervals take seconds to compute, so a report is stored under a key that
changes whenever its inputs change (the metric runs, their completion, the bootstrap settings).
"""
from django.db import models

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
