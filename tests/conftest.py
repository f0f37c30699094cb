import os
import sys

import pgtrigger
import pytest
from django.core.management.commands import flush
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.backends.postgresql.operations import DatabaseOperations as PostgresOperations

# The suite runs ~100 Python processes (xdist workers, servers, workers, commands): with PYTHONDONTWRITEBYTECODE set
# in the environment, each would compile (and pytest rewrite) every module again — ~10 s per test worker.
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

# The ledger refuses TRUNCATE for every connection. Transactional tests clean up with
# `flush` (a TRUNCATE), so the flush alone runs with the guards ignored; the guards stay
# installed (migrations run) and bind every test.
# Django then sends post_migrate, to make again the content types and permissions the flush deleted (~80 ms
# a test: ~300 rows, a permission query per app, the partition guards' catalog read per app). The flush
# keeps those tables, what migrate made and no test writes, so nothing needs making again; what else
# post_migrate does (installing guards) a flush never undoes.
_flush_handle = flush.Command.handle
KEPT_BY_FLUSH = {"django_content_type", "auth_permission"}


def _trigger_aware_flush(self, **options):
    if connections[options.get("database") or DEFAULT_DB_ALIAS].vendor == "postgresql":
        options["inhibit_post_migrate"] = True  # the tables it would fill are kept (_delete_flush)
    with pgtrigger.ignore():
        return _flush_handle(self, **options)


flush.Command.handle = _trigger_aware_flush


# A transactional test's teardown empties every table. PostgreSQL's TRUNCATE of the ~110 relations (the
# ledger's partitions included) takes a second or more: DELETE of the few rows a test wrote takes
# milliseconds, with the same result (the foreign keys are deferred, so the order does not matter).
_pg_sql_flush = PostgresOperations.sql_flush


def _delete_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):
    tables = [table for table in tables if table not in KEPT_BY_FLUSH]
    if reset_sequences or not tables:
        return _pg_sql_flush(self, style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade)
    return ["SET CONSTRAINTS ALL DEFERRED", *(f"DELETE FROM {self.quote_name(table)}" for table in tables)]


PostgresOperations.sql_flush = _delete_flush


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix):
    """On PostgreSQL, test and scratch databases are copies of a migrated template (tests/template_db.py)."""
    from django.conf import settings

    from ledger.ops.scratch import TEMPLATE_ENV, connect_kwargs
    from tests.template_db import ensure_template

    database = settings.DATABASES["default"]
    if "postgresql" not in database["ENGINE"]:
        return
    server = connect_kwargs()
    del server["dbname"]
    template = ensure_template(server)
    if template:
        database.setdefault("TEST", {})["TEMPLATE"] = template
        os.environ[TEMPLATE_ENV] = template


@pytest.fixture
def api():
    from rest_framework.test import APIClient

    return APIClient()


# Real processes, servers or a browser of the test's own: `slow`, left out of the edit loop's quick selection
# (`pytest -m "not slow"`, see pyproject.toml). Besides the tests marked so, every test using one of these is.
SLOW_FIXTURES = {
    "bench_command": "runs `manage.py bench` in a process of its own",
    "workers": "starts real Celery worker processes",
    "browser": "drives Chromium",
    "live_server": "serves the app on a thread of its own for clients over real HTTP",
}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Mark the slow tests; on the embedded SQLite default skip what proves real locking, processes or
    PostgreSQL itself (``transaction=True`` tests, ``postgres``): the ledger's behaviour runs on both."""
    from django.conf import settings

    sqlite = settings.DATABASES["default"]["ENGINE"].endswith("sqlite3")
    skip = pytest.mark.skip(reason="needs PostgreSQL (real row locks, several connections)")
    for item in items:
        if SLOW_FIXTURES.keys() & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
        db = item.get_closest_marker("django_db")
        if sqlite and (item.get_closest_marker("postgres") or (db is not None and db.kwargs.get("transaction"))):
            item.add_marker(skip)
