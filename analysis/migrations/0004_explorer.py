# Issue 15: the example explorer's stored tables and the interactive scatter charts' data.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("analysis", "0003_report_kinds"),
    ]

    operations = [
        migrations.AlterField(
            model_name="report",
            name="kind",
            field=models.CharField(choices=[
                ("campaign", "campaign report"), ("image", "per-image diversity"),
                ("correlations", "dataset correlation report"), ("benchmark", "benchmark meta-evaluation"),
                ("comparison", "cross-benchmark comparison"), ("explorer", "example explorer table"),
                ("scatter", "metric-vs-human scatter")],
                max_length=30),
        ),
    ]
