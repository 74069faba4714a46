"""Dataset.protocol (how reports treat a dataset) and PairwiseJudgment without a reference.

The data step sets the protocol of Flickr8k-Expert datasets imported before this migration to the
one :class:`crowd.importers.flickr8k.Flickr8kExpertImporter` now stores (a frozen copy, as
migrations must not import application code that may change later).
"""
import django.db.models.deletion
from django.db import migrations, models

FLICKR8K_EXPERT_PROTOCOL = {
    "task": "rating",
    "rows": "rating",
    "headline": "kendall_tau_c",
    "criteria": ["quality"],
    "summary": (
        "Flickr8k-Expert (Hodosh et al. 2013): 3 expert ratings (1-4) per image-caption pair. Standard "
        "protocol (Anderson et al. 2016; Hessel et al. 2021, appendix A): pairs whose candidate is one of "
        "the image's own five captions are excluded (5,664 pairs remain); the image's five captions are "
        "the references; every one of the 16,992 expert ratings is a correlation row paired with its "
        "candidate's metric score; Kendall tau-c is the headline statistic."
    ),
    "source": "Hessel et al. 2021 (CLIPScore, EMNLP), Table 1 and appendix A",
}


def set_expert_protocol(apps, schema_editor):
    Dataset = apps.get_model("crowd", "Dataset")
    for dataset in Dataset.objects.filter(kind="flickr8k-expert"):
        if not dataset.protocol:
            dataset.protocol = dict(FLICKR8K_EXPERT_PROTOCOL)
            dataset.save(update_fields=["protocol"])


class Migration(migrations.Migration):

    dependencies = [
        ('crowd', '0005_objectlabel'),
    ]

    operations = [
        migrations.AddField(
            model_name='dataset',
            name='protocol',
            field=models.JSONField(blank=True, default=dict, help_text='how reports must treat the dataset, set by its importer: {"task": "rating" | "forced_choice", "rows": "rating" (every rating is a correlation row) | "mean" (one row per caption, its mean score), "headline": "kendall_tau_c" | "kendall_tau_b" | "pearson" | "accuracy", "criteria": [...], "summary": "...", "source": "paper, table", ...}'),
        ),
        migrations.AlterField(
            model_name='pairwisejudgment',
            name='reference',
            field=models.ForeignKey(blank=True, help_text="the reference A the rater compared with; empty = judged against the image's reference set", null=True, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='crowd.caption'),
        ),
        migrations.AddConstraint(
            model_name='pairwisejudgment',
            constraint=models.UniqueConstraint(condition=models.Q(('reference__isnull', True)), fields=('caption_b', 'caption_c', 'rater'), name='pairwise_unique_rater_no_reference'),
        ),
        migrations.RunPython(set_expert_protocol, migrations.RunPython.noop),
    ]
