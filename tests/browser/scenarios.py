"""Runs in interesting states, driven through the API like an agent (shared by page and browser tests)."""

from tests.factories import client_for, make_agent, make_workflow
from tests.ledger.helpers import EVIDENCE, AgentDriver

ACTION = {"system": "k8s", "operation": "deploy", "target": "web@prod", "summary": "Roll out web v42 to prod"}


def agent_driver(workflow, owner=None) -> AgentDriver:
    _, token = make_agent(owner=owner)
    return AgentDriver(client_for(token), workflow.slug)


def approval_workflow(**fields):
    """build → deploy, where deploy is an effect stage that needs an editor's approval."""
    fields.setdefault("stages", ["build", "deploy"])
    fields.setdefault("effect_stages", ["deploy"])
    fields.setdefault("approval_stages", ["deploy"])
    return make_workflow(**fields)


def awaiting_approval_run(agent: AgentDriver, intent: str, action=None) -> tuple[dict, dict]:
    """A run waiting in ``awaiting_approval`` for its deploy; returns (run, approval) as the API answers."""
    run = agent.trigger(intent=intent, inputs={"intent": intent})
    agent.pass_stage(run["id"], "build")
    response = agent.client.post(f"/api/v1/runs/{run['id']}/approvals/",
                                 {"kind": "high_impact", "stage": "deploy", "action": action or ACTION},
                                 format="json")
    assert response.status_code == 201, response.content
    return agent.run(run["id"]), response.json()


def escalation_workflow(**fields):
    """build → test, no effects, one failed run since progress exhausts the retry budget."""
    fields.setdefault("stages", ["build", "test"])
    fields.setdefault("effect_stages", [])
    fields.setdefault("approval_stages", [])
    fields.setdefault("max_retries", 1)
    return make_workflow(**fields)


def failed_run(agent: AgentDriver, intent: str) -> dict:
    """A run that checkpointed ``build`` and then failed ``test``."""
    run = agent.trigger(intent=intent, inputs={"intent": intent})
    agent.pass_stage(run["id"], "build")
    agent.event(run["id"], "test", "started")
    agent.event(run["id"], "test", "failed", reason_code="tests_red",
                evidence=[{**EVIDENCE[0], "excerpt": "3 tests failed"}])
    return agent.run(run["id"])


def escalated_run(agent: AgentDriver, intent: str) -> tuple[dict, dict]:
    """(failed run, escalated run): the re-trigger after a failure escalates (retry budget exhausted)."""
    failed = failed_run(agent, intent)
    escalated = agent.trigger(intent=intent, inputs={"intent": intent})
    assert escalated["state"] == "escalated", escalated
    return failed, escalated


def completed_run(agent: AgentDriver, workflow, intent: str) -> dict:
    """A run through every stage of a workflow without approval stages, effects verified with evidence."""
    run = agent.trigger(intent=intent, inputs={"intent": intent})
    for stage in workflow.stages:
        agent.pass_stage(run["id"], stage, effect_stage=stage in workflow.effect_stages)
    return agent.run(run["id"])


__all__ = ["ACTION", "EVIDENCE", "agent_driver", "approval_workflow", "awaiting_approval_run",
           "completed_run", "escalated_run", "escalation_workflow", "failed_run"]
