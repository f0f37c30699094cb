"""What spans intents, kept apart from the per-intent tables so those can be partitioned by intent
(SPEC §13, docs/scaling.md): one small row per run and per effect key.

On PostgreSQL the run, event, effect and checkpoint tables are hash-partitioned by ``intent``
(migration 0021), and a partitioned table's unique constraints must include its partition key; the
rules that span intents are enforced here instead, by the primary keys and unique constraints of
these unpartitioned tables.
"""

from django.db import models

from ledger.models.runs import Workflow


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
