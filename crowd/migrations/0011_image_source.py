# Issue 15: datasets carry an image source (URL template, local folder, uploaded files).

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("crowd", "0010_results_published"),
    ]

    operations = [
        migrations.AddField(
            model_name="dataset",
            name="image_source",
            field=models.CharField(
                blank=True, default="", max_length=10,
                choices=[("", "none"), ("url", "URL template"), ("coco", "public COCO server"), ("folder", "local folder"),
                 ("upload", "uploaded files")],
                help_text="where the pictures come from (crowd.images): a URL template, the COCO server, a local folder, uploaded files",
            ),
        ),
        migrations.AddField(
            model_name="dataset",
            name="image_location",
            field=models.CharField(
                blank=True, default="", max_length=2000,
                help_text="the URL template (with {key}), the COCO split or the absolute folder path; empty for uploads",
            ),
        ),
    ]
