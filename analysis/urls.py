from django.urls import path

from . import views

app_name = "analysis"
urlpatterns = [
    path("", views.index, name="index"),
    path("datasets/<slug:name>/", views.dataset_detail, name="dataset"),
    path("datasets/<slug:name>/runs.json", views.runs_json, name="runs-json"),
    path("datasets/<slug:name>/correlations.json", views.report_json, name="report-json"),
    path("datasets/<slug:name>/correlations.csv", views.report_csv, name="report-csv"),
    path("datasets/<slug:name>/scatter/<slug:metric>.png", views.scatter, name="scatter"),
]
