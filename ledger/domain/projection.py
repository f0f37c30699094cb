"""Effects are a projection of the ledger: rebuildable from ledger events alone."""

from __future__ import annotations

from typing import Iterable

from ledger.domain.effects import effect_next

COMPARED_FIELDS = ("stage", "run", "status", "system", "operation", "reference", "attempts")


def effects_replay(events: Iterable, runs: dict, effect_stages: dict) -> dict[str, dict]:
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
        if event.kind in ("compensated", "rolled_back"):
            # A compensation undoes the keys it lists (every effect of the run's fingerprint the world
            # held, for one recorded before rollbacks existed); a rollback isolates the keys it lists.
            data = event.data or {}
            listed = data.get("effects") if event.kind == "compensated" else data.get("isolated") or []
            scope = (workflow_id, intent, event.input_fingerprint or fingerprint)
            for effect_key, effect in effects.items():
                if (effect_key in listed) if listed is not None else effect["scope"] == scope:
                    effect["status"] = effect_next(effect["status"], event.kind, run_state=before) or effect["status"]
            continue
        key = event.idempotency_key
        if not key or event.stage not in effect_stages.get(workflow_id, ()):
            continue
        current = effects.get(key)
        moved = effect_next(current["status"] if current else None, event.kind, run_state=before,
                            reason_code=event.reason_code)
        if moved is None:
            continue
        if event.kind == "started":
            effects[key] = current = {"stage": event.stage, "run": run_id, "system": "", "operation": "",
                                      "reference": "", "attempts": current["attempts"] + 1 if current else 1,
                                      "scope": (workflow_id, intent, event.input_fingerprint or fingerprint)}
        current["status"] = moved
        for name in ("system", "operation", "reference"):
            current[name] = (event.effect or {}).get(name, current[name])
    for effect in effects.values():
        effect.pop("scope", None)
    return effects
