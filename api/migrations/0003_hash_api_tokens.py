"""Hash the API tokens made before the platform used django-rest-knox.

Until then tokens were Django REST framework's ``authtoken`` keys, kept in plain text in the table
``authtoken_token``. Each one becomes a knox ``AuthToken`` holding only the key's digest
(``knox.crypto.hash_token``, SHA-512) and its first 15 characters, for the same user, created at
the same time and never expiring, so that every existing key keeps working with the same
``Authorization: Token <key>`` header; then the plain-text rows are deleted. The old table, if any,
is left empty (``rest_framework.authtoken`` is no longer an installed app). Nothing happens on a
database that never had that table. Irreversible in effect: going back leaves the tokens hashed
(their keys are known to nobody but their users)."""
from datetime import timezone as dt_timezone

from django.db import migrations
from django.utils import timezone
from django.utils.dateparse import parse_datetime

#: Django REST framework's authtoken table (rest_framework.authtoken.models.Token)
OLD_TABLE = "authtoken_token"


def _aware(value):
    """A stored creation time (a datetime, or text on SQLite) as an aware datetime, or None."""
    if isinstance(value, str):
        value = parse_datetime(value)
    if value is not None and timezone.is_naive(value):
        value = value.replace(tzinfo=dt_timezone.utc)
    return value


def hash_old_tokens(apps, schema_editor):
    """Every row of :data:`OLD_TABLE` as a knox token of the same key (digest only); the rows deleted."""
    from knox.crypto import hash_token
    from knox.settings import CONSTANTS

    connection = schema_editor.connection
    if OLD_TABLE not in connection.introspection.table_names():
        return
    AuthToken = apps.get_model("knox", "AuthToken")
    qn = connection.ops.quote_name
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {qn('key')}, {qn('user_id')}, {qn('created')} FROM {qn(OLD_TABLE)}")
        rows = cursor.fetchall()
    for key, user_id, created in rows:
        digest = hash_token(key)
        AuthToken.objects.update_or_create(digest=digest, defaults={
            "token_key": key[:CONSTANTS.TOKEN_KEY_LENGTH], "user_id": user_id, "expiry": None})
        if _aware(created) is not None:  # auto_now_add set "now": keep when the key was made
            AuthToken.objects.filter(digest=digest).update(created=_aware(created))
    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {qn(OLD_TABLE)}")


class Migration(migrations.Migration):

    dependencies = [
        ("api", "0002_import_jobs"),
        ("knox", "0009_extend_authtoken_field"),
    ]

    operations = [
        migrations.RunPython(hash_old_tokens, migrations.RunPython.noop),
    ]
