"""Claims through the write gate: propose, refresh, accept."""

from __future__ import annotations

from datetime import datetime

from django.db import transaction
from django.utils import timezone

from knowledge import authorizers
from knowledge.domain import actions, gate
from knowledge.models import Claim, ClaimStatus
from knowledge.services.versions import (
    REFRESH_FIELDS,
    WriteGateRejected,
    append,
    as_proposal,
    content_fields,
    copy_content,
    decision_record,
    gate_context,
    head_for_update,
    reject_recorded,
    resolve_owner_id,
)
from stateboard.errors import Conflict, NotFound
from stateboard.roles import actor_for

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
        reject_recorded(exc, action="propose", user=user, key=data.get("key") if isinstance(data, dict) else "",
                         now=now, payload=data)
        raise


@transaction.atomic
def _claim_propose(*, user, data: dict, now: datetime) -> Claim:
    authorizers.may_propose(user)
    key = data.get("key") if isinstance(data, dict) else None
    head = head_for_update(key, now) if isinstance(key, str) and key else None
    result = gate.evaluate(data, gate_context(user=user, now=now, head=head))
    if result.rejected:
        raise WriteGateRejected(result)
    key = result.cleaned["key"]
    head = head or head_for_update(key, now, create=True)
    owner_id = resolve_owner_id(user=user, named=result.cleaned["owner"], key=key, head=head)
    claim = append(
        head, status=result.outcome, fields=content_fields(result.cleaned, owner_id=owner_id),
        actor=actor_for(user), now=now, provenance={"action": "propose"},
        pending_reasons=result.pending_reasons, policy_version=result.policy_version,
    )
    decision_record(action="propose", user=user, key=key, result=result, now=now, claim=claim)
    return claim


def claim_refresh(*, user, key: str, data: dict, now: datetime | None = None) -> Claim:
    """A new version of a live claim with new evidence and dates, through the write gate."""
    now = now or timezone.now()
    try:
        return _claim_refresh(user=user, key=key, data=data, now=now)
    except WriteGateRejected as exc:
        reject_recorded(exc, action="refresh", user=user, key=key, now=now, payload=data)
        raise


@transaction.atomic
def _claim_refresh(*, user, key: str, data: dict, now: datetime) -> Claim:
    authorizers.may_refresh(user, key)
    head = head_for_update(key, now)
    if head is None or head.latest_version == 0 and not head.gc_status:
        raise NotFound("claim_not_found", f"No claim with key {key!r}.")
    current = head.current
    if current is None or not actions.refreshable(current.status):
        state = current.status if current else ("removed" if head.gc_status else "pending")
        raise Conflict("claim_not_live", f"Only a live claim can be refreshed; {key!r} is {state}. "
                       "Propose a new version instead.", status=state)
    extra = sorted(set(data) - set(REFRESH_FIELDS))
    proposal = {**as_proposal(current), **{k: v for k, v in data.items() if k in REFRESH_FIELDS and k != "reason"}}
    result = gate.evaluate(proposal, gate_context(user=user, now=now, head=head))
    unknown = [{"code": "unknown_field", "field": name,
                "detail": f"A refresh may change {', '.join(REFRESH_FIELDS)}."} for name in extra]
    if unknown:
        result.reasons, result.outcome, result.pending_reasons = unknown + result.reasons, "rejected", []
    if result.rejected:
        raise WriteGateRejected(result)
    owner_id = resolve_owner_id(user=user, named=result.cleaned["owner"], key=key, head=head)
    claim = append(
        head, status=result.outcome, fields=content_fields(result.cleaned, owner_id=owner_id),
        actor=actor_for(user), now=now, reason=str(data.get("reason") or ""),
        provenance={"action": "refresh", "of_version": current.version, "of_store_version": current.store_version},
        pending_reasons=result.pending_reasons, policy_version=result.policy_version,
    )
    decision_record(action="refresh", user=user, key=key, result=result, now=now, claim=claim)
    return claim


@transaction.atomic
def claim_accept(*, user, key: str, version: int | None = None, now: datetime | None = None) -> Claim:
    """The pending version becomes active, as a new version with a new store_version."""
    now = now or timezone.now()
    head = head_for_update(key, now)
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
    return append(
        head, status=ClaimStatus.ACTIVE, fields=copy_content(chosen), actor=actor_for(user), now=now,
        provenance={"action": "accept", "of_version": chosen.version, "of_store_version": chosen.store_version,
                    "cleared": chosen.pending_reasons, "proposed_by": chosen.actor},
        policy_version=chosen.policy_version,
    )
