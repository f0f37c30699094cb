"""Reconcile a checkpoint's memory snapshot with the live store (tombstones always win)."""

from __future__ import annotations

import dataclasses
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from knowledge import authorizers
from knowledge import selectors as knowledge_selectors
from knowledge.domain import gate
from knowledge.models import GateDecision
from knowledge.services.versions import (
    KEY_MAX_LENGTH,
    SNAPSHOT_ONLY_FIELDS,
    append_many,
    content_fields,
    gate_context,
    gate_decision,
    heads_for_update,
    key_state,
    resolve_owner_id,
)
from stateboard.errors import Invalid
from stateboard.roles import actor_for

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
    authorizers.may_reconcile(user)
    now = now or timezone.now()
    _entries_check(entries)
    if version_boundary is not None and (isinstance(version_boundary, bool) or not isinstance(version_boundary, int)):
        raise Invalid("version_boundary_invalid", "version_boundary is an integer store version.")
    heads = heads_for_update([e["key"] for e in entries], now, create=True)
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
            context = gate_context(user=user, now=now, head=head)
            # A claim may derive from another restored earlier in the same snapshot.
            context = dataclasses.replace(context, key_state=lambda k: "live" if k in restoring else key_state(k))
            result = gate.evaluate(proposal, context)
            if result.rejected:
                outcome = "rejected"
                row["reasons"] = result.reasons
                decisions.append(gate_decision(action="restore", user=user, key=key, result=result, now=now,
                                           payload=entry))
            else:
                outcome = "restored"
                restoring.add(key)
                owner_id = resolve_owner_id(user=user, named=result.cleaned["owner"], key=key, head=head)
                restores.append((row, result, entry, (head, dict(
                    status=result.outcome, fields=content_fields(result.cleaned, owner_id=owner_id),
                    actor=actor_for(user), now=now, pending_reasons=result.pending_reasons,
                    policy_version=result.policy_version,
                    provenance={"action": "restore", "checkpoint": checkpoint,
                                "snapshot_store_version": snapshot_sv, "version_boundary": version_boundary},
                ))))
        row["outcome"] = outcome
        counts[outcome] += 1
        results.append(row)
    claims = append_many([item for *_, item in restores])
    for (row, result, entry, _), claim in zip(restores, claims):
        row.update(version=claim.version, store_version=claim.store_version, status=claim.status)
        decisions.append(gate_decision(action="restore", user=user, key=claim.key, result=result, now=now,
                                   claim=claim))
    GateDecision.objects.bulk_create(decisions)
    return {"results": results, "counts": counts, "store_version": knowledge_selectors.store_version(),
            "checkpoint": checkpoint}
