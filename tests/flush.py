"""Emptying the database after a transactional test in milliseconds instead of seconds.

Django ends each ``TransactionTestCase`` (pytest-django: ``django_db(transaction=True)``,
``transactional_db``, ``live_server``) with ``manage.py flush``: one TRUNCATE of every table (about
1.7 s for the project's 54 tables on PostgreSQL, most of them empty) and the ``post_migrate`` signal,
which recreates the content types and permissions the TRUNCATE removed (0.2-0.4 s).

:func:`empty_filled_tables` leaves the database in the same state: it asks which tables hold rows
(one query), empties those with DELETE (TRUNCATE ... CASCADE for tables of more than
:data:`BIG` rows, where DELETE would be the slower) and keeps the content types and permissions
as long as they are exactly what ``post_migrate`` made (:data:`KEPT`, compared by a digest of their
rows). When they are not, when the database is not PostgreSQL, or for a test case with
``available_apps`` or serialized rollback, Django's flush runs as before. Sequences are not reset in
either case (Django's flush in tests does not reset them either).

:func:`vacuum_bloated` removes the dead rows that rolled-back tests leave behind. Every ordinary
``django_db`` test ends with a ROLLBACK, so what it inserted (a dataset import, a metric run: up to
hundreds of thousands of rows) stays in the table files as dead rows; where autovacuum is off (as on
the Debian clusters of these machines) nothing ever removes them during the session, and every later
sequential scan or ``count(*)`` reads them all: requests of tests late in the run took 5-10 times as
long as alone. ``tests/conftest.py`` calls it before every test module.

:func:`installed` puts it in place of ``TransactionTestCase._fixture_teardown`` for the test
session (``tests/conftest.py``)."""
from __future__ import annotations

import contextlib

from django.db import OperationalError, connections, transaction
from django.test import TransactionTestCase

#: the tables ``post_migrate`` fills after a flush; kept while their rows are unchanged
KEPT = ("django_content_type", "auth_permission")
#: a table with more rows than this is emptied with TRUNCATE instead of DELETE
BIG = 20000
#: per database alias, the digest of :data:`KEPT` as Django's flush and ``post_migrate`` left them
_made_by_post_migrate: dict[str, str] = {}


def kept_digest(connection) -> str:
    """A digest of every row of the :data:`KEPT` tables."""
    qn = connection.ops.quote_name
    parts = [f"(SELECT md5(coalesce(string_agg(t::text, '|' ORDER BY t::text), '')) FROM {qn(name)} t)"
             for name in KEPT]
    with connection.cursor() as cursor:
        cursor.execute("SELECT " + " || ".join(parts))
        return cursor.fetchone()[0]


def filled_tables(connection) -> dict[str, bool]:
    """The project's tables that hold rows, each with whether it holds more than :data:`BIG`."""
    qn = connection.ops.quote_name
    tables = sorted(connection.introspection.django_table_names(only_existing=True, include_views=False))
    probes = [f"SELECT %s, EXISTS (SELECT 1 FROM {qn(name)} OFFSET {BIG}) WHERE EXISTS (SELECT 1 FROM {qn(name)})"
              for name in tables]
    with connection.cursor() as cursor:
        cursor.execute(" UNION ALL ".join(probes), tables)
        return dict(cursor.fetchall())


def empty_filled_tables(alias: str) -> bool:
    """Empty every table of database ``alias`` that holds rows, except :data:`KEPT` while it is as
    ``post_migrate`` made it. Returns False (and changes nothing) where only Django's flush will do:
    not PostgreSQL, or :data:`KEPT` changed or never yet seen after a flush."""
    connection = connections[alias]
    if connection.vendor != "postgresql" or _made_by_post_migrate.get(alias) != kept_digest(connection):
        return False
    qn = connection.ops.quote_name
    filled = {name: big for name, big in filled_tables(connection).items() if name not in KEPT}
    with transaction.atomic(using=alias), connection.cursor() as cursor:
        big = [qn(name) for name, is_big in filled.items() if is_big]
        if big:  # CASCADE reaches only tables that refer to these, never KEPT
            cursor.execute(f"TRUNCATE {', '.join(big)} CASCADE")
        for name, is_big in filled.items():
            if not is_big:  # foreign keys are deferred to the commit, when every table is empty
                cursor.execute(f"DELETE FROM {qn(name)}")
    return True


#: a table with more dead rows than this is vacuumed by :func:`vacuum_bloated`
DEAD_ROWS = 5000


def vacuum_bloated(alias: str = "default", min_dead: int = DEAD_ROWS) -> list[str]:
    """``VACUUM`` and ``REINDEX`` every table of database ``alias`` holding more than ``min_dead``
    dead rows (PostgreSQL's own count, ``pg_stat_user_tables.n_dead_tup``), then give each the planner
    statistics of a table never vacuumed (``pg_class.reltuples = -1``). Returns the tables vacuumed;
    nothing is done (``[]``) for another database, inside a transaction (where VACUUM cannot run), or
    for a role that is not a superuser (which may not write ``pg_class``). A table locked by another
    connection for more than 2 s is left as it is.

    Why REINDEX, and why the statistics are reset: VACUUM truncates the emptied table file but
    leaves its indexes at their bloated size, and records 0 rows. The planner then prices a
    primary-key lookup through the large index above a sequential scan of the tiny table; a
    foreign-key check planned so is cached for the connection, and when a later test inserts tens of
    thousands of rows referring to that table, Django's teardown (``SET CONSTRAINTS ALL IMMEDIATE``)
    scans the whole table once per row: 136 s, 225 s and 7 minutes in single teardowns of CI runs
    (seen with ``perf``: all the time in ``heapgetpage``). REINDEX rebuilds the indexes small, and
    ``reltuples = -1`` gives the table PostgreSQL's minimum estimate of 10 pages
    (``table_block_relation_estimate_size``), so such lookups stay index scans."""
    connection = connections[alias]
    if connection.vendor != "postgresql" or connection.in_atomic_block:
        return []
    qn = connection.ops.quote_name
    done = []
    with connection.cursor() as cursor:
        cursor.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
        if not cursor.fetchone()[0]:
            return []
        cursor.execute("SELECT relname FROM pg_stat_user_tables WHERE n_dead_tup > %s ORDER BY relname", [min_dead])
        names = [row[0] for row in cursor.fetchall()]
        cursor.execute("SET lock_timeout = '2s'")
        try:
            for name in names:
                try:
                    cursor.execute(f"VACUUM {qn(name)}")
                    cursor.execute(f"REINDEX TABLE {qn(name)}")
                except OperationalError:  # lock_timeout: another connection holds the table
                    continue
                cursor.execute("UPDATE pg_class SET reltuples = -1, relpages = 0, relallvisible = 0 "
                               "WHERE oid = %s::regclass", [qn(name)])
                done.append(name)
        finally:
            cursor.execute("RESET lock_timeout")
    return done


def _fixture_teardown(self) -> None:
    """``TransactionTestCase._fixture_teardown``: :func:`empty_filled_tables` for every database of
    the test, or Django's flush (then noting the digest of :data:`KEPT` it left)."""
    aliases = self._databases_names(include_mirrors=False)
    plain = self.available_apps is None and not self.serialized_rollback
    if plain and all(empty_filled_tables(alias) for alias in aliases):
        return
    _original(self)
    for alias in aliases:
        if plain and connections[alias].vendor == "postgresql":
            _made_by_post_migrate[alias] = kept_digest(connections[alias])


_original = TransactionTestCase._fixture_teardown


@contextlib.contextmanager
def installed():
    """Use :func:`_fixture_teardown` for every transactional test while the context is open."""
    TransactionTestCase._fixture_teardown = _fixture_teardown
    try:
        yield
    finally:
        TransactionTestCase._fixture_teardown = _original
