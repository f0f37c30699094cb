"""Database helpers shared by the apps."""

import pgtrigger
from django.db import migrations


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


def sqlite_guard_sql(name: str, operation: str, table: str, message: str) -> str:
    """The SQLite trigger refusing ``operation`` (UPDATE|DELETE) on ``table``."""
    return (f"CREATE TRIGGER IF NOT EXISTS {name} BEFORE {operation} ON {table} "
            f"BEGIN SELECT RAISE(ABORT, 'Cannot {operation.lower()} rows: {message}'); END;")


def sqlite_guards(triggers: list[tuple[str, str, str, str]]) -> migrations.RunPython:
    """A migration operation installing SQLite equivalents of the pgtrigger guards.

    ``triggers`` are (name, UPDATE|DELETE, table, message). On other databases it does nothing
    (PostgreSQL has the pgtrigger triggers).
    """

    def install(apps, schema_editor):
        if schema_editor.connection.vendor == "sqlite":
            for name, operation, table, message in triggers:
                schema_editor.execute(sqlite_guard_sql(name, operation, table, message))

    def uninstall(apps, schema_editor):
        if schema_editor.connection.vendor == "sqlite":
            for name, *_ in triggers:
                schema_editor.execute(f"DROP TRIGGER IF EXISTS {name}")

    return migrations.RunPython(install, uninstall)
