"""Effects are a projection of the ledger: rebuildable from ledger events alone."""

from __future__ import annotations

from typing import Iterable

from ledger.models import Effect, LedgerEvent, Run

COMPARED_FIELDS = ("stage", "run", "status", "system", "operation", "reference", "attempts")


def effects_replay(events: Iterable[LedgerEvent], runs: dict, effect_stages: dict) -> dict[str, dict]:
    """Replay events (in insertion order) into {idempotency_key: effect fields}.

    ``runs`` maps run id → (workflow id, intent, input_fingerprint); ``effect_stages`` maps
    workflow id → set of effect stages.
    """
    effects: dict[str, dict] = {}
    state: dict = {}  # run id → state before the next event
    for event in events:
        run_id = str(event.run_id)
        before = state.get(run_id, "captured")
        if event.kind == "transition":
            state[run_id] = (event.data or {}).get("to", before)
            continue
        workflow_id, intent, fingerprint = runs[run_id]
        key = event.idempotency_key
        is_effect_stage = event.stage in effect_stages.get(workflow_id, ())
        ref = event.effect or {}
        current = effects.get(key) if key else None
        if event.kind == "compensated":
            listed = (event.data or {}).get("effects")  # the keys it undid (recorded since rollbacks exist)
            for effect_key, effect in effects.items():
                if listed is not None:
                    if effect_key in listed:
                        effect["status"] = "compensated"
                elif effect["scope"] == (workflow_id, intent, fingerprint) \
                        and effect["status"] not in ("failed", "compensated"):
                    effect["status"] = "compensated"
            continue
        if event.kind == "rolled_back":
            for effect_key in (event.data or {}).get("isolated") or []:
                if effect_key in effects:
                    effects[effect_key]["status"] = "isolated"
            continue
        if event.kind == "started" and is_effect_stage and key:
            attempts = current["attempts"] + 1 if current else 1
            effects[key] = {"stage": event.stage, "run": run_id, "status": "attempted", "system": "",
                            "operation": "", "reference": "", "attempts": attempts,
                            "scope": (workflow_id, intent, fingerprint)}
        elif current is None:
            continue
        elif event.kind in ("succeeded", "unknown", "verified") and is_effect_stage:
            current["status"] = {"succeeded": "effective"}.get(event.kind, event.kind)
            for name in ("system", "operation", "reference"):
                current[name] = ref.get(name, current[name])
        elif event.kind == "failed" and is_effect_stage:
            if before == "execute" or event.reason_code == "effect_absent":
                current["status"] = "failed"
        elif event.kind == "skipped" and is_effect_stage and current["status"] == "attempted":
            current["status"] = "failed"
    for effect in effects.values():
        effect.pop("scope", None)
    return effects


def effects_rebuild_diff() -> list[str]:
    """Compare stored effects with a replay of the whole ledger; [] means they are equal."""
    from ledger.models import Workflow

    runs = {str(r[0]): (r[1], r[2], r[3]) for r in Run.objects.values_list("id", "workflow_id", "intent",
                                                                             "input_fingerprint")}
    stages = {w.id: set(w.effect_stages) for w in Workflow.objects.all()}
    replayed = effects_replay(LedgerEvent.objects.order_by("id").iterator(chunk_size=5000), runs, stages)
    stored = {e.idempotency_key: {"stage": e.stage, "run": str(e.run_id), "status": e.status, "system": e.system,
                                  "operation": e.operation, "reference": e.reference, "attempts": e.attempts}
              for e in Effect.objects.all()}
    diffs = []
    for key in sorted(set(replayed) | set(stored)):
        a, b = replayed.get(key), stored.get(key)
        if a != b:
            diffs.append(f"{key}: ledger={a} stored={b}")
    return diffs
