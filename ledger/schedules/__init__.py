"""Celery beat entries: the sweeps and one cron entry per scheduled workflow; cron validation."""

import json
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone

from celery.schedules import crontab
from croniter import CroniterBadDateError, croniter
from django.db import transaction
from django.utils import timezone
from django_celery_beat.models import CrontabSchedule, IntervalSchedule, PeriodicTask, PeriodicTasks

from ledger.models import Workflow

SWEEPS = {
    "stateboard: expire leases": ("ledger.tasks.runs_expire_leases", 60),
    "stateboard: expire approvals": ("ledger.tasks.approvals_expire", 60),
    "stateboard: prune checkpoints": ("ledger.tasks.checkpoints_prune", 3600),
    "stateboard: knowledge tombstone gc": ("knowledge.tasks.tombstones_gc", 3600),
    "stateboard: stale claims": ("knowledge.tasks.claims_stale_sweep", 60),
    "stateboard: claim retention": ("knowledge.tasks.claims_retention_sweep", 60),
    "stateboard: relay outbox": ("ledger.tasks.outbox_relay", 10),
    "stateboard: executor attempts": ("ledger.tasks.executor_sweep", 60),
    "stateboard: report rollups": ("ledger.tasks.rollups_refresh", 60),
    "stateboard: evaluate alerts": ("ledger.tasks.alerts_evaluate", 60),  # SPEC §14
    "stateboard: export traces": ("ledger.tasks.traces_export", 10),  # SPEC §16 (nothing without OTEL_*)
}
SLOT_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def schedule_problem(expression: str) -> str | None:
    """Why a 5-field UTC cron expression is refused, or None when it is valid and can fire."""
    fields = expression.split()
    if len(fields) != 5:
        return "Use a five-field cron expression: minute hour day-of-month month day-of-week."
    if not croniter.is_valid(expression):
        return f"{expression!r} is not a valid cron expression."
    try:
        minute, hour, day, month, weekday = fields
        crontab(minute=minute, hour=hour, day_of_month=day, month_of_year=month, day_of_week=weekday)
    except (ValueError, TypeError, IndexError) as exc:
        return f"{expression!r} is not a valid cron expression ({exc})."
    try:
        croniter(expression, datetime(2000, 1, 1, tzinfo=dt_timezone.utc)).get_next(datetime)
    except (CroniterBadDateError, ValueError):
        return f"{expression!r} can never fire."
    return None


def tick_slot(expression: str, now: datetime) -> str:
    """The scheduled time T of the tick due at ``now``: the latest cron time at or before ``now`` (UTC)."""
    now = now.astimezone(dt_timezone.utc).replace(microsecond=0)
    slot = croniter(expression, now + timedelta(seconds=1)).get_prev(datetime)
    return slot.astimezone(dt_timezone.utc).strftime(SLOT_FORMAT)


@transaction.atomic
def periodic_tasks_ensure() -> int:
    """Create or update the beat entries; returns how many workflow schedules are installed. Serialized on
    django-celery-beat's one ``PeriodicTasks`` row, so beats starting at once never duplicate a schedule."""
    PeriodicTasks.objects.get_or_create(ident=1, defaults={"last_update": timezone.now()})
    PeriodicTasks.objects.select_for_update().get(ident=1)
    for name, (task, seconds) in SWEEPS.items():
        every, _ = IntervalSchedule.objects.get_or_create(every=seconds, period=IntervalSchedule.SECONDS)
        PeriodicTask.objects.update_or_create(name=name, defaults={"task": task, "interval": every, "crontab": None})
    installed = 0
    scheduled = Workflow.objects.exclude(schedule="").filter(archived_at__isnull=True)  # archived: ticks stop
    PeriodicTask.objects.filter(name__startswith="workflow: ").exclude(
        name__in=[f"workflow: {slug}" for slug in scheduled.values_list("slug", flat=True)]
    ).delete()  # a schedule that was removed
    for workflow in scheduled:
        minute, hour, day, month, weekday = workflow.schedule.split()
        cron, _ = CrontabSchedule.objects.get_or_create(minute=minute, hour=hour, day_of_month=day,
                                                        month_of_year=month, day_of_week=weekday, timezone="UTC")
        PeriodicTask.objects.update_or_create(
            name=f"workflow: {workflow.slug}",
            defaults={"task": "ledger.tasks.workflow_fire", "crontab": cron, "interval": None,
                      "args": json.dumps([workflow.slug])})
        installed += 1
    return installed
