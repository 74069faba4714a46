"""Celery tasks of the human side."""
from celery import shared_task

from . import engine


@shared_task(name="crowd.expire_assignments")
def expire_assignments() -> int:
    """Expire accepted assignments past their deadline (slots go back to the pool; rows stay).
    Scheduled every minute by ``CELERY_BEAT_SCHEDULE`` (run ``celery -A evalsite beat``)."""
    return engine.expire_overdue()


@shared_task(name="crowd.collect_mturk")
def collect_mturk() -> dict:
    """Collect and reconcile the results of every live or paused MTurk campaign (each run is stored
    as an ``MTurkSync`` with its report). Scheduled every ``MTURK_COLLECT_SECONDS`` (300)."""
    from .mturk.collect import collect_all

    return collect_all()


@shared_task(name="crowd.verify_claims")
def verify_claims() -> dict:
    """Confirm pending provider claims (e.g. MTurk assignments opened from URL parameters) with the
    provider's own records -- the due ones, in one batch within the provider's throttle (MTurk:
    ``MTURK_VERIFY_RATE``), releasing at once the ones it refuses -- then release those unconfirmed
    past their deadline plus ``PROVIDER_CLAIM_GRACE_SECONDS`` (:func:`crowd.providers.verify_all`).
    Scheduled every ``CLAIM_VERIFY_SECONDS`` (120). Returns {"confirmed": n, "released": n}."""
    from .providers import verify_all

    return verify_all()


@shared_task(name="crowd.expire_sessions")
def expire_sessions() -> int:
    """End ``timed_out`` the open participant sessions whose time budget (plus one task's time) is
    over (:func:`crowd.journey.expire_sessions`; their accepted tasks go back to the pool).
    Scheduled by ``CELERY_BEAT_SCHEDULE``. Returns how many sessions ended."""
    from .journey import expire_sessions as expire

    return expire()


@shared_task(name="crowd.sync_prolific")
def sync_prolific() -> dict:
    """Poll Prolific for the submissions of every published Prolific study and apply them
    (statuses, released work; :func:`crowd.prolific.sync.sync_all`), the safety net behind the
    webhooks. Scheduled every ``PROLIFIC_SYNC_SECONDS`` (120). Returns {campaign: summary}."""
    from .prolific.sync import sync_all

    return sync_all()
