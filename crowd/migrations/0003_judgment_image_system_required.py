import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("crowd", "0002_campaigns")]

    operations = [
        migrations.AlterField(
            model_name="humanjudgment", name="image",
            field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="judgments", to="crowd.image"),
        ),
        migrations.AlterField(
            model_name="humanjudgment", name="system",
            field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="judgments", to="crowd.system"),
        ),
    ]
