"""Models of the human side.

* :mod:`crowd.models.datasets` -- datasets, images, systems, captions (caption sets) and the human
  judgments the correlation analysis reads.
* :mod:`crowd.models.campaigns` -- rating campaigns, their items, workers and assignments.
* :mod:`crowd.models.mturk` -- Mechanical Turk settings, batches, HITs, bonus ledger, call log, syncs.
* :mod:`crowd.models.sessions` -- participant sessions (consent, practice, a bundle of tasks, the outcome).
* :mod:`crowd.models.prolific` -- Prolific studies, submissions, the bonus ledger, call log, webhook events.
"""
from .campaigns import Assignment, AuditEntry, Campaign, CampaignRater, Item, OwnerInvitation, Worker, WorkerStatus
from .mturk import MTurkBatch, MTurkCall, MTurkConfig, MTurkHIT, MTurkSync, Payment
from .prolific import ProlificBonus, ProlificCall, ProlificEvent, ProlificStudy, ProlificSubmission
from .sessions import ParticipantSession, PracticeAnswer
from .datasets import Caption, Dataset, HumanJudgment, Image, ObjectLabel, PairwiseJudgment, System

__all__ = [
    "Assignment", "AuditEntry", "Campaign", "CampaignRater", "Caption", "Dataset", "HumanJudgment", "Image", "Item", "ObjectLabel",
    "OwnerInvitation", "PairwiseJudgment",
    "System", "Worker", "WorkerStatus", "MTurkBatch", "MTurkCall", "MTurkConfig", "MTurkHIT", "MTurkSync", "Payment",
    "ParticipantSession", "PracticeAnswer", "ProlificBonus", "ProlificCall", "ProlificEvent", "ProlificStudy",
    "ProlificSubmission",
]
