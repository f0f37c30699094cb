"""Reads of the ledger, shared by pages, the API and the knowledge app."""

from django.db.models import Min

from ledger.models import Checkpoint, LedgerEvent


def event_is_verified(*, event_id: int) -> bool:
    """True when the ledger event exists and is a ``verified`` event (a claim may rest on it)."""
    return LedgerEvent.objects.filter(id=event_id, kind="verified").exists()


def oldest_live_version_boundary(*, now) -> int | None:
    """Smallest ``version_boundary`` among checkpoints not yet expired (None: no such checkpoint).

    Checkpoints without a boundary hold no knowledge snapshot and cannot resurrect anything.
    """
    return (Checkpoint.objects.filter(expires_at__gt=now, version_boundary__isnull=False)
            .aggregate(m=Min("version_boundary"))["m"])
