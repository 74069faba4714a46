from django.apps import AppConfig


class MetricsConfig(AppConfig):
    """Automatic side: metric runs, per-caption scores and the Celery tasks that compute them."""

    name = "metrics"
    verbose_name = "Metrics: runs and scores"

    def ready(self):
        # a new caption-set campaign (diversity) starts its set-level metric runs (metrics.campaigns):
        # crowd sits below metrics and sends nothing of its own, so Django's post_save is the hook
        from django.db.models.signals import post_save

        from .campaigns import on_campaign_saved

        post_save.connect(on_campaign_saved, sender="crowd.Campaign", dispatch_uid="metrics.campaigns.on_campaign_saved")
