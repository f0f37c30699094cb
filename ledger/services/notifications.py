"""Notifications (SPEC §5.3): rows a user reads on the pages and through the API, and e-mail
when Django's mail settings are configured, and a chat message for a pending request (``chat``).
Below every other service module: it imports only ``chat`` (which imports only the outbox).

A notification is identified per user by its ``dedupe_key`` (``stale:<key>:<version>``,
``approval:<id>``, ``escalation:<id>``): inserting it is ``ON CONFLICT DO NOTHING``, so a
sweep that runs twice, or two sweeps at once, notify once. Mail goes after commit, only for
rows this call inserted.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Iterable, NamedTuple

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError as DjangoValidationError
from django.core.mail import EmailMessage, get_connection
from django.db import connection, transaction
from django.urls import reverse
from django.utils import timezone

from ledger.models import Notification
from ledger.services.chat import chat_approval_post
from stateboard.errors import NotFound
from stateboard.roles import EDITOR, ONCALL, users_in_role

log = logging.getLogger(__name__)
SUBJECT_MAX = Notification._meta.get_field("subject").max_length
URL_MAX = Notification._meta.get_field("url").max_length
DEDUPE_MAX = Notification._meta.get_field("dedupe_key").max_length
INSERT_CHUNK = 1000


class Item(NamedTuple):
    """One notification to insert: for ``user_id``, unique by ``dedupe_key``."""

    user_id: int
    kind: str
    subject: str
    url: str
    dedupe_key: str


def _user_id(user) -> int:
    return user if isinstance(user, int) else user.pk


def notifications_send(*, users, kind: str, subject: str, url: str, dedupe_key: str,
                       now: datetime | None = None) -> list[int]:
    """Notify each of ``users`` (users or ids) once per ``dedupe_key``; returns the new rows' ids."""
    ids = dict.fromkeys(_user_id(u) for u in users)
    return notifications_send_many([Item(uid, kind, subject, url, dedupe_key) for uid in ids], now=now)


def notifications_send_many(items: Iterable[Item], *, now: datetime | None = None) -> list[int]:
    """Insert many notifications in a few multi-row statements, skipping ones already sent."""
    now = now or timezone.now()
    rows = list({(i.user_id, i.dedupe_key[:DEDUPE_MAX]): i for i in items}.items())
    table = connection.ops.quote_name(Notification._meta.db_table)
    at = connection.ops.adapt_datetimefield_value(now)
    inserted: list[tuple[int, int, str, str]] = []
    with connection.cursor() as cursor:
        for start in range(0, len(rows), INSERT_CHUNK):
            chunk = rows[start:start + INSERT_CHUNK]
            params = []
            for (user_id, key), item in chunk:
                params += [user_id, item.kind, item.subject[:SUBJECT_MAX], item.url[:URL_MAX], key, at]
            values = ", ".join(["(%s, %s, %s, %s, %s, %s, NULL)"] * len(chunk))
            cursor.execute(
                f"INSERT INTO {table} (user_id, kind, subject, url, dedupe_key, created_at, read_at) "
                f"VALUES {values} ON CONFLICT (user_id, dedupe_key) DO NOTHING RETURNING id, user_id, subject, url",
                params)
            inserted += cursor.fetchall()
    if inserted and settings.NOTIFICATIONS_EMAIL:
        transaction.on_commit(lambda: _mail(inserted))
    return [row[0] for row in inserted]


def _mail(rows) -> None:
    """One message per new notification to users with an address; a mail failure is logged, never raised."""
    addresses = dict(get_user_model().objects.filter(id__in={r[1] for r in rows}).exclude(email="")
                     .values_list("id", "email"))
    messages = [EmailMessage(subject=f"[Stateboard] {subject}", body=f"{subject}\n\n{url}\n",
                             from_email=settings.DEFAULT_FROM_EMAIL, to=[addresses[user_id]])
                for _, user_id, subject, url in rows if user_id in addresses]
    if not messages:
        return
    try:
        get_connection().send_messages(messages)
    except Exception:  # noqa: BLE001 - the row is the notification; mail is best effort
        log.exception("notification e-mail failed (%d messages)", len(messages))


@transaction.atomic
def notification_read(*, notification_id, user) -> Notification:
    """Mark the caller's notification read (once: reading it again keeps the first time)."""
    try:
        notification = Notification.objects.select_for_update().get(id=notification_id, user_id=user.pk)
    except (Notification.DoesNotExist, ValueError, TypeError, DjangoValidationError):
        raise NotFound("notification_not_found", f"No notification {notification_id} of yours.")
    if notification.read_at is None:
        notification.read_at = timezone.now()
        notification.save(update_fields=["read_at"])
    return notification


def approval_notify(approval) -> list[int]:
    """A new request waits for people: editors decide high-impact and compensation requests
    (the requester excepted: they cannot decide it), on-call decides escalations. Once per request,
    and once to the team's chat when a webhook is configured."""
    chat_approval_post(approval)
    escalation = approval.kind == "escalation"
    users = users_in_role(ONCALL if escalation else EDITOR)
    if approval.requested_by_user_id is not None:
        users = users.exclude(id=approval.requested_by_user_id)
    workflow = approval.run.workflow.slug
    if escalation:
        subject = f"Run of {workflow} escalated: {approval.action.get('summary', '')}"
    else:
        subject = f"Approval needed ({approval.kind.replace('_', '-')}) on {workflow}/{approval.stage}: " \
                  f"{approval.action.get('summary', '')}"
    return notifications_send(
        users=users.values_list("id", flat=True), kind="escalation" if escalation else "approval_pending",
        subject=subject, url=f"{reverse('ledger:approval_list')}#approval-{approval.id}",
        dedupe_key=f"{'escalation' if escalation else 'approval'}:{approval.id}", now=approval.created_at)
