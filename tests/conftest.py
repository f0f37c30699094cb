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


def pytest_collection_modifyitems(config, items):
    """On the embedded SQLite default the ledger's behaviour runs as on PostgreSQL; what proves real
    locking, processes or PostgreSQL itself (``transaction=True`` tests, ``postgres``) runs there only."""
    from django.conf import settings

    if not settings.DATABASES["default"]["ENGINE"].endswith("sqlite3"):
        return
    skip = pytest.mark.skip(reason="needs PostgreSQL (real row locks, several connections)")
    for item in items:
        db = item.get_closest_marker("django_db")
        if item.get_closest_marker("postgres") or (db is not None and db.kwargs.get("transaction")):
            item.add_marker(skip)
