"""URLs of the metrics app: uploading a researcher's own per-caption scores."""
from django.urls import path

from . import views

app_name = "metrics"
urlpatterns = [
    path("datasets/<slug:name>/upload-scores/", views.upload_scores_page, name="upload-scores"),
]
