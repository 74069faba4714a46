from django.apps import AppConfig


class AnalysisConfig(AppConfig):
    """Metric-human agreement: correlation reports, the dashboard and its downloads."""

    name = "analysis"
    verbose_name = "Analysis: metric-human correlations"
