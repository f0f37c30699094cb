"""SQLite equivalents of the pgtrigger guards, for the embedded default database.

On PostgreSQL the pgtrigger triggers of 0001 do the work and this migration does nothing.
"""

from django.db import migrations

SQLITE_TRIGGERS = [
    ("ledger_event_append_only_update", "UPDATE", "ledger_ledgerevent", "the ledger is append-only"),
    ("ledger_event_append_only_delete", "DELETE", "ledger_ledgerevent", "the ledger is append-only"),
    ("ledger_checkpoint_immutable", "UPDATE", "ledger_checkpoint", "checkpoints are immutable"),
]


def install(apps, schema_editor):
    if schema_editor.connection.vendor != "sqlite":
        return
    for name, operation, table, message in SQLITE_TRIGGERS:
        schema_editor.execute(
            f"CREATE TRIGGER IF NOT EXISTS {name} BEFORE {operation} ON {table} "
            f"BEGIN SELECT RAISE(ABORT, 'Cannot {operation.lower()} rows: {message}'); END;"
        )


def uninstall(apps, schema_editor):
    if schema_editor.connection.vendor != "sqlite":
        return
    for name, *_ in SQLITE_TRIGGERS:
        schema_editor.execute(f"DROP TRIGGER IF EXISTS {name}")


class Migration(migrations.Migration):
    dependencies = [("ledger", "0001_initial")]
    operations = [migrations.RunPython(install, uninstall)]
