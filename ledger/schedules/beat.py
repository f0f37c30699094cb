"""Celery beat with the tick's scheduled time in the message (SPEC §5.1).

``TickScheduler`` is django-celery-beat's ``DatabaseScheduler`` (schedule changes are picked up
from the PeriodicTask rows without a restart); when a workflow's cron entry is due it adds
``slot`` = the tick's time T (UTC, ``YYYY-MM-DDTHH:MM:SSZ``) to ``ledger.tasks.workflow_fire``'s
kwargs. T is derived from the entry's crontab and the scheduler's "now" (the latest cron time at or
before it), so two schedulers, or one that sends late, name the same tick the same way.
"""

from __future__ import annotations

from django_celery_beat.schedulers import DatabaseScheduler, ModelEntry

from ledger.schedules import tick_slot

FIRE_TASK = "ledger.tasks.workflow_fire"


def entry_expression(entry: ModelEntry) -> str | None:
    """The 5-field cron expression of a crontab entry, or None (interval entries)."""
    cron = getattr(entry.model, "crontab", None)
    if cron is None:
        return None
    return " ".join([cron.minute, cron.hour, cron.day_of_month, cron.month_of_year, cron.day_of_week])


def entry_with_slot(entry: ModelEntry, now) -> ModelEntry:
    """``entry`` with ``slot`` added to its kwargs when it is a workflow tick."""
    expression = entry_expression(entry)
    if entry.task == FIRE_TASK and expression:
        entry.kwargs = {**(entry.kwargs or {}), "slot": tick_slot(expression, now)}
    return entry


class TickScheduler(DatabaseScheduler):
    def apply_async(self, entry, producer=None, advance=True, **kwargs):
        entry = self.reserve(entry) if advance else entry  # (reserving builds a fresh entry: add the slot after)
        return super().apply_async(entry_with_slot(entry, self.app.now()), producer=producer, advance=False,
                                   **kwargs)
