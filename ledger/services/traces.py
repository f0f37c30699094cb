"""SPEC §16: the ledger's runs exported as traces, from the ledger itself (docs/decisions.md, "The ledger is the
outbox"): no request writes or waits for anything of it.

Each pass reads the events after the mark (``TraceMark``: the last exported event by ``at`` and id), up to
``LAG`` ago — so a transaction that committed late is never passed over — and exports the trace of every run
that ended among them (a terminal run whose last event is there), then advances the mark. It advances only
after the collector accepted the spans: a collector outage leaves the mark where it was, and the next pass
sends the same runs again, with the same ids (``ledger.traces.context``). A run that moves on after it ended
(a rollback) is exported again when it ends again, its earlier spans unchanged.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.db.models import Q
from django.utils import timezone

from ledger.models import TERMINAL_STATES, LedgerEvent, Run, TraceMark
from ledger.traces import otlp
from ledger.traces.spans import run_spans

logger = logging.getLogger(__name__)

MARK = "otlp"
LAG = timedelta(seconds=30)  # far longer than any transaction that appends events
BATCH = 500  # events read per round; a pass goes on while rounds are full, at most ROUNDS of them
ROUNDS = 10


def traces_export(*, now=None, lag: timedelta = LAG, batch: int = BATCH) -> int:
    """One pass (beat, every few seconds; safe to run twice, or at once: the same spans again). Returns how many
    runs' traces the collector accepted. Without ``OTEL_EXPORTER_OTLP_ENDPOINT``: nothing, not a statement."""
    if not otlp.enabled():
        return 0
    now = now or timezone.now()
    exported = 0
    for _ in range(ROUNDS):
        done, full = _round(until=now - lag, batch=batch)
        if done is None:
            break
        exported += done
        if not full:
            break
    return exported


def _round(*, until, batch: int) -> tuple[int | None, bool]:
    """(runs exported or None when the collector refused them, whether the round read a full batch)."""
    mark = TraceMark.objects.filter(name=MARK).first()
    events = LedgerEvent.objects.filter(at__lte=until)
    if mark is not None:
        events = events.filter(Q(at__gt=mark.at) | Q(at=mark.at, id__gt=mark.event_id), at__gte=mark.at)  # (a range)
    window = list(events.order_by("at", "id").values_list("id", "at", "run_id", "intent", "seq")[:batch])
    if not window:
        return 0, False
    seen = {(run_id, seq) for _, _, run_id, _, seq in window}
    runs = Run.objects.filter(id__in={w[2] for w in window}, intent__in={w[3] for w in window},
                              state__in=TERMINAL_STATES).select_related("workflow")
    ended = [run for run in runs if (run.id, run.event_count) in seen]
    events_of = {run.id: [] for run in ended}
    if ended:  # one read of the ended runs' events (by run and intent: their partitions only)
        for event in LedgerEvent.objects.filter(run_id__in=list(events_of),
                                                intent__in={run.intent for run in ended}):
            events_of[event.run_id].append(event)
    spans = [span for run in ended for span in run_spans(run, events_of[run.id], workflow=run.workflow.slug,
                                                          effect_stages=run.workflow.effect_stages or ())]
    failure = otlp.send(spans) if spans else None
    last_id, last_at = window[-1][0], window[-1][1]
    if failure is not None:
        TraceMark.objects.filter(name=MARK).update(last_error=failure)
        logger.warning("traces: %d runs not exported (%s); the next pass sends them again", len(ended), failure)
        return None, False
    TraceMark.objects.update_or_create(name=MARK, defaults={"at": last_at, "event_id": last_id,
                                                            "exported_at": timezone.now(), "last_error": ""})
    return len(ended), len(window) == batch
