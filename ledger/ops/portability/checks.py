"""What an import must find true before it writes (SPEC §11.2): every chain from seq 1, and every field
the ledger determines, rebuilt from the events, equal to the file's value."""

from __future__ import annotations

from collections import defaultdict

from django.utils import timezone

from ledger.domain.machine import TERMINAL_STATES
from ledger.domain.projection import effects_replay
from ledger.ops.portability.rows import TYPES, ImportRefused, User
from ledger.services.writer import GENESIS_HASH, event_compute_hash


def now():
    return timezone.now()


def _refuse(number: int, line_type: str, field: str, found, expected):
    raise ImportRefused(f"line {number} ({line_type}): {field} is {found!r} in the file, the ledger says {expected!r}")


def verify(rows: dict, *, identities: bool) -> None:
    runs = {row.id: (number, row) for number, row, _ in rows.get("run", [])}
    workflows = {row.id: row for _, row, _ in rows.get("workflow", [])}
    events = defaultdict(list)
    for number, event, _ in rows.get("event", []):
        if event.run_id not in runs:
            _refuse(number, "event", "run", str(event.run_id), "a run of the file")
        events[event.run_id].append((number, event))
    for run_id, found in events.items():
        _chain(found)
    for run_id, (number, run) in runs.items():
        if run.workflow_id not in workflows:
            _refuse(number, "run", "workflow_id", run.workflow_id, "a workflow of the file")
        _run_fields(number, run, [event for _, event in events.get(run_id, [])])
    _effects(rows, runs, workflows, events)
    _approvals(rows, events)
    _checkpoints(rows, runs, events)


def _chain(found: list) -> None:
    prev = GENESIS_HASH
    for expected, (number, event) in enumerate(sorted(found, key=lambda item: item[1].seq), 1):
        if event.seq != expected:
            _refuse(number, "event", "seq", event.seq, expected)
        if event.prev_hash != prev:
            _refuse(number, "event", "prev_hash", event.prev_hash, prev)
        computed = event_compute_hash(event)
        if event.hash != computed:
            _refuse(number, "event", "hash", event.hash, computed)
        prev = event.hash


def _run_fields(number: int, run, events: list) -> None:
    events = sorted(events, key=lambda e: e.seq)
    transitions = [e for e in events if e.kind == "transition"]
    state = transitions[-1].data.get("to") if transitions else "captured"
    ended = next((e.reason_code for e in reversed(transitions) if e.data.get("to") in TERMINAL_STATES), "")
    determined = {"event_count": len(events), "last_hash": events[-1].hash if events else run.last_hash,
                  "state": state, "ended_reason": ended if state in TERMINAL_STATES else run.ended_reason}
    for field, expected in determined.items():
        if getattr(run, field) != expected:
            _refuse(number, "run", field, getattr(run, field), expected)


def _effects(rows: dict, runs: dict, workflows: dict, events: dict) -> None:
    scope = {str(run_id): (run.workflow_id, run.intent, run.input_fingerprint) for run_id, (_, run) in runs.items()}
    stages = {workflow.id: set(workflow.effect_stages) for workflow in workflows.values()}
    ordered = sorted((event for found in events.values() for _, event in found), key=lambda e: (e.at, e.run_id, e.seq))
    replayed = effects_replay(ordered, scope, stages)
    stored = {effect.idempotency_key: (number, effect) for number, effect, _ in rows.get("effect", [])}
    for key, fields in replayed.items():
        if key not in stored:
            raise ImportRefused(f"effect {key}: the ledger says {fields['status']!r}, the file has no such effect")
        number, effect = stored[key]
        for field in ("stage", "status", "system", "operation", "reference", "attempts"):
            if getattr(effect, field) != fields[field]:
                _refuse(number, "effect", field, getattr(effect, field), fields[field])
        if str(effect.run_id) != fields["run"]:
            _refuse(number, "effect", "run_id", str(effect.run_id), fields["run"])
    for key, (number, effect) in stored.items():
        if key not in replayed:
            _refuse(number, "effect", "idempotency_key", key, "no effect of this key in the ledger")


DECISIONS = frozenset({"approved", "rejected"})  # event kinds that are also the approval's status


def _approvals(rows: dict, events: dict) -> None:
    """An approval approved or rejected by a person is so in the ledger (an event naming it, by the same
    decider); a permit spent names the event that spent it."""
    named = defaultdict(list)
    for found in events.values():
        for _, event in found:
            approval = (event.data or {}).get("approval") if isinstance(event.data, dict) else None
            if approval:
                named[str(approval)].append(event)
    for number, approval, _ in rows.get("approval", []):
        if approval.kind == "escalation":
            continue  # closed by on-call's retry, abandon or rollback events, which name the run
        decisions = [e for e in named[str(approval.id)] if e.kind in DECISIONS]
        if approval.status in DECISIONS:
            last = decisions[-1] if decisions else None
            expected = last.kind if last else "no decision in the ledger"
            if approval.status != expected:
                _refuse(number, "approval", "status", approval.status, expected)
            if approval.decided_by != last.actor:
                _refuse(number, "approval", "decided_by", approval.decided_by, last.actor)
        elif approval.status == "pending" and decisions:
            _refuse(number, "approval", "status", approval.status, decisions[-1].kind)
        if approval.consumed_seq is not None:
            spent = [e for e in named[str(approval.id)] if e.seq == approval.consumed_seq
                     and e.kind in ("started", "compensated")]
            if not spent:
                _refuse(number, "approval", "consumed_seq", approval.consumed_seq, "no event spent it")


def _checkpoints(rows: dict, runs: dict, events: dict) -> None:
    for number, checkpoint, _ in rows.get("checkpoint", []):
        if checkpoint.run_id not in runs:
            _refuse(number, "checkpoint", "run_id", str(checkpoint.run_id), "a run of the file")
        run = runs[checkpoint.run_id][1]
        for field in ("workflow_id", "intent", "staged"):
            if getattr(checkpoint, field) != getattr(run, field):
                _refuse(number, "checkpoint", field, getattr(checkpoint, field), getattr(run, field))
        decided = {run.input_fingerprint} | {e.input_fingerprint for _, e in events.get(run.id, [])}
        if checkpoint.input_fingerprint not in decided:
            _refuse(number, "checkpoint", "input_fingerprint", checkpoint.input_fingerprint, sorted(decided))


def forget_identities(rows: dict) -> None:
    """--trust-unsigned: no identities come in, so nothing refers to one."""
    for line_type, found in rows.items():
        user_fields = [f.attname for f in TYPES[line_type]._meta.concrete_fields
                       if f.is_relation and f.related_model is User]
        for _, row, _ in found:
            for attname in user_fields:
                setattr(row, attname, None)
