"""Room on each page of every ``ledger_run`` partition for HOT updates of a run's row (one per ledger event).

0004 set ``fillfactor = 70`` on ``ledger_run``; 0021 rebuilt it partitioned, and a partitioned table keeps
no storage parameters, so its partitions were filled to 100 % and most updates of a run's row wrote a new
entry in each of its eleven indexes (5–7 kB of WAL each; `bench fleet --private-cluster`)."""

from django.db import migrations

FILLFACTOR = 70


def _partitions(schema_editor) -> list[str]:
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SELECT relid::regclass::text FROM pg_partition_tree('ledger_run'::regclass) WHERE isleaf")
        return [name for (name,) in cursor.fetchall()]


def fillfactor_set(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        for partition in _partitions(schema_editor):
            schema_editor.execute(f"ALTER TABLE {partition} SET (fillfactor = {FILLFACTOR})")


def fillfactor_reset(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        for partition in _partitions(schema_editor):
            schema_editor.execute(f"ALTER TABLE {partition} RESET (fillfactor)")


class Migration(migrations.Migration):

    dependencies = [
        ("ledger", "0031_approval_links"),
    ]

    operations = [
        migrations.RunPython(fillfactor_set, fillfactor_reset),
    ]
