"""``run_progress(sender=MetricRun, run=run)`` is sent after each chunk of a run is stored.

The command line connects to it to move its progress bar when tasks run in-process.
"""
from django.dispatch import Signal

run_progress = Signal()
