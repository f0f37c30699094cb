"""The lowest layer of knowledge writes: heads, store versions, appending versions, gate decisions."""

from __future__ import annotations

import json
from datetime import datetime

from django.contrib.auth import get_user_model
from django.db import connection, transaction

from knowledge import authorizers, ports
from knowledge.domain import gate
from knowledge.models import (
    EFFECTIVE_STATUSES,
    Claim,
    ClaimDerivation,
    ClaimHead,
    ClaimStatus,
    GateDecision,
    StoreCounter,
)
from stateboard.canonical import canonical_json
from stateboard.errors import Invalid
from stateboard.roles import OWNER, actor_for, has_role, is_agent, user_roles

# Fields of a retrieved claim that a snapshot may carry back; reconcile ignores them.
SNAPSHOT_ONLY_FIELDS = frozenset({
    "store_version", "version", "status", "use_as", "needs_review", "actor", "created_at", "provenance",
    "policy_version", "reason", "pending_reasons", "reviews",
})
KEY_MAX_LENGTH = Claim._meta.get_field("key").max_length
GATE_DECISION_KEY_MAX = GateDecision._meta.get_field("key").max_length
REFRESH_FIELDS = ["observed_at", "refresh_after", "source_refs", "statement", "ledger_event",
                  "retention_until", "derived_from", "reason"]


class WriteGateRejected(Invalid):
    def __init__(self, result: gate.GateResult):
        codes = ", ".join(result.codes)
        super().__init__("write_gate_rejected", f"The write gate refused this claim: {codes}.",
                         reasons=result.reasons, policy_version=result.policy_version)
        self.result = result


# ---------------------------------------------------------------------------------------------
# building blocks

def store_versions_reserve(n: int = 1) -> int:
    """Reserve ``n`` store versions; returns the last one. Locks the counter row until commit."""
    table = connection.ops.quote_name(StoreCounter._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (id, value) VALUES (1, %s) "
            f"ON CONFLICT (id) DO UPDATE SET value = {table}.value + EXCLUDED.value RETURNING value",
            [n],
        )
        return cursor.fetchone()[0]


def heads_for_update(keys, now: datetime, *, create: bool) -> dict[str, ClaimHead]:
    """Lock the heads of ``keys`` in key order (creating empty ones when ``create``)."""
    keys = sorted(set(keys))
    if create:
        ClaimHead.objects.bulk_create([ClaimHead(key=k, updated_at=now) for k in keys], ignore_conflicts=True)
    # Lock first, then read the current versions in a new statement: under READ COMMITTED a
    # locking SELECT that joins re-reads only the locked row after waiting, and would pair a
    # freshly moved head with a stale (or missing) current version.
    heads = list(ClaimHead.objects.select_for_update().filter(key__in=keys).order_by("key"))
    currents = Claim.objects.in_bulk([h.current_id for h in heads if h.current_id is not None])
    for head in heads:
        head.current = currents.get(head.current_id) if head.current_id is not None else None
    return {h.key: h for h in heads}


def head_for_update(key: str, now: datetime, *, create: bool = False) -> ClaimHead | None:
    return heads_for_update([key], now, create=create).get(key)


def latest_version(key: str) -> Claim | None:
    return Claim.objects.filter(key=key).order_by("-version").first()


def _is_revoked(head: ClaimHead | None) -> bool:
    if head is None:
        return False
    if head.current_id is not None:
        return head.current.status == ClaimStatus.REVOKED
    return head.gc_status == ClaimStatus.REVOKED


def key_state(key: str) -> str:
    head = ClaimHead.objects.filter(key=key).only("live", "current_id", "gc_status").first()
    if head is None or not head.ever_live:
        return "missing"
    return "live" if head.live else "tombstoned"


def _user_kind(username: str) -> str | None:
    user = get_user_model().objects.filter(username=username).first()
    if user is None:
        return None
    return "agent" if is_agent(user) else "human"


def _ledger_event_verified(event_id: int) -> bool:
    return ports.event_is_verified(event_id=event_id)


def gate_context(*, user, now: datetime, head: ClaimHead | None) -> gate.GateContext:
    def revoked_key_authority(key):
        if head is None or head.key != key or not _is_revoked(head):
            return None
        return authorizers.acts_as_claim_owner(user, authorizers.claim_owner_id(head))

    return gate.GateContext(
        now=now,
        actor_roles=frozenset(user_roles(user)),
        ledger_event_verified=_ledger_event_verified,
        user_kind=_user_kind,
        key_state=key_state,
        revoked_key_authority=revoked_key_authority,
    )


def resolve_owner_id(*, user, named: str | None, key: str, head: ClaimHead | None = None) -> int | None:
    """Named in the proposal; else the previous version's; else the proposing agent's owner;
    else the proposer, when a person with the owner role."""
    if named:
        return get_user_model().objects.only("id").get(username=named).pk
    if head is None or head.latest_version > 0 or head.gc_status:
        previous = head.current if head is not None and head.current_id else latest_version(key)
        if previous is not None and previous.owner_id is not None:
            return previous.owner_id
        if head is not None and head.gc_status and head.owner_id is not None:
            return head.owner_id
    if user is not None and is_agent(user):
        agent = getattr(user, "agent", None)
        return agent.owner_id if agent is not None else None
    if user is not None and has_role(user, OWNER):
        return user.pk
    return None


def content_fields(cleaned: dict, *, owner_id: int | None) -> dict:
    scope = cleaned["scope"]
    return {
        "statement": cleaned["statement"],
        "source_refs": cleaned["source_refs"],
        "source_type": cleaned["source_type"],
        "scope_system": scope["system"],
        "scope_version": scope["version"],
        "scope_task": scope["task"],
        "confidence": cleaned["confidence"],
        "observed_at": cleaned["observed_at"],
        "refresh_after": cleaned["refresh_after"],
        "owner_id": owner_id,
        "sensitivity": cleaned["sensitivity"],
        "retention_until": cleaned["retention_until"],
        "derived_from": cleaned["derived_from"],
        "ledger_event": cleaned["ledger_event"],
    }


def copy_content(claim: Claim) -> dict:
    return {
        "statement": claim.statement,
        "source_refs": claim.source_refs,
        "source_type": claim.source_type,
        "scope_system": claim.scope_system,
        "scope_version": claim.scope_version,
        "scope_task": claim.scope_task,
        "confidence": claim.confidence,
        "observed_at": claim.observed_at,
        "refresh_after": claim.refresh_after,
        "owner_id": claim.owner_id,
        "sensitivity": claim.sensitivity,
        "retention_until": claim.retention_until,
        "derived_from": claim.derived_from,
        "ledger_event": claim.ledger_event,
    }


def as_proposal(claim: Claim) -> dict:
    """A stored version as a gate proposal (for a refresh, which re-runs the gate)."""
    proposal = {
        "key": claim.key,
        "statement": claim.statement,
        "source_refs": claim.source_refs,
        "source_type": claim.source_type,
        "scope": claim.scope,
        "confidence": claim.confidence,
        "sensitivity": claim.sensitivity,
        "derived_from": claim.derived_from,
    }
    if claim.owner_id is not None:
        proposal["owner"] = claim.owner.get_username()
    if claim.retention_until is not None:
        proposal["retention_until"] = claim.retention_until.isoformat()
    if claim.ledger_event is not None:
        proposal["ledger_event"] = claim.ledger_event
    return proposal


def _new_version(head: ClaimHead, *, store_version: int, status: str, fields: dict, actor: str, now: datetime,
                 provenance: dict, reason: str = "", pending_reasons=(), policy_version: str = "") -> Claim:
    return Claim(
        key=head.key, version=head.latest_version + 1, store_version=store_version, status=status,
        actor=actor, reason=reason, provenance=provenance, pending_reasons=list(pending_reasons),
        policy_version=policy_version or gate.load_policy()["version"], created_at=now, **fields,
    )


def _move_head(head: ClaimHead, claim: Claim, now: datetime) -> None:
    head.latest_version = claim.version
    head.updated_at = now
    if claim.status in EFFECTIVE_STATUSES:
        head.current = claim
        head.live = claim.status == ClaimStatus.ACTIVE
        head.system, head.scope_version, head.task = claim.scope_system, claim.scope_version, claim.scope_task
        head.sensitivity = claim.sensitivity
        head.owner_id = claim.owner_id
        head.refresh_due_at = claim.refresh_after if head.live else None  # the stale sweep's work list


HEAD_FIELDS = ["latest_version", "updated_at", "current", "live", "system", "scope_version", "task", "sensitivity",
               "owner", "refresh_due_at"]


def append(head: ClaimHead, **version) -> Claim:
    """Append the next version of ``head.key`` (the head is locked by the caller)."""
    return append_many([(head, version)])[0]


SETTLED_WORDS = {"refresh": "refreshed", "propose": "a new version proposed", "accept": "a new version accepted",
                 "invalidate": "invalidated", "revoke": "revoked", "restore": "restored from a checkpoint",
                 "retention_expired": "invalidated (retention expired)"}


def append_many(items: list[tuple[ClaimHead, dict]]) -> list[Claim]:
    """Append one new version to each of several locked heads: one block of store versions,
    bulk inserts, one head update statement."""
    if not items:
        return []
    last = store_versions_reserve(len(items))
    claims = [_new_version(head, store_version=last - len(items) + 1 + i, **version)
              for i, (head, version) in enumerate(items)]
    Claim.objects.bulk_create(claims)
    derivations = [ClaimDerivation(claim=c, source_key=k) for c in claims for k in c.derived_from]
    if derivations:
        ClaimDerivation.objects.bulk_create(derivations)
    settled: dict[str, list[str]] = {}
    for (head, version), claim in zip(items, claims):
        _move_head(head, claim, version["now"])
        if claim.status in EFFECTIVE_STATUSES:  # what a stale notice asked for: a newer effective version
            action = (claim.provenance or {}).get("action") if isinstance(claim.provenance, dict) else None
            verb = SETTLED_WORDS.get(action if isinstance(action, str) else "", claim.status)
            settled.setdefault(f"{verb} by {claim.actor}", []).append(head.key)
    for done, keys in settled.items():
        ports.notifications_settle(claim_keys=keys, done=done, now=items[0][1]["now"])
    if len(items) == 1:
        items[0][0].save(update_fields=HEAD_FIELDS)
    else:
        ClaimHead.objects.bulk_update([head for head, _ in items], HEAD_FIELDS)
    return claims


def decision_record(**fields) -> GateDecision:
    decision = gate_decision(**fields)
    decision.save()
    return decision


def gate_decision(*, action: str, user, key, result: gate.GateResult, now: datetime,
              payload=None, claim: Claim | None = None) -> GateDecision:
    # A key too long for a claim is one reason of a rejection: the log keeps its start, the payload all of it.
    return GateDecision(
        at=now, action=action, actor=actor_for(user), key=key[:GATE_DECISION_KEY_MAX] if isinstance(key, str) else "",
        outcome=result.outcome, reasons=result.reasons, pending_reasons=result.pending_reasons,
        policy_version=result.policy_version,
        # As sent, made JSON-safe (a service caller may pass datetimes).
        payload=json.loads(canonical_json(payload)) if result.rejected else None,
        claim_store_version=claim.store_version if claim else None,
    )


def reject_recorded(exc: WriteGateRejected, *, action: str, user, key, now, payload):
    """Record a rejection in its own transaction: the refused write itself rolled back."""
    with transaction.atomic():
        decision_record(action=action, user=user, key=key, result=exc.result, now=now, payload=payload)
