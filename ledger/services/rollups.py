"""The reports' hourly rollups, kept by a sweep (``ledger.tasks.rollups_refresh``).

Each pass recomputes whole hours — never increments — and upserts them, so a repeated pass, or two at
once (two beats, two workers), writes the same rows; of two passes writing one row the later reader wins.
An hour is recomputed when any of its runs gained an event (or an effect its runs claimed moved) since
shortly before the newest row was computed; with no row yet, the last ``BACKFILL`` is computed at once.
"""

from __future__ import annotations

import json
from datetime import timedelta
from datetime import timezone as dt_timezone

from django.db import connection, transaction
from django.db.models import Max
from django.db.models.functions import TruncHour
from django.utils import timezone

from ledger import reports
from ledger.models import Effect, LedgerEvent, ReportRollup

# Events are committed a moment after their ``at`` (and a trigger's latency a moment after its event): hours
# touched this long before the newest row's computation are looked at again.
MARGIN = timedelta(minutes=2)
BACKFILL = timedelta(days=31)  # the longest window, 30 days, and its partial first day


def _touched_hours(*, since) -> list:
    """Start of each hour whose runs gained an event since ``since``, or claimed an effect an event moved."""
    recent = LedgerEvent.objects.filter(at__gte=since)
    hours = set(recent.annotate(h=TruncHour("run__created_at", tzinfo=dt_timezone.utc))
                .values_list("h", flat=True).distinct())
    moved = recent.exclude(idempotency_key="").values("idempotency_key")
    hours |= set(Effect.objects.filter(idempotency_key__in=moved)
                 .annotate(h=TruncHour("run__created_at", tzinfo=dt_timezone.utc)).values_list("h", flat=True).distinct())
    return sorted(hours)


_UPSERT = """
INSERT INTO {table} (workflow_id, hour, {counts}, outcomes, latency_histogram, computed_at)
VALUES {values}
ON CONFLICT (workflow_id, hour) DO UPDATE SET {updates}, outcomes = excluded.outcomes,
    latency_histogram = excluded.latency_histogram, computed_at = excluded.computed_at
WHERE {table}.computed_at <= excluded.computed_at
"""


def rollups_refresh(*, now=None) -> int:
    """Recompute and store the hours touched since the last pass; returns how many rows it wrote."""
    now = now or timezone.now()  # taken before anything is read: a row is at least as fresh as its computed_at
    newest = ReportRollup.objects.aggregate(m=Max("computed_at"))["m"]
    if newest is None:
        found = reports.hour_figures(since=(now - BACKFILL).replace(minute=0, second=0, microsecond=0))
    else:
        hours = [h for h in _touched_hours(since=newest - MARGIN) if h >= now - BACKFILL]
        found = reports.hour_figures(hours=hours) if hours else {}
    rows = sorted(found.items())  # one order for every pass: concurrent upserts lock rows alike, never deadlock
    adapt = connection.ops.adapt_datetimefield_value
    for start in range(0, len(rows), 500):
        chunk, params = rows[start:start + 500], []
        for (workflow_id, hour), f in chunk:
            params += [workflow_id, adapt(hour), *(f[name] for name in reports.COUNTS),
                       json.dumps(f["outcomes"], sort_keys=True), json.dumps(f["latency_histogram"]), adapt(now)]
        width = 5 + len(reports.COUNTS)
        sql = _UPSERT.format(
            table=ReportRollup._meta.db_table, counts=", ".join(reports.COUNTS),
            values=", ".join(["(" + ", ".join(["%s"] * width) + ")"] * len(chunk)),
            updates=", ".join(f"{name} = excluded.{name}" for name in reports.COUNTS))
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(sql, params)
    return len(rows)
