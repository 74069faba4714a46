# Issue 15: metric runs and score uploads started from the web, with progress.

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("metrics", "0004_nan_scores_on_sqlite"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="UploadJob",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("name", models.CharField(help_text="the metric's display name as typed", max_length=100)),
                ("higher", models.CharField(help_text='"better" or "worse"', max_length=10)),
                ("filename", models.CharField(max_length=255)),
                ("size", models.PositiveBigIntegerField(help_text="bytes of the uploaded file")),
                ("content", models.BinaryField(default=b"", help_text="the file's bytes until the job ends")),
                ("status", models.CharField(choices=[("pending", "pending"), ("running", "running"), ("done", "done"), ("failed", "failed")], default="pending", max_length=10)),
                ("message", models.TextField(blank=True)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("started_at", models.DateTimeField(blank=True, null=True)),
                ("finished_at", models.DateTimeField(blank=True, null=True)),
                ("dataset", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="+", to="crowd.dataset")),
                ("run", models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name="+", to="metrics.metricrun")),
                ("user", models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name="+", to=settings.AUTH_USER_MODEL)),
            ],
            options={
                "ordering": ["-created_at"],
            },
        ),
    ]
