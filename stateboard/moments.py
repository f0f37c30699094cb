"""Moments from the outside world: ISO 8601 text to an aware UTC datetime (SPEC: times are UTC)."""

from datetime import datetime
from datetime import timezone as dt_timezone

from django.utils import timezone
from django.utils.dateparse import parse_datetime


def parse_moment(value, *, naive_as_utc: bool = False) -> datetime | None:
    """An ISO 8601 date-time in UTC, or None: also for impossible dates (Feb 30) and for an offset that
    takes it out of range (``9999-12-31T23:59:59-20:58``). A naive one is None unless ``naive_as_utc``."""
    if not isinstance(value, str):
        return None
    try:
        moment = parse_datetime(value.strip())
        if moment is not None and timezone.is_naive(moment):
            moment = moment.replace(tzinfo=dt_timezone.utc) if naive_as_utc else None
        return moment.astimezone(dt_timezone.utc) if moment is not None else None
    except (ValueError, OverflowError):
        return None
