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


_UNITS = (("day", 86400), ("h", 3600), ("min", 60), ("s", 1))


def duration_words(seconds) -> str:
    """A length of time as people say it: ``86400`` → "1 day", ``5400`` → "1 h 30 min", ``0.4`` → "0.4 s".
    At most two units, the larger first; whole days are said in days."""
    if seconds is None or seconds == "":
        return "—"
    try:
        seconds = float(seconds)
    except (TypeError, ValueError):
        return str(seconds)
    if seconds < 0.05:
        return "< 0.1 s"
    if seconds < 10:
        return f"{seconds:.1f} s".replace(".0 s", " s")
    parts, left = [], int(round(seconds))
    for name, size in _UNITS:
        count, left = divmod(left, size)
        if count:
            parts.append(f"{count} {name}{'s' if name == 'day' and count > 1 else ''}")
        if len(parts) == 2 or (parts and not left):
            break
    return " ".join(parts)
