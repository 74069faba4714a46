# Invitations bound to campaigns and gold that stays due (issue 21):
# * CampaignRater: a local worker is a rater only of the campaigns it was invited to. Existing data:
#   every local worker that has an assignment in a local campaign stays a rater of that campaign.
# * Assignment.awaiting_gold: a submission made before its worker passed the minimum gold checks
#   (counted once they pass, crowd.engine.count_awaiting_gold). Existing rows: False (unchanged).

import django.db.models.deletion
from django.db import migrations, models


def keep_existing_raters(apps, schema_editor):
    """Workers with assignments in a local campaign stay raters of it."""
    Assignment = apps.get_model("crowd", "Assignment")
    CampaignRater = apps.get_model("crowd", "CampaignRater")
    pairs = (
        Assignment.objects.filter(campaign__provider="local", worker__provider="local")
        .values_list("campaign_id", "worker_id").distinct().order_by()
    )
    CampaignRater.objects.bulk_create(
        [CampaignRater(campaign_id=c, worker_id=w) for c, w in pairs], batch_size=1000, ignore_conflicts=True,
    )


class Migration(migrations.Migration):

    dependencies = [
        ('crowd', '0008_verified_identities'),
    ]

    operations = [
        migrations.AddField(
            model_name='assignment',
            name='awaiting_gold',
            field=models.BooleanField(default=False, help_text="submitted before its worker passed the campaign's minimum gold checks: stored, holds no slot, counted once they pass (crowd.engine.count_awaiting_gold)"),
        ),
        migrations.CreateModel(
            name='CampaignRater',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('campaign', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='raters', to='crowd.campaign')),
                ('worker', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='memberships', to='crowd.worker')),
            ],
            options={
                'constraints': [models.UniqueConstraint(fields=('campaign', 'worker'), name='campaign_rater_unique')],
            },
        ),
        migrations.RunPython(keep_existing_raters, migrations.RunPython.noop),
    ]
