"""Reads of stages across runs (SPEC §15): each run's stages with their word and duration, from the
ledger's stage events, in a constant number of queries for any number of runs."""

from django.db.models import Max, Min, Q

from ledger.domain.effects import stage_word
from ledger.models import Effect, LedgerEvent

OUTCOMES = ("succeeded", "failed", "skipped", "verified", "unknown")


def _spans(runs, *, current_only: bool = False) -> dict:
    """{(run id, stage): {first, start, end}} of ``runs``' stage events, in one grouped query."""
    events = LedgerEvent.objects.filter(intent__in={r.intent for r in runs}, run_id__in=[r.id for r in runs],
                                        kind__in=(*OUTCOMES, "started", "proposed", "approval_requested"))
    if current_only:
        events = events.filter(stage__in={r.current_stage for r in runs if r.current_stage})
    rows = (events.exclude(stage="").values("run_id", "stage")
            .annotate(first=Min("at"), start=Min("at", filter=Q(kind="started")),
                      end=Max("at", filter=Q(kind__in=OUTCOMES))))
    return {(row["run_id"], row["stage"]): row for row in rows}


def with_current_stage_time(runs, *, now) -> list:
    """Set ``stage_seconds`` (how long the current stage took, or has run so far) and ``stage_running`` on
    each of ``runs`` (a page's rows), in one query; None where the stage has not started."""
    runs = list(runs)
    spans = _spans(runs, current_only=True) if runs else {}
    for run in runs:
        span = spans.get((run.id, run.current_stage)) or {}
        start, end = span.get("start") or span.get("first"), span.get("end")
        run.stage_running = bool(start) and end is None and not run.is_terminal
        until = end or (now if run.stage_running else None)
        run.stage_seconds = (until - start).total_seconds() if start and until else None
    return runs


def stage_grid(*, workflow, runs) -> list[dict]:
    """Per run (in the order given): {run, cells: [{stage, word, seconds, running}]} over the workflow's stages.

    ``seconds`` runs from the stage's first ``started`` (else its first event) to its last outcome, as on
    the run page; None while it runs or before it starts. The word is the run page's (``stage_word``:
    an unverified effect makes it ``unknown``)."""
    if not runs:
        return []
    intents = {r.intent for r in runs}
    spans = _spans(runs)
    effect_status = {}
    for intent, fingerprint, stage, status in (Effect.objects.filter(workflow_id=workflow.id, intent__in=intents)
                                               .order_by("claimed_seq", "id")
                                               .values_list("intent", "input_fingerprint", "stage", "status")):
        effect_status[(intent, fingerprint, stage)] = status  # the latest claimed, as stage_effect_statuses
    grid = []
    for run in runs:
        cells = []
        for stage in workflow.stages:
            span = spans.get((run.id, stage)) or {}
            start, end = span.get("start") or span.get("first"), span.get("end")
            status = ((run.stage_states or {}).get(stage) or {}).get("status")
            cells.append({"stage": stage,
                          "word": stage_word(status, effect_status.get((run.intent, run.input_fingerprint, stage))),
                          "seconds": (end - start).total_seconds() if start and end else None,
                          "running": bool(span) and end is None and not run.is_terminal})
        grid.append({"run": run, "cells": cells})
    return grid
