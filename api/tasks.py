"""Celery tasks of the REST API: importing a large dataset upload (:func:`api.importing.run_job`)."""
from celery import shared_task

from .importing import run_job


@shared_task(name="api.import_dataset_job", acks_late=True)
def import_dataset_job(job_id: int) -> str:
    """Import the upload stored as :class:`api.models.ImportJob` ``job_id``; returns its final status."""
    return run_job(job_id)
