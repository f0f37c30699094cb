"""Goal versions and stage generations: the small reads the fingerprint and the default effect key need.

Below every verb that triggers, decides or claims (SPEC §1, §10): a run's fingerprint includes the
intent's latest goal version, and a stage's default effect key carries its generation once a
rollback or a compensation covered it, so an isolated or compensated key is never claimed again.
"""

from __future__ import annotations

from django.db.models import F

from ledger.models import Goal, StageGeneration


def goal_latest_version(*, workflow_id: int, intent: str) -> int | None:
    """The intent's latest goal version, or None when it has none."""
    return next(iter(goals_latest(intent=intent, workflow_id=workflow_id)), None)


def goals_latest(*, intent: str, **workflow):
    """The intent's latest goal version as a queryset of at most one (``workflow_id=`` or ``workflow__slug=``)."""
    return Goal.objects.filter(intent=intent, **workflow).order_by("-version").values_list("version", flat=True)[:1]


def stage_generation(*, workflow_id: int, intent: str, fingerprint: str, stage: str) -> int:
    """Rollbacks and compensations of this intent and fingerprint that covered the stage (0 if none)."""
    return (StageGeneration.objects.filter(workflow_id=workflow_id, intent=intent, input_fingerprint=fingerprint,
                                           stage=stage).values_list("generation", flat=True).first()) or 0


def generations_bump(*, workflow_id: int, intent: str, fingerprint: str, stages) -> None:
    """One more rollback or compensation covered these stages (callers hold the workflow or run lock)."""
    for stage in sorted(set(stages)):
        row, created = StageGeneration.objects.get_or_create(
            workflow_id=workflow_id, intent=intent, input_fingerprint=fingerprint, stage=stage,
            defaults={"generation": 1})
        if not created:
            StageGeneration.objects.filter(id=row.id).update(generation=F("generation") + 1)
