"""Notifications (SPEC §5.3): rows a user reads on the pages and through the API, and e-mail
when Django's mail settings are configured, and a chat message for a pending request (``chat``).
Below every other service module: it imports only ``chat`` (which imports only the outbox).
The message of a pending request carries its Approve and Reject links, signed for each recipient
(``ledger.approval_links``, SPEC §17).

A notification is identified per user by its ``dedupe_key`` (``stale:<key>:<version>``,
``approval:<id>``, ``escalation:<id>``): inserting it is ``ON CONFLICT DO NOTHING``, so a
sweep that runs twice, or two sweeps at once, notify once. Mail goes after commit, only for
rows this call inserted.
"""

from __future__ import annotations

import logging
import uuid
from datetime import datetime
from typing import Callable, Iterable, NamedTuple

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError as DjangoValidationError
from django.core.mail import EmailMessage, get_connection
from django.db import connection, transaction
from django.db.models import F, Q, Value
from django.db.models.functions import Coalesce
from django.urls import reverse
from django.utils import timezone

from ledger.approval_links import approval_link_paths
from ledger.domain.approval_rules import groups_named, users_named
from ledger.models import Notification
from ledger.services.chat import chat_approval_post, public_url
from stateboard.errors import NotFound
from stateboard.roles import EDITOR, ONCALL, users_in_role

log = logging.getLogger(__name__)
SUBJECT_MAX = Notification._meta.get_field("subject").max_length
URL_MAX = Notification._meta.get_field("url").max_length
DEDUPE_MAX = Notification._meta.get_field("dedupe_key").max_length
INTENT_MAX = Notification._meta.get_field("intent").max_length
CLAIM_KEY_MAX = Notification._meta.get_field("claim_key").max_length
DONE_MAX = Notification._meta.get_field("done").max_length
RUN_ID_FIELD = Notification._meta.get_field("run_id")
INSERT_CHUNK = 1000


class NotificationItem(NamedTuple):
    """One notification to insert: for ``user_id``, unique by ``dedupe_key``; about a run (and its
    intent) or a claim."""

    user_id: int
    kind: str
    subject: str
    url: str
    dedupe_key: str
    run_id: str | None = None
    intent: str = ""
    claim_key: str = ""


def _user_id(user) -> int:
    return user if isinstance(user, int) else user.pk


def notifications_send(*, users, kind: str, subject: str, url: str, dedupe_key: str, run_id=None,
                       intent: str = "", claim_key: str = "", now: datetime | None = None,
                       mail_more: Callable[[int], str] | None = None) -> list[int]:
    """Notify each of ``users`` (users or ids) once per ``dedupe_key``; returns the new rows' ids.
    ``mail_more(user_id)``: what the e-mail says besides, to that recipient alone."""
    ids = dict.fromkeys(_user_id(u) for u in users)
    run_id = str(run_id) if run_id else None
    return notifications_send_many([NotificationItem(uid, kind, subject, url, dedupe_key, run_id, intent, claim_key)
                                    for uid in ids], now=now, mail_more=mail_more)


def notifications_send_many(items: Iterable[NotificationItem], *, now: datetime | None = None,
                            mail_more: Callable[[int], str] | None = None) -> list[int]:
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
                params += [user_id, item.kind, item.subject[:SUBJECT_MAX], item.url[:URL_MAX], key, at,
                           RUN_ID_FIELD.get_db_prep_value(uuid.UUID(item.run_id), connection) if item.run_id else None,
                           item.intent[:INTENT_MAX], item.claim_key[:CLAIM_KEY_MAX]]
            values = ", ".join(["(%s, %s, %s, %s, %s, %s, NULL, %s, %s, %s, '')"] * len(chunk))
            cursor.execute(
                f"INSERT INTO {table} (user_id, kind, subject, url, dedupe_key, created_at, read_at, "
                f"run_id, intent, claim_key, done) "
                f"VALUES {values} ON CONFLICT (user_id, dedupe_key) DO NOTHING RETURNING id, user_id, subject, url",
                params)
            inserted += cursor.fetchall()
    if inserted and settings.NOTIFICATIONS_EMAIL:
        transaction.on_commit(lambda: _mail(inserted, mail_more))
    return [row[0] for row in inserted]


def _mail(rows, mail_more: Callable[[int], str] | None = None) -> None:
    """One message per new notification to users with an address; a mail failure is logged, never raised."""
    addresses = dict(get_user_model().objects.filter(id__in={r[1] for r in rows}).exclude(email="")
                     .values_list("id", "email"))
    messages = [EmailMessage(subject=f"[Stateboard] {subject}",
                             body=f"{subject}\n\n{public_url(url) if url.startswith('/') else url}\n"
                                  + (f"\n{mail_more(user_id)}" if mail_more else ""),
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


def notifications_settle(*, done: str, dedupe_keys: Iterable[str] = (), claim_keys: Iterable[str] = (),
                         now: datetime | None = None) -> int:
    """What the notifications with these keys (or about these claims) asked for is done: each one not
    done yet says by what, and is read (one read before keeps its time)."""
    keys, claims = [key[:DEDUPE_MAX] for key in dedupe_keys], [key[:CLAIM_KEY_MAX] for key in claim_keys]
    if not keys and not claims:
        return 0
    about = (Q(dedupe_key__in=keys) if keys else Q()) | (Q(claim_key__in=claims) if claims else Q())
    return Notification.objects.filter(about, done="").update(
        read_at=Coalesce(F("read_at"), Value(now or timezone.now())), done=done[:DONE_MAX])


def notifications_read_all(*, user) -> int:
    """Mark every unread notification of the caller read; answers how many."""
    return Notification.objects.filter(user_id=user.pk, read_at__isnull=True).update(read_at=timezone.now())


def approval_keys(approval_id) -> list[str]:
    """The dedupe keys a request's notifications carry (an escalation's or an approval's)."""
    return [f"approval:{approval_id}", f"escalation:{approval_id}"]


def approval_notify(approval) -> list[int]:
    """A new request waits for people: editors decide high-impact and compensation requests (those its
    approvers name; the requester excepted: they cannot decide it), on-call decides escalations. Once per request,
    and once to the team's chat when a webhook is configured."""
    chat_approval_post(approval)
    escalation = approval.kind == "escalation"
    users = users_in_role(ONCALL if escalation else EDITOR)
    if not escalation and "role:editor" not in approval.approvers:  # SPEC §17: only the editors it names
        users = users.filter(Q(username__in=users_named(approval.approvers))
                             | Q(approver_groups__name__in=groups_named(approval.approvers)))
    if approval.requested_by_user_id is not None:
        users = users.exclude(id=approval.requested_by_user_id)
    run = approval.run
    where = f"{run.workflow.slug} · {run.intent} · run {str(run.id)[:8]}"
    if escalation:
        subject = f"Escalated: {where}. {approval.action.get('summary', '')}"
    else:
        subject = f"Approval needed ({approval.kind.replace('_', '-')}, stage {approval.stage}): {where}. " \
                  f"{approval.action.get('summary', '')}"
    return notifications_send(
        users=users.values_list("id", flat=True), kind="escalation" if escalation else "approval_pending",
        subject=subject, url=f"{reverse('ledger:approval_list')}#approval-{approval.id}",
        dedupe_key=approval_keys(approval.id)[1 if escalation else 0], run_id=run.id, intent=run.intent,
        now=approval.created_at, mail_more=lambda user_id: approval_links_text(approval, user_id))


def approval_links_text(approval, user_id: int) -> str:
    """The e-mail's Approve and Reject links for one recipient (SPEC §17), and what they do."""
    links = "".join(f"{label}: {public_url(path)}\n" for label, path in approval_link_paths(approval, user_id))
    return (f"{links}\nThese links are yours alone: each opens a page where you confirm, signed in as yourself "
            f"(a rejection with its reason). They decide once, until the request's deadline "
            f"({approval.deadline:%Y-%m-%d %H:%M} UTC).\n")
