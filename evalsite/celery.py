"""The Celery application.

The broker comes from ``CELERY_BROKER_URL`` (e.g. ``redis://127.0.0.1:6379/0``). With no broker
configured, settings turn on ``task_always_eager`` so every task runs in-process: the embedded
quick-start mode. Start workers with ``celery -A evalsite worker -l info``.

Every time a worker's consumer connects to the broker (when the worker starts, and again after a
broker outage) it queues ``metrics.resume_runs``, so metric runs recorded while the broker was
down, or left unfinished by a killed worker, complete without anyone re-running a command.
"""
import logging
import os
import sys

from celery import Celery, bootsteps

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "evalsite.settings")

log = logging.getLogger("evalsite.celery")

_path = list(sys.path)
app = Celery("evalsite")
# Celery's Django fix-up puts the current folder first on sys.path, for a project run from its own
# folder. Elsewhere (the platform installed from the captioneval-server wheel, or a checkout's
# manage.py run from another folder) that entry would let a metrics.py or crowd.py of the current
# folder shadow the apps: it is kept only where the current folder holds evalsite/.
if sys.path == [os.getcwd(), *_path] and \
        os.path.realpath(os.getcwd()) != os.path.dirname(os.path.dirname(os.path.realpath(__file__))):
    del sys.path[0]
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


class ResumeRunsOnConnect(bootsteps.StartStopStep):
    """Consumer step: queue ``metrics.resume_runs`` each time the consumer (re)starts, i.e. after
    every (re)connection to the broker. The task waits in the queue behind the chunks already
    there, so by the time it runs only lost or still-missing units are dispatched again. A failed
    publish is logged, never fatal: the periodic beat task is the fallback."""

    requires = {"celery.worker.consumer.tasks:Tasks"}

    def start(self, c):
        try:
            c.app.send_task("metrics.resume_runs")
        except Exception as exc:  # noqa: BLE001 - the worker must come up even if this fails
            log.warning("could not queue metrics.resume_runs: %s", exc)


app.steps["consumer"].add(ResumeRunsOnConnect)
