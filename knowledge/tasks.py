from celery import shared_task


@shared_task(acks_late=True)
def tombstones_gc() -> int:
    """Remove tombstones no live checkpoint could resurrect; safe to run twice."""
    from knowledge import services

    return services.tombstones_gc()["count"]
