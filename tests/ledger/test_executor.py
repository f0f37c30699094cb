"""Stateboard's executor (SPEC §5.2) against a real webhook receiver on 127.0.0.1 (tasks run eagerly)."""

import hashlib
import hmac
import json

import pytest
from django.urls import reverse

from ledger.models import Approval, Effect, LedgerEvent, Run
from tests.factories import client_for, login, make_agent, make_operator, make_workflow, texts
from tests.ledger.helpers import AgentDriver
from tests.ledger.receiver import Receiver

ACTION = {"system": "k8s", "operation": "deploy", "target": "prod/web", "summary": "roll out v2",
          "params": {"image": "web:2"}}
pytestmark = pytest.mark.django_db(transaction=True)


def _setup(receiver, *, approval=False, max_retries=3, **config):
    wf = make_workflow(stages=["build", "deploy"], effect_stages=["deploy"],
                       approval_stages=["deploy"] if approval else [], max_retries=max_retries,
                       executors={"deploy": {"handler": "webhook", "config": {"url": receiver.url, **config}}})
    driver = AgentDriver(client_for(make_agent()[1]), wf.slug)
    run = driver.trigger()
    driver.pass_stage(run["id"], "build")
    return wf, driver, run["id"]


def test_executor_approved_action_is_performed_exactly_once(monkeypatch):
    """Proposal → approval → the executor POSTs once (signed), verifies, completes; the agent cannot start it."""
    monkeypatch.setenv("HOOK_SECRET", "s3cret")
    with Receiver() as receiver:
        wf, driver, run_id = _setup(receiver, approval=True, secret_env="HOOK_SECRET", timeout_seconds=5)
        refused = driver.client.post(f"/api/v1/runs/{run_id}/events/",
                                     {"client_event_id": "s", "stage": "deploy", "kind": "started"}, format="json")
        assert refused.status_code == 409 and refused.json()["code"] == "executor_stage"
        driver.event(run_id, "deploy", "proposed", action=ACTION)
        run = driver.run(run_id)
        assert run["state"] == "awaiting_approval" and run["lease"]["owner"] == "system:executor"
        approval = Approval.objects.get(run_id=run_id, kind="high_impact")
        assert approval.requested_by == driver.run(run_id)["triggered_by"]
        editor = client_for(make_operator("editor")[1])
        for _ in range(2):  # approving twice changes nothing
            assert editor.post(f"/api/v1/approvals/{approval.id}/approve/", {}, format="json").status_code == 200
        key = Effect.objects.get(run_id=run_id).idempotency_key
        assert dict(receiver.posts) == {key: 1}
        body = receiver.bodies[0]
        assert body == {"idempotency_key": key, "run": run_id, "workflow": wf.slug, "intent": wf.slug,
                        "stage": "deploy", "action": ACTION}
        raw = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
        expected = "sha256=" + hmac.new(b"s3cret", raw, hashlib.sha256).hexdigest()
        assert receiver.headers[0]["X-Stateboard-Signature"] == expected
        assert receiver.headers[0]["Idempotency-Key"] == key
    run = Run.objects.get(id=run_id)
    assert run.state == "completed" and Effect.objects.get(run_id=run_id).status == "verified"
    verified = LedgerEvent.objects.get(run_id=run_id, kind="verified")
    assert verified.actor == "system:executor" and verified.evidence[0]["uri"] == "executor:webhook/deploy"
    started = LedgerEvent.objects.get(run_id=run_id, kind="started", stage="deploy")
    assert started.data["attempt"] == 1 and started.data["approval"] == str(approval.id)


def test_executor_absent_effect_is_executed_again():
    """The receiver says the effect is absent: the stage runs again (attempt 2) and is then verified."""
    with Receiver(mode="absent_once") as receiver:
        _, driver, run_id = _setup(receiver, timeout_seconds=5)
        driver.event(run_id, "deploy", "proposed", action=ACTION)
        key = Effect.objects.get(run_id=run_id).idempotency_key
        assert receiver.posts[key] == 2
    attempts = list(LedgerEvent.objects.filter(run_id=run_id, kind="started", stage="deploy")
                    .values_list("data__attempt", flat=True))
    assert attempts == [1, 2]
    assert LedgerEvent.objects.filter(run_id=run_id, kind="failed", reason_code="effect_absent").count() == 1
    assert Run.objects.get(id=run_id).state == "completed"


def test_executor_receiver_that_never_answers_escalates_after_max_retries():
    """No answer to the POST nor to verification: unknown, never POSTed again, escalated executor_unverifiable."""
    with Receiver(mode="hang") as receiver:
        _, driver, run_id = _setup(receiver, max_retries=2, timeout_seconds=0.5)
        driver.event(run_id, "deploy", "proposed", action=ACTION)
        assert sum(receiver.posts.values()) == 1 and sum(receiver.gets.values()) == 2
    run = Run.objects.get(id=run_id)
    assert run.state == "escalated" and run.lease_owner == ""
    last = LedgerEvent.objects.filter(run_id=run_id, kind="transition").order_by("-seq").first()
    assert last.reason_code == "executor_unverifiable"
    assert LedgerEvent.objects.filter(run_id=run_id, kind="unknown").count() == 1
    assert Approval.objects.filter(run_id=run_id, kind="escalation", status="pending").exists()


def test_executor_unset_secret_escalates_before_any_call(monkeypatch):
    """A secret_env naming an unset variable: escalated / executor_misconfigured, the receiver never called."""
    monkeypatch.delenv("UNSET_HOOK_SECRET", raising=False)
    with Receiver() as receiver:
        _, driver, run_id = _setup(receiver, secret_env="UNSET_HOOK_SECRET", timeout_seconds=5)
        driver.event(run_id, "deploy", "proposed", action=ACTION)
        assert not receiver.posts
    run = Run.objects.get(id=run_id)
    assert run.state == "escalated" and not Effect.objects.filter(run_id=run_id).exists()
    assert LedgerEvent.objects.filter(run_id=run_id, reason_code="executor_misconfigured").exists()


def test_executor_record_handler_hands_the_run_back_to_the_agent():
    """After the executor finishes a stage the run is the agent's again, under its lease, which restarts."""
    wf = make_workflow(stages=["build", "deploy", "verify"], effect_stages=["deploy"], approval_stages=[],
                       executors={"deploy": {"handler": "record", "config": {}}})
    driver = AgentDriver(client_for(make_agent("holder")[1]), wf.slug)
    run = driver.trigger()
    lease_id = run["lease"]["id"]
    driver.pass_stage(run["id"], "build")
    driver.event(run["id"], "deploy", "proposed", action={k: v for k, v in ACTION.items() if k != "params"})
    after = driver.run(run["id"])
    assert after["state"] == "checkpointed" and after["lease"]["owner"] == "agent:holder"
    assert after["lease"]["id"] == lease_id
    driver.pass_stage(run["id"], "verify")
    assert driver.run(run["id"])["state"] == "completed"


def test_executor_stage_under_a_goal_change_finishes_then_the_run_is_queued(monkeypatch):
    """A goal changes while the executor performs the stage: the run owes the world that effect, so it is
    verified under the old goal first; then it moves (fresh / goal_changed) and is queued for an agent,
    not handed back to the agent that proposed."""
    from ledger import services
    from ledger.executor.record import RecordHandler

    wf = make_workflow(stages=["build", "deploy", "verify"], effect_stages=["deploy"], approval_stages=[],
                       executors={"deploy": {"handler": "record", "config": {}}})
    driver = AgentDriver(client_for(make_agent("proposer")[1]), wf.slug)
    run = driver.trigger()
    driver.pass_stage(run["id"], "build")
    owner, _ = make_operator("owner")
    answers = []
    original = RecordHandler.execute

    def execute_while_the_goal_changes(self, action, key, context):
        _, moves = services.goal_create(workflow_slug=wf.slug, intent=wf.slug, objective="new", user=owner)
        answers.append(moves)
        return original(self, action, key, context)

    monkeypatch.setattr(RecordHandler, "execute", execute_while_the_goal_changes)
    driver.event(run["id"], "deploy", "proposed", action={k: v for k, v in ACTION.items() if k != "params"})
    assert answers == [{"moved": [], "deferred": [run["id"]]}]  # in execute: it keeps its goal
    assert Effect.objects.get(run_id=run["id"]).status == "verified"
    moved = Run.objects.get(id=run["id"])
    assert moved.state == "fresh" and moved.decision["reason_code"] == "goal_changed" and moved.goal_version == 1
    assert moved.lease_owner == "" and moved.queued_until is not None and moved.executor_state == {}
    assert driver.lease()["id"] == run["id"]


def _executed_then_rolled_back(receiver, **config):
    """A run whose executor stage (deploy) was performed and verified, then rolled back to deploy with
    compensation: (workflow, driver, run id, the deploy effect, the pending compensation approval)."""
    wf = make_workflow(stages=["build", "deploy"], effect_stages=["deploy"], approval_stages=[],
                       executors={"deploy": {"handler": "webhook", "config": {"url": receiver.url, **config}}})
    driver = AgentDriver(client_for(make_agent()[1]), wf.slug)
    run_id = driver.trigger()["id"]
    driver.pass_stage(run_id, "build")
    driver.event(run_id, "deploy", "proposed", action=ACTION)
    assert Run.objects.get(id=run_id).state == "completed"
    effect = Effect.objects.get(run_id=run_id)
    oncall = client_for(make_operator("oncall")[1])
    answer = oncall.post(f"/api/v1/runs/{run_id}/rollback/", {"to_stage": "deploy", "reason": "bad rollout",
                                                               "compensate": True}, format="json")
    assert answer.status_code == 200 and answer.json()["state"] == "compensate", answer.content
    return wf, driver, run_id, effect, Approval.objects.get(run_id=run_id, kind="compensation", status="pending")


def test_an_approved_compensation_on_an_executor_stage_is_performed_by_the_executor_once():
    """API.md: on a stage with an executor the executor performs the approved compensation (the agent may
    not post there): one POST of the approved plan under its own key, verified, then ``compensated`` by
    system:executor with the plan and evidence; the run is decided again and the stage can be performed
    anew (a new hand-over, new event ids)."""
    with Receiver() as receiver:
        wf, driver, run_id, effect, approval = _executed_then_rolled_back(receiver, timeout_seconds=5)
        refused = driver.event(run_id, "deploy", "compensated", expect=409, action=approval.action,
                               evidence=[{"uri": "https://x.test", "observed_at": "2026-12-01T00:00:00+00:00"}])
        assert refused["code"] == "not_leased"  # nobody holds a run in compensate: the lease refuses first
        editor_page, _ = login("editor")
        inbox = texts(editor_page.get(reverse("ledger:approval_list")))
        assert f'id="approval-{approval.id}"' in inbox and 'data-performer="executor"' in inbox
        editor = client_for(make_operator("editor")[1])
        for _ in range(2):  # approving twice performs it once
            assert editor.post(f"/api/v1/approvals/{approval.id}/approve/", {}, format="json").status_code == 200
        key = f"compensation:{approval.id}"
        assert receiver.posts[key] == 1 and receiver.gets[key] == 1
        undo = next(body for body in receiver.bodies if body["idempotency_key"] == key)
        assert undo == {"idempotency_key": key, "run": run_id, "workflow": wf.slug, "intent": wf.slug,
                        "stage": "deploy", "action": approval.action}
        assert approval.action["operation"] == "compensate" and effect.reference in approval.action["target"]

        compensated = LedgerEvent.objects.get(run_id=run_id, kind="compensated")
        assert compensated.actor == "system:executor" and compensated.stage == "deploy"
        assert compensated.data["approval"] == str(approval.id) and compensated.data["rollback"] is True
        assert compensated.evidence[0]["uri"] == "executor:webhook/deploy"
        effect.refresh_from_db()
        assert effect.status == "compensated"
        run = Run.objects.get(id=run_id)
        assert run.state == "resume" and run.executor_state == {} and run.lease_owner == ""
        assert Approval.objects.get(id=approval.id).consumed_at is not None

        assert driver.lease()["id"] == run_id  # the stage again, under the next generation's key
        driver.event(run_id, "deploy", "proposed", action=ACTION)
        new_key = Effect.objects.filter(run_id=run_id).exclude(id=effect.id).get().idempotency_key
        assert receiver.posts[new_key] == 1 and new_key != effect.idempotency_key
    assert Run.objects.get(id=run_id).state == "completed"
    assert driver.client.get(f"/api/v1/runs/{run_id}/verify-chain/").json()["ok"] is True


def _undo_answered(mode: str, timeout_seconds: float):
    """Roll back with compensation, let the receiver answer the undo in ``mode``, approve it:
    (workflow, run id, the deploy effect, the approval, the receiver, the escalation that followed)."""
    with Receiver() as receiver:
        wf, _, run_id, effect, approval = _executed_then_rolled_back(receiver, timeout_seconds=timeout_seconds)
        receiver.mode = mode
        editor = client_for(make_operator("editor")[1])
        assert editor.post(f"/api/v1/approvals/{approval.id}/approve/", {}, format="json").status_code == 200
    run = Run.objects.get(id=run_id)
    assert run.state == "escalated" and run.lease_owner == "" and run.executor_state == {}
    assert not LedgerEvent.objects.filter(run_id=run_id, kind="compensated").exists()
    effect.refresh_from_db()
    assert effect.status == "isolated"
    escalation = LedgerEvent.objects.filter(run_id=run_id, kind="transition").order_by("-seq").first()
    return wf, run_id, approval, receiver, escalation


def test_a_compensation_the_receiver_cannot_confirm_is_not_repeated_and_escalates():
    """The undo is POSTed once; verification never confirms it: verified again, never POSTed again, and
    after max_retries the run is escalated (executor_unverifiable) with nothing marked compensated."""
    wf, _, approval, receiver, escalation = _undo_answered("hang", 0.5)
    key = f"compensation:{approval.id}"
    assert receiver.posts[key] == 1 and receiver.gets[key] == wf.max_retries == 3
    assert escalation.reason_code == "executor_unverifiable" and escalation.data["from"] == "compensate"


def test_a_compensation_the_receiver_refuses_escalates_compensation_failed():
    """A 4xx to the undo means it definitely did not happen: escalated (compensation_failed), no verification,
    nothing compensated, the effect still isolated, and on-call can see why."""
    _, run_id, approval, receiver, escalation = _undo_answered("refuse", 5)
    key = f"compensation:{approval.id}"
    assert receiver.posts[key] == 1 and receiver.gets[key] == 0
    assert escalation.reason_code == "compensation_failed" and escalation.data["detail"] == "HTTP 422"
    assert Approval.objects.filter(run_id=run_id, kind="escalation", status="pending").exists()


def test_an_undo_verification_proved_absent_is_sent_again_then_compensated():
    """Verification says the undo did not happen: the executor sends it again (attempt 2), then it is verified."""
    with Receiver() as receiver:
        _, _, run_id, effect, approval = _executed_then_rolled_back(receiver, timeout_seconds=5)
        receiver.mode = "absent_once"
        editor = client_for(make_operator("editor")[1])
        assert editor.post(f"/api/v1/approvals/{approval.id}/approve/", {}, format="json").status_code == 200
    key = f"compensation:{approval.id}"
    assert receiver.posts[key] == 2 and receiver.gets[key] == 2
    compensated = LedgerEvent.objects.get(run_id=run_id, kind="compensated")
    assert compensated.data["attempt"] == 2
    effect.refresh_from_db()
    assert effect.status == "compensated" and Run.objects.get(id=run_id).state == "resume"
