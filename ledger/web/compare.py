"""Compare two runs (usually two attempts of one intent): inputs, decisions, stages, effects, checkpoints."""

import uuid

from django.shortcuts import render
from django.views.decorators.http import require_GET

from ledger import selectors
from ledger.web.common import inputs_diff
from stateboard.policy import ANY, Policy, page

DECISION_FIELDS = ("outcome", "reason_code", "resume_from", "prior_run", "checkpoint", "failed_assertions",
                   "reset_stages", "verify_effects")


def _uuid(value):
    try:
        return uuid.UUID(str(value))
    except ValueError:
        return None


def compare_context(a, b) -> dict:
    """Side by side, row by row; ``same`` marks what did not change."""
    checkpoints = selectors.checkpoints_of_runs(run_ids=[a.id, b.id])
    times = {r.id: selectors.stage_times(run=r) for r in (a, b)}
    stages = list(dict.fromkeys([*a.workflow.stages, *b.workflow.stages]))
    effects = {r.id: {e.stage: e for e in r.effects.all()} for r in (a, b)}
    stage_rows = []
    for stage in stages:
        cells = []
        for r in (a, b):
            span = times[r.id].get(stage) or {}
            seconds = ((span["end"] - span["start"]).total_seconds()
                       if span.get("start") and span.get("end") else None)
            cells.append({"status": ((r.stage_states or {}).get(stage) or {}).get("status", "pending"),
                          "seconds": seconds, "effect": effects[r.id].get(stage)})
        same = cells[0]["status"] == cells[1]["status"]
        stage_rows.append({"stage": stage, "cells": cells, "same": same})
    decisions = [{"field": f, "a": (a.decision or {}).get(f), "b": (b.decision or {}).get(f),
                  "same": (a.decision or {}).get(f) == (b.decision or {}).get(f)} for f in DECISION_FIELDS]
    effect_keys = sorted({e.idempotency_key for r in (a, b) for e in r.effects.all()})
    by_key = {r.id: {e.idempotency_key: e for e in r.effects.all()} for r in (a, b)}
    effect_rows = [{"key": k, "cells": [by_key[a.id].get(k), by_key[b.id].get(k)]} for k in effect_keys]
    cps = [checkpoints.get(str(a.id)), checkpoints.get(str(b.id))]
    return {"a": a, "b": b, "inputs": inputs_diff(a.inputs, b.inputs), "decisions": decisions,
            "stages": stage_rows, "effects": effect_rows, "checkpoints": cps,
            "same_intent": a.workflow_id == b.workflow_id and a.intent == b.intent,
            "same_fingerprint": a.input_fingerprint == b.input_fingerprint}


@require_GET
@page(Policy(roles=ANY))
def run_compare(request):
    """``/runs/compare/?a=<id>&b=<id>``: what changed between two runs."""
    ids = [_uuid(request.GET.get("a", "")), _uuid(request.GET.get("b", ""))]
    runs = selectors.runs_by_ids(ids=[i for i in ids if i]) if all(ids) else {}
    missing = [name for name, i in zip("ab", ids) if not i or str(i) not in runs]
    if missing:
        return render(request, "ledger/run_compare.html",
                      {"missing": missing, "a_id": request.GET.get("a", ""), "b_id": request.GET.get("b", "")},
                      status=404 if all(ids) else 400)
    context = compare_context(runs[str(ids[0])], runs[str(ids[1])])
    template = "ledger/run_compare.html#compare-body" if request.htmx else "ledger/run_compare.html"
    return render(request, template, context)
