"""Events carry their run's intent; what spans intents gets tables of its own (``ledger.models.keys``).
Existing events get their intent here on SQLite, and in 0021's copy on PostgreSQL; effect keys are
copied from the effects on both."""

import django.db.models.deletion
from django.db import migrations, models

from stateboard.db import guard_lifted


def keys_fill(apps, schema_editor):
    connection = schema_editor.connection
    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO ledger_effectkey (idempotency_key, intent) "
                       "SELECT idempotency_key, intent FROM ledger_effect")
        if connection.vendor == "sqlite":
            cursor.execute("SELECT EXISTS (SELECT 1 FROM ledger_ledgerevent)")
            if cursor.fetchone()[0]:
                with guard_lifted("ledger.LedgerEvent:append_only", using=connection.alias):
                    cursor.execute("UPDATE ledger_ledgerevent SET intent = "
                                   "(SELECT intent FROM ledger_run WHERE ledger_run.id = ledger_ledgerevent.run_id)")


class Migration(migrations.Migration):

    dependencies = [
        ('ledger', '0019_verbose_names'),
    ]

    operations = [
        migrations.AddField(
            model_name='ledgerevent',
            name='intent',
            field=models.CharField(default='', max_length=500),
            preserve_default=False,
        ),
        migrations.CreateModel(
            name='EffectKey',
            fields=[
                ('idempotency_key', models.CharField(max_length=200, primary_key=True, serialize=False)),
                ('intent', models.CharField(max_length=500)),
            ],
            options={
                'constraints': [models.UniqueConstraint(fields=('idempotency_key', 'intent'), name='effectkey_key_intent')],
            },
        ),
        migrations.CreateModel(
            name='RunKey',
            fields=[
                ('run_id', models.UUIDField(primary_key=True, serialize=False)),
                ('intent', models.CharField(max_length=500)),
                ('trigger_key', models.CharField(max_length=500)),
                ('workflow', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='ledger.workflow')),
            ],
            options={
                'constraints': [models.UniqueConstraint(fields=('workflow', 'trigger_key'), name='runkey_unique_trigger_key'), models.UniqueConstraint(fields=('run_id', 'intent'), name='runkey_run_intent')],
            },
        ),
        migrations.RunPython(keys_fill, migrations.RunPython.noop),
    ]
