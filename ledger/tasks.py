"""Celery tasks: thin wrappers over services; each is idempotent and safe to run twice."""

from celery import shared_task
from django.utils import timezone


@shared_task(acks_late=True)
def runs_expire_leases() -> int:
    """Move runs whose executor went silent past the lease to failed."""
    from ledger import services

    return services.runs_expire_leases(now=timezone.now())


@shared_task(acks_late=True)
def approvals_expire() -> int:
    """Expire undecided approval requests past their deadline into escalations."""
    from ledger import services

    return services.approvals_expire(now=timezone.now())


@shared_task(acks_late=True)
def checkpoints_prune() -> int:
    """Delete expired checkpoints that are no longer the latest of their intent."""
    from ledger import services

    return services.checkpoints_prune(now=timezone.now())


@shared_task(acks_late=True)
def workflow_fire(workflow_slug: str, slot: str | None = None) -> str:
    """A cron trigger; the trigger key is the schedule slot (the minute), so a double fire is one run."""
    from datetime import datetime

    from ledger import services

    slot = datetime.fromisoformat(slot) if slot else timezone.now().replace(second=0, microsecond=0)
    run, _ = services.run_trigger(workflow_slug=workflow_slug, inputs={"slot": slot.isoformat()},
                                  intent=f"{workflow_slug}:{slot.date().isoformat()}", trigger="schedule",
                                  trigger_key=f"schedule:{slot.isoformat()}", actor="system")
    return str(run.id)
