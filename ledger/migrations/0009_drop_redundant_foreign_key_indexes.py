import django.db.models.deletion
from django.db import migrations, models

# Foreign-key indexes that other indexes already lead with (as 0007 did for the ledger's run_id):
# run.workflow (run_intent_state, run_intent_fp_state, run_unique_trigger_key), effect.workflow
# (effect_intent_fp), effect.run (effect_run, the same index twice) and checkpoint.workflow
# (checkpoint_intent_latest). Each cost every insert an index write, and the run's drew a trigger's
# locking read of the intent's runs to a scan of the whole workflow while the table had no statistics
# yet (a prepared statement keeps that plan). The constraints stay as they are.
INDEXES = {
    ("run", "workflow", "runs", "ledger.workflow"): ("ledger_run_workflow_id_f9347e4d", "ledger_run", "workflow_id"),
    ("effect", "workflow", "effects", "ledger.workflow"): ("ledger_effect_workflow_id_74ce4342", "ledger_effect",
                                                          "workflow_id"),
    ("effect", "run", "effects", "ledger.run"): ("ledger_effect_run_id_708c3a16", "ledger_effect", "run_id"),
    ("checkpoint", "workflow", "checkpoints", "ledger.workflow"): ("ledger_checkpoint_workflow_id_e68ec133",
                                                                  "ledger_checkpoint", "workflow_id"),
}


class Migration(migrations.Migration):

    dependencies = [
        ("ledger", "0008_run_failed_or_retried_index"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name=model, name=field,
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT,
                                            related_name=related, to=to),
                )
                for model, field, related, to in INDEXES
            ],
            database_operations=[
                migrations.RunSQL(f"DROP INDEX IF EXISTS {index}", reverse_sql=f"CREATE INDEX {index} ON {table} ({column})")
                for index, table, column in INDEXES.values()
            ],
        ),
    ]
