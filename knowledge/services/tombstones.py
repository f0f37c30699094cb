"""Tombstones: invalidate and revoke (new versions, never deletes), and their GC (SPEC §4)."""

from __future__ import annotations

from datetime import datetime

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from knowledge import authorizers, ports
from knowledge.domain import actions
from knowledge.models import TOMBSTONE_STATUSES, Claim, ClaimDerivation, ClaimHead, ClaimReview, ClaimStatus
from knowledge.services.versions import append_many, head_for_update, heads_for_update, latest_version
from stateboard.db import guard_lifted
from stateboard.errors import Conflict, Invalid, NotFound
from stateboard.roles import actor_for

# ---------------------------------------------------------------------------------------------
# tombstones

def _tombstone(*, user, key: str, reason: str, status: str, now: datetime | None) -> Claim:
    now = now or timezone.now()
    if not isinstance(reason, str) or not reason.strip():
        raise Invalid("reason_required", "Say why: a non-empty reason is required.")
    head = head_for_update(key, now)
    if head is None or (head.latest_version == 0 and not head.gc_status):
        raise NotFound("claim_not_found", f"No claim with key {key!r}.")
    (authorizers.may_revoke if status == ClaimStatus.REVOKED else authorizers.may_invalidate)(user, head)
    current = head.current
    if head.gc_status and current is None:
        raise Conflict("claim_removed", f"{key!r} was deleted and its history garbage-collected.")
    # Repeating a tombstone changes nothing (a retried request gets the same answer);
    # a revoke is the stronger tombstone, so invalidating a revoked claim changes nothing either.
    if current is not None and not actions.tombstone_changes(current.status, status):
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
        base = current or latest_version(head.key)
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
    tombstones = append_many(items)
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
    boundary = ports.oldest_live_version_boundary(now=now)
    candidates = ClaimHead.objects.filter(current__status__in=TOMBSTONE_STATUSES,
                                          latest_version=F("current__version"))
    if boundary is not None:
        candidates = candidates.filter(current__store_version__lt=boundary)
    keys = list(candidates.order_by("current__store_version").values_list("key", flat=True)[:limit])
    removed = []
    for head in heads_for_update(keys, now, create=False).values():
        tombstone = head.current  # re-checked under the lock: a write may have moved the head since
        if (tombstone is None or not tombstone.is_tombstone or head.latest_version != tombstone.version
                or (boundary is not None and tombstone.store_version >= boundary)):
            continue
        head.current, head.live, head.refresh_due_at = None, False, None
        head.gc_status, head.gc_store_version, head.gc_at, head.updated_at = (
            tombstone.status, tombstone.store_version, now, now)
        head.save()
        with guard_lifted("knowledge.Claim:append_only", "knowledge.ClaimDerivation:append_only"):  # (cascades)
            deleted, _ = Claim.objects.filter(key=head.key, store_version__lte=tombstone.store_version).delete()
        removed.append({"key": head.key, "status": tombstone.status, "version": tombstone.version,
                        "store_version": tombstone.store_version, "rows_deleted": deleted})
    return {"removed": removed, "count": len(removed), "oldest_live_boundary": boundary, "at": now.isoformat()}
