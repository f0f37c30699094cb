"""Citations: ledger events that cite claims as evidence (the stale-claim-as-fact metric)."""

from __future__ import annotations

from datetime import datetime

from django.db import transaction

from knowledge.models import EFFECTIVE_STATUSES, Claim, ClaimCitation, ClaimHead, ClaimStatus

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
