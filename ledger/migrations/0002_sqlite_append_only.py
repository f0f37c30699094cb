"""SQLite equivalents of the pgtrigger guards, for the embedded default database.

On PostgreSQL the pgtrigger triggers of 0001 do the work and this migration does nothing.
"""

from django.db import migrations

from stateboard.db import sqlite_guards

SQLITE_TRIGGERS = [
    ("ledger_event_append_only_update", "UPDATE", "ledger_ledgerevent", "the ledger is append-only"),
    ("ledger_event_append_only_delete", "DELETE", "ledger_ledgerevent", "the ledger is append-only"),
    ("ledger_checkpoint_immutable", "UPDATE", "ledger_checkpoint", "checkpoints are immutable"),
]


class Migration(migrations.Migration):
    dependencies = [("ledger", "0001_initial")]
    operations = [sqlite_guards(SQLITE_TRIGGERS)]
