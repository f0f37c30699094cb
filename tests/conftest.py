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
