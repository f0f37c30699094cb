"""Reads of stages across runs (SPEC §15): each run's stages with their word and duration, from the
ledger's stage events, in a constant number of queries for any number of runs."""

from django.db.models import Max, Min, Q

from ledger.domain.effects import stage_word
from ledger.models import Effect, LedgerEvent

OUTCOMES = ("succeeded", "failed", "skipped", "verified", "unknown")


def stage_grid(*, workflow, runs) -> list[dict]:
    """Per run (in the order given): {run, cells: [{stage, word, seconds, running}]} over the workflow's stages.

    ``seconds`` runs from the stage's first ``started`` (else its first event) to its last outcome, as on
    the run page; None while it runs or before it starts. The word is the run page's (``stage_word``:
    an unverified effect makes it ``unknown``)."""
    if not runs:
        return []
    ids, intents = [r.id for r in runs], {r.intent for r in runs}
    spans = {}
    rows = (LedgerEvent.objects.filter(intent__in=intents, run_id__in=ids,
                                       kind__in=(*OUTCOMES, "started", "proposed", "approval_requested"))
            .exclude(stage="").values("run_id", "stage")
            .annotate(first=Min("at"), start=Min("at", filter=Q(kind="started")),
                      end=Max("at", filter=Q(kind__in=OUTCOMES))))
    for row in rows:
        spans[(row["run_id"], row["stage"])] = row
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
