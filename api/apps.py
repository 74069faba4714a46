"""The REST API app (``/api/``): DRF views over the same core as the pages (docs/api.md)."""
from django.apps import AppConfig


class ApiConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "api"
    verbose_name = "REST API"
