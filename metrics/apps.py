from django.apps import AppConfig


class MetricsConfig(AppConfig):
    """Automatic side: metric runs, per-caption scores and the Celery tasks that compute them."""

    name = "metrics"
    verbose_name = "Metrics: runs and scores"
