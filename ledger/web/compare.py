"""Compare two runs (usually two attempts of one intent): inputs, decisions, stages, effects, checkpoints."""

import uuid

from django.shortcuts import render
from django.views.decorators.http import require_GET

from ledger import attempt_selectors, selectors
from ledger.domain.effects import stage_word
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
    ran = attempt_selectors.runs_as_they_ran([a, b])  # each run's own decision and effects, not its intent's
    effects = {r.id: {e.stage: e for e in ran[r.id]["effects"]} for r in (a, b)}
    stage_rows = []
    for stage in stages:
        cells = []
        for r in (a, b):
            span = times[r.id].get(stage) or {}
            seconds = ((span["end"] - span["start"]).total_seconds()
                       if span.get("start") and span.get("end") else None)
            status = ((r.stage_states or {}).get(stage) or {}).get("status")
            effect = effects[r.id].get(stage)
            cells.append({"status": stage_word(status, effect.status if effect else None),
                          "seconds": seconds, "effect": effects[r.id].get(stage)})
        same = cells[0]["status"] == cells[1]["status"]
        stage_rows.append({"stage": stage, "cells": cells, "same": same})
    da, db = ran[a.id]["decision"], ran[b.id]["decision"]
    decisions = [{"field": f, "a": da.get(f), "b": db.get(f), "same": da.get(f) == db.get(f)} for f in DECISION_FIELDS]
    effect_keys = sorted({e.idempotency_key for r in (a, b) for e in ran[r.id]["effects"]})
    by_key = {r.id: {e.idempotency_key: e for e in ran[r.id]["effects"]} for r in (a, b)}
    effect_rows = [{"key": k, "cells": [by_key[a.id].get(k), by_key[b.id].get(k)]} for k in effect_keys]
    cps = [checkpoints.get(str(a.id)), checkpoints.get(str(b.id))]
    return {"a": a, "b": b, "inputs": inputs_diff(a.inputs, b.inputs), "decisions": decisions,
            "stages": stage_rows, "effects": effect_rows, "checkpoints": cps,
            "decided_again": [ran[a.id]["later"], ran[b.id]["later"]],
            "same_intent": a.workflow_id == b.workflow_id and a.intent == b.intent,
            "same_fingerprint": a.input_fingerprint == b.input_fingerprint}


def _resolve(value: str) -> tuple[str | None, str]:
    """A full run id or a unique id prefix → (run id, ""); else (None, what is wrong with it)."""
    value = (value or "").strip()[:64]
    if not value:
        return None, ""
    full = _uuid(value)
    found = [str(full)] if full else [str(i) for i in selectors.run_by_prefix(prefix=value)]
    if len(found) == 1:
        return found[0], ""
    return None, (f"“{value}” matches more than one run: give more of its id." if found
                  else f"No run id starts with “{value}”.")


@require_GET
@page(Policy(roles=ANY))
def run_compare(request):
    """``/runs/compare/?a=<id or prefix>&b=<id or prefix>``: what changed between two runs; without
    ids an empty form, an unknown or ambiguous id a form error."""
    raw = {name: request.GET.get(name, "") for name in "ab"}
    resolved = {name: _resolve(value) for name, value in raw.items()}
    errors = {name: why for name, (_, why) in resolved.items() if why}
    ids = [resolved["a"][0], resolved["b"][0]]
    runs = selectors.runs_by_ids(ids=ids) if all(ids) else {}
    if not all(ids) or any(i not in runs for i in ids):
        for name, i in zip("ab", ids):
            if i and i not in runs:
                errors[name] = f"No run {i}."
        return render(request, "ledger/run_compare.html",
                      {"form_only": True, "errors": errors, "a_id": raw["a"], "b_id": raw["b"]})
    context = compare_context(runs[ids[0]], runs[ids[1]])
    template = "ledger/run_compare.html#compare-body" if request.htmx else "ledger/run_compare.html"
    return render(request, template, context)
