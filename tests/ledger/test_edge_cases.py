"""Edges found in review: stuck intents, number normalisation, lock order, over-long or impossible input."""

import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from ledger import services
from ledger.models import Run
from ledger.selectors import effects_rebuild_diff
from tests.factories import client_for, make_agent, make_operator, make_workflow
from tests.ledger.helpers import EVIDENCE, AgentDriver

pytestmark = pytest.mark.django_db
ACTION = {"system": "k8s", "operation": "deploy", "target": "prod/web", "summary": "Deploy"}


def _setup(**fields):
    fields = {"stages": ["build", "deploy"], "effect_stages": ["deploy"], "approval_stages": ["deploy"], **fields}
    workflow = make_workflow(**fields)
    _, token = make_agent()
    return workflow, AgentDriver(client_for(token), workflow.slug)


def _age(run_id, **delta):
    Run.objects.filter(id=run_id).update(lease_expires_at=timezone.now() - timedelta(**delta))


def test_pending_approval_holds_the_intent_but_an_approved_dead_agent_does_not():
    """No lease expiry while a human decides; once approved, a silent agent's lease expires again."""
    _, agent = _setup()
    _, editor_token = make_operator("editor")
    run = agent.trigger()
    agent.pass_stage(run["id"], "build")
    approval = agent.client.post(f"/api/v1/runs/{run['id']}/approvals/",
                                 {"kind": "high_impact", "stage": "deploy", "action": ACTION}, format="json").json()
    assert Run.objects.get(id=run["id"]).lease_expires_at is None
    assert services.runs_expire_leases(now=timezone.now() + timedelta(days=2)) == 0
    assert agent.trigger()["decision"]["reason_code"] == "active_run_exists"
    assert client_for(editor_token).post(f"/api/v1/approvals/{approval['id']}/approve/").status_code == 200
    _age(run["id"], hours=1)
    nxt = agent.trigger()
    assert Run.objects.get(id=run["id"]).state == "failed"
    assert (nxt["decision"]["outcome"], nxt["decision"]["resume_from"]) == ("resume", "deploy")
    started = agent.event(nxt["id"], "deploy", "started", action=ACTION)  # the permit outlived the crash
    assert started["data"]["approval"] == approval["id"]
    assert agent.client.get(f"/api/v1/runs/{nxt['id']}/verify-chain/").json()["ok"] is True


def test_fresh_run_after_expired_checkpoint_passes_verified_effects():
    """Starting afresh keeps the effects the world already holds: the run goes on past them."""
    workflow, agent = _setup(stages=["a", "commit", "b"], effect_stages=["commit"], approval_stages=[],
                             checkpoint_ttl_seconds=60)
    run = agent.trigger()
    agent.pass_stage(run["id"], "a")
    agent.pass_stage(run["id"], "commit", effect_stage=True)
    _age(run["id"], hours=1)
    from ledger.models import Checkpoint

    Checkpoint.objects.filter(run_id=run["id"]).delete()  # as if pruned after expiry
    nxt = agent.trigger()
    assert nxt["decision"]["outcome"] == "fresh" and nxt["stage_states"]["commit"]["status"] == "verified"
    agent.pass_stage(nxt["id"], "a")
    agent.pass_stage(nxt["id"], "b")
    assert agent.run(nxt["id"])["state"] == "completed"


def test_compensate_is_refused_while_another_run_holds_the_intent():
    _, agent = _setup(stages=["build"], effect_stages=[], approval_stages=[], max_retries=1)
    oncall, oncall_token = make_operator("oncall")
    escalated = agent.escalated_run(inputs={"v": 1})
    active = agent.trigger(inputs={"v": 2})
    assert active["state"] == "fresh"
    response = client_for(oncall_token).post(f"/api/v1/runs/{escalated['id']}/compensate/", {}, format="json")
    assert response.status_code == 409 and response.json()["code"] == "active_run_exists"
    assert Run.objects.get(id=escalated["id"]).state == "escalated"


def test_numbers_are_hashed_as_jsonb_stores_them():
    """1e16 comes back from jsonb as an integer: the chain still verifies and a retried trigger dedupes."""
    _, agent = _setup(stages=["a"], effect_stages=[], approval_stages=[])
    body = b'{"workflow": "%s", "trigger_key": "k", "inputs": {"n": 1e20, "z": -0.0, "f": 0.5}}' % agent.workflow.encode()
    first = agent.client.generic("POST", "/api/v1/runs/", body, content_type="application/json")
    again = agent.client.generic("POST", "/api/v1/runs/", body, content_type="application/json")
    assert (first.status_code, again.status_code) == (201, 200) and again.json()["duplicate"] is True
    run_id = first.json()["id"]
    raw = b'{"stage": "a", "kind": "started", "data": {"big": 1e16, "neg": -0.0, "small": 1.5e-7}}'
    assert agent.client.generic("POST", f"/api/v1/runs/{run_id}/events/", raw,
                                content_type="application/json").status_code == 201
    assert agent.client.get(f"/api/v1/runs/{run_id}/verify-chain/").json()["ok"] is True
    bad = agent.client.generic("POST", f"/api/v1/runs/{run_id}/events/", b'{"stage": "a", "kind": "proposed", '
                               b'"data": {"x": NaN}}', content_type="application/json")
    assert bad.status_code == 400 and bad.json()["code"] == "malformed_json"


@pytest.mark.parametrize("body,code", [
    ({"stage": {"x": 1}, "kind": "corrected", "data": {"corrects": 1}}, "unknown_stage"),
    ({"stage": "build", "kind": "started", "reason_code": "r" * 101}, "validation_error"),
    ({"stage": "build", "kind": "started", "idempotency_key": "k" * 201}, "validation_error"),
    ({"stage": "build", "kind": "started", "evidence": [{"uri": "u", "observed_at": "2026-02-30T00:00:00Z"}]},
     "invalid_evidence"),
])
def test_malformed_event_fields_are_422_not_500(body, code):
    _, agent = _setup()
    run = agent.trigger()
    response = agent.client.post(f"/api/v1/runs/{run['id']}/events/", body, format="json")
    assert response.status_code == 422 and response.json()["code"] == code
    assert agent.client.get(f"/api/v1/runs/{run['id']}/verify-chain/").json()["ok"] is True


def test_effect_reference_over_the_limit_is_422():
    _, agent = _setup(approval_stages=[])
    run = agent.trigger()
    agent.pass_stage(run["id"], "build")
    agent.event(run["id"], "deploy", "started")
    response = agent.event(run["id"], "deploy", "succeeded", expect=422,
                           effect={"system": "k8s", "operation": "deploy", "reference": "r" * 1001})
    assert response["code"] == "invalid_effect"


@pytest.mark.parametrize("payload", [
    {"assertions": [{"stage": ["build"], "pointer": "p"}]},
    {"assertions": [{"stage": "nope", "pointer": "p"}]},
    {"observed_effects": [{"k": 1}]},
    {"expires_at": "2026-02-30T00:00:00Z"},
])
def test_malformed_checkpoints_are_refused_so_later_triggers_still_decide(payload):
    _, agent = _setup()
    run = agent.trigger()
    response = agent.client.post(f"/api/v1/runs/{run['id']}/checkpoints/", payload, format="json")
    assert response.status_code == 422
    _age(run["id"], hours=1)
    assert agent.trigger()["decision"]["outcome"] == "fresh"


def test_impossible_metrics_date_is_422_and_unknown_method_is_405():
    _, token = make_operator("viewer")
    client = client_for(token)
    assert client.get("/api/v1/metrics/", {"since": "2026-02-30T00:00:00Z"}).status_code == 422
    assert client.delete("/api/v1/runs/").status_code == 405


def test_compensated_effects_are_rebuilt_from_the_ledger_and_may_run_again():
    """After an approved, verified compensation the projection still equals the ledger replay."""
    workflow, agent = _setup(stages=["deploy"], approval_stages=[])
    oncall, oncall_token = make_operator("oncall")
    _, editor_token = make_operator("editor")
    run = agent.trigger()
    agent.event(run["id"], "deploy", "started")
    agent.event(run["id"], "deploy", "succeeded", effect={"system": "k8s", "operation": "deploy", "reference": "d-1"})
    agent.event(run["id"], "deploy", "failed", reason_code="partial_rollout")
    proposal = client_for(oncall_token).post(f"/api/v1/runs/{run['id']}/compensate/", {}, format="json").json()
    approval = proposal["approval"]
    assert client_for(editor_token).post(f"/api/v1/approvals/{approval['id']}/approve/").status_code == 200
    agent.event(run["id"], "deploy", "compensated", action=approval["action"], evidence=EVIDENCE)
    assert agent.run(run["id"])["state"] == "compensated"
    assert agent.client.get(f"/api/v1/runs/{run['id']}/verify-chain/").json()["ok"] is True
    assert effects_rebuild_diff() == []
    again = agent.trigger()
    assert again["decision"]["resume_from"] == "deploy"
    agent.event(again["id"], "deploy", "started")  # the undone effect may be executed again, once
    assert effects_rebuild_diff() == []


@pytest.mark.django_db(transaction=True)
def test_retry_and_trigger_together_never_deadlock():
    """Both take the workflow lock before the run lock."""
    workflow, agent = _setup(stages=["build"], effect_stages=[], approval_stages=[], max_retries=1)
    oncall, _ = make_operator("oncall")
    errors = []
    for round_ in range(5):
        run, _ = services.run_trigger(workflow_slug=workflow.slug, inputs={"r": round_}, intent=f"i{round_}",
                                      actor="agent:a")
        services.event_append(run_id=run.id, body={"stage": "build", "kind": "started"}, actor="agent:a")
        services.event_append(run_id=run.id, body={"stage": "build", "kind": "failed"}, actor="agent:a")
        escalated, _ = services.run_trigger(workflow_slug=workflow.slug, inputs={"r": round_}, intent=f"i{round_}",
                                            actor="agent:a")
        barrier = threading.Barrier(2)

        def retry():
            try:
                barrier.wait()
                services.run_retry(run_id=escalated.id, user=oncall, reason="try again")
            except Exception as exc:
                errors.append(exc)
            finally:
                connection.close()

        def trigger():
            try:
                barrier.wait()
                services.run_trigger(workflow_slug=workflow.slug, inputs={"other": round_}, intent=f"i{round_}",
                                     actor="agent:b")
            except Exception as exc:
                errors.append(exc)
            finally:
                connection.close()

        threads = [threading.Thread(target=retry), threading.Thread(target=trigger)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
    assert errors == []
