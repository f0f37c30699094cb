"""Every append-only table refuses UPDATE, DELETE and TRUNCATE, and the per-intent tables whose rows change
refuse TRUNCATE, in PostgreSQL itself: on each parent and on each of its partitions, today's and a later one's."""

import itertools

import pgtrigger
import pytest
from django.core.management.sql import emit_post_migrate_signal
from django.db import connection, transaction
from django.db.utils import DatabaseError
from django.utils import timezone

from knowledge.models import Claim, ClaimCitation, ClaimDerivation, ClaimReview, GateDecision, PacketClaim, PacketServed
from ledger.models import AuditEntry, Checkpoint, Goal, LedgerEvent, Run
from stateboard.db import partition_guards_install
from tests.factories import make_workflow

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]

# The contract (API.md, settled points): what each table refuses.
APPEND_ONLY = ("ledger_ledgerevent", "ledger_auditentry", "ledger_goal", "knowledge_claim",
               "knowledge_claimderivation", "knowledge_claimreview", "knowledge_gatedecision",
               "knowledge_claimcitation", "knowledge_packetserved", "knowledge_packetclaim")
REFUSED = {**{table: ("UPDATE", "DELETE", "TRUNCATE") for table in APPEND_ONLY},
           "ledger_checkpoint": ("UPDATE", "TRUNCATE"),  # immutable; expired ones are deleted one by one
           "ledger_run": ("TRUNCATE",), "ledger_effect": ("TRUNCATE",)}
STATEMENTS = {"UPDATE": "UPDATE {} SET id = id", "DELETE": "DELETE FROM {}", "TRUNCATE": "TRUNCATE {} CASCADE"}


def _partitions(table: str) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT relid::regclass::text FROM pg_partition_tree(%s::regclass) WHERE relid <> %s::regclass",
                       [table, table])
        return [name for (name,) in cursor.fetchall()]


def _count(table: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM {table}")
        return cursor.fetchone()[0]


@pytest.fixture
def a_row_everywhere():
    """A row in every guarded table and in every partition of the partitioned ones (row triggers fire on rows)."""
    now = timezone.now()
    wf = make_workflow()
    for n in itertools.count():
        run = Run.objects.create(workflow=wf, intent=f"guarded-{n}", trigger_key=f"guarded-{n}", inputs={},
                                 input_fingerprint="f" * 64, policy_version="1", created_at=now, updated_at=now)
        LedgerEvent.objects.create(run=run, intent=run.intent, seq=1, at=now, kind="decided", actor="system",
                                   input_fingerprint="f" * 64, policy_version="1", hash="a" * 64)
        Checkpoint.objects.create(workflow=wf, intent=run.intent, run=run, source="server", payload={},
                                  input_fingerprint="f" * 64, policy_version="1", created_at=now, expires_at=now)
        if n % 16 == 15 and all(_count(p) for t in ("ledger_ledgerevent", "ledger_checkpoint") for p in _partitions(t)):
            break
        assert n < 1000
    claim = Claim.objects.create(key="guarded", version=1, store_version=10**12, status="active", actor="t",
                                 created_at=now)
    ClaimDerivation.objects.create(claim=claim, source_key="source")
    ClaimReview.objects.create(key="guarded", source_key="source", source_store_version=1, reason="r", actor="t",
                               created_at=now)
    GateDecision.objects.create(at=now, action="propose", actor="t", key="guarded", outcome="active",
                                policy_version="1")
    ClaimCitation.objects.create(event_id=1, actor="t", at=now, uri="claim:guarded", key="guarded")
    packet = PacketServed.objects.create(run_id="r", served_to="t", at=now, budget_tokens=1, approx_tokens=1,
                                         digest="d")
    PacketClaim.objects.create(packet=packet, key="guarded", use="fact")
    AuditEntry.objects.create(at=now, actor="t", role="", action="guarded", outcome="done")
    Goal.objects.create(workflow=wf, intent="guarded-0", version=1, created_by="t", created_at=now)
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # the deferred foreign key checks, done: TRUNCATE may run


def _refused(table: str, operation: str) -> None:
    """The statement fails with the guard's own message naming ``table`` (or its partition), and nothing changes."""
    before = _count(table)
    assert operation == "TRUNCATE" or before, f"{table} has no row to try {operation} on"
    with pytest.raises(DatabaseError, match=f"pgtrigger: Cannot .*{table}\\w* table"):
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(STATEMENTS[operation].format(table))
    assert _count(table) == before


@pytest.mark.parametrize("table", sorted(REFUSED))
def test_each_table_and_each_partition_refuses_what_it_must(a_row_everywhere, table):
    tables = [table, *_partitions(table)]
    if table in ("ledger_ledgerevent", "ledger_run", "ledger_effect", "ledger_checkpoint"):
        assert len(tables) == 17, tables  # the parent and its 16 partitions (migration 0021)
    for name in tables:
        for operation in REFUSED[table]:
            _refused(name, operation)


def test_lifting_a_guard_lifts_it_on_the_partitions_too(a_row_everywhere):
    """pgtrigger.ignore (the suite's flush, ``guard_lifted``) names the parent's guard: its partitions follow."""
    partition = _partitions("ledger_ledgerevent")[1]
    with transaction.atomic():
        with pgtrigger.ignore("ledger.LedgerEvent:no_truncate"), connection.cursor() as cursor:
            cursor.execute(f"TRUNCATE {partition}")
        assert _count(partition) == 0
        transaction.set_rollback(True)
    assert _count(partition) > 0
    _refused(partition, "TRUNCATE")


def test_a_partition_added_later_is_guarded_by_the_helper_and_after_every_migrate():
    """A later migration's partition: ``partition_guards_install`` guards it, and so does the next migrate."""
    with transaction.atomic(), connection.cursor() as cursor:
        old = _partitions("ledger_ledgerevent")[-1]
        for fresh in ("ledger_ledgerevent_later", "ledger_ledgerevent_later_a"):
            cursor.execute(f"ALTER TABLE ledger_ledgerevent DETACH PARTITION {old}")
            cursor.execute(f"CREATE TABLE {fresh} PARTITION OF ledger_ledgerevent "
                           f"FOR VALUES WITH (MODULUS 16, REMAINDER 15)")
            with transaction.atomic():  # unguarded until the helper runs
                cursor.execute(f"TRUNCATE {fresh}")
            if fresh.endswith("_a"):
                emit_post_migrate_signal(verbosity=0, interactive=False, db=connection.alias)
            else:
                assert partition_guards_install() == 1
            _refused(fresh, "TRUNCATE")
            old = fresh
        assert partition_guards_install() == 0  # idempotent
        transaction.set_rollback(True)
