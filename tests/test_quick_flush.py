"""After a transactional test the database is left exactly as Django's flush leaves it, though only
the tables holding rows are emptied (tests/flush.py); where that cannot be told, Django's flush runs."""
import pytest
from django.contrib.auth.models import Permission, User
from django.contrib.contenttypes.models import ContentType
from django.core.management import call_command
from django.db import connection

from crowd import engine
from crowd.models import Dataset

from . import flush
from .conftest import run_command

pytestmark = pytest.mark.django_db(transaction=True)


def everything():
    """Every row of every project table, as text, by table."""
    qn = connection.ops.quote_name
    rows = {}
    with connection.cursor() as cursor:
        for name in sorted(connection.introspection.django_table_names(only_existing=True, include_views=False)):
            cursor.execute(f"SELECT t::text FROM {qn(name)} t ORDER BY 1")
            rows[name] = [r[0] for r in cursor.fetchall()]
    return rows


def fill(subset_dir):
    """Rows in many tables, joined by foreign keys: a dataset, a campaign with its items, users."""
    owner = User.objects.create_user("owner", password="pw")
    run_command("import_dataset", "flickr8k-expert", str(subset_dir), "--name", "sub")
    campaign = engine.create_campaign(Dataset.objects.get(name="sub"), "rating", name="c", owners=[owner],
                                      options={"images": 2}, gold_every=0)
    engine.invite_workers(2, campaign=campaign)


def test_quick_flush_leaves_what_djangos_flush_leaves(subset_dir, monkeypatch):
    fill(subset_dir)
    call_command("flush", verbosity=0, interactive=False)  # Django's: TRUNCATE everything, post_migrate
    after_django = everything()
    assert after_django["django_content_type"] and after_django["auth_permission"]
    assert not after_django["crowd_dataset"] and not after_django["auth_user"]
    flush._made_by_post_migrate[connection.alias] = flush.kept_digest(connection)

    fill(subset_dir)
    filled = flush.filled_tables(connection)
    assert {"crowd_dataset", "crowd_campaign", "auth_user", "django_content_type"} <= set(filled)
    assert not any(filled.values())  # nothing over BIG rows: DELETE everywhere
    assert flush.empty_filled_tables(connection.alias)
    assert everything() == after_django

    fill(subset_dir)  # the same with TRUNCATE ... CASCADE for the "big" tables
    monkeypatch.setattr(flush, "BIG", 3)
    assert any(flush.filled_tables(connection).values())
    assert flush.empty_filled_tables(connection.alias)
    assert everything() == after_django


def test_changed_permissions_or_content_types_leave_it_to_djangos_flush(subset_dir):
    call_command("flush", verbosity=0, interactive=False)
    flush._made_by_post_migrate[connection.alias] = flush.kept_digest(connection)
    fill(subset_dir)
    Permission.objects.create(codename="extra", name="Extra", content_type=ContentType.objects.get_for_model(User))
    before = everything()
    assert not flush.empty_filled_tables(connection.alias)
    assert everything() == before  # nothing emptied: the test's teardown runs Django's flush


def test_vacuum_bloated_removes_the_dead_rows_a_rolled_back_import_leaves(subset_dir):
    """What a rolled-back test inserted stays in the table as dead rows (no autovacuum here during a
    run); :func:`tests.flush.vacuum_bloated` vacuums exactly the tables over the threshold, keeps
    every live row, and does nothing inside a transaction."""
    from django.db import transaction

    from crowd.models import Caption

    keep = User.objects.create_user("keep", password="pw")

    class RolledBack(Exception):
        pass

    with pytest.raises(RolledBack), transaction.atomic():
        run_command("import_dataset", "flickr8k-expert", str(subset_dir), "--name", "gone")
        inserted = Caption.objects.count()
        raise RolledBack
    assert inserted > 200 and not Caption.objects.exists()

    def dead(table):
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_stat_force_next_flush()")  # this backend's counts, now (PostgreSQL 15)
            cursor.execute("SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = %s", [table])
            return cursor.fetchone()[0]

    assert dead("crowd_caption") >= inserted
    before = everything()
    with transaction.atomic():
        assert flush.vacuum_bloated(min_dead=200) == []  # VACUUM cannot run in a transaction
    vacuumed = flush.vacuum_bloated(min_dead=200)
    assert "crowd_caption" in vacuumed and "auth_user" not in vacuumed
    assert dead("crowd_caption") == 0
    assert everything() == before and User.objects.get(pk=keep.pk).username == "keep"
    # The emptied table keeps the statistics of one never vacuumed, so that a foreign-key check
    # (a primary-key lookup) planned now is an index scan, not a sequential scan that a cached plan
    # would repeat for every row a later test inserts.
    with connection.cursor() as cursor:
        cursor.execute("SELECT reltuples FROM pg_class WHERE oid = 'crowd_caption'::regclass")
        assert cursor.fetchone()[0] == -1
        # ... and its indexes rebuilt small (a plain VACUUM leaves them at the size the rows made)
        cursor.execute("SELECT max(pg_relation_size(indexrelid)) FROM pg_index WHERE indrelid = 'crowd_caption'::regclass")
        assert cursor.fetchone()[0] <= 2 * 8192
        cursor.execute("EXPLAIN SELECT 1 FROM crowd_caption WHERE id = 1")
        plan = " ".join(row[0] for row in cursor.fetchall())
    assert "Index" in plan and "Seq Scan" not in plan, plan
