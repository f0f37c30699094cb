"""SQLite equivalents of the audit trail's pgtrigger guards (see 0002)."""

from django.db import migrations

from stateboard.db import sqlite_guards

SQLITE_TRIGGERS = [
    ("ledger_audit_append_only_update", "UPDATE", "ledger_auditentry", "the audit trail is append-only"),
    ("ledger_audit_append_only_delete", "DELETE", "ledger_auditentry", "the audit trail is append-only"),
]


class Migration(migrations.Migration):
    dependencies = [("ledger", "0004_run_hot_updates")]
    operations = [sqlite_guards(SQLITE_TRIGGERS)]
