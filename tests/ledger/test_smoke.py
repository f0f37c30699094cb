import pytest

from tests.factories import client_for, make_agent, make_workflow
from tests.ledger.helpers import AgentDriver

pytestmark = pytest.mark.django_db


def test_run_flows_through_all_stages_to_completed():
    """A fresh run passes every stage (effects verified) and ends completed; a re-trigger is a noop."""
    wf = make_workflow(approval_stages=[])
    _, token = make_agent()
    agent = AgentDriver(client_for(token), wf.slug)
    run = agent.trigger()
    assert run["state"] == "fresh" and run["decision"]["reason_code"] == "no_checkpoint"
    for stage in wf.stages:
        agent.pass_stage(run["id"], stage, effect_stage=stage in wf.effect_stages)
    assert agent.run(run["id"])["state"] == "completed"
    again = agent.trigger()
    assert again["decision"]["outcome"] == "noop"
    assert again["decision"]["reason_code"] == "verified_effect_same_fingerprint"
