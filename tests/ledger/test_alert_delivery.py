"""SPEC §14 delivery, against a real local HTTP receiver: from the outbox, at least once, each change once per
channel; a receiver down loses nothing and is retried with backoff; a repeat is only the retry of a send the
receiver did not take, with the same key and state."""

import hashlib
import hmac
import json
from datetime import timedelta

import pytest
from django.core import mail
from django.utils import timezone

from ledger import services
from ledger.models import Alert, Notification, Outbox, Workflow
from tests.factories import client_for, make_agent, make_operator, make_workflow
from tests.ledger.helpers import AgentDriver
from tests.ledger.receiver import Receiver

pytestmark = pytest.mark.django_db

SECRET = "alert-secret"


def _rule(*notify, severity="page"):
    return {"name": "stuck", "kind": "escalation_age", "severity": severity, "notify": list(notify), "minutes": 1}


@pytest.fixture
def receiver(settings):
    with Receiver() as receiver:
        settings.STATEBOARD_ALERT_WEBHOOK_URL = receiver.url
        settings.STATEBOARD_ALERT_WEBHOOK_SECRET = SECRET
        settings.STATEBOARD_PAGERDUTY_URL = receiver.url
        settings.STATEBOARD_PAGERDUTY_ROUTING_KEY = "routing-key"
        yield receiver


def _fire(*notify, severity="page", owner=None) -> Alert:
    workflow = make_workflow(approval_stages=[], max_retries=1, alerts=[_rule(*notify, severity=severity)],
                             owner=owner)
    AgentDriver(client_for(make_agent()[1]), workflow.slug).escalated_run(stage="discovery")
    services.alerts_evaluate(timezone.now() + timedelta(minutes=2))
    return Alert.objects.get()


def test_the_webhook_gets_the_alert_signed(receiver):
    alert = _fire("webhook")
    assert receiver.posts.total() == 0  # nothing from the request: the relay delivers
    assert services.outbox_relay() == 1
    [body] = receiver.bodies
    assert set(body) == {"alert", "workflow", "rule", "kind", "severity", "state", "subject", "summary", "url", "at"}
    assert (body["alert"], body["state"], body["severity"]) == (alert.key, "firing", "page")
    raw = json.dumps(body, sort_keys=True).encode()
    assert receiver.headers[0]["X-Stateboard-Signature"] == \
        "sha256=" + hmac.new(SECRET.encode(), raw, hashlib.sha256).hexdigest()


def test_pagerduty_gets_each_change_once_as_events_api_v2(receiver):
    alert = _fire("pagerduty")
    oncall, _ = make_operator("oncall")
    services.alert_acknowledge(alert_id=alert.id, user=oncall)
    services.alert_resolve(alert_id=alert.id, user=oncall, reason="fixed")
    assert services.outbox_relay() == 3
    assert services.outbox_relay() == 0
    assert [b["event_action"] for b in receiver.bodies] == ["trigger", "acknowledge", "resolve"]
    event = receiver.bodies[0]
    assert (event["routing_key"], event["dedup_key"]) == ("routing-key", alert.key)
    assert (event["payload"]["source"], event["payload"]["severity"]) == ("stateboard", "critical")
    assert event["payload"]["summary"] == alert.summary and event["links"][0]["href"].endswith(f"#alert-{alert.id}")


def test_a_receiver_down_loses_nothing_and_repeats_only_the_send_it_did_not_take(receiver):
    receiver.mode = "unavailable"
    alert = _fire("webhook")
    assert services.outbox_relay() == 0
    row = Outbox.objects.get(task="ledger.tasks.alert_send")
    assert row.attempts == 1 and "503" in row.last_error and row.claimed_until > timezone.now()  # backing off
    shown = client_for(make_operator("oncall")[1]).get(f"/api/v1/alerts/{alert.id}/").json()
    assert [(d["channel"], d["state"], d["attempts"]) for d in shown["deliveries"]] == [("webhook", "retrying", 1)]
    assert services.outbox_relay() == 0 and receiver.posts.total() == 1  # not before its backoff
    receiver.mode = "ok"
    Outbox.objects.filter(id=row.id).update(claimed_until=timezone.now() - timedelta(seconds=1))  # the wait is over
    assert services.outbox_relay() == 1
    assert services.outbox_relay() == 0
    assert receiver.posts.total() == 2 and receiver.bodies[0] == receiver.bodies[1]  # the retry of the refused one
    assert len(set(receiver.posts)) == 1  # one idempotency key: the receiver may drop a repeat


def test_one_channel_down_holds_back_only_its_own_deliveries(receiver, settings):
    with Receiver(mode="unavailable") as down:
        settings.STATEBOARD_PAGERDUTY_URL = down.url
        _fire("pagerduty", "webhook")
        assert services.outbox_relay() == 1
        assert down.posts.total() == 1
    assert [b["state"] for b in receiver.bodies] == ["firing"]


def test_a_rule_that_cannot_be_read_stops_no_other(receiver):
    broken = make_workflow(approval_stages=[], max_retries=1, alerts=[_rule("webhook")])
    Workflow.objects.filter(id=broken.id).update(alerts=[{"name": "stuck", "kind": "escalation_age"}])  # no minutes
    alert = _fire("webhook")
    assert Alert.objects.get() == alert


def test_inapp_and_email_reach_oncall_for_a_page_and_the_owner_for_info(receiver):
    oncall, _ = make_operator("oncall")
    oncall.email = "oncall@example.test"
    oncall.save()
    _fire("inapp", "email")
    services.outbox_relay()
    assert list(Notification.objects.filter(kind="alert").values_list("user_id", flat=True)) == [oncall.id]
    assert [m.to for m in mail.outbox] == [["oncall@example.test"]]


def test_an_info_alert_goes_to_the_workflows_owner(receiver):
    owner, _ = make_operator("owner")
    make_operator("oncall")
    _fire("inapp", severity="info", owner=owner)
    services.outbox_relay()
    assert list(Notification.objects.filter(kind="alert").values_list("user_id", flat=True)) == [owner.id]


def test_chat_gets_the_alert(receiver, settings):
    alert = _fire("chat")
    settings.STATEBOARD_CHAT_WEBHOOK_URL = receiver.url  # (set before, the escalation's own message would go too)
    assert services.outbox_relay() == 1
    assert alert.key in receiver.bodies[0]["text"] and "firing" in receiver.bodies[0]["text"]
