from celery import shared_task

from knowledge import services
from knowledge.ops import sweeps
from stateboard.celery import DB_RETRY


@shared_task(acks_late=True, **DB_RETRY)
def tombstones_gc() -> int:
    """Remove tombstones no live checkpoint could resurrect; safe to run twice."""
    return services.tombstones_gc()["count"]


@shared_task(acks_late=True, **DB_RETRY)
def claims_stale_sweep() -> int:
    """Notify owners of claims whose refresh_after passed, once per version; safe twice."""
    return sweeps.claims_stale_sweep()["marked"]


@shared_task(acks_late=True, **DB_RETRY)
def claims_retention_sweep() -> int:
    """Erase sensitive claims past retention_until (the one true deletion); safe twice."""
    return sweeps.claims_retention_sweep()["erased"]
