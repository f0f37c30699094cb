"""Fixtures for the ledger's tests (services, API and pages)."""

import pytest

from tests.factories import client_for, make_agent, make_workflow
from tests.ledger.helpers import AgentDriver


@pytest.fixture
def fleet():
    """Two workflows, three runs: (agent driver of wf-a, wf-a, wf-b, [run dicts])."""
    wf_a, wf_b = make_workflow(approval_stages=[]), make_workflow(approval_stages=[])
    _, token = make_agent()
    a, b = AgentDriver(client_for(token), wf_a.slug), AgentDriver(client_for(token), wf_b.slug)
    runs = [a.trigger(intent="daily-post"), a.trigger(intent="daily-post-2"), b.trigger(intent="triage")]
    return a, wf_a, wf_b, runs
