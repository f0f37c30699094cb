"""The hash chain of a run's events (SPEC §11.2): what an event's hash covers, and its verification. The
writer, the verifier and the import (``ledger.portability.checks``) compute it here, and only here."""

from __future__ import annotations

from datetime import datetime
from datetime import timezone as dt_timezone

from ledger.models import LedgerEvent, Run
from stateboard.canonical import canonical_json, sha256_hex

GENESIS_HASH = "0" * 64


def _iso(value: datetime) -> str:
    return value.astimezone(dt_timezone.utc).isoformat(timespec="microseconds")


def event_hash_fields(event: LedgerEvent) -> dict:
    return {
        "run": str(event.run_id), "seq": event.seq, "at": _iso(event.at), "stage": event.stage,
        "kind": event.kind, "actor": event.actor, "input_fingerprint": event.input_fingerprint,
        "policy_version": event.policy_version, "env_fingerprint": event.env_fingerprint,
        "idempotency_key": event.idempotency_key, "effect": event.effect, "evidence": event.evidence,
        "reason_code": event.reason_code, "data": event.data, "client_event_id": event.client_event_id,
        **({"usage": event.usage} if event.usage else {}),  # (SPEC §16: absent from events before it)
    }


def event_compute_hash(event: LedgerEvent) -> str:
    return sha256_hex(event.prev_hash.encode("ascii") + canonical_json(event_hash_fields(event)))


def chain_verify(*, run: Run) -> dict:
    """Recompute the run's hash chain: ``{ok, events, first_bad_seq}`` (a gap counts as tampering)."""
    prev, expected_seq, first_bad, count = GENESIS_HASH, 1, None, 0
    for event in LedgerEvent.objects.of_run(run).order_by("seq").iterator(chunk_size=2000):
        count += 1
        if first_bad is None:
            if event.seq != expected_seq:
                first_bad = expected_seq
            elif event.prev_hash != prev or event_compute_hash(event) != event.hash:
                first_bad = event.seq
        prev, expected_seq = event.hash, event.seq + 1
    return {"ok": first_bad is None, "events": count, "first_bad_seq": first_bad}

