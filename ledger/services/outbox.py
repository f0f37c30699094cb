"""The transactional outbox: a task is written as a row in the transaction that decided it, then sent.

``outbox_put`` writes the row and asks for a relay once the transaction commits (best effort); the
relay sweep (every ~10 s) sends whatever is still unsent, so a broker outage delays work but never
loses it. Tasks are idempotent, so a row sent twice (the send succeeded, the mark did not) is harmless.

A chat delivery (``CHAT_TASK``, SPEC §12.3) is performed by the relay itself, never from a request: the
row is sent only once the chat service has answered, so a chat outage keeps it for the next sweep.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from ledger.models import Outbox
from stateboard.celery import app

logger = logging.getLogger(__name__)

EXECUTOR_TASK = "ledger.tasks.executor_run"
CHAT_TASK = "ledger.tasks.chat_deliver"
ALERT_TASK = "ledger.tasks.alert_send"
# Run by the relay sweep in its own process (an HTTP call), not handed to the broker from the request.
PERFORMED_BY_RELAY = frozenset({CHAT_TASK, ALERT_TASK})
CLAIM_SECONDS = 30
BACKOFF_MAX_SECONDS = 600  # an alert receiver that keeps failing: 20 s, 40 s, … up to 10 min


def outbox_put(*, task: str, args: list | None = None, kwargs: dict | None = None, dedupe_key: str,
               countdown: int = 0) -> bool:
    """Record a task to send after commit; a second row with the same ``dedupe_key`` is not written."""
    try:
        with transaction.atomic():
            row = Outbox.objects.create(task=task, args=args or [], kwargs=kwargs or {}, dedupe_key=dedupe_key,
                                        countdown=countdown, created_at=timezone.now())
    except IntegrityError:
        return False
    if task not in PERFORMED_BY_RELAY:
        transaction.on_commit(lambda: outbox_relay(ids=[row.id]))
    return True


def _send(row: Outbox) -> None:
    task = app.tasks.get(row.task)  # registered when the app is ready (ledger/apps.py)
    if row.task in PERFORMED_BY_RELAY:
        task(*row.args, **row.kwargs)  # here and now: it raises when the delivery failed
    elif task is not None:  # apply_async honours task_always_eager (tests and the embedded demo)
        task.apply_async(args=row.args, kwargs=row.kwargs, countdown=row.countdown or None, retry=False)
    else:
        app.send_task(row.task, args=row.args, kwargs=row.kwargs, countdown=row.countdown or None, retry=False)


def outbox_relay(*, ids: list[int] | None = None, limit: int = 200) -> int:
    """Send unsent rows (oldest first) to the broker; rows that fail stay for the next relay.

    Each row is claimed in a short transaction and sent after it commits, so no database transaction
    is open while the broker is called (and an eager task runs on committed data)."""
    sent, down = 0, set()
    for row_id, task, kwargs in list(_unsent(ids).values_list("id", "task", "kwargs")[:limit]):
        if _route(task, kwargs) in down:
            continue  # its broker (or chat service) is down: the rest would fail the same way
        try:
            row = _claim(row_id)
            if row is None:
                continue
            try:
                _send(row)
            except Exception as exc:  # the broker is unreachable: keep the row, try again later
                Outbox.objects.filter(id=row.id).update(claimed_until=_backoff(row), last_error=str(exc)[:500])
                logger.warning("outbox: %s not sent (%s); the relay sweep retries", row.task, exc)
                if ids is None:
                    down.add(_route(row.task, row.kwargs))
                continue
            Outbox.objects.filter(id=row.id).update(sent_at=timezone.now(), claimed_until=None)
            sent += 1
        except Exception:  # a relay after commit must never break the request that triggered it
            logger.exception("outbox relay failed")
    return sent


def _route(task: str, kwargs: dict) -> str:
    if task == ALERT_TASK:
        return f"{task}:{kwargs.get('channel')}"  # one alert receiver down holds back only its own rows
    return task if task in PERFORMED_BY_RELAY else "broker"


def _backoff(row: Outbox):
    """An alert delivery waits 10 s × 2^attempts (at most BACKOFF_MAX_SECONDS) before the next try."""
    if row.task != ALERT_TASK:
        return None
    return timezone.now() + timedelta(seconds=min(10 * 2 ** row.attempts, BACKOFF_MAX_SECONDS))


def _unsent(ids):
    now = timezone.now()
    pending = Outbox.objects.filter(sent_at__isnull=True).filter(
        Q(claimed_until__isnull=True) | Q(claimed_until__lte=now))
    if ids is not None:
        pending = pending.filter(id__in=ids)
    return pending.order_by("id")


def _claim(row_id) -> Outbox | None:
    with transaction.atomic():
        row = _unsent(None).select_for_update(skip_locked=True).filter(id=row_id).first()
        if row is None:
            return None
        row.attempts += 1
        row.claimed_until = timezone.now() + timedelta(seconds=CLAIM_SECONDS)
        row.save(update_fields=["attempts", "claimed_until"])
    return row
