"""Staged (dry) runs (SPEC §10.3): every stage kind passes, nothing is claimed, real runs never see them."""

import pytest

from ledger.models import Approval, Checkpoint, Effect, LedgerEvent, Run
from tests.factories import client_for, make_agent, make_operator, make_workflow
from tests.ledger.helpers import AgentDriver

pytestmark = pytest.mark.django_db

ACTION = {"system": "k8s", "operation": "deploy", "target": "prod", "summary": "deploy"}


def _team(**fields):
    workflow = make_workflow(**fields)  # default stages: effect stages commit/push/deploy, approval stage deploy
    _, token = make_agent()
    return workflow, AgentDriver(client_for(token), workflow.slug)


def test_staged_run_passes_every_stage_kind_and_claims_nothing():
    """Plain, effect and approval stages pass; no Effect row, no key; the next real run decides as if it never ran."""
    workflow, agent = _team()
    run = agent.trigger(staged=True)
    assert run["staged"] is True and run["state"] == "fresh"
    assert run["decision"]["outcome"] == "fresh" and run["decision"]["reason_code"] == "staged"
    refused = agent.client.post(f"/api/v1/runs/{run['id']}/approvals/",
                                {"kind": "high_impact", "stage": "deploy", "action": ACTION}, format="json")
    assert refused.status_code == 409 and refused.json()["code"] == "staged_run"
    for stage in workflow.stages:
        started = agent.event(run["id"], stage, "started")
        assert started["idempotency_key"] == ""
        if stage in workflow.effect_stages:
            # the effect it would have had (its reference optional)
            done = agent.event(run["id"], stage, "succeeded", effect={"system": "git", "operation": stage})
            assert done["effect"] == {"system": "git", "operation": stage}
        else:
            agent.event(run["id"], stage, "succeeded")
    finished = agent.run(run["id"])
    assert finished["state"] == "completed" and finished["staged"] is True
    assert not Effect.objects.exists()
    assert not LedgerEvent.objects.filter(run_id=run["id"]).exclude(idempotency_key="").exists()
    assert Checkpoint.objects.filter(run_id=run["id"], staged=True).exists()

    real = agent.trigger()
    assert real["decision"]["outcome"] == "fresh" and real["decision"]["reason_code"] == "no_checkpoint"
    assert real["decision"]["resume_from"] == workflow.stages[0]
    latest = agent.client.get(f"/api/v1/runs/{real['id']}/checkpoint/")
    assert latest.status_code == 404  # a staged run's checkpoint is not the real intent's
    _, viewer_token = make_operator("viewer")
    metrics = client_for(viewer_token).get("/api/v1/metrics/", {"workflow": workflow.slug}).json()
    assert metrics["runs"] == 1 and metrics["recovery_decisions"] == {"fresh": 1}


def test_staged_runs_hold_no_place_and_their_failures_do_not_count():
    """A staged run beside a real one is not a noop, and vice versa; staged failures spend no retry budget."""
    workflow, agent = _team(stages=["build"], effect_stages=[], approval_stages=[], max_retries=1)
    staged = agent.trigger(inputs={"v": 1}, staged=True)
    agent.fail_stage(staged["id"], "build")
    assert Run.objects.get(id=staged["id"]).state == "failed"
    real = agent.trigger(inputs={"v": 1})  # one real failure would escalate (max_retries=1); a staged one does not
    assert real["state"] == "fresh" and real["decision"]["reason_code"] == "no_checkpoint", real["decision"]
    beside = agent.trigger(inputs={"v": 1}, staged=True)
    assert beside["state"] == "fresh"  # a real run holds the intent: a staged run still runs
    agent.fail_stage(real["id"], "build")
    assert agent.trigger(inputs={"v": 1})["state"] == "escalated"  # real failures do count
    agent.event(beside["id"], "build", "started")  # beside is still active, and holds no place:
    assert agent.trigger(inputs={"v": 2})["state"] == "fresh"


def test_trigger_key_is_either_staged_or_real():
    """Reusing a trigger key for the other kind of run is 409 trigger_key_mismatch."""
    workflow, agent = _team()
    first = agent.trigger(trigger_key="k-1", staged=True)
    again = agent.trigger(trigger_key="k-1", staged=True)
    assert again["id"] == first["id"] and again["duplicate"] is True
    refused = agent.trigger(trigger_key="k-1", expect=409)
    assert refused["code"] == "trigger_key_mismatch"
    agent.trigger(trigger_key="k-2")
    assert agent.trigger(trigger_key="k-2", staged=True, expect=409)["code"] == "trigger_key_mismatch"


@pytest.mark.django_db(transaction=True)
def test_staged_run_proposal_on_an_executor_stage_passes_it_and_calls_nothing():
    """SPEC §10.3: the agent's `proposed` on an executor (and approval) stage makes the stage done; the
    executor is never handed the run, nothing is enqueued and the webhook is never called."""
    from ledger.models import Outbox
    from tests.ledger.receiver import Receiver

    with Receiver() as receiver:
        workflow, agent = _team(stages=["build", "deploy"], effect_stages=["deploy"], approval_stages=["deploy"],
                                executors={"deploy": {"handler": "webhook", "config": {"url": receiver.url}}})
        run = agent.trigger(staged=True)
        agent.pass_stage(run["id"], "build")
        assert agent.event(run["id"], "deploy", "started", expect=409)["code"] == "executor_stage"
        bad = agent.event(run["id"], "deploy", "proposed", action={"system": "k8s"}, expect=422)
        assert bad["code"] == "invalid_action"
        proposed = agent.event(run["id"], "deploy", "proposed", action=ACTION)
        assert proposed["idempotency_key"] == ""
        finished = Run.objects.get(id=run["id"])
        assert finished.state == "completed" and finished.staged
        assert finished.stage_states["deploy"]["status"] == "succeeded"
        assert finished.lease_owner != "system:executor" and finished.executor_state == {}
        assert not Outbox.objects.exists() and not Effect.objects.exists()
        assert not Approval.objects.filter(run_id=run["id"]).exists()
        assert dict(receiver.posts) == {} and dict(receiver.gets) == {}
