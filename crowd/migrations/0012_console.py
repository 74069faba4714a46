# Issue 15: the campaign console (invitation links, audit trail, speed checks).

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("crowd", "0011_image_source"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name="campaignrater",
            name="revoked_at",
            field=models.DateTimeField(
                blank=True, null=True,
                help_text="when an owner revoked the membership (its invitation link): the worker no longer sees or "
                          "does this campaign (crowd.audit.revoke_invitation)"),
        ),
        migrations.CreateModel(
            name="AuditEntry",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("actor", models.CharField(help_text="the user name at the time, or 'system'", max_length=150)),
                ("at", models.DateTimeField(default=django.utils.timezone.now)),
                ("action", models.CharField(choices=[
                    ("publish", "publish"), ("pause", "pause"), ("resume", "resume"), ("finish", "finish"),
                    ("auto-finish", "auto-finish"), ("invite", "invite"), ("revoke", "revoke"), ("block", "block"),
                    ("unblock", "unblock"), ("count", "count"), ("uncount", "uncount")], max_length=20)),
                ("target", models.CharField(blank=True, help_text="e.g. the worker's rater id", max_length=200)),
                ("reason", models.TextField(blank=True)),
                ("detail", models.JSONField(blank=True, default=dict)),
                ("campaign", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE,
                                               related_name="audit_entries", to="crowd.campaign")),
                ("user", models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL,
                                           related_name="+", to=settings.AUTH_USER_MODEL)),
            ],
            options={
                "ordering": ["-at", "-pk"],
                "indexes": [models.Index(fields=["campaign", "at"], name="crowd_audit_campaig_8a1e3f_idx")],
            },
        ),
    ]
