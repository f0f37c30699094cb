"""SQLite equivalents of the pgtrigger guards, for the embedded default database.

On PostgreSQL the pgtrigger triggers of 0001 do the work and this migration does nothing.
Claim versions refuse UPDATE only here: the tombstone GC deletes them, and SQLite has no way
to let that one writer through (on PostgreSQL it uses ``pgtrigger.ignore``).
"""

from django.db import migrations

SQLITE_TRIGGERS = [
    ("knowledge_claim_append_only_update", "UPDATE", "knowledge_claim", "claim versions are append-only"),
    ("knowledge_gatedecision_append_only_update", "UPDATE", "knowledge_gatedecision", "the gate log is append-only"),
    ("knowledge_gatedecision_append_only_delete", "DELETE", "knowledge_gatedecision", "the gate log is append-only"),
    ("knowledge_claimcitation_append_only_update", "UPDATE", "knowledge_claimcitation", "citations are append-only"),
    ("knowledge_claimcitation_append_only_delete", "DELETE", "knowledge_claimcitation", "citations are append-only"),
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
    dependencies = [("knowledge", "0001_initial")]
    operations = [migrations.RunPython(install, uninstall)]
