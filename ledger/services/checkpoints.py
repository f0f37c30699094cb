"""Checkpoints (L3): server checkpoints derived from the ledger, agents' whitelisted saves, pruning."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from ledger.domain import recovery
from ledger.models import TERMINAL_STATES, Checkpoint, Run
from ledger.services.writer import illegal, lease_require, run_lock, run_spec, stage_status
from stateboard.canonical import canonical_json
from stateboard.errors import Invalid
from stateboard.moments import parse_moment

CHECKPOINT_MAX_BYTES = 64 * 1024
BIGINT_MAX = 2**63 - 1
# A stage's status in a state_table: the words of SPEC §3.
STAGE_WORDS = frozenset({"succeeded", "skipped", "verified", "pending", "failed", "unknown"})
SUMMARY_MAX_CHARS = 280
CHECKPOINT_FIELDS = frozenset({
    "stage", "resume_after", "retry_count", "max_retries", "allowed_next_stages", "observed_effects",
    "state_table", "version_boundary", "assertions", "pending_intents", "input_fingerprint",
    "policy_version", "env_fingerprint", "created_at", "expires_at",
})
TRANSCRIPT_FIELDS = frozenset({
    "messages", "message_list", "transcript", "transcripts", "conversation", "chat", "chat_history",
    "history", "summary_chain", "summaries", "tool_schemas", "tools", "tool_calls", "tool_outputs",
    "prompt", "prompts", "completion", "raw_output",
})

# ---------------------------------------------------------------- checkpoints

def server_checkpoint(run: Run, *, now: datetime) -> Checkpoint:
    """Derived from the run's ledger projection, so recovery works for agents that never save one.
    Returned unsaved: the run writer inserts it with the events."""
    spec = run_spec(run)
    status = stage_status(run)
    done = [s for s in spec.stages if recovery.stage_done(spec, s, status.get(s))]
    next_stage = recovery.first_not_done(spec, status)
    table = {s: {"status": e.get("status"), "pointer": e.get("pointer", "")} for s, e in run.stage_states.items()}
    payload = {
        "stage": run.current_stage,
        "retry_count": (run.decision or {}).get("retry_count", 0),
        "max_retries": run.workflow.max_retries,
        "allowed_next_stages": [next_stage] if next_stage else [],
        "observed_effects": sorted({e["effect_key"] for e in run.stage_states.values() if e.get("effect_key")}),
        "state_table": table,
        "assertions": [{"stage": s, "pointer": run.stage_states[s].get("pointer", ""),
                        "digest": run.stage_states[s].get("digest", "")} for s in done],
        "input_fingerprint": run.input_fingerprint,
        "policy_version": run.policy_version,
        "env_fingerprint": run.env_fingerprint,
    }
    return checkpoint_build(run, payload=payload, source=Checkpoint.Source.SERVER, now=now)


def checkpoint_build(run: Run, *, payload: dict, source: str, now: datetime, saved_by: str = "system",
                     expires_at: datetime | None = None, version_boundary: int | None = None) -> Checkpoint:
    """created_at and expires_at live in their columns (read back into the payload by the API)."""
    expires_at = expires_at or now + timedelta(seconds=run.workflow.checkpoint_ttl_seconds)
    if version_boundary is not None:
        payload = {**payload, "version_boundary": version_boundary}
    checkpoint = Checkpoint(
        workflow_id=run.workflow_id, intent=run.intent, run_id=run.id, source=source, payload=payload,
        staged=run.staged, input_fingerprint=run.input_fingerprint, policy_version=run.policy_version,
        env_fingerprint=run.env_fingerprint, version_boundary=version_boundary, saved_by=saved_by,
        created_at=now, expires_at=expires_at)
    return checkpoint


def _looks_like_transcript(value) -> str | None:
    """Name the first transcript-like part of a payload: message lists, chat turns, tool schemas."""
    stack = [("", value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, dict):
            if {"role", "content"} <= set(item):
                return path or "payload"
            for key, child in item.items():
                if key in TRANSCRIPT_FIELDS:
                    return f"{path}.{key}".lstrip(".")
                stack.append((f"{path}.{key}".lstrip("."), child))
        elif isinstance(item, list):
            stack.extend((f"{path}[{i}]", child) for i, child in enumerate(item))
    return None


def checkpoint_validate(run: Run, payload: dict, *, now: datetime) -> tuple[dict, datetime | None]:
    if not isinstance(payload, dict):
        raise Invalid("validation_error", "A checkpoint is a JSON object of whitelisted fields.")
    size = len(canonical_json(payload))
    if size > CHECKPOINT_MAX_BYTES:
        raise Invalid("checkpoint_too_large", f"Checkpoint is {size} bytes; the limit is {CHECKPOINT_MAX_BYTES} "
                                              "(64 KiB). Keep the minimum to resume; put artifacts behind pointers.")
    transcript = _looks_like_transcript(payload)
    if transcript:
        raise Invalid("checkpoint_transcript_rejected",
                      f"Checkpoints never hold transcripts, message lists, summary chains or tool schemas "
                      f"(found at {transcript!r}). Save the minimum to resume: state_table, assertions, pointers.",
                      field=transcript)
    unknown = sorted(set(payload) - CHECKPOINT_FIELDS)
    if unknown:
        raise Invalid("checkpoint_field_not_allowed", f"Fields not allowed in a checkpoint: {', '.join(unknown)}.",
                      fields=unknown, allowed=sorted(CHECKPOINT_FIELDS))
    for name, expected in (("input_fingerprint", run.input_fingerprint), ("policy_version", run.policy_version),
                           ("env_fingerprint", run.env_fingerprint)):
        if name in payload and payload[name] != expected:
            raise Invalid("checkpoint_mismatch", f"{name} does not match the run's ({expected!r}).", field=name)
    table = payload.get("state_table", {})
    if not isinstance(table, dict):
        raise Invalid("validation_error", "state_table must be an object {stage: {status, summary, pointer}}.")
    for stage, entry in table.items():
        if stage not in run.workflow.stages:
            raise Invalid("unknown_stage", f"state_table names unknown stage {stage!r}.")
        if not isinstance(entry, dict) or set(entry) - {"status", "summary", "pointer", "digest"}:
            raise Invalid("validation_error", f"state_table[{stage!r}] may hold only status, summary, pointer.")
        if "status" in entry and entry["status"] not in STAGE_WORDS:
            raise Invalid("invalid_stage_status", f"state_table[{stage!r}].status must be one of "
                                                  f"{', '.join(sorted(STAGE_WORDS))}.", field=f"state_table.{stage}")
        if len(str(entry.get("summary", ""))) > SUMMARY_MAX_CHARS:
            raise Invalid("summary_too_long", f"state_table[{stage!r}].summary exceeds {SUMMARY_MAX_CHARS} characters.")
    for name in ("observed_effects", "assertions", "pending_intents", "allowed_next_stages"):
        if name in payload and not isinstance(payload[name], list):
            raise Invalid("validation_error", f"{name} must be a list.")
    for name in ("observed_effects", "allowed_next_stages"):
        if not all(isinstance(item, str) and len(item) <= 200 for item in payload.get(name, [])):
            raise Invalid("validation_error", f"{name} must be a list of strings.")
    for assertion in payload.get("assertions", []):
        if not isinstance(assertion, dict) or assertion.get("stage") not in run.workflow.stages \
                or set(assertion) - {"stage", "pointer", "digest"} \
                or not all(isinstance(assertion.get(k, ""), str) for k in ("pointer", "digest")):
            raise Invalid("validation_error", "assertions must be objects {stage, pointer, digest} naming "
                                              "stages of this workflow.")
    boundary = payload.get("version_boundary")
    if boundary is not None and (not isinstance(boundary, int) or isinstance(boundary, bool)
                                 or not 0 <= boundary <= BIGINT_MAX):
        raise Invalid("validation_error", f"version_boundary must be an integer from 0 to {BIGINT_MAX}.")
    expires_at = None
    if payload.get("expires_at") is not None:
        expires_at = parse_moment(payload["expires_at"])
        limit = now + timedelta(seconds=run.workflow.checkpoint_ttl_seconds)
        if expires_at is None or not now < expires_at <= limit:
            raise Invalid("validation_error", "expires_at must be an aware date-time within the workflow's checkpoint TTL.")
    clean = {k: v for k, v in payload.items() if k not in ("created_at", "expires_at")}
    clean.update(input_fingerprint=run.input_fingerprint, policy_version=run.policy_version,
                 env_fingerprint=run.env_fingerprint)
    return clean, expires_at


@transaction.atomic
def checkpoint_save(*, run_id, payload: dict, actor: str, intent: str | None = None) -> Checkpoint:
    """An agent's richer checkpoint (whitelisted, at most 64 KiB), saved only by the run's lease holder
    and recorded as saved by it (``saved_by``): the decision trusts no checkpoint another agent wrote.

    Checkpoints are their own immutable layer (L3), not ledger events; the run stays locked while one is
    saved, so a finished run takes none and an intent's checkpoints stay in order."""
    if set(payload) == {"payload"} and isinstance(payload["payload"], dict):
        payload = payload["payload"]
    run = run_lock(run_id, intent=intent)
    if run.state in TERMINAL_STATES:
        raise illegal(run, f"The run is {run.state!r}; save checkpoints while it runs.")
    lease_require(run, actor)
    now = timezone.now()
    clean, expires_at = checkpoint_validate(run, payload, now=now)
    checkpoint = checkpoint_build(run, payload=clean, source=Checkpoint.Source.AGENT, now=now, saved_by=actor,
                                  expires_at=expires_at, version_boundary=clean.get("version_boundary"))
    checkpoint.save(force_insert=True)
    return checkpoint


def checkpoints_prune(*, now: datetime | None = None, batch_size: int = 1000, max_batches: int | None = None) -> int:
    """Sweep: delete expired checkpoints that are no longer the latest of their intent nor of their
    fingerprint. A newer checkpoint of the same (workflow, intent, fingerprint) is also newer than it
    within the intent, so "a newer one of its fingerprint exists" says both. Batches of ``batch_size``,
    each its own transaction: one locking SELECT (SKIP LOCKED: a concurrent sweep takes other rows)
    and one DELETE by id. Safe twice and concurrently."""
    now = now or timezone.now()
    newer = Checkpoint.objects.filter(workflow_id=OuterRef("workflow_id"), intent=OuterRef("intent"),
                                      input_fingerprint=OuterRef("input_fingerprint"), id__gt=OuterRef("id"))
    removed = batches = 0
    while max_batches is None or batches < max_batches:
        with transaction.atomic():
            ids = list(Checkpoint.objects.select_for_update(skip_locked=True)
                       .filter(expires_at__lte=now).filter(Exists(newer)).order_by("expires_at", "id")
                       .values_list("id", flat=True)[:batch_size])
            if not ids:
                break
            removed += Checkpoint.objects.filter(id__in=ids).delete()[0]
        batches += 1
    return removed
