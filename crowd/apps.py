from django.apps import AppConfig


class CrowdConfig(AppConfig):
    """Human side: datasets, images, systems, captions (caption sets) and human judgments."""

    name = "crowd"
    verbose_name = "Crowd: captions and human judgments"
