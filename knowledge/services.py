"""Every write to the knowledge store.

Locking order, everywhere: the key's ``ClaimHead`` rows (sorted by key), then the
``StoreCounter`` row last (``store_versions_reserve``), held until commit. Store versions are
therefore committed in order, and writers of different keys only queue on the counter for the
few statements between their INSERT and COMMIT.
"""

import dataclasses
import json
from datetime import datetime

from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from knowledge import authorizers, gate
from knowledge import selectors as knowledge_selectors
from knowledge.models import (
    EFFECTIVE_STATUSES,
    TOMBSTONE_STATUSES,
    Claim,
    ClaimCitation,
    ClaimDerivation,
    ClaimHead,
    ClaimReview,
    ClaimStatus,
    GateDecision,
    StoreCounter,
)
from ledger import selectors as ledger_selectors
from stateboard.canonical import canonical_json
from stateboard.db import guard_lifted
from stateboard.errors import Conflict, Invalid, NotFound
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


def _heads_for_update(keys, now: datetime, *, create: bool) -> dict[str, ClaimHead]:
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


def _head_for_update(key: str, now: datetime, *, create: bool = False) -> ClaimHead | None:
    return _heads_for_update([key], now, create=create).get(key)


def _latest_version(key: str) -> Claim | None:
    return Claim.objects.filter(key=key).order_by("-version").first()


def _is_revoked(head: ClaimHead | None) -> bool:
    if head is None:
        return False
    if head.current_id is not None:
        return head.current.status == ClaimStatus.REVOKED
    return head.gc_status == ClaimStatus.REVOKED


def _key_state(key: str) -> str:
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
    return ledger_selectors.event_is_verified(event_id=event_id)


def _gate_context(*, user, now: datetime, head: ClaimHead | None) -> gate.GateContext:
    def revoked_key_authority(key):
        if head is None or head.key != key or not _is_revoked(head):
            return None
        return authorizers.acts_as_claim_owner(user, authorizers.claim_owner_id(head))

    return gate.GateContext(
        now=now,
        actor_roles=frozenset(user_roles(user)),
        ledger_event_verified=_ledger_event_verified,
        user_kind=_user_kind,
        key_state=_key_state,
        revoked_key_authority=revoked_key_authority,
    )


def _resolve_owner_id(*, user, named: str | None, key: str, head: ClaimHead | None = None) -> int | None:
    """Named in the proposal; else the previous version's; else the proposing agent's owner;
    else the proposer, when a person with the owner role."""
    if named:
        return get_user_model().objects.only("id").get(username=named).pk
    if head is None or head.latest_version > 0 or head.gc_status:
        previous = head.current if head is not None and head.current_id else _latest_version(key)
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


def _content_fields(cleaned: dict, *, owner_id: int | None) -> dict:
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


def _copy_content(claim: Claim) -> dict:
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


def _as_proposal(claim: Claim) -> dict:
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


def _append(head: ClaimHead, **version) -> Claim:
    """Append the next version of ``head.key`` (the head is locked by the caller)."""
    return _append_many([(head, version)])[0]


def _append_many(items: list[tuple[ClaimHead, dict]]) -> list[Claim]:
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
    for (head, version), claim in zip(items, claims):
        _move_head(head, claim, version["now"])
    if len(items) == 1:
        items[0][0].save(update_fields=HEAD_FIELDS)
    else:
        ClaimHead.objects.bulk_update([head for head, _ in items], HEAD_FIELDS)
    return claims


def _decision_record(**fields) -> GateDecision:
    decision = _decision(**fields)
    decision.save()
    return decision


def _decision(*, action: str, user, key, result: gate.GateResult, now: datetime,
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


def _reject_recorded(exc: WriteGateRejected, *, action: str, user, key, now, payload):
    """Record a rejection in its own transaction: the refused write itself rolled back."""
    with transaction.atomic():
        _decision_record(action=action, user=user, key=key, result=exc.result, now=now, payload=payload)


# ---------------------------------------------------------------------------------------------
# propose / refresh / accept

def claim_propose(*, user, data: dict, now: datetime | None = None) -> Claim:
    """Propose a claim through the write gate: a new active or pending version.

    Raises ``WriteGateRejected`` (422, every reason) after recording the rejection; the
    rejection is written in its own transaction because the refused write rolls back.
    """
    now = now or timezone.now()
    try:
        return _claim_propose(user=user, data=data, now=now)
    except WriteGateRejected as exc:
        _reject_recorded(exc, action="propose", user=user, key=data.get("key") if isinstance(data, dict) else "",
                         now=now, payload=data)
        raise


@transaction.atomic
def _claim_propose(*, user, data: dict, now: datetime) -> Claim:
    authorizers.may_propose(user)
    key = data.get("key") if isinstance(data, dict) else None
    head = _head_for_update(key, now) if isinstance(key, str) and key else None
    result = gate.evaluate(data, _gate_context(user=user, now=now, head=head))
    if result.rejected:
        raise WriteGateRejected(result)
    key = result.cleaned["key"]
    head = head or _head_for_update(key, now, create=True)
    owner_id = _resolve_owner_id(user=user, named=result.cleaned["owner"], key=key, head=head)
    claim = _append(
        head, status=result.outcome, fields=_content_fields(result.cleaned, owner_id=owner_id),
        actor=actor_for(user), now=now, provenance={"action": "propose"},
        pending_reasons=result.pending_reasons, policy_version=result.policy_version,
    )
    _decision_record(action="propose", user=user, key=key, result=result, now=now, claim=claim)
    return claim


def claim_refresh(*, user, key: str, data: dict, now: datetime | None = None) -> Claim:
    """A new version of a live claim with new evidence and dates, through the write gate."""
    now = now or timezone.now()
    try:
        return _claim_refresh(user=user, key=key, data=data, now=now)
    except WriteGateRejected as exc:
        _reject_recorded(exc, action="refresh", user=user, key=key, now=now, payload=data)
        raise


@transaction.atomic
def _claim_refresh(*, user, key: str, data: dict, now: datetime) -> Claim:
    authorizers.may_refresh(user, key)
    head = _head_for_update(key, now)
    if head is None or head.latest_version == 0 and not head.gc_status:
        raise NotFound("claim_not_found", f"No claim with key {key!r}.")
    current = head.current
    if current is None or current.is_tombstone:
        state = current.status if current else ("removed" if head.gc_status else "pending")
        raise Conflict("claim_not_live", f"Only a live claim can be refreshed; {key!r} is {state}. "
                       "Propose a new version instead.", status=state)
    extra = sorted(set(data) - set(REFRESH_FIELDS))
    proposal = {**_as_proposal(current), **{k: v for k, v in data.items() if k in REFRESH_FIELDS and k != "reason"}}
    result = gate.evaluate(proposal, _gate_context(user=user, now=now, head=head))
    unknown = [{"code": "unknown_field", "field": name,
                "detail": f"A refresh may change {', '.join(REFRESH_FIELDS)}."} for name in extra]
    if unknown:
        result.reasons, result.outcome, result.pending_reasons = unknown + result.reasons, "rejected", []
    if result.rejected:
        raise WriteGateRejected(result)
    owner_id = _resolve_owner_id(user=user, named=result.cleaned["owner"], key=key, head=head)
    claim = _append(
        head, status=result.outcome, fields=_content_fields(result.cleaned, owner_id=owner_id),
        actor=actor_for(user), now=now, reason=str(data.get("reason") or ""),
        provenance={"action": "refresh", "of_version": current.version, "of_store_version": current.store_version},
        pending_reasons=result.pending_reasons, policy_version=result.policy_version,
    )
    _decision_record(action="refresh", user=user, key=key, result=result, now=now, claim=claim)
    return claim


@transaction.atomic
def claim_accept(*, user, key: str, version: int | None = None, now: datetime | None = None) -> Claim:
    """The pending version becomes active, as a new version with a new store_version."""
    now = now or timezone.now()
    head = _head_for_update(key, now)
    if head is None or head.latest_version == 0:
        raise NotFound("claim_not_found", f"No claim with key {key!r}.")
    current_sv = head.current.store_version if head.current_id else (head.gc_store_version or 0)
    pending = Claim.objects.filter(key=key, status=ClaimStatus.PENDING)
    if version is not None:
        chosen = Claim.objects.filter(key=key, version=version).first()
        if chosen is None:
            raise NotFound("version_not_found", f"{key!r} has no version {version}.")
        if chosen.status != ClaimStatus.PENDING:
            raise Conflict("not_pending", f"Version {version} of {key!r} is {chosen.status}, not pending.")
    else:
        chosen = pending.order_by("-version").first()
        if chosen is None:
            raise Conflict("nothing_pending", f"{key!r} has no pending version to accept.")
    if chosen.erased_at is not None:
        raise Conflict("claim_erased", f"Version {chosen.version} of {key!r} was erased when its retention expired.")
    if chosen.store_version < current_sv:
        raise Conflict("pending_superseded",
                       f"Version {chosen.version} of {key!r} was proposed before the current value "
                       f"(version {head.current.version if head.current_id else '?'}); accepting it would put an older "
                       "value over a newer one. Propose it again.")
    authorizers.may_accept(user, chosen)
    return _append(
        head, status=ClaimStatus.ACTIVE, fields=_copy_content(chosen), actor=actor_for(user), now=now,
        provenance={"action": "accept", "of_version": chosen.version, "of_store_version": chosen.store_version,
                    "cleared": chosen.pending_reasons, "proposed_by": chosen.actor},
        policy_version=chosen.policy_version,
    )


# ---------------------------------------------------------------------------------------------
# tombstones

def _tombstone(*, user, key: str, reason: str, status: str, now: datetime | None) -> Claim:
    now = now or timezone.now()
    if not isinstance(reason, str) or not reason.strip():
        raise Invalid("reason_required", "Say why: a non-empty reason is required.")
    head = _head_for_update(key, now)
    if head is None or (head.latest_version == 0 and not head.gc_status):
        raise NotFound("claim_not_found", f"No claim with key {key!r}.")
    (authorizers.may_revoke if status == ClaimStatus.REVOKED else authorizers.may_invalidate)(user, head)
    current = head.current
    if head.gc_status and current is None:
        raise Conflict("claim_removed", f"{key!r} was deleted and its history garbage-collected.")
    # Repeating a tombstone changes nothing (a retried request gets the same answer);
    # a revoke is the stronger tombstone, so invalidating a revoked claim changes nothing either.
    if current is not None and (current.status == status or current.status == ClaimStatus.REVOKED):
        return current
    return tombstones_append([head], user=user, status=status, reason=reason.strip(), now=now)[0]


def tombstones_append(heads: list[ClaimHead], *, user, status: str, reason: str, now: datetime,
                      action: str | None = None) -> list[Claim]:
    """Append a tombstone version to each of ``heads`` (locked by the caller, checked already):
    its fields from the current value (else the latest version), one block of store versions,
    and review flags on the live claims derived from each key."""
    items = []
    for head in heads:
        current = head.current
        base = current or _latest_version(head.key)
        fields = {
            "source_type": base.source_type, "scope_system": base.scope_system, "scope_version": base.scope_version,
            "scope_task": base.scope_task, "confidence": base.confidence, "owner_id": base.owner_id,
            "sensitivity": base.sensitivity,
        }
        provenance = {"action": action or ("revoke" if status == ClaimStatus.REVOKED else "invalidate")}
        if current is not None:
            provenance.update(of_version=current.version, of_store_version=current.store_version)
        items.append((head, dict(status=status, fields=fields, actor=actor_for(user), now=now,
                                 provenance=provenance, reason=reason)))
    tombstones = _append_many(items)
    by_key = {t.key: t for t in tombstones}
    derived = (ClaimDerivation.objects.filter(source_key__in=list(by_key), claim__head_of__live=True)
               .values_list("claim__key", "source_key").distinct())
    ClaimReview.objects.bulk_create([
        ClaimReview(key=k, source_key=source, source_store_version=by_key[source].store_version,
                    reason=f"derived_from_{status}", actor=by_key[source].actor, created_at=now)
        for k, source in sorted(derived)
    ])
    return tombstones


@transaction.atomic
def claim_invalidate(*, user, key: str, reason: str, now: datetime | None = None) -> Claim:
    """Tombstone: the claim is wrong or no longer true. A later proposal with fresh sources is
    a new version like any other. Claims derived from it are flagged for review."""
    return _tombstone(user=user, key=key, reason=reason, status=ClaimStatus.INVALIDATED, now=now)


@transaction.atomic
def claim_revoke(*, user, key: str, reason: str, now: datetime | None = None) -> Claim:
    """Tombstone by the claim's owner: later proposals for the key wait for the owner."""
    return _tombstone(user=user, key=key, reason=reason, status=ClaimStatus.REVOKED, now=now)


# ---------------------------------------------------------------------------------------------
# reconcile

def _entries_check(entries) -> None:
    if not isinstance(entries, list):
        raise Invalid("entries_invalid", "entries is a list of claim snapshots {key, store_version, ...}.")
    errors, seen = [], set()
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            errors.append({"index": i, "code": "entry_invalid", "detail": "An entry is an object."})
            continue
        key, sv = entry.get("key"), entry.get("store_version")
        if not isinstance(key, str) or not key:
            errors.append({"index": i, "code": "key_missing", "detail": "An entry needs its key."})
        elif len(key) > KEY_MAX_LENGTH:
            errors.append({"index": i, "code": "key_too_long", "detail": f"Keys are at most {KEY_MAX_LENGTH} characters."})
        elif key in seen:
            errors.append({"index": i, "code": "duplicate_key", "detail": f"{key!r} appears twice."})
        else:
            seen.add(key)
        if isinstance(sv, bool) or not isinstance(sv, int) or sv < 1:
            errors.append({"index": i, "code": "store_version_invalid",
                           "detail": "An entry names the store_version it was read at (an integer >= 1)."})
    if errors:
        raise Invalid("entries_invalid", "Some snapshot entries are malformed; nothing was reconciled.",
                      errors=errors)


@transaction.atomic
def knowledge_reconcile(*, user, entries: list, checkpoint=None, version_boundary: int | None = None,
                        now: datetime | None = None) -> dict:
    """Merge a checkpoint's memory snapshot into the live store, tombstones included.

    A live value always wins over the snapshot (``kept_live``), a tombstone always wins
    (``kept_tombstone``, also once the GC removed the key's history); only keys that never
    existed live are restored, as a new version through the write gate whose provenance names
    the checkpoint (``restored``; ``rejected`` with reasons when the gate refuses it).
    """
    now = now or timezone.now()
    _entries_check(entries)
    if version_boundary is not None and (isinstance(version_boundary, bool) or not isinstance(version_boundary, int)):
        raise Invalid("version_boundary_invalid", "version_boundary is an integer store version.")
    heads = _heads_for_update([e["key"] for e in entries], now, create=True)
    results, counts = [], {"restored": 0, "kept_live": 0, "kept_tombstone": 0, "rejected": 0}
    restores, decisions, restoring = [], [], set()
    for entry in entries:
        key, snapshot_sv = entry["key"], entry["store_version"]
        head = heads[key]
        row = {"key": key, "snapshot_store_version": snapshot_sv}
        if head.live:
            outcome = "kept_live"
            row.update(live_version=head.current.version, live_store_version=head.current.store_version)
            if snapshot_sv > head.current.store_version:
                # The snapshot claims to be newer than the store: the store lost writes. Still
                # never overwrite; say so, so an operator can look.
                row["snapshot_newer"] = True
        elif head.ever_live:
            outcome = "kept_tombstone"
            row["tombstone_store_version"] = (head.current.store_version if head.current_id
                                              else head.gc_store_version)
        else:
            proposal = {k: v for k, v in entry.items() if k not in SNAPSHOT_ONLY_FIELDS}
            if isinstance(proposal.get("owner"), dict):
                proposal["owner"] = proposal["owner"].get("username")
            context = _gate_context(user=user, now=now, head=head)
            # A claim may derive from another restored earlier in the same snapshot.
            context = dataclasses.replace(context, key_state=lambda k: "live" if k in restoring else _key_state(k))
            result = gate.evaluate(proposal, context)
            if result.rejected:
                outcome = "rejected"
                row["reasons"] = result.reasons
                decisions.append(_decision(action="restore", user=user, key=key, result=result, now=now,
                                           payload=entry))
            else:
                outcome = "restored"
                restoring.add(key)
                owner_id = _resolve_owner_id(user=user, named=result.cleaned["owner"], key=key, head=head)
                restores.append((row, result, entry, (head, dict(
                    status=result.outcome, fields=_content_fields(result.cleaned, owner_id=owner_id),
                    actor=actor_for(user), now=now, pending_reasons=result.pending_reasons,
                    policy_version=result.policy_version,
                    provenance={"action": "restore", "checkpoint": checkpoint,
                                "snapshot_store_version": snapshot_sv, "version_boundary": version_boundary},
                ))))
        row["outcome"] = outcome
        counts[outcome] += 1
        results.append(row)
    claims = _append_many([item for *_, item in restores])
    for (row, result, entry, _), claim in zip(restores, claims):
        row.update(version=claim.version, store_version=claim.store_version, status=claim.status)
        decisions.append(_decision(action="restore", user=user, key=claim.key, result=result, now=now,
                                   claim=claim))
    GateDecision.objects.bulk_create(decisions)
    return {"results": results, "counts": counts, "store_version": knowledge_selectors.store_version(),
            "checkpoint": checkpoint}


# ---------------------------------------------------------------------------------------------
# tombstone GC

@transaction.atomic
def tombstones_gc(*, now: datetime | None = None, limit: int = 1000) -> dict:
    """Remove tombstones no restorable checkpoint can still contradict; report what went.

    A tombstone goes only when every non-expired checkpoint's ``version_boundary`` is newer
    than it, and only when it is its key's latest version. With it goes the key's older
    history (removing the tombstone alone would resurrect the value below it). The head row
    remains with ``gc_*`` set, so the key is still known to have existed: reconcile keeps it
    deleted and version numbers are never reused.
    """
    now = now or timezone.now()
    boundary = ledger_selectors.oldest_live_version_boundary(now=now)
    candidates = ClaimHead.objects.filter(current__status__in=TOMBSTONE_STATUSES,
                                          latest_version=F("current__version"))
    if boundary is not None:
        candidates = candidates.filter(current__store_version__lt=boundary)
    keys = list(candidates.order_by("current__store_version").values_list("key", flat=True)[:limit])
    removed = []
    for head in _heads_for_update(keys, now, create=False).values():
        tombstone = head.current  # re-checked under the lock: a write may have moved the head since
        if (tombstone is None or not tombstone.is_tombstone or head.latest_version != tombstone.version
                or (boundary is not None and tombstone.store_version >= boundary)):
            continue
        head.current, head.live, head.refresh_due_at = None, False, None
        head.gc_status, head.gc_store_version, head.gc_at, head.updated_at = (
            tombstone.status, tombstone.store_version, now, now)
        head.save()
        with guard_lifted("knowledge.Claim:append_only"):
            deleted, _ = Claim.objects.filter(key=head.key, store_version__lte=tombstone.store_version).delete()
        removed.append({"key": head.key, "status": tombstone.status, "version": tombstone.version,
                        "store_version": tombstone.store_version, "rows_deleted": deleted})
    return {"removed": removed, "count": len(removed), "oldest_live_boundary": boundary, "at": now.isoformat()}


# ---------------------------------------------------------------------------------------------
# citations (called by the ledger when an event's evidence cites claim:<key>[@<version>])

def _parse_claim_uri(uri: str) -> tuple[str, int | None] | None:
    if not isinstance(uri, str) or not uri.startswith("claim:"):
        return None
    ref = uri[len("claim:"):]
    key, version = ref, None
    if "@" in ref:
        key, _, tail = ref.rpartition("@")
        if not tail.isdigit():
            return None
        version = int(tail)
    return (key, version) if key else None


@transaction.atomic
def claim_citations_record(*, event_id: int, run_id, actor: str, at: datetime, uris: list[str]) -> None:
    """Record each ``claim:`` citation and whether the claim was a fact at ``at``.

    Stale (past refresh_after), superseded (a newer version existed) or tombstoned at that
    moment is counted as a stale claim cited as fact. A repeat for the same event is a no-op.
    """
    rows = []
    for uri in dict.fromkeys(u for u in uris if isinstance(u, str)):
        parsed = _parse_claim_uri(uri)
        if parsed is None:
            continue
        key, cited_version = parsed
        effective = (Claim.objects.filter(key=key, status__in=EFFECTIVE_STATUSES, created_at__lte=at)
                     .order_by("-version").first())
        if cited_version is None:
            cited = effective
        else:
            cited = Claim.objects.filter(key=key, version=cited_version, created_at__lte=at).first()
        row = ClaimCitation(event_id=event_id, run_id=str(run_id or ""), actor=actor, at=at, uri=uri[:400],
                            key=key[:300], cited_version=cited_version)
        gc_removed = ClaimHead.objects.filter(key=key, gc_at__isnull=False, current__isnull=True).exists()
        if cited is None or cited.status == ClaimStatus.PENDING:
            row.tombstoned = gc_removed
        else:
            row.found = True
            row.tombstoned = cited.is_tombstone or (effective is not None and effective.is_tombstone)
            row.superseded = (not row.tombstoned and effective is not None and effective.version > cited.version)
            row.stale = (not row.tombstoned and cited.refresh_after is not None and at > cited.refresh_after)
        rows.append(row)
    ClaimCitation.objects.bulk_create(rows, ignore_conflicts=True)

