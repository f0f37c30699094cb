"""Export the ledger as JSON Lines and import a complete export into an empty database."""

from __future__ import annotations

import json
from collections import defaultdict
from typing import IO, Iterable

from django.db import transaction
from django.utils.dateparse import parse_datetime

from ledger.models import Approval, Checkpoint, Effect, LedgerEvent, Run, Workflow
from ledger.domain.projection import effects_replay
from ledger.services import GENESIS_HASH, event_compute_hash

WORKFLOW_FIELDS = ("slug", "title", "stages", "effect_stages", "approval_stages", "policy_version",
                   "checkpoint_ttl_seconds", "max_retries", "lease_seconds", "approval_ttl_seconds", "schedule")
RUN_FIELDS = ("intent", "trigger", "trigger_key", "inputs", "input_fingerprint", "policy_version", "env_fingerprint",
              "state", "decision", "current_stage", "stage_states", "triggered_by", "created_at", "updated_at",
              "ended_at", "decided_at", "retried_at", "lease_owner", "lease_expires_at", "event_count", "last_hash")
EVENT_FIELDS = ("seq", "at", "stage", "kind", "actor", "input_fingerprint", "policy_version", "env_fingerprint",
                "idempotency_key", "effect", "evidence", "reason_code", "data", "client_event_id", "body_digest",
                "prev_hash", "hash")
CHECKPOINT_FIELDS = ("intent", "source", "payload", "input_fingerprint", "policy_version", "env_fingerprint",
                     "version_boundary", "created_at", "expires_at")
APPROVAL_FIELDS = ("kind", "stage", "action", "action_digest", "policy_version", "input_fingerprint", "status",
                   "requested_by", "decided_by", "decided_role", "reason", "created_at", "deadline", "decided_at",
                   "consumed_at", "consumed_seq")
DATETIME_FIELDS = {"at", "created_at", "updated_at", "ended_at", "decided_at", "retried_at", "lease_expires_at",
                   "expires_at", "deadline", "consumed_at"}


class ImportRefused(Exception):
    pass


def _plain(obj, fields) -> dict:
    out = {}
    for name in fields:
        value = getattr(obj, name)
        out[name] = value.isoformat() if hasattr(value, "isoformat") else value
    return out


def export_lines(*, since=None, until=None) -> Iterable[str]:
    """Events in insertion order, each run's context line before its first event; checkpoints and approvals after."""
    events = LedgerEvent.objects.order_by("id")
    if since:
        events = events.filter(at__gte=since)
    if until:
        events = events.filter(at__lt=until)
    seen_workflows, seen_runs = set(), set()
    runs = {}
    for event in events.iterator(chunk_size=5000):
        if event.run_id not in seen_runs:
            run = runs.get(event.run_id) or Run.objects.select_related("workflow").get(id=event.run_id)
            if run.workflow_id not in seen_workflows:
                seen_workflows.add(run.workflow_id)
                yield json.dumps({"type": "workflow", **_plain(run.workflow, WORKFLOW_FIELDS)}, sort_keys=True)
            seen_runs.add(event.run_id)
            yield json.dumps({"type": "run", "id": str(run.id), "workflow": run.workflow.slug,
                              **_plain(run, RUN_FIELDS)}, sort_keys=True)
        yield json.dumps({"type": "event", "run": str(event.run_id), **_plain(event, EVENT_FIELDS)}, sort_keys=True)
    for checkpoint in Checkpoint.objects.filter(run_id__in=seen_runs).order_by("id").iterator():
        yield json.dumps({"type": "checkpoint", "run": str(checkpoint.run_id),
                          **_plain(checkpoint, CHECKPOINT_FIELDS)}, sort_keys=True)
    for approval in Approval.objects.filter(run_id__in=seen_runs).order_by("created_at").iterator():
        yield json.dumps({"type": "approval", "id": str(approval.id), "run": str(approval.run_id),
                          **_plain(approval, APPROVAL_FIELDS)}, sort_keys=True)


def _dates(record: dict) -> dict:
    return {k: (parse_datetime(v) if k in DATETIME_FIELDS and isinstance(v, str) else v) for k, v in record.items()}


def import_file(stream: IO[str]) -> dict:
    """Load a complete export into an empty database; refuse broken chains, gaps or a non-empty database."""
    if Run.objects.exists() or LedgerEvent.objects.exists():
        raise ImportRefused("The database is not empty: import_ledger loads into an empty database only.")
    records = defaultdict(list)
    for number, line in enumerate(stream, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError as exc:
            raise ImportRefused(f"Line {number}: not JSON ({exc}).")
        records[record.get("type")].append(record)
    runs = {r["id"]: r for r in records["run"]}
    by_run = defaultdict(list)
    for event in records["event"]:
        if event["run"] not in runs:
            raise ImportRefused(f"Event of run {event['run']} has no run context line.")
        by_run[event["run"]].append(event)
    for run_id, events in by_run.items():
        prev = GENESIS_HASH
        for expected, record in enumerate(sorted(events, key=lambda e: e["seq"]), 1):
            if record["seq"] != expected:
                raise ImportRefused(f"Run {run_id}: gap in the ledger at seq {expected} (found {record['seq']}).")
            event = LedgerEvent(run_id=run_id, **_dates({k: record[k] for k in EVENT_FIELDS}))
            if event.prev_hash != prev or event_compute_hash(event) != event.hash:
                raise ImportRefused(f"Run {run_id}: hash chain does not verify at seq {expected}.")
            prev = event.hash
    with transaction.atomic():
        workflows = {}
        for record in records["workflow"]:
            data = {k: record[k] for k in WORKFLOW_FIELDS if k in record}
            workflows[record["slug"]] = Workflow.objects.create(**data)
        Run.objects.bulk_create(
            Run(id=r["id"], workflow=workflows[r["workflow"]], **_dates({k: r[k] for k in RUN_FIELDS}))
            for r in runs.values())
        LedgerEvent.objects.bulk_create(
            (LedgerEvent(run_id=r["run"], **_dates({k: r[k] for k in EVENT_FIELDS})) for r in records["event"]),
            batch_size=2000)
        for record in records["checkpoint"]:
            run = runs[record["run"]]
            Checkpoint.objects.create(run_id=record["run"], workflow=workflows[run["workflow"]],
                                      **_dates({k: record[k] for k in CHECKPOINT_FIELDS}))
        Approval.objects.bulk_create(
            Approval(id=r["id"], run_id=r["run"], **_dates({k: r[k] for k in APPROVAL_FIELDS}))
            for r in records["approval"])
        effects = _effects_from_import(records["event"], runs, workflows)
    return {"workflows": len(workflows), "runs": len(runs), "events": len(records["event"]),
            "checkpoints": len(records["checkpoint"]), "approvals": len(records["approval"]), "effects": effects}


def _effects_from_import(events: list[dict], runs: dict, workflows: dict) -> int:
    """Rebuild the effect projection from the imported ledger."""
    run_scope = {rid: (workflows[r["workflow"]].id, r["intent"], r["input_fingerprint"]) for rid, r in runs.items()}
    stages = {w.id: set(w.effect_stages) for w in workflows.values()}
    replay_events = [LedgerEvent(run_id=e["run"], **_dates({k: e[k] for k in EVENT_FIELDS})) for e in events]
    replayed = effects_replay(replay_events, run_scope, stages)
    first_seen, last_seen = {}, {}
    for event in replay_events:
        if event.idempotency_key in replayed:
            first_seen.setdefault(event.idempotency_key, event)
            last_seen[event.idempotency_key] = event
    rows = []
    for key, fields in replayed.items():
        workflow_id, intent, fingerprint = run_scope[fields["run"]]
        rows.append(Effect(
            idempotency_key=key, workflow_id=workflow_id, intent=intent, input_fingerprint=fingerprint,
            stage=fields["stage"], run_id=fields["run"], status=fields["status"], system=fields["system"],
            operation=fields["operation"], reference=fields["reference"], attempts=fields["attempts"],
            claimed_seq=first_seen[key].seq, last_seq=last_seen[key].seq,
            created_at=first_seen[key].at, updated_at=last_seen[key].at))
    Effect.objects.bulk_create(rows)
    return len(rows)
