"""Effects, and what the ledger determines of a run, are projections of the ledger: rebuildable from its
events alone."""

from __future__ import annotations

from typing import Iterable

from ledger.domain.attributes import AttributesInvalid, attributes_replay
from ledger.domain.effects import effect_next
from ledger.domain.machine import LEASE_ENDING_STATES, TERMINAL_STATES
from ledger.domain.usage import usage_replay

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


# ---------------------------------------------------------------- the lease and the run, from the events

NO_LEASE = ("", None, None)  # (owner, holder user id, lease id): nobody holds the run


def lease_next(lease: tuple, kind: str, data) -> tuple:
    """The lease (owner, holder, lease id as text) after one event. Only three things move it: a transition
    into a terminal or escalated state (nobody holds it), ``leased`` (its data names who does) and
    ``released`` (nobody does). The run writer records every other change as one of the last two
    (``RunWriter.flush``), so this is the whole rule."""
    data = data if isinstance(data, dict) else {}
    if kind == "transition" and data.get("to") in LEASE_ENDING_STATES or kind == "released":
        return NO_LEASE
    if kind == "leased":
        lease_id = data.get("lease_id")
        return (data.get("owner", ""), data.get("holder"), str(lease_id) if lease_id else None)
    return lease


def run_replay(events: Iterable) -> dict:
    """What a run's events (in seq order) determine of its row: state, ended_reason, event_count,
    last_hash, the lease (lease_owner, lease_holder_id, lease_id), whether it is staged (its first
    decision says so: a dry run is always decided fresh / ``staged``) and the goal version it moved to
    (``goal_moved_to``: the last ``goal_changed``'s ``to``; absent when it never moved), and its usage totals."""
    state, ended, count, last_hash, lease, staged = "captured", "", 0, None, NO_LEASE, None
    found: dict = {}
    events = list(events)
    for event in events:
        data = event.data if isinstance(event.data, dict) else {}
        count, last_hash = count + 1, event.hash
        if event.kind == "transition":
            state = data.get("to", state)
            if state in TERMINAL_STATES:
                ended = event.reason_code
        elif event.kind == "goal_changed":
            found["goal_moved_to"] = data.get("to")
        elif event.kind == "decided" and staged is None:
            staged = event.reason_code == "staged"
        lease = lease_next(lease, event.kind, data)
    owner, holder, lease_id = lease
    found["usage"] = usage_replay(events)  # (SPEC §16: its events' usage added up)
    try:
        found["attributes"] = attributes_replay(events)
    except AttributesInvalid as invalid:  # (a ledger that holds such an event was not written by Stateboard)
        found["attributes"] = f"none: {invalid.detail}"
    return {"state": state, "ended_reason": ended if state in TERMINAL_STATES else "", "event_count": count,
            "last_hash": last_hash, "lease_owner": owner, "lease_holder_id": holder, "lease_id": lease_id,
            "staged": bool(staged), **found}
