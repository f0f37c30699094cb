"""Database helpers shared by the apps: the append-only guards, declared once for both databases.

PostgreSQL (the product database) gets the pgtrigger triggers declared in each model's
``Meta.triggers``, installed by migrations. SQLite (the embedded demo) gets equivalents generated
from the same declarations after every ``migrate``, so a new guarded model is guarded on both.
"""

from __future__ import annotations

import contextlib

import pgtrigger
from django.db import connections, transaction

LIFT_TABLE = "stateboard_guard_lift"
# Triggers installed by the first SQLite migrations, before the guards were generated.
LEGACY_SQLITE_TRIGGERS = (
    "ledger_event_append_only_update", "ledger_event_append_only_delete", "ledger_checkpoint_immutable",
    "ledger_audit_append_only_update", "ledger_audit_append_only_delete",
    "knowledge_claim_append_only_update", "knowledge_gatedecision_append_only_update",
    "knowledge_gatedecision_append_only_delete", "knowledge_claimcitation_append_only_update",
    "knowledge_claimcitation_append_only_delete",
)


def append_only_triggers(*, what: str = "it is append-only"):
    """No UPDATE, DELETE or TRUNCATE, for every connection, superusers too."""
    return [
        pgtrigger.Protect(name="append_only", operation=pgtrigger.Update | pgtrigger.Delete),
        pgtrigger.Trigger(
            name="no_truncate",
            operation=pgtrigger.Truncate,
            level=pgtrigger.Statement,
            when=pgtrigger.Before,
            func=f"RAISE EXCEPTION 'pgtrigger: Cannot truncate % table: {what}', TG_TABLE_NAME;",
        ),
    ]


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
