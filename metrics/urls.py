"""URLs of the metrics app: uploading a researcher's own per-caption scores, starting metric runs
from the web, and the progress of both; the page of an LLM judge's run (its parse outcomes and raw
replies)."""
from django.urls import path

from . import views

app_name = "metrics"
urlpatterns = [
    path("datasets/<slug:name>/upload-scores/", views.upload_scores_page, name="upload-scores"),
    path("datasets/<slug:name>/compute/", views.compute, name="compute"),
    path("datasets/<slug:name>/jobs.json", views.jobs_json, name="jobs-json"),
    path("datasets/<slug:name>/runs/<int:pk>/judge/", views.judge_run, name="judge-run"),
]
