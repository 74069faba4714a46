"""Models of the human side.

* :mod:`crowd.models.datasets` -- datasets, images, systems, captions (caption sets) and the human
  judgments the correlation analysis reads.
* :mod:`crowd.models.campaigns` -- rating campaigns, their items, workers and assignments.
"""
from .campaigns import Assignment, Campaign, Item, Worker, WorkerStatus
from .datasets import Caption, Dataset, HumanJudgment, Image, PairwiseJudgment, System

__all__ = [
    "Assignment", "Campaign", "Caption", "Dataset", "HumanJudgment", "Image", "Item", "PairwiseJudgment",
    "System", "Worker", "WorkerStatus",
]
