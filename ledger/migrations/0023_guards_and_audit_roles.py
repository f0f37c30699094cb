"""The guards hold on every partition, and an audit entry's roles always fit.

- Runs, effects and checkpoints refuse TRUNCATE (events already refused UPDATE, DELETE and TRUNCATE).
- PostgreSQL copies the row triggers (UPDATE, DELETE) of a partitioned table to its partitions, but not
  its statement triggers: ``TRUNCATE ledger_ledgerevent_p01`` went through. Each partition of the
  partitioned tables gets the TRUNCATE guard here (``stateboard.db.partition_guards_install``); a
  migration that adds partitions calls it too, and it runs again after every ``migrate``.
- ``AuditEntry.role`` holds every role of the actor joined (26 characters for a superuser): text.
"""

import pgtrigger.compiler
import pgtrigger.migrations
from django.db import migrations, models

from stateboard.db import partition_guards_install


def partitions_guard(apps, schema_editor):
    partition_guards_install(using=schema_editor.connection.alias)


class Migration(migrations.Migration):

    dependencies = [
        ('ledger', '0022_event_ordering'),
    ]

    operations = [
        migrations.AlterField(
            model_name='auditentry',
            name='role',
            field=models.TextField(),
        ),
        pgtrigger.migrations.AddTrigger(
            model_name='checkpoint',
            trigger=pgtrigger.compiler.Trigger(name='no_truncate', sql=pgtrigger.compiler.UpsertTriggerSql(func="RAISE EXCEPTION 'pgtrigger: Cannot truncate % table: the ledger is never truncated', TG_TABLE_NAME;", hash='e9f52782c9a933211c9db20280beec5b4ddb9b5e', level='STATEMENT', operation='TRUNCATE', pgid='pgtrigger_no_truncate_e2c1f', table='ledger_checkpoint', when='BEFORE')),
        ),
        pgtrigger.migrations.AddTrigger(
            model_name='effect',
            trigger=pgtrigger.compiler.Trigger(name='no_truncate', sql=pgtrigger.compiler.UpsertTriggerSql(func="RAISE EXCEPTION 'pgtrigger: Cannot truncate % table: the ledger is never truncated', TG_TABLE_NAME;", hash='cae32db215d530c8d4e33407189cb33b33b64435', level='STATEMENT', operation='TRUNCATE', pgid='pgtrigger_no_truncate_0b36e', table='ledger_effect', when='BEFORE')),
        ),
        pgtrigger.migrations.AddTrigger(
            model_name='run',
            trigger=pgtrigger.compiler.Trigger(name='no_truncate', sql=pgtrigger.compiler.UpsertTriggerSql(func="RAISE EXCEPTION 'pgtrigger: Cannot truncate % table: the ledger is never truncated', TG_TABLE_NAME;", hash='496bdeaf6f61b4a7d6402d6949c58bd463f60be9', level='STATEMENT', operation='TRUNCATE', pgid='pgtrigger_no_truncate_b8a2b', table='ledger_run', when='BEFORE')),
        ),
        migrations.RunPython(partitions_guard, migrations.RunPython.noop, elidable=False),
    ]
