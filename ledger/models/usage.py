"""SPEC §16: what a workflow spent each UTC day, and the one escalation a spent day budget opens.

``WorkflowDaySpend`` is kept by the appends themselves — incremented by the statement that writes the event
and the run (``store.run_write``), never recomputed — so a trigger reads the day's cost in its declared reads
(``services.runs``), and reports and ``/metrics`` read totals per workflow without summing events. Cost is in
millionths of a dollar (an integer: exact in SQL on every database; ``domain.usage.micro_usd``).

``BudgetEscalation`` holds "one escalation stands for the workflow's day" in the database: its unique
(workflow, day) lets one of two concurrent triggers (of different intents, so not serialised by the intent
lock) claim the day; the other's insert does nothing and it is decided ``noop`` / ``budget_exhausted``.
"""

from django.db import models

from ledger.models.runs import Workflow


class WorkflowDaySpend(models.Model):
    workflow = models.ForeignKey(Workflow, on_delete=models.CASCADE, related_name="+",
                                 db_index=False)  # workflow_day_spend_unique leads with it
    day = models.CharField(max_length=10)  # YYYY-MM-DD (UTC): a string, so a trigger's declared reads bind it
    input_tokens = models.BigIntegerField(default=0)
    output_tokens = models.BigIntegerField(default=0)
    cost_micro_usd = models.BigIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["workflow", "day"], name="workflow_day_spend_unique")]

    def __str__(self):
        return f"{self.workflow_id} @ {self.day}: {self.cost_micro_usd} µ$"


class BudgetEscalation(models.Model):
    workflow = models.ForeignKey(Workflow, on_delete=models.CASCADE, related_name="+",
                                 db_index=False)  # budget_escalation_one_per_day leads with it
    day = models.CharField(max_length=10)
    run_id = models.UUIDField()  # the escalated run (runs are partitioned: no foreign key)
    intent = models.CharField(max_length=500)
    created_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["workflow", "day"], name="budget_escalation_one_per_day")]

    def __str__(self):
        return f"{self.workflow_id} @ {self.day}: {self.run_id}"
