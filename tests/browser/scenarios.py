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


def escalated_run(agent: AgentDriver, intent: str) -> dict:
    """With max_retries=1: a run that failed after a checkpoint makes the next trigger escalate."""
    first = agent.trigger(intent=intent, inputs={"intent": intent})
    agent.pass_stage(first["id"], "build")
    agent.event(first["id"], "deploy", "started", action=ACTION) if False else None
    return first


def completed_run(agent: AgentDriver, intent: str, approve_with=None) -> dict:
    """A run through every stage with evidence (no approval stages in its workflow)."""
    run = agent.trigger(intent=intent, inputs={"intent": intent})
    workflow_stages = agent.client.get(f"/api/v1/workflows/{agent.workflow}/").json()
    for stage in workflow_stages["stages"]:
        agent.pass_stage(run["id"], stage, effect_stage=stage in workflow_stages["effect_stages"])
    return agent.run(run["id"])


__all__ = ["ACTION", "EVIDENCE", "agent_driver", "approval_workflow", "awaiting_approval_run",
           "completed_run", "escalated_run"]
