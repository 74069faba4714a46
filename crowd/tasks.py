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
    provider's own records, then release those unconfirmed past their deadline plus
    ``PROVIDER_CLAIM_GRACE_SECONDS`` (:func:`crowd.providers.verify_all`). Scheduled every
    ``CLAIM_VERIFY_SECONDS`` (120). Returns {"confirmed": n, "released": n}."""
    from .providers import verify_all

    return verify_all()
