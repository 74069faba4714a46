# Learned metrics (issue 32): image features stored once per (model signature, picture content).

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('metrics', '0007_document_frequency_packed'),
    ]

    operations = [
        migrations.CreateModel(
            name='ImageFeature',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('key', models.CharField(max_length=64, unique=True)),
                ('dtype', models.CharField(help_text='"float32" or "float16"', max_length=10)),
                ('dim', models.PositiveIntegerField()),
                ('vector', models.BinaryField()),
                ('created_at', models.DateTimeField(auto_now_add=True)),
            ],
        ),
    ]
