"""The ledger is append-only in the database, for every connection; tampering is detectable."""

import pgtrigger
import pytest
from django.db import connection, transaction
from django.db.utils import DatabaseError

from ledger.models import LedgerEvent
from tests.ledger.helpers import driven_run

pytestmark = pytest.mark.django_db


@pytest.fixture
def run_with_events():
    driver, run, _ = driven_run("discovery", "assessment")
    return driver, run


@pytest.mark.postgres  # (tampering goes around PostgreSQL's triggers with pgtrigger.ignore)
@pytest.mark.parametrize("sql", [
    "UPDATE ledger_ledgerevent SET kind = 'succeeded' WHERE run_id = %s",
    "DELETE FROM ledger_ledgerevent WHERE run_id = %s",
])
def test_raw_sql_cannot_change_the_ledger(run_with_events, sql):
    """UPDATE, DELETE and TRUNCATE are refused by triggers (superuser connection included)."""
    _, run = run_with_events
    before = LedgerEvent.objects.filter(run_id=run["id"]).count()
    with pytest.raises(DatabaseError, match="pgtrigger"):
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(sql, [run["id"]] if "%s" in sql else None)
    assert LedgerEvent.objects.filter(run_id=run["id"]).count() == before


@pytest.mark.django_db(transaction=True)
def test_truncate_is_refused(run_with_events):
    """TRUNCATE bypasses row triggers, so a statement trigger refuses it."""
    _, run = run_with_events
    with pytest.raises(DatabaseError, match="append-only"):
        with connection.cursor() as cursor:
            cursor.execute("TRUNCATE ledger_ledgerevent CASCADE")
    assert LedgerEvent.objects.filter(run_id=run["id"]).exists()


def test_orm_update_is_refused_too(run_with_events):
    _, run = run_with_events
    with pytest.raises(DatabaseError):
        with transaction.atomic():
            LedgerEvent.objects.filter(run_id=run["id"]).update(actor="user:mallory")


@pytest.mark.postgres  # (tampering goes around PostgreSQL's triggers with pgtrigger.ignore)
def test_tampered_event_is_reported_by_verify_chain(run_with_events):
    """A row changed behind the guard's back breaks the chain at its seq."""
    driver, run = run_with_events
    ok = driver.client.get(f"/api/v1/runs/{run['id']}/verify-chain/").json()
    assert ok["ok"] is True and ok["first_bad_seq"] is None and ok["events"] > 5
    with pgtrigger.ignore("ledger.LedgerEvent:append_only"):
        LedgerEvent.objects.filter(run_id=run["id"], seq=5).update(actor="agent:someone-else")
    report = driver.client.get(f"/api/v1/runs/{run['id']}/verify-chain/").json()
    assert report == {"ok": False, "events": ok["events"], "first_bad_seq": 5}


@pytest.mark.postgres  # (tampering goes around PostgreSQL's triggers with pgtrigger.ignore)
def test_deleted_event_is_reported_as_a_gap(run_with_events):
    driver, run = run_with_events
    with pgtrigger.ignore("ledger.LedgerEvent:append_only"):
        LedgerEvent.objects.filter(run_id=run["id"], seq=3).delete()
    report = driver.client.get(f"/api/v1/runs/{run['id']}/verify-chain/").json()
    assert report["ok"] is False and report["first_bad_seq"] == 3


def test_checkpoints_are_immutable(run_with_events):
    from ledger.models import Checkpoint

    with pytest.raises(DatabaseError):
        with transaction.atomic():
            Checkpoint.objects.update(intent="other")
