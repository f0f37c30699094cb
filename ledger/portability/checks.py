"""What an import must find true before it writes (SPEC §11.2): every chain from seq 1, and every field
the ledger determines, rebuilt from the events, equal to the file's value."""

from __future__ import annotations

import uuid
from collections import defaultdict

from django.utils import timezone

from ledger.domain.approval_rules import (
    DEFAULT_APPROVERS,
    ESCALATION_APPROVERS,
    RulesInvalid,
    rules_checked,
    schema_problem,
    vote,
)
from ledger.domain.kinds import APPROVAL_STATUS_KINDS
from ledger.domain.projection import effects_replay, run_replay
from ledger.domain.usage import UsageInvalid, budget_checked, usage_checked
from ledger.portability.rows import TYPES, ImportRefused, User
from ledger.services import GENESIS_HASH, event_compute_hash, input_fingerprint


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
    for number, workflow, _ in rows.get("workflow", []):
        _budget(number, workflow)
        _approval_rules(number, workflow)
    goal_versions = defaultdict(list)
    for _, goal, _ in rows.get("goal", []):
        goal_versions[(goal.workflow_id, goal.intent)].append(goal.version)
    for run_id, (number, run) in runs.items():
        if run.workflow_id not in workflows:
            _refuse(number, "run", "workflow_id", run.workflow_id, "a workflow of the file")
        _run_fields(number, run, [event for _, event in events.get(run_id, [])], workflows[run.workflow_id],
                    goal_versions[(run.workflow_id, run.intent)])
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
        if event.usage:  # SPEC §16: as the append records it (its hash may have been computed over anything)
            try:
                recorded = usage_checked(event.usage)
            except UsageInvalid as exc:
                _refuse(number, "event", "usage", event.usage, f"a usage object ({exc})")
            if recorded != event.usage:
                _refuse(number, "event", "usage", event.usage, recorded)
        computed = event_compute_hash(event)
        if event.hash != computed:
            _refuse(number, "event", "hash", event.hash, computed)
        prev = event.hash


def _budget(number: int, workflow) -> None:
    try:
        if not isinstance(workflow.budget, dict):
            raise UsageInvalid("budget must be an object")
        budget_checked(workflow.budget)
    except UsageInvalid as exc:
        _refuse(number, "workflow", "budget", workflow.budget, f"a budget ({exc})")


def _approval_rules(number: int, workflow) -> None:
    """SPEC §17: rules the API would refuse never come in (a request would take them)."""
    try:
        rules_checked(workflow.approval_rules, stages=workflow.stages, approval_stages=workflow.approval_stages,
                      schema_problem=schema_problem)
    except (RulesInvalid, TypeError) as exc:
        _refuse(number, "workflow", "approval_rules", workflow.approval_rules, f"approval rules ({exc})")


def _run_fields(number: int, run, events: list, workflow, goal_versions: list) -> None:
    """The run's row as its events determine it (``projection.run_replay``), and its goal version: the last
    ``goal_changed``'s, else the one whose fingerprint its first event carries."""
    events = sorted(events, key=lambda e: e.seq)
    determined = run_replay(events)
    if not events:
        determined.update(last_hash=run.last_hash, staged=run.staged)
    moved_to = determined.pop("goal_moved_to", _UNMOVED)
    first_fp = events[0].input_fingerprint if events else run.input_fingerprint
    goal = moved_to if moved_to is not _UNMOVED else next(
        (g for g in (run.goal_version, None, *goal_versions) if _fingerprint(run, workflow, g) == first_fp),
        "none whose fingerprint its first event carries")
    determined["goal_version"] = goal
    if events:
        determined["input_fingerprint"] = events[-1].input_fingerprint
    for field, expected in determined.items():
        found = getattr(run, field)
        if (str(found) if field == "lease_id" and found else found) != expected:
            _refuse(number, "run", field, found, expected)
    if not isinstance(goal, str) and _fingerprint(run, workflow, goal) != run.input_fingerprint:
        _refuse(number, "run", "inputs", run.inputs, "the inputs of the fingerprint its events carry")


_UNMOVED = object()


def _fingerprint(run, workflow, goal_version) -> str:
    return input_fingerprint(workflow_slug=workflow.slug, intent=run.intent, inputs=run.inputs,
                             policy_version=run.policy_version, goal_version=goal_version)


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


def _approvals(rows: dict, events: dict) -> None:
    """Each approval is what the events naming it say (SPEC §11.2): asked for by one (a request or an
    escalation raised), its status, decider and decision time those of the last that set its status
    (``kinds.APPROVAL_STATUS_KINDS``), and a permit spent by the one event that spent it."""
    named = defaultdict(list)
    for found in events.values():
        for _, event in found:
            approval = event.data.get("approval") if isinstance(event.data, dict) else None
            if approval:
                named[str(approval)].append(event)
    for number, approval, line in rows.get("approval", []):
        found = sorted(named[str(approval.id)], key=lambda e: (e.at, e.seq))
        changes = [e for e in found if e.kind in APPROVAL_STATUS_KINDS]
        if not changes or changes[0].data.get("status", APPROVAL_STATUS_KINDS[changes[0].kind]) != "pending":
            _refuse(number, "approval", "id", str(approval.id), "no request or escalation of this id in the ledger")
        asked = changes[0]
        if (asked.data.get("kind"), asked.run_id) != (approval.kind, approval.run_id):
            _refuse(number, "approval", "kind, run_id", [approval.kind, str(approval.run_id)],
                    [asked.data.get("kind"), str(asked.run_id)])
        last = changes[-1]
        status = APPROVAL_STATUS_KINDS[last.kind] or last.data.get("status")
        decider = last.data.get("decided_by", last.actor if last.kind in ("approved", "rejected") else "")
        determined = {"status": status, "decided_by": decider,
                      "decided_at": None if status == "pending" else last.at}
        spent = [e for e in found if e.kind in SPENDING_KINDS]
        determined.update(consumed_seq=spent[-1].seq if spent else None, consumed_at=spent[-1].at if spent else None)
        determined.update(_rules_and_votes(approval, asked, found))
        for field, expected in determined.items():
            if field not in line:  # a file from before the field: the ledger's value
                setattr(approval, field, expected)
            if getattr(approval, field) != expected:
                _refuse(number, "approval", field, getattr(approval, field), expected)


VOTE_KINDS = ("approval_voted", "approved")  # SPEC §17: each approving vote, the last one the approval


def _rules_and_votes(approval, asked, found: list) -> dict:
    """What the request took from its stage's rules (its ``approval_requested``), the request it amends, and its
    votes (one event each)."""
    escalation = approval.kind == "escalation"
    amended_from = asked.data.get("amended_from")
    votes = [] if escalation else [
        vote(by=e.actor, at=e.at, reason=e.data.get("reason") or "") for e in found if e.kind in VOTE_KINDS]
    return {"approvers": asked.data.get("approvers", list(ESCALATION_APPROVERS if escalation else DEFAULT_APPROVERS)),
            "quorum": asked.data.get("quorum", 1), "votes": votes,
            "amended_from_id": _uuid_or_text(amended_from)}


def _uuid_or_text(value):
    try:
        return uuid.UUID(value) if value is not None else None
    except (ValueError, TypeError, AttributeError):
        return value  # (no row's id: the comparison refuses it)


SPENDING_KINDS = ("started", "compensated")  # the events that spend the permit they name


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
