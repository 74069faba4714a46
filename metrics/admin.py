from django.contrib import admin

from .models import MetricRun


@admin.register(MetricRun)
class MetricRunAdmin(admin.ModelAdmin):
    list_display = ("metric", "dataset", "version", "status", "completed", "total", "created_at", "finished_at")
    list_filter = ("metric", "status", "dataset")
    readonly_fields = ("params", "params_key", "error")
