"""Models of the human side.

* :mod:`crowd.models.datasets` -- datasets, images, systems, captions (caption sets) and the human
  judgments the correlation analysis reads.
* :mod:`crowd.models.campaigns` -- rating campaigns, their items, workers and assignments.
* :mod:`crowd.models.mturk` -- Mechanical Turk settings, batches, HITs, bonus ledger, call log, syncs.
"""
from .campaigns import Assignment, AuditEntry, Campaign, CampaignRater, Item, Worker, WorkerStatus
from .mturk import MTurkBatch, MTurkCall, MTurkConfig, MTurkHIT, MTurkSync, Payment
from .datasets import Caption, Dataset, HumanJudgment, Image, ObjectLabel, PairwiseJudgment, System

__all__ = [
    "Assignment", "AuditEntry", "Campaign", "CampaignRater", "Caption", "Dataset", "HumanJudgment", "Image", "Item", "ObjectLabel",
    "PairwiseJudgment",
    "System", "Worker", "WorkerStatus", "MTurkBatch", "MTurkCall", "MTurkConfig", "MTurkHIT", "MTurkSync", "Payment",
]
