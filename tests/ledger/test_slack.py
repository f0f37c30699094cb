"""Approvals from chat (SPEC §12.3): messages to a real local webhook from the outbox (content, an outage
that loses nothing and delays no request), and Slack's signed callbacks decided by the dashboard's rules."""

import hashlib
import hmac
import json
import socket
import threading
import time
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlencode

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from knowledge import services as knowledge_services
from knowledge.ops import sweeps
from ledger import services, tasks
from ledger.identities import operator_create
from ledger.models import Approval, AuditEntry, LedgerEvent, Outbox, Run, SlackIdentity, SlackSignature
from tests.factories import client_for, make_agent, make_operator, make_workflow
from tests.knowledge.conftest import iso, proposal
from tests.ledger.helpers import AgentDriver

pytestmark = pytest.mark.django_db

SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
PUBLIC = "https://board.example.test"
TEAM = "T0TEAM"
ACTION = {"system": "cms", "operation": "publish", "target": "post-7",
          "summary": "Publish post 7 (key sk-abcdefghijklmnopqrstuvwx)"}
EVIDENCE = [{"uri": "https://ci.example.test/build/42?token=hunter2hunter2", "observed_at": "2026-12-01T10:00:00+00:00"}]
URL = "/integrations/slack/actions/"


class ChatReceiver:
    """A Slack stand-in on 127.0.0.1: records each JSON POST with its path; ``hang`` holds every answer."""

    def __init__(self, port: int = 0, hang: float = 0.0):
        self.posts: list[tuple[str, dict]] = []
        self.hang = hang
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if receiver.hang:
                    time.sleep(receiver.hang)
                receiver.posts.append((self.path, json.loads(body)))
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def at(self, path: str) -> list[dict]:
        return [body for p, body in self.posts if p == path]

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def chat(settings):
    receiver = ChatReceiver()
    settings.STATEBOARD_CHAT_WEBHOOK_URL = receiver.url("/hook")
    settings.STATEBOARD_SLACK_SIGNING_SECRET = SECRET
    settings.STATEBOARD_PUBLIC_URL = PUBLIC + "/"
    yield receiver
    receiver.close()


class Desk:
    """A workflow whose publish needs approval, an agent driving it, people mapped to Slack users."""

    def __init__(self, **workflow):
        self.wf = make_workflow(stages=["build", "publish"], effect_stages=["publish"], approval_stages=["publish"],
                                **workflow)
        _, token = make_agent()
        self.agent = AgentDriver(client_for(token), self.wf.slug)
        self.editor = operator_create(name="ed", role="editor", slack_id=f"{TEAM}:UEDITOR")[0]
        self.oncall = operator_create(name="oc", role="oncall", slack_id=f"{TEAM}:UONCALL")[0]
        self.viewer = operator_create(name="vi", role="viewer", slack_id=f"{TEAM}:UVIEWER")[0]

    def pending(self) -> Approval:
        run = self.agent.trigger(intent="post-7")
        self.agent.event(run["id"], "build", "started")
        self.agent.event(run["id"], "build", "succeeded", evidence=EVIDENCE)
        answer = self.agent.client.post(f"/api/v1/runs/{run['id']}/approvals/",
                                        {"kind": "high_impact", "stage": "publish", "action": ACTION}, format="json")
        assert answer.status_code == 201, answer.content
        return Approval.objects.get(id=answer.json()["id"])

    def escalation(self) -> Approval:
        self.agent.escalated_run(intent="flaky")
        return Approval.objects.get(kind="escalation", status="pending")


def payload(action_id: str, value: str, *, user: str, reason: str | None = None, response_url: str) -> dict:
    """A block_actions payload as Slack sends it when a button of our message is pressed."""
    return {"type": "block_actions", "team": {"id": TEAM, "domain": "acme"},
            "user": {"id": user, "username": user.lower(), "team_id": TEAM},
            "api_app_id": "A1", "trigger_id": "1.2.3", "response_url": response_url,
            "container": {"type": "message", "message_ts": "1.2"}, "channel": {"id": "C1"},
            "actions": [{"action_id": action_id, "block_id": f"decide:{value}", "value": value, "type": "button",
                         "action_ts": "1.3"}],
            "state": {"values": {"reason": {"reason": {"type": "plain_text_input", "value": reason}}}}}


def signed(body: str, *, secret: str = SECRET, at: int | None = None) -> dict:
    timestamp = str(int(time.time()) if at is None else at)
    digest = hmac.new(secret.encode(), f"v0:{timestamp}:{body}".encode(), hashlib.sha256).hexdigest()
    return {"HTTP_X_SLACK_REQUEST_TIMESTAMP": timestamp, "HTTP_X_SLACK_SIGNATURE": f"v0={digest}"}


def press(data: dict, headers: dict | None = None, body: str | None = None):
    body = body if body is not None else urlencode({"payload": json.dumps(data)})
    return client_for(None).post(URL, data=body, content_type="application/x-www-form-urlencoded",
                                 **(headers if headers is not None else signed(body)))


def changed(approval: Approval) -> tuple:
    """What a refused decision must leave alone."""
    approval.refresh_from_db()
    run = Run.objects.get(id=approval.run_id)
    return approval.status, run.state, LedgerEvent.objects.filter(run=run).count()


def reply_of(chat, path="/response") -> dict:
    services.outbox_relay()
    [reply] = chat.at(path)
    return reply


def all_text(message: dict) -> str:
    return json.dumps(message)


# ---------------------------------------------------------------- messages

def test_a_pending_approval_posts_its_message_from_the_outbox(chat):
    """Run, intent, action, evidence, the deciding page on the public URL, Approve / Reject with the
    approval id and the reason input; secrets redacted; sent by the relay, not by the request."""
    approval = Desk().pending()
    assert chat.posts == []  # the request wrote a row; it called nobody
    row = Outbox.objects.get(dedupe_key=f"chat:high_impact:{approval.id}")
    assert row.sent_at is None and "hunter2" not in json.dumps(row.kwargs)
    assert services.outbox_relay() >= 1
    [message] = chat.at("/hook")
    text = all_text(message)
    run = approval.run
    assert str(run.id)[:8] in text and f"{PUBLIC}/runs/{run.id}/" in text
    assert "post-7" in text and run.workflow.slug in text and "publish" in text
    assert "Publish post 7" in text and "sk-[redacted]" in text and "abcdefghijklmnop" not in text
    assert "https://ci.example.test/build/42?token=[redacted]" in text and "hunter2" not in text
    assert f"{PUBLIC}/approvals/#approval-{approval.id}" in text
    [actions] = [b for b in message["blocks"] if b["type"] == "actions"]
    assert [(e["action_id"], e["value"]) for e in actions["elements"]] == [
        ("approve", str(approval.id)), ("reject", str(approval.id))]
    assert any(b["type"] == "input" and b["block_id"] == "reason" for b in message["blocks"])
    assert Outbox.objects.get(id=row.id).sent_at is not None
    services.outbox_relay()
    assert len(chat.at("/hook")) == 1  # delivered once


def test_without_a_signing_secret_the_message_has_no_buttons(chat, settings):
    settings.STATEBOARD_SLACK_SIGNING_SECRET = ""
    Desk().pending()
    services.outbox_relay()
    [message] = chat.at("/hook")
    assert {b["type"] for b in message["blocks"]}.isdisjoint({"actions", "input"})


def test_without_a_webhook_nothing_is_queued(chat, settings):
    settings.STATEBOARD_CHAT_WEBHOOK_URL = ""
    Desk().pending()
    assert not Outbox.objects.filter(task="ledger.tasks.chat_deliver").exists()


def test_an_escalation_posts_retry_and_abandon(chat):
    escalation = Desk(max_retries=1).escalation()
    services.outbox_relay()
    [message] = chat.at("/hook")
    text = all_text(message)
    assert "escalated" in text and "retry_budget_exhausted" in text and "flaky" in text
    assert f"{PUBLIC}/oncall/" in text and str(escalation.run_id)[:8] in text
    [actions] = [b for b in message["blocks"] if b["type"] == "actions"]
    assert [(e["action_id"], e["value"]) for e in actions["elements"]] == [
        ("retry", str(escalation.id)), ("abandon", str(escalation.id))]


def test_a_stale_claim_posts_its_message_once(chat):
    owner, _ = make_operator("owner")
    agent, _ = make_agent(owner=owner)
    now = timezone.now()
    claim = knowledge_services.claim_propose(user=agent, data=proposal(
        observed_at=iso(now - timedelta(hours=2)), refresh_after=iso(now - timedelta(minutes=5)),
        source_refs=["https://docs.example.com/billing?api_key=zzzsecretzzz#timeouts"]))
    sweeps.claims_stale_sweep()
    sweeps.claims_stale_sweep()
    services.outbox_relay()
    [message] = chat.at("/hook")
    text = all_text(message)
    assert claim.key in text and "stale" in text and "The billing API times out after 30 s." in text
    assert f"{PUBLIC}/claims/{claim.key}/history/" in text
    assert "api_key=[redacted]" in text and "zzzsecretzzz" not in text


def test_a_chat_outage_loses_nothing_and_is_delivered_once_it_is_back(chat, settings):
    """The webhook's port is closed: the request succeeds, the relay keeps the row (and still relays
    other work); once the service is back the message is delivered, once."""
    port = free_port()
    settings.STATEBOARD_CHAT_WEBHOOK_URL = f"http://127.0.0.1:{port}/hook"
    approval = Desk().pending()
    row = Outbox.objects.get(dedupe_key=f"chat:high_impact:{approval.id}")
    services.outbox_relay()
    services.outbox_relay()
    row.refresh_from_db()
    assert row.sent_at is None and row.attempts == 2 and "unreachable" in row.last_error
    back = ChatReceiver(port=port)
    try:
        services.outbox_relay()
        services.outbox_relay()
        assert len(back.at("/hook")) == 1 and approval.action["target"] in all_text(back.at("/hook")[0])
    finally:
        back.close()
    row.refresh_from_db()
    assert row.sent_at is not None


def test_a_slow_chat_service_delays_no_request(chat):
    """A webhook that takes 3 s per message: requesting the approval answers at once and calls nobody."""
    chat.hang = 3.0
    desk = Desk()
    started = time.perf_counter()
    approval = desk.pending()
    assert time.perf_counter() - started < 2.0
    assert chat.posts == []
    assert Outbox.objects.get(dedupe_key=f"chat:high_impact:{approval.id}").sent_at is None


# ---------------------------------------------------------------- signed callbacks

def test_approve_from_slack_decides_as_the_mapped_editor(chat):
    desk = Desk()
    approval = desk.pending()
    answer = press(payload("approve", str(approval.id), user="UEDITOR", response_url=chat.url("/response")))
    assert answer.status_code == 200, answer.content
    approval.refresh_from_db()
    assert approval.status == "approved" and approval.decided_by == "user:ed" and approval.decided_role == "editor"
    event = LedgerEvent.objects.get(run_id=approval.run_id, kind="approved")
    assert event.actor == "user:ed" and event.data["via"] == "slack"
    reply = reply_of(chat)
    assert reply["replace_original"] is True and "Approved by user:ed via Slack" in reply["text"]


def test_reject_from_slack_takes_the_reason_from_the_input_block(chat):
    approval = Desk().pending()
    press(payload("reject", str(approval.id), user="UEDITOR", reason="Wrong post.", response_url=chat.url("/response")))
    approval.refresh_from_db()
    assert approval.status == "rejected" and approval.reason == "Wrong post."
    assert Run.objects.get(id=approval.run_id).state == "abandoned"
    assert LedgerEvent.objects.get(run_id=approval.run_id, kind="rejected").data["via"] == "slack"
    assert "Rejected by user:ed" in reply_of(chat)["text"]


def _refused(chat, approval, data, code):
    before = changed(approval)
    answer = press(data)
    assert answer.status_code == 200, answer.content
    assert changed(approval) == before
    reply = reply_of(chat, data["response_url"].split(str(chat.port), 1)[1])
    assert reply["response_type"] == "ephemeral" and reply["replace_original"] is False
    assert f"Not done ({code})" in reply["text"], reply


def test_reject_without_a_reason_is_refused_and_changes_nothing(chat):
    approval = Desk().pending()
    _refused(chat, approval, payload("reject", str(approval.id), user="UEDITOR", reason="  ",
                                     response_url=chat.url("/response")), "reason_required")


def test_an_unmapped_slack_user_is_refused_and_changes_nothing(chat):
    approval = Desk().pending()
    _refused(chat, approval, payload("approve", str(approval.id), user="USTRANGER", response_url=chat.url("/response")),
             "slack_user_unknown")


def test_the_wrong_role_is_refused_and_audited(chat):
    approval = Desk().pending()
    _refused(chat, approval, payload("approve", str(approval.id), user="UVIEWER", response_url=chat.url("/response")),
             "permission_denied")
    assert AuditEntry.objects.filter(action="slack_action", code="permission_denied", outcome="refused").count() == 1


def test_the_requester_cannot_approve_their_own_request_from_slack(chat):
    """Four eyes: on-call proposes a compensation; the same person (also an editor) presses Approve."""
    desk = Desk()
    both = operator_create(name="both", role="oncall", slack_id=f"{TEAM}:UBOTH")[0]
    operator_create(name="both", role="editor")
    publish = desk.pending()
    press(payload("approve", str(publish.id), user="UEDITOR", response_url=chat.url("/ok")))
    desk.agent.event(publish.run_id, "publish", "started", action=ACTION)
    desk.agent.event(publish.run_id, "publish", "succeeded",
                     effect={"system": "cms", "operation": "publish", "reference": "post-7@1"})
    desk.agent.event(publish.run_id, "publish", "failed", reason_code="page_broken")
    assert Run.objects.get(id=publish.run_id).state == "compensate"
    _, compensation = services.run_compensate(run_id=publish.run_id, user=both, reason="undo")
    assert compensation is not None and compensation.requested_by_user_id == both.pk
    _refused(chat, compensation, payload("approve", str(compensation.id), user="UBOTH",
                                         response_url=chat.url("/response")), "requester_cannot_decide")
    press(payload("approve", str(compensation.id), user="UEDITOR", response_url=chat.url("/other")))
    compensation.refresh_from_db()
    assert compensation.status == "approved" and compensation.decided_by == "user:ed"


def test_a_bad_signature_is_401_and_changes_nothing(chat):
    approval = Desk().pending()
    before = changed(approval)
    body = urlencode({"payload": json.dumps(payload("approve", str(approval.id), user="UEDITOR",
                                                     response_url=chat.url("/response")))})
    wrong = press({}, headers=signed(body, secret="not-the-secret"), body=body)
    assert wrong.status_code == 401 and wrong.json()["code"] == "authentication_failed"
    tampered = press({}, headers=signed(body), body=body.replace("approve", "reject"))
    assert tampered.status_code == 401
    unsigned = press({}, headers={}, body=body)
    assert unsigned.status_code == 401
    assert changed(approval) == before and not SlackSignature.objects.exists()
    services.outbox_relay()
    assert chat.at("/response") == []


def test_a_stale_timestamp_is_401_even_when_signed(chat):
    approval = Desk().pending()
    body = urlencode({"payload": json.dumps(payload("approve", str(approval.id), user="UEDITOR",
                                                     response_url=chat.url("/response")))})
    for at in (int(time.time()) - 330, int(time.time()) + 330):  # (past the 300 s window whatever the load)
        answer = press({}, headers=signed(body, at=at), body=body)
        assert answer.status_code == 401, answer.content
    assert changed(approval)[0] == "pending"
    fresh = press({}, headers=signed(body, at=int(time.time()) - 270), body=body)
    assert fresh.status_code == 200 and changed(approval)[0] == "approved"


def test_a_replayed_callback_is_409_slack_replay(chat):
    """The same signed request twice: decided once, answered once; the second is refused by the
    signatures' unique index (shared by every instance)."""
    approval = Desk().pending()
    body = urlencode({"payload": json.dumps(payload("approve", str(approval.id), user="UEDITOR",
                                                     response_url=chat.url("/response")))})
    headers = signed(body)
    assert press({}, headers=headers, body=body).status_code == 200
    again = press({}, headers=headers, body=body)
    assert again.status_code == 409 and again.json()["code"] == "slack_replay"
    assert LedgerEvent.objects.filter(run_id=approval.run_id, kind="approved").count() == 1
    services.outbox_relay()
    assert len(chat.at("/response")) == 1


def test_old_signatures_are_pruned_by_the_approvals_sweep(chat):
    SlackSignature.objects.create(signature="v0=old", seen_at=timezone.now() - timedelta(minutes=11))
    SlackSignature.objects.create(signature="v0=new", seen_at=timezone.now() - timedelta(minutes=9))
    tasks.approvals_expire()
    assert list(SlackSignature.objects.values_list("signature", flat=True)) == ["v0=new"]


def test_retry_and_abandon_an_escalation_from_slack(chat):
    desk = Desk(max_retries=1)
    escalation = desk.escalation()
    press(payload("retry", str(escalation.id), user="UONCALL", response_url=chat.url("/response")))
    escalation.refresh_from_db()
    assert escalation.status == "approved" and escalation.decided_by == "user:oc"
    assert Run.objects.get(id=escalation.run_id).state != "escalated"
    assert LedgerEvent.objects.get(run_id=escalation.run_id, kind="retried").data["via"] == "slack"
    assert "Retried by user:oc via Slack" in reply_of(chat)["text"]

    desk.agent.escalated_run(intent="flaky-2")
    second = Approval.objects.get(kind="escalation", status="pending")
    _refused(chat, second, payload("abandon", str(second.id), user="UONCALL", response_url=chat.url("/no-reason")),
             "reason_required")
    _refused(chat, second, payload("abandon", str(second.id), user="UEDITOR", reason="x",
                                   response_url=chat.url("/editor")), "permission_denied")
    press(payload("abandon", str(second.id), user="UONCALL", reason="Flaky for good.", response_url=chat.url("/ab")))
    assert Run.objects.get(id=second.run_id).state == "abandoned"
    assert LedgerEvent.objects.get(run_id=second.run_id, kind="abandoned").data["via"] == "slack"
    assert "Abandoned by user:oc" in reply_of(chat, "/ab")["text"]


def test_approve_does_not_apply_to_an_escalation(chat):
    escalation = Desk(max_retries=1).escalation()
    _refused(chat, escalation, payload("approve", str(escalation.id), user="UONCALL",
                                       response_url=chat.url("/response")), "slack_action_mismatch")


# ---------------------------------------------------------------- create_operator --slack-id

def test_create_operator_maps_a_slack_user_once():
    call_command("create_operator", "alice", "--role", "editor", "--slack-id", "T1:U1")
    call_command("create_operator", "alice", "--role", "oncall", "--slack-id", "T1:U1")  # the same mapping again
    assert list(SlackIdentity.objects.values_list("team_id", "slack_user_id", "user__username")) == [("T1", "U1", "alice")]
    with pytest.raises(CommandError, match="already mapped"):
        call_command("create_operator", "bob", "--role", "editor", "--slack-id", "T1:U1")
    with pytest.raises(CommandError, match="TEAM:USER"):
        call_command("create_operator", "carol", "--role", "editor", "--slack-id", "U1")
    from django.contrib.auth import get_user_model
    assert not get_user_model().objects.filter(username__in=["bob", "carol"]).exists()  # nothing partial
