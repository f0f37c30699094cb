import django.db.models.deletion
from django.db import migrations, models

# The (run, seq) unique index serves every lookup by run; the plain run_id index only cost each append
# an index write and led the planner astray on young tables. Dropping it keeps the foreign key as it is
# (Django's AlterField would drop and re-validate the constraint over the whole ledger).
INDEX = "ledger_ledgerevent_run_id_1790fda4"


class Migration(migrations.Migration):

    dependencies = [
        ("ledger", "0006_loop_notifications_goals"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="ledgerevent",
                    name="run",
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT,
                                            related_name="events", to="ledger.run"),
                ),
            ],
            database_operations=[
                migrations.RunSQL(f"DROP INDEX IF EXISTS {INDEX}",
                                  reverse_sql=f"CREATE INDEX {INDEX} ON ledger_ledgerevent (run_id)"),
            ],
        ),
    ]
