"""Database helpers shared by the apps: the append-only guards, declared once for both databases.

PostgreSQL (the product database) gets the pgtrigger triggers declared in each model's
``Meta.triggers``, installed by migrations. SQLite (the embedded demo) gets equivalents generated
from the same declarations after every ``migrate``, so a new guarded model is guarded on both.
"""

from __future__ import annotations

import contextlib

import pgtrigger
from django.db import connections, transaction
from pgtrigger import features as pgtrigger_features
from pgtrigger import utils as pgtrigger_utils

LIFT_TABLE = "stateboard_guard_lift"
# Triggers installed by the first SQLite migrations, before the guards were generated.
LEGACY_SQLITE_TRIGGERS = (
    "ledger_event_append_only_update", "ledger_event_append_only_delete", "ledger_checkpoint_immutable",
    "ledger_audit_append_only_update", "ledger_audit_append_only_delete",
    "knowledge_claim_append_only_update", "knowledge_gatedecision_append_only_update",
    "knowledge_gatedecision_append_only_delete", "knowledge_claimcitation_append_only_update",
    "knowledge_claimcitation_append_only_delete",
)


class NoTruncate(pgtrigger.Trigger):
    """Refuses TRUNCATE (a statement trigger, which PostgreSQL never copies to a partition: on a partitioned
    table ``partition_guards_install`` puts its twin on every partition)."""

    name = "no_truncate"
    operation = pgtrigger.Truncate
    level = pgtrigger.Statement
    when = pgtrigger.Before

    def __init__(self, *, what: str):
        self.what = what
        super().__init__(func=f"RAISE EXCEPTION 'pgtrigger: Cannot truncate % table: {what}', TG_TABLE_NAME;")


def append_only_triggers(*, what: str = "it is append-only"):
    """No UPDATE, DELETE or TRUNCATE, for every connection, superusers too."""
    return [pgtrigger.Protect(name="append_only", operation=pgtrigger.Update | pgtrigger.Delete),
            NoTruncate(what=what)]


# ---------------------------------------------------------------- PostgreSQL: the partitions' TRUNCATE guards
# Row triggers on a partitioned table are copied by PostgreSQL to each partition, present and future; statement
# triggers (TRUNCATE) are not. Each partition gets this one, which names its parent's guard: pgtrigger.ignore()
# of the parent's guard (the test suite's flush, ``guard_lifted``) lifts it too.
PARTITION_GUARD = "stateboard_no_truncate"


def _partition_guard_function() -> str:
    ignored = f'{pgtrigger_utils.quote(pgtrigger_features.schema())}._pgtrigger_should_ignore'  # (as pgtrigger's)
    return f"""
CREATE OR REPLACE FUNCTION {PARTITION_GUARD}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF {ignored}(TG_ARGV[0]::name) IS TRUE THEN
        RETURN NULL;
    END IF;
    RAISE EXCEPTION 'pgtrigger: Cannot truncate % table: %', TG_TABLE_NAME, TG_ARGV[1];
END $$"""


def partition_guards_install(*, using: str = "default", **kwargs) -> int:
    """Give every partition of a table declaring ``NoTruncate`` that guard (PostgreSQL; idempotent); returns
    how many were added. Called by each migration that adds partitions, and after every ``migrate`` (a
    post_migrate receiver), so a partition a later migration adds is guarded even if that one forgot."""
    connection = connections[using]
    if connection.vendor != "postgresql":
        return 0
    wanted = {model._meta.db_table: (trigger.get_pgid(model), trigger.what)
              for model, trigger in pgtrigger.registered() if isinstance(trigger, NoTruncate)}
    with connection.cursor() as cursor:
        cursor.execute("""
            SELECT parent.relname, tree.relid::regclass::text, t.tgargs
            FROM pg_partitioned_table p JOIN pg_class parent ON parent.oid = p.partrelid
            CROSS JOIN LATERAL pg_partition_tree(p.partrelid) tree
            LEFT JOIN pg_trigger t ON t.tgrelid = tree.relid AND t.tgname = %s
            WHERE parent.relname = ANY(%s) AND pg_table_is_visible(parent.oid) AND tree.relid <> p.partrelid""",
                       [PARTITION_GUARD, list(wanted)])
        missing = [(partition, *wanted[parent]) for parent, partition, args in cursor.fetchall()
                   if args is None or bytes(args) != "\0".join([*wanted[parent], ""]).encode()]
        if missing:
            cursor.execute(_partition_guard_function())
        for partition, pgid, what in missing:
            cursor.execute(f"DROP TRIGGER IF EXISTS {PARTITION_GUARD} ON {partition}")
            cursor.execute(f"CREATE TRIGGER {PARTITION_GUARD} BEFORE TRUNCATE ON {partition} FOR EACH STATEMENT "
                           f"EXECUTE FUNCTION {PARTITION_GUARD}(%s, %s)", [pgid, what])
    return len(missing)


def guarded_operations() -> list[tuple[str, str, str]]:
    """(trigger uri, table, UPDATE|DELETE) for every row-level Protect trigger the models declare."""
    found = []
    for model, trigger in pgtrigger.registered():
        if not isinstance(trigger, pgtrigger.Protect):
            continue
        uri = f"{model._meta.label}:{trigger.name}"
        for operation in ("UPDATE", "DELETE"):
            if operation in str(trigger.operation).split(" OR "):
                found.append((uri, model._meta.db_table, operation))
    return found


def sqlite_trigger_name(uri: str, operation: str) -> str:
    return "guard_" + uri.replace(".", "_").replace(":", "_").lower() + "_" + operation.lower()


def sqlite_guards_install(*, using: str = "default", **kwargs) -> int:
    """Install the SQLite equivalents of the guards (a post_migrate receiver); returns how many."""
    connection = connections[using]
    if connection.vendor != "sqlite":
        return 0
    tables = set(connection.introspection.table_names())
    installed = 0
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE TABLE IF NOT EXISTS {LIFT_TABLE} (uri TEXT PRIMARY KEY)")
        for name in LEGACY_SQLITE_TRIGGERS:
            cursor.execute(f"DROP TRIGGER IF EXISTS {name}")
        for uri, table, operation in guarded_operations():
            if table not in tables:
                continue
            cursor.execute(
                f"CREATE TRIGGER IF NOT EXISTS {sqlite_trigger_name(uri, operation)} BEFORE {operation} ON {table} "
                f"WHEN NOT EXISTS (SELECT 1 FROM {LIFT_TABLE} WHERE uri = '{uri}') "
                f"BEGIN SELECT RAISE(ABORT, 'Cannot {operation.lower()} rows of {table}: it is guarded ({uri})'); END")
            installed += 1
    return installed


@contextlib.contextmanager
def guard_lifted(*uris: str, using: str = "default"):
    """Lift the named guards for the current transaction only: the one path for the few writes the
    product allows on guarded rows (tombstone GC, retention erasure). Callers audit what they do."""
    connection = connections[using]
    if connection.vendor != "sqlite":
        with pgtrigger.ignore(*uris):
            yield
        return
    with transaction.atomic(using=using), connection.cursor() as cursor:
        cursor.executemany(f"INSERT OR IGNORE INTO {LIFT_TABLE} (uri) VALUES (%s)", [(u,) for u in uris])
        try:
            yield
        finally:
            cursor.executemany(f"DELETE FROM {LIFT_TABLE} WHERE uri = %s", [(u,) for u in uris])
