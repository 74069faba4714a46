# Item.full: lets a claim skip items whose k slots are all held (crowd.engine keeps it).

from django.db import migrations, models

MARK_FULL = """
UPDATE crowd_item SET "full" = TRUE FROM crowd_campaign c
WHERE c.id = crowd_item.campaign_id AND NOT crowd_item.is_gold
  AND (SELECT count(*) FROM crowd_assignment a
       WHERE a.item_id = crowd_item.id AND a.slot IS NOT NULL) >= c.judgments_per_item
"""


class Migration(migrations.Migration):

    dependencies = [
        ('crowd', '0006_protocol_pairwise_without_reference'),
    ]

    operations = [
        migrations.AddField(
            model_name='item',
            name='full',
            field=models.BooleanField(default=False, help_text='all k slots are held (kept by crowd.engine; lets claims skip full items)'),
        ),
        migrations.AddIndex(
            model_name='item',
            index=models.Index(condition=models.Q(('full', False), ('is_gold', False)), fields=['campaign', 'position'], name='item_open_position'),
        ),
        migrations.RunSQL(MARK_FULL, migrations.RunSQL.noop),
    ]
