"""Celery beat entries: the TTL sweeps and one cron entry per scheduled workflow."""

import json

SWEEPS = {
    "stateboard: expire leases": ("ledger.tasks.runs_expire_leases", 60),
    "stateboard: expire approvals": ("ledger.tasks.approvals_expire", 60),
    "stateboard: prune checkpoints": ("ledger.tasks.checkpoints_prune", 3600),
    "stateboard: knowledge tombstone gc": ("knowledge.tasks.tombstones_gc", 3600),
    "stateboard: stale claims": ("knowledge.tasks.claims_stale_sweep", 60),
    "stateboard: claim retention": ("knowledge.tasks.claims_retention_sweep", 60),
}


def periodic_tasks_ensure() -> int:
    """Create or update the beat entries; returns how many workflow schedules are installed."""
    from django_celery_beat.models import CrontabSchedule, IntervalSchedule, PeriodicTask

    from ledger.models import Workflow

    for name, (task, seconds) in SWEEPS.items():
        every, _ = IntervalSchedule.objects.get_or_create(every=seconds, period=IntervalSchedule.SECONDS)
        PeriodicTask.objects.update_or_create(name=name, defaults={"task": task, "interval": every, "crontab": None})
    installed = 0
    PeriodicTask.objects.filter(name__startswith="workflow: ").exclude(
        name__in=[f"workflow: {slug}" for slug in Workflow.objects.exclude(schedule="").values_list("slug", flat=True)]
    ).delete()  # a schedule that was removed
    for workflow in Workflow.objects.exclude(schedule=""):
        minute, hour, day, month, weekday = workflow.schedule.split()
        cron, _ = CrontabSchedule.objects.get_or_create(minute=minute, hour=hour, day_of_month=day,
                                                        month_of_year=month, day_of_week=weekday, timezone="UTC")
        PeriodicTask.objects.update_or_create(
            name=f"workflow: {workflow.slug}",
            defaults={"task": "ledger.tasks.workflow_fire", "crontab": cron, "interval": None,
                      "args": json.dumps([workflow.slug])})
        installed += 1
    return installed
