"""Knowledge sweeps (SPEC §5.3): stale-claim notifications and retention deletion.

Both work in batches, each batch its own short transaction. A batch takes its keys' ``ClaimHead``
rows with ``FOR UPDATE SKIP LOCKED`` — the lock every claim write takes first — so two sweeps at
once share the work instead of doing it twice, and a key being written at that moment is left
for the next run. Notifications are unique per (user, dedupe key) as well, so even a repeat
that slipped through would notify once.

**Retention** is the one true deletion in the system and the one exception to the append-only
guard. For each sensitive version past its ``retention_until`` it erases, under the guard lifted
for exactly those rows:

- the version's ``statement`` (set to "") and ``source_refs`` (set to []), and marks ``erased_at``;
- the refused proposals recorded for the key by the write gate (``GateDecision.payload``, the
  proposal as sent, is set to null; the decision, its reasons and codes remain).

If the erased version is the key's live value, a tombstone version (``invalidated``, reason
``retention_expired``) is appended and claims derived from it are flagged, as for any tombstone.
An ``AuditEntry`` (``retention_erase``) names the key and the versions erased. What remains:
the key, version numbers, dates, scope, owner, sensitivity, the tombstone. What is *not*
touched: ledger events (append-only forever; evidence must not quote sensitive claims),
checkpoint payloads, and PostgreSQL's dead row versions until VACUUM reclaims them (they are
invisible to every query and to ``pg_dump`` at once).
"""

from __future__ import annotations

import time
from datetime import datetime

from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from knowledge import ports, services
from knowledge.models import Claim, ClaimHead, ClaimStatus, GateDecision, Sensitivity
from stateboard.db import guard_lifted
from stateboard.roles import OWNER, users_in_role

STALE_BATCH = 1000
RETENTION_BATCH = 100
RETENTION_REASON = "retention_expired"
# The guards the retention path lifts, for the rows it rewrites only.
_LIFTED = ("knowledge.Claim:append_only", "knowledge.GateDecision:append_only")


def _batches(run_batch, *, max_batches: int | None) -> dict:
    """Run ``run_batch()`` (one transaction each, returning a dict of counts, ``rows`` among them)
    until it finds nothing; report totals and the longest batch (the longest any lock was held)."""
    report = {"batches": 0, "longest_batch_seconds": 0.0}
    while max_batches is None or report["batches"] < max_batches:
        started = time.perf_counter()
        with transaction.atomic():
            counts = run_batch()
        if not counts.pop("rows"):
            break
        report["batches"] += 1
        report["longest_batch_seconds"] = max(report["longest_batch_seconds"], time.perf_counter() - started)
        for name, value in counts.items():
            report[name] = report.get(name, 0) + value
    return report


def _owner_ids(head_owner_id: int | None, cache: dict) -> list[int]:
    """The claim's owner; a claim with no owner has every owner-role user (looked up once per batch)."""
    if head_owner_id is not None:
        return [head_owner_id]
    if "owners" not in cache:
        cache["owners"] = list(users_in_role(OWNER).values_list("id", flat=True))
    return cache["owners"]


# ---------------------------------------------------------------------------------------------
# stale claims

def claims_stale_sweep(*, now: datetime | None = None, batch_size: int = STALE_BATCH,
                       max_batches: int | None = None) -> dict:
    """Mark live claims whose ``refresh_after`` passed and notify their owner, once per version.

    A claim is on the list while its head's ``refresh_due_at`` is set (a new version sets it
    again, so a refreshed claim that goes stale later notifies again). Safe twice and concurrently.
    """
    now = now or timezone.now()
    report = _batches(lambda: _stale_batch(now, batch_size), max_batches=max_batches)
    return {"marked": report.pop("marked", 0), "notified": report.pop("notified", 0), **report}


def _stale_batch(now: datetime, size: int) -> dict:
    heads = list(ClaimHead.objects.select_for_update(skip_locked=True).filter(refresh_due_at__lte=now)
                 .order_by("refresh_due_at", "id").only("id", "key", "current_id", "owner_id")[:size])
    if not heads:
        return {"rows": 0}
    currents = Claim.objects.only("id", "version", "status", "refresh_after").in_bulk(
        [h.current_id for h in heads if h.current_id is not None])
    items, cache, stale = [], {}, []
    for head in heads:
        claim = currents.get(head.current_id)
        if claim is None or claim.status != ClaimStatus.ACTIVE:
            continue
        stale.append(claim.id)
        subject = (f"Claim {head.key} (version {claim.version}) is stale: refresh_after "
                   f"{claim.refresh_after:%Y-%m-%d %H:%M} UTC passed. Refresh, invalidate or revoke it.")
        url = reverse("knowledge:claim_history", args=[head.key])
        for user_id in _owner_ids(head.owner_id, cache):
            items.append(ports.Notice(user_id, "stale_claim", subject, url, f"stale:{head.key}:{claim.version}",
                                      claim_key=head.key))
    created = ports.notifications_send_many(items, now=now)
    ports.chat_claims_stale(claim_ids=stale)
    ClaimHead.objects.filter(id__in=[h.id for h in heads]).update(refresh_due_at=None)
    return {"rows": len(heads), "marked": len(heads), "notified": len(created)}


# ---------------------------------------------------------------------------------------------
# retention

def _due(now: datetime):
    return Claim.objects.filter(sensitivity=Sensitivity.SENSITIVE, erased_at__isnull=True,
                                retention_until__isnull=False, retention_until__lte=now)


def claims_retention_sweep(*, now: datetime | None = None, batch_size: int = RETENTION_BATCH,
                           max_batches: int | None = None) -> dict:
    """Erase sensitive claim versions past ``retention_until`` (see the module docstring for what
    goes and what remains). Safe twice and concurrently: erased versions are never erased again."""
    now = now or timezone.now()
    report = _batches(lambda: _retention_batch(now, batch_size), max_batches=max_batches)
    return {"keys": report.pop("keys", 0), "erased": report.pop("erased", 0),
            "tombstones": report.pop("tombstones", 0), **report}


def _retention_batch(now: datetime, size: int) -> dict:
    candidates = list(_due(now).order_by("key").values_list("key", flat=True).distinct()[:size])
    if not candidates:
        return {"rows": 0}
    heads = list(ClaimHead.objects.select_for_update(skip_locked=True).filter(key__in=candidates).order_by("key"))
    # Re-read under the locks: another sweep may have erased them since the candidates were read.
    due = list(_due(now).filter(key__in=[h.key for h in heads]).only("id", "key", "version", "store_version"))
    if not due:
        return {"rows": 0}
    by_key: dict[str, list[Claim]] = {}
    for claim in due:
        by_key.setdefault(claim.key, []).append(claim)
    with guard_lifted(*_LIFTED):
        Claim.objects.filter(id__in=[c.id for c in due]).update(statement="", source_refs=[], erased_at=now)
        GateDecision.objects.filter(key__in=list(by_key), payload__isnull=False).update(payload=None)
    cache, items, ending = {}, [], []
    for head in heads:
        erased = by_key.get(head.key)
        if not erased:
            continue
        ends = head.live and head.current_id in {c.id for c in erased}  # its live value goes: tombstone
        if ends:
            ending.append(head)
        versions = sorted(c.version for c in erased)
        ports.audit_record(
            user=None, action="retention_erase", outcome="done", target=head.key[:200], code=RETENTION_REASON,
            reason=f"sensitive versions {versions} of {head.key} past retention_until",
            data={"key": head.key, "versions": versions, "store_versions": sorted(c.store_version for c in erased),
                  "erased": ["statement", "source_refs", "gate_payloads"], "tombstoned": ends})
        subject = f"Claim {head.key}: versions {', '.join(map(str, versions))} deleted (retention expired)."
        url = reverse("knowledge:claim_history", args=[head.key])
        for user_id in _owner_ids(head.owner_id, cache):
            items.append(ports.Notice(user_id, "retention_expired", subject, url,
                                      f"retention:{head.key}:{max(versions)}"))
    ports.notifications_send_many(items, now=now)
    # Last: appending takes the store counter's lock, which every claim write waits for until commit.
    if ending:
        currents = Claim.objects.in_bulk([h.current_id for h in ending])
        for head in ending:
            head.current = currents[head.current_id]
        services.tombstones_append(ending, user=None, status=ClaimStatus.INVALIDATED, reason=RETENTION_REASON,
                                   now=now, action=RETENTION_REASON)
    return {"rows": len(due), "keys": len(by_key), "erased": len(due), "tombstones": len(ending)}
