"""What spans intents, kept apart from the per-intent tables so those can be partitioned by intent
(SPEC §13, docs/scaling.md): one small row per run and per effect key.

On PostgreSQL the run, event, effect and checkpoint tables are hash-partitioned by ``intent``
(migration 0021), and a partitioned table's unique constraints must include its partition key; the
rules that span intents are enforced here instead, by the primary keys and unique constraints of
these unpartitioned tables.
"""

from django.db import connections, models

from ledger.models.runs import Workflow

# SQLite's run-key triggers (PostgreSQL's are in migration 0021). SQLite drops a table's triggers when
# Django rebuilds the table (an altered field), so they are ensured again after every migrate.
SQLITE_RUN_KEY_TRIGGERS = (
    "CREATE TRIGGER IF NOT EXISTS ledger_run_key_insert AFTER INSERT ON ledger_run BEGIN "
    "INSERT INTO ledger_runkey (run_id, intent, workflow_id, trigger_key) "
    "VALUES (NEW.id, NEW.intent, NEW.workflow_id, NEW.trigger_key); END",
    "CREATE TRIGGER IF NOT EXISTS ledger_run_key_delete AFTER DELETE ON ledger_run BEGIN "
    "DELETE FROM ledger_runkey WHERE run_id = OLD.id; END",
    "CREATE TRIGGER IF NOT EXISTS ledger_run_key_change BEFORE UPDATE OF id, intent, workflow_id, trigger_key "
    "ON ledger_run WHEN NEW.id IS NOT OLD.id OR NEW.intent IS NOT OLD.intent "
    "OR NEW.workflow_id IS NOT OLD.workflow_id OR NEW.trigger_key IS NOT OLD.trigger_key "
    "BEGIN SELECT RAISE(ABORT, 'a run''s id, intent, workflow and trigger key never change'); END",
)


def sqlite_run_key_triggers_install(*, using: str = "default", **kwargs) -> None:
    """Ensure SQLite's run-key triggers (a post_migrate receiver), once the key table exists."""
    connection = connections[using]
    if connection.vendor != "sqlite" or "ledger_runkey" not in connection.introspection.table_names():
        return
    with connection.cursor() as cursor:
        for statement in SQLITE_RUN_KEY_TRIGGERS:
            cursor.execute(statement)


class RunKey(models.Model):
    """A run's address, one row per run: a run found by its id alone (``run_id`` → its intent and
    workflow, then its one partition), what approvals and the audit refer to, and the trigger key's
    uniqueness per workflow. The database writes it, a trigger on the run's insert (migration 0021), on
    PostgreSQL and SQLite alike; it is never written by the product."""

    run_id = models.UUIDField(primary_key=True)
    intent = models.CharField(max_length=500)
    workflow = models.ForeignKey(Workflow, on_delete=models.PROTECT, db_index=False, related_name="+")
    trigger_key = models.CharField(max_length=500)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["workflow", "trigger_key"], name="runkey_unique_trigger_key"),
            models.UniqueConstraint(fields=["run_id", "intent"], name="runkey_run_intent"),  # what run rows refer to
        ]

    def __str__(self):
        return f"{self.run_id} ({self.intent})"


class EffectKey(models.Model):
    """An effect's idempotency key, unique across the install, with the intent its effect belongs to.
    The store claims it in the statement that inserts the effect; on PostgreSQL the effect's foreign
    key ``(idempotency_key, intent)`` points here and its ``(idempotency_key, intent)`` is unique in
    its partition, so a key has one effect."""

    idempotency_key = models.CharField(max_length=200, primary_key=True)
    intent = models.CharField(max_length=500)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["idempotency_key", "intent"], name="effectkey_key_intent")]

    def __str__(self):
        return self.idempotency_key
