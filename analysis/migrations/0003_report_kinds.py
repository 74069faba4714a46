from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("analysis", "0002_report"),
    ]

    operations = [
        migrations.AlterField(
            model_name="report",
            name="kind",
            field=models.CharField(choices=[
                ("campaign", "campaign report"), ("image", "per-image diversity"),
                ("correlations", "dataset correlation report"), ("benchmark", "benchmark meta-evaluation"),
                ("comparison", "cross-benchmark comparison")], max_length=30),
        ),
    ]
