"""Models of SPEC §10: an intent's goal versions and the stage generations of rollbacks and
compensations (imported by ``ledger.models``, so they are part of the ledger app)."""

from django.db import models
from django.db.models import Q

from ledger.models.runs import Workflow, append_only_triggers


class Goal(models.Model):
    """A version of an intent's goal (SPEC §10.1): immutable; the latest version counts."""

    workflow = models.ForeignKey(Workflow, on_delete=models.PROTECT, related_name="goals")
    intent = models.CharField(max_length=500)
    version = models.PositiveIntegerField()
    objective = models.TextField(blank=True)
    constraints = models.JSONField(default=list, blank=True)
    acceptance = models.JSONField(default=list, blank=True)
    change = models.CharField(max_length=10, default="replace")  # amend | replace
    created_by = models.CharField(max_length=200)
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["-version"]
        constraints = [
            models.UniqueConstraint(fields=["workflow", "intent", "version"], name="goal_unique_version"),
            models.CheckConstraint(condition=Q(version__gte=1), name="goal_version_positive"),
        ]
        triggers = append_only_triggers()

    def __str__(self):
        return f"goal {self.workflow_id}:{self.intent} v{self.version}"


class StageGeneration(models.Model):
    """How many rollbacks and compensations of an intent and fingerprint covered a stage (SPEC §1
    Effect): the default effect key of the stage's next attempt carries it when it is >= 1.
    A projection of the ledger's ``rolled_back`` and ``compensated`` events."""

    workflow = models.ForeignKey(Workflow, on_delete=models.PROTECT, related_name="+")
    intent = models.CharField(max_length=500)
    input_fingerprint = models.CharField(max_length=64)
    stage = models.CharField(max_length=100)
    generation = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["workflow", "intent", "input_fingerprint", "stage"],
                                    name="stage_generation_unique"),
        ]

    def __str__(self):
        return f"{self.stage} generation {self.generation}"
