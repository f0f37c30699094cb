"""Alert deliveries (SPEC §14), from the outbox, at least once, each change once per channel.

``change_deliver`` writes one outbox row per channel of the alert's rule (dedupe key
``alert:<id>:<change>:<channel>``) in the change's transaction; the relay performs it (``alert_send``, like a
chat message: the row is marked sent only once the receiver took it, so an outage loses nothing and a
failing receiver is retried with backoff, its attempts and last error shown on the alert). A repeat carries
the same alert key and state: a receiver may drop it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging

from django.conf import settings
from django.core.mail import send_mail

from ledger.domain.alerts import OPEN_STATES, PAGERDUTY_SEVERITY
from ledger.models import Alert, AlertChange, AlertSilence, Outbox
from ledger.services.chat import esc, post_or_raise, public_url
from ledger.services.notifications import notifications_send
from ledger.services.outbox import ALERT_TASK, outbox_put
from stateboard.roles import ONCALL, users_in_role

log = logging.getLogger(__name__)


def alert_path(alert: Alert) -> str:
    """The alert on the /alerts/ page."""
    return f"/alerts/#alert-{alert.id}"


class AlertUndelivered(RuntimeError):
    """The receiver did not take it (down, 5xx, 408, 429): the outbox row stays for the next relay."""


def _channels(alert: Alert) -> list[str]:
    rule = next((r for r in alert.workflow.alerts if r.get("name") == alert.rule), None)
    return list(rule["notify"]) if rule else []


def _put(alert: Alert, change: AlertChange, tag: str) -> int:
    return sum(outbox_put(task=ALERT_TASK, kwargs={"alert_id": alert.id, "change_id": change.id, "channel": channel},
                          dedupe_key=f"alert:{alert.id}:{tag}:{channel}") for channel in _channels(alert))


def change_deliver(alert: Alert, change: AlertChange) -> int:
    """One outbox row per channel for ``change`` (in the caller's transaction)."""
    return _put(alert, change, str(change.id))


def silence_release(now, *, workflow=None, rule: str | None = None) -> int:
    """Silences that ended and were not released: their rule's open alerts are delivered once, as they stand."""
    ended = AlertSilence.objects.filter(until__lte=now, released_at__isnull=True).select_related("workflow")
    if workflow is not None:
        ended = ended.filter(workflow=workflow, rule=rule)
    delivered = 0
    for silence in ended:
        if not AlertSilence.objects.filter(id=silence.id, released_at__isnull=True).update(released_at=now):
            continue  # another beat released it
        for alert in Alert.objects.filter(workflow=silence.workflow, rule=silence.rule, state__in=OPEN_STATES):
            alert.workflow = silence.workflow
            change = alert.changes.order_by("-id").first()
            delivered += _put(alert, change, f"release-{silence.id}-{int(silence.until.timestamp())}")
    return delivered


def deliveries_of(alert_ids) -> dict[int, list[dict]]:
    """{alert id: [{channel, change, state, attempts, last_error}]} from the outbox rows, oldest first: ``state``
    the delivery's (pending, retrying, delivered), ``change`` the alert state it carries."""
    found: dict[int, list[dict]] = {alert_id: [] for alert_id in alert_ids}
    if not found:
        return found
    rows = Outbox.objects.filter(task=ALERT_TASK, kwargs__alert_id__in=list(found)).order_by("id")
    changes = dict(AlertChange.objects.filter(alert_id__in=list(found)).values_list("id", "state"))
    for row in rows:
        found[row.kwargs["alert_id"]].append({
            "channel": row.kwargs["channel"], "change": changes.get(row.kwargs["change_id"], ""),
            "state": "delivered" if row.sent_at else ("retrying" if row.attempts else "pending"),
            "attempts": row.attempts, "last_error": row.last_error})
    return found


# ---------------------------------------------------------------- performed by the relay

def _payload(alert: Alert, change: AlertChange) -> dict:
    return {"alert": alert.key, "workflow": alert.workflow.slug, "rule": alert.rule, "kind": alert.kind,
            "severity": alert.severity, "state": change.state, "subject": alert.subject, "summary": alert.summary,
            "url": public_url(alert_path(alert)), "at": change.at.isoformat()}


def _post(url: str, body: bytes, headers: dict) -> None:
    post_or_raise(url, AlertUndelivered, "alert receiver", content=body,
                  headers={"Content-Type": "application/json", **headers})


def _webhook(alert, change, payload) -> None:
    if not settings.STATEBOARD_ALERT_WEBHOOK_URL:
        log.warning("alert: webhook is notified but STATEBOARD_ALERT_WEBHOOK_URL is not set; dropped")
        return
    body = json.dumps(payload, sort_keys=True).encode()
    headers = {"Idempotency-Key": f"{alert.key}:{change.state}:{change.id}"}
    secret = settings.STATEBOARD_ALERT_WEBHOOK_SECRET.encode()
    if secret:  # signed like the executor's webhook
        headers["X-Stateboard-Signature"] = "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()
    _post(settings.STATEBOARD_ALERT_WEBHOOK_URL, body, headers)


PAGERDUTY_ACTION = {"firing": "trigger", "acknowledged": "acknowledge", "resolved": "resolve"}


def _pagerduty(alert, change, payload) -> None:
    if not settings.STATEBOARD_PAGERDUTY_ROUTING_KEY:
        log.warning("alert: pagerduty is notified but STATEBOARD_PAGERDUTY_ROUTING_KEY is not set; dropped")
        return
    event = {"routing_key": settings.STATEBOARD_PAGERDUTY_ROUTING_KEY, "event_action": PAGERDUTY_ACTION[change.state],
             "dedup_key": alert.key,
             "payload": {"summary": alert.summary[:1024], "source": "stateboard",
                         "severity": PAGERDUTY_SEVERITY[alert.severity],
                         "custom_details": {k: payload[k] for k in ("workflow", "rule", "kind", "subject", "state")}},
             "links": [{"href": payload["url"], "text": "Stateboard alert"}]}
    _post(settings.STATEBOARD_PAGERDUTY_URL, json.dumps(event).encode(), {"Idempotency-Key": f"{alert.key}:{change.id}"})


def _chat(alert, change, payload) -> None:
    from ledger.services.chat import chat_deliver  # raises ChatUnavailable: the row stays

    text = f"*{esc(alert.severity)} alert {esc(change.state)}*: {esc(alert.key)}\n{esc(alert.summary)}"
    chat_deliver(body={"text": text, "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": text[:2900]}}]})


def _people(alert):
    if alert.severity == "info":
        return [alert.workflow.owner] if alert.workflow.owner_id else []
    return list(users_in_role(ONCALL))


def _inapp(alert, change, payload) -> None:
    notifications_send(users=_people(alert), kind="alert", subject=f"Alert {change.state}: {alert.key}"[:300],
                       url=alert_path(alert), dedupe_key=f"alert:{change.id}",
                       run_id=alert.run_id)


def _email(alert, change, payload) -> None:
    emails = [u.email for u in _people(alert) if u.email]
    if emails:
        send_mail(f"[Stateboard] {alert.severity} alert {change.state}: {alert.key}",
                  f"{alert.summary}\n\n{payload['url']}\n", settings.DEFAULT_FROM_EMAIL, emails)


SENDERS = {"inapp": _inapp, "email": _email, "chat": _chat, "webhook": _webhook, "pagerduty": _pagerduty}


def alert_send(*, alert_id: int, change_id: int, channel: str) -> str:
    """Deliver one change on one channel (run by the outbox relay, which keeps the row when this raises)."""
    change = AlertChange.objects.select_related("alert__workflow__owner").filter(id=change_id, alert_id=alert_id).first()
    if change is None:
        return "gone"
    SENDERS[channel](change.alert, change, _payload(change.alert, change))
    return "delivered"
