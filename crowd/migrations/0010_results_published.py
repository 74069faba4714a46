# Campaign data stays private until its owner publishes the results (issue 21, item 7):
# Campaign.results_published_at, None until the owner's "publish results" action. Existing
# campaigns: None, so their campaign systems (description campaigns) leave the public pages until
# an owner publishes them.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("crowd", "0009_campaign_raters"),
    ]

    operations = [
        migrations.AddField(
            model_name="campaign",
            name="results_published_at",
            field=models.DateTimeField(
                blank=True, null=True,
                help_text="when an owner published the results (None: the campaign's data is on owner pages only)"),
        ),
    ]
