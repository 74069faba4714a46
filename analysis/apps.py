from django.apps import AppConfig


class AnalysisConfig(AppConfig):
    """Metric-human agreement: correlation reports, the dashboard and its downloads."""

    name = "analysis"
    verbose_name = "Analysis: metric-human correlations"

    def ready(self):
        # with a broker, a dataset's reports are queued once its last metric run is done (analysis.warm)
        from metrics.signals import run_progress

        from .warm import refresh_after_run

        run_progress.connect(refresh_after_run, dispatch_uid="analysis.warm.refresh_after_run")
