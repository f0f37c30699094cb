"""SPEC §15: a run's attributes (a JSON column on the run row, written by the statements that already write
it) and the ``attributes_set`` event kind. On PostgreSQL a GIN index (``jsonb_path_ops``) on the partitioned
run table (one per partition) serves ``attr.<key>=<value>`` as containment (``attributes @> {"k": v}``).
Without ``fastupdate``: a new run's entries go into the index at once, never into a pending list that every
search reads whole (up to 4 MB per partition until a vacuum merges it: 20 ms per probe per partition, and the
planner, costing it, walked the list's order instead). Not declared in ``Run.Meta.indexes``: SQLite has no GIN
(its filter is JSON equality, unindexed)."""

from django.db import migrations, models

INDEX = "run_attributes_gin"


def attributes_index(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"CREATE INDEX IF NOT EXISTS {INDEX} ON ledger_run USING gin (attributes jsonb_path_ops) "
                              "WITH (fastupdate = off)")


def attributes_index_drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"DROP INDEX IF EXISTS {INDEX}")


class Migration(migrations.Migration):

    dependencies = [
        ('ledger', '0025_agent_activity'),
    ]

    operations = [
        migrations.AddField(
            model_name='run',
            name='attributes',
            field=models.JSONField(blank=True, db_default=models.Value({}, models.JSONField()), default=dict),
        ),
        migrations.AlterField(
            model_name='ledgerevent',
            name='kind',
            field=models.CharField(choices=[('started', 'Started'), ('proposed', 'Proposed'), ('succeeded', 'Succeeded'), ('failed', 'Failed'), ('skipped', 'Skipped'), ('verified', 'Verified'), ('unknown', 'Unknown'), ('decided', 'Decided'), ('transition', 'Transition'), ('checkpointed', 'Checkpointed'), ('approval_requested', 'Approval Requested'), ('approved', 'Approved'), ('rejected', 'Rejected'), ('compensated', 'Compensated'), ('retried', 'Retried'), ('abandoned', 'Abandoned'), ('expired', 'Expired'), ('corrected', 'Corrected'), ('leased', 'Leased'), ('rolled_back', 'Rolled Back'), ('goal_changed', 'Goal Changed'), ('released', 'Released'), ('escalation_raised', 'Escalation Raised'), ('escalation_closed', 'Escalation Closed'), ('approval_voided', 'Approval Voided'), ('attributes_set', 'Attributes Set')], max_length=30),
        ),
        migrations.RunPython(attributes_index, attributes_index_drop, elidable=False),
    ]
