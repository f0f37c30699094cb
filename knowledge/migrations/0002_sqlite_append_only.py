"""SQLite equivalents of the pgtrigger guards, for the embedded default database.

On PostgreSQL the pgtrigger triggers of 0001 do the work and this migration does nothing.
Claim versions refuse UPDATE only here: the tombstone GC deletes them, and SQLite has no way
to let that one writer through (on PostgreSQL it uses ``pgtrigger.ignore``).
"""

from django.db import migrations

from stateboard.db import sqlite_guards

SQLITE_TRIGGERS = [
    ("knowledge_claim_append_only_update", "UPDATE", "knowledge_claim", "claim versions are append-only"),
    ("knowledge_gatedecision_append_only_update", "UPDATE", "knowledge_gatedecision", "the gate log is append-only"),
    ("knowledge_gatedecision_append_only_delete", "DELETE", "knowledge_gatedecision", "the gate log is append-only"),
    ("knowledge_claimcitation_append_only_update", "UPDATE", "knowledge_claimcitation", "citations are append-only"),
    ("knowledge_claimcitation_append_only_delete", "DELETE", "knowledge_claimcitation", "citations are append-only"),
]


class Migration(migrations.Migration):
    dependencies = [("knowledge", "0001_initial")]
    operations = [sqlite_guards(SQLITE_TRIGGERS)]
