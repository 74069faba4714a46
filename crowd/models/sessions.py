"""Participant sessions: one visit of one participant to one campaign (the participant journey,
:mod:`crowd.journey`).

A session is a *bundle*: consent (versioned, the version kept here), instructions, an optional
practice phase (items with known answers from ``Campaign.options["practice"]``, a pass threshold),
then ``tasks_target`` tasks served by the assignment engine (:func:`crowd.engine.accept`, so the
per-task guarantees are unchanged; each :class:`~crowd.models.Assignment` points back here), with
attention checks (the kind's gold items) among them, within a time budget. It ends with one
outcome, which the provider maps to what it does next (Prolific: a completion code).

Invariants the database enforces: one open session per (campaign, worker) -- a second concurrent
session is refused; a provider's session id (Prolific's ``SESSION_ID``, the submission id) names
one session per campaign.
"""
import secrets

from django.db import models
from django.utils import timezone


def new_session_key() -> str:
    """A URL-safe secret of 32 characters (192 bits) naming a session in a browser."""
    return secrets.token_urlsafe(24)


class ParticipantSession(models.Model):
    """One participant's visit: stage (where they are), outcome (how it ended), what they agreed to.

    ``verified`` follows the provider rule (docs/security.md): a session opened from URL
    parameters (Prolific's ``PROLIFIC_PID`` / ``STUDY_ID`` / ``SESSION_ID``) is a claim until the
    provider's API confirms that submission for that participant and study; its tasks are then
    claims too (``Assignment.verified=False``) and count only once it is confirmed.
    """

    CONSENT, INSTRUCTIONS, PRACTICE, TASKS, ENDED = "consent", "instructions", "practice", "tasks", "ended"
    STAGES = [(s, s) for s in (CONSENT, INSTRUCTIONS, PRACTICE, TASKS, ENDED)]
    COMPLETED, NO_CONSENT, SCREENED_OUT, FAILED_ATTENTION = "completed", "no_consent", "screened_out", "failed_attention"
    RETURNED, TIMED_OUT, REJECTED, NO_TASK = "returned", "timed_out", "rejected", "no_task"
    OUTCOMES = [(o, o) for o in (COMPLETED, NO_CONSENT, SCREENED_OUT, FAILED_ATTENTION, RETURNED, TIMED_OUT,
                                 REJECTED, NO_TASK)]

    campaign = models.ForeignKey("crowd.Campaign", on_delete=models.CASCADE, related_name="sessions")
    worker = models.ForeignKey("crowd.Worker", on_delete=models.PROTECT, related_name="sessions")
    provider = models.CharField(max_length=20)
    provider_ref = models.CharField(max_length=100, blank=True, help_text="e.g. Prolific's SESSION_ID (submission id)")
    study_ref = models.CharField(max_length=100, blank=True, help_text="e.g. Prolific's STUDY_ID")
    key = models.CharField(max_length=40, unique=True, default=new_session_key,
                           help_text="secret naming the session in the participant's browser")
    stage = models.CharField(max_length=15, choices=STAGES, default=CONSENT)
    outcome = models.CharField(max_length=20, choices=OUTCOMES, blank=True)
    consent_version = models.PositiveIntegerField(null=True, blank=True, help_text="version agreed to (None: not yet)")
    consented_at = models.DateTimeField(null=True, blank=True)
    practice_correct = models.PositiveSmallIntegerField(default=0)
    practice_answered = models.PositiveSmallIntegerField(default=0)
    tasks_target = models.PositiveSmallIntegerField(default=0, help_text="N of 'task n of N' (0: open-ended)")
    tasks_done = models.PositiveSmallIntegerField(default=0, help_text="tasks submitted in this session")
    attention_failures = models.PositiveSmallIntegerField(default=0)
    started_at = models.DateTimeField(default=timezone.now)
    deadline = models.DateTimeField(null=True, blank=True, help_text="end of the time budget (None: none)")
    ended_at = models.DateTimeField(null=True, blank=True)
    completion_code = models.CharField(max_length=40, blank=True, help_text="the code given at the end, if any")
    verified = models.BooleanField(default=True)
    verified_at = models.DateTimeField(null=True, blank=True)
    user_agent = models.CharField(max_length=300, blank=True)

    class Meta:
        ordering = ["campaign", "started_at"]
        constraints = [
            models.UniqueConstraint(fields=["campaign", "worker"], condition=models.Q(ended_at__isnull=True),
                                    name="session_one_open_per_worker"),
            models.UniqueConstraint(fields=["campaign", "provider_ref"], condition=~models.Q(provider_ref=""),
                                    name="session_unique_provider_ref"),
        ]
        indexes = [models.Index(fields=["campaign", "outcome"])]

    def __str__(self):
        return f"session {self.pk} of {self.worker} in {self.campaign} ({self.stage}{'/' + self.outcome if self.outcome else ''})"

    @property
    def is_open(self) -> bool:
        return self.ended_at is None


class PracticeAnswer(models.Model):
    """One answer to a practice item (``Campaign.options["practice"][i]``, named by its ``key``),
    graded against its known answer; never a judgment, never counted."""

    session = models.ForeignKey(ParticipantSession, on_delete=models.CASCADE, related_name="practice_answers")
    key = models.CharField(max_length=100)
    answer = models.JSONField()
    correct = models.BooleanField()
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["session", "key"], name="practice_answer_once")]
