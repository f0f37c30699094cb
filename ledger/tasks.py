"""Celery tasks: thin wrappers over services; each is idempotent and safe to run twice."""

from celery import shared_task
from django.utils import timezone

from ledger import services
from stateboard.celery import DB_RETRY


@shared_task(acks_late=True, **DB_RETRY)
def runs_expire_leases() -> int:
    """Move runs whose executor went silent past the lease to failed."""
    return services.runs_expire_leases(now=timezone.now())


@shared_task(acks_late=True, **DB_RETRY)
def approvals_expire() -> int:
    """Expire undecided approval requests past their deadline into escalations; forget Slack request
    signatures past the replay window."""
    now = timezone.now()
    services.slack_signatures_prune(now=now)
    return services.approvals_expire(now=now)


@shared_task(acks_late=True, **DB_RETRY)
def checkpoints_prune() -> int:
    """Delete expired checkpoints that are no longer the latest of their intent."""
    return services.checkpoints_prune(now=timezone.now())


@shared_task(acks_late=True, **DB_RETRY)
def workflow_fire(workflow_slug: str, slot: str | None = None) -> str:
    """A schedule tick. ``slot`` is the tick's scheduled time T, computed by beat (``ledger.schedules.beat``) and
    carried in the message: the worker never reads its own clock for it, so a late or repeated
    delivery of one tick is still that tick's one run."""
    if not slot:
        raise ValueError("workflow_fire needs the tick's slot (sent by ledger.schedules.beat.TickScheduler)")
    run = services.schedule_tick(workflow_slug=workflow_slug, slot=slot)
    return str(run.id) if run else ""


@shared_task(acks_late=True, **DB_RETRY)
def executor_run(run_id: str, stage: str) -> str:
    """One executor pass over an effect stage (SPEC §5.2); a redelivered message is harmless."""
    return services.executor_run(run_id=run_id, stage=stage)


@shared_task(acks_late=True, **DB_RETRY)
def executor_sweep() -> int:
    """Re-enqueue executor attempts past their deadline; escalate stuck executor stages."""
    return services.executor_sweep(now=timezone.now())


@shared_task(acks_late=True, **DB_RETRY)
def outbox_relay() -> int:
    """Send outbox rows the on-commit relay could not (the broker was down)."""
    return services.outbox_relay()


@shared_task(acks_late=True, **DB_RETRY)
def chat_deliver(body: dict, response_url: str = "") -> str:
    """POST one chat message; run by the outbox relay, which keeps the row when it raises."""
    return services.chat_deliver(body=body, response_url=response_url)


@shared_task(acks_late=True, **DB_RETRY)
def alert_send(alert_id: int, change_id: int, channel: str) -> str:
    """Deliver one alert change on one channel; run by the outbox relay, which keeps the row when it raises."""
    return services.alert_send(alert_id=alert_id, change_id=change_id, channel=channel)


@shared_task(acks_late=True, **DB_RETRY)
def alerts_evaluate() -> dict:
    """Evaluate every alert rule (SPEC §14); idempotent, any number of beats at once."""
    return services.alerts_evaluate(now=timezone.now())


@shared_task(acks_late=True, **DB_RETRY)
def rollups_refresh() -> int:
    """Recompute the reports' rollups of the hours touched since the last pass; safe to run twice, or at once."""
    return services.rollups_refresh(now=timezone.now())


@shared_task(acks_late=True, **DB_RETRY)
def traces_export() -> int:
    """Export the traces of the runs that ended since the mark (SPEC §16); nothing without an OTLP endpoint."""
    return services.traces_export(now=timezone.now())
