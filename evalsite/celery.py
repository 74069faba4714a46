"""The Celery application.

The broker comes from ``CELERY_BROKER_URL`` (e.g. ``redis://127.0.0.1:6379/0``). With no broker
configured, settings turn on ``task_always_eager`` so every task runs in-process: the embedded
quick-start mode. Start workers with ``celery -A evalsite worker -l info``.
"""
import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "evalsite.settings")

app = Celery("evalsite")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
