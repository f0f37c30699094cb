import pgtrigger
import pytest
from django.core.management.commands import flush

# The ledger refuses TRUNCATE for every connection. Transactional tests clean up with
# `flush` (a TRUNCATE), so the flush alone runs with the guards ignored; the guards stay
# installed (migrations run) and bind every test.
_flush_handle = flush.Command.handle


def _trigger_aware_flush(self, **options):
    with pgtrigger.ignore():
        return _flush_handle(self, **options)


flush.Command.handle = _trigger_aware_flush


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
