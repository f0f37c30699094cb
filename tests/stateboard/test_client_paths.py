"""The client builds every path from quoted segments and sends a run id only when it is a UUID: a crafted id
(``lease/?``) never reaches another endpoint, through the client or the MCP tools (issue 39.11)."""

import anyio
import pytest

from ledger.models import Run
from stateboard.client import Client, StateboardError, StateboardInvalid, api_path
from stateboard.client import Run as ClientRun
from stateboard.mcp.server import build_server
from tests.factories import make_agent, make_operator, make_workflow

pytestmark = pytest.mark.django_db(transaction=True)

CRAFTED = ["lease/?", "lease", "../lease/", "x?wait_seconds=0#", "", "00000000-0000-0000-0000-00000000000/"]


def test_path_segments_are_quoted_whole():
    assert api_path("workflows", "a/../b?c#d", "goals") == "/workflows/a%2F..%2Fb%3Fc%23d/goals/"


@pytest.fixture
def queued(live_server):
    """A workflow, a run of it queued by a human, and an agent's client."""
    wf = make_workflow(stages=["build"], effect_stages=[], approval_stages=[])
    with Client(live_server.url, make_operator("owner")[1]) as owner:
        run = owner.trigger(wf.slug, {"v": 1})
    assert not Run.objects.get(id=run.id).lease_id
    with Client(live_server.url, make_agent()[1], retries=0) as agent:
        yield wf, run, agent


def test_the_client_refuses_a_run_id_that_is_no_uuid_and_sends_nothing(queued):
    wf, run, agent = queued
    for crafted in CRAFTED:
        for call in (lambda: agent.run(crafted), lambda: ClientRun.from_body(agent, {"id": crafted})):
            with pytest.raises(StateboardInvalid) as refused:
                call()
            assert (refused.value.status, refused.value.code) == (0, "invalid_run_id")
    with pytest.raises(StateboardError) as missing:
        agent.workflow(f"{wf.slug}/../../runs/lease/?")
    assert missing.value.status == 404
    assert not Run.objects.get(id=run.id).lease_id


def test_an_mcp_tool_given_a_crafted_run_id_is_a_clear_tool_error_and_leases_nothing(queued):
    wf, run, agent = queued
    server = build_server(agent)

    async def calls():
        return [await server.call_tool(tool, {"run_id": crafted, **arguments})
                for crafted in CRAFTED
                for tool, arguments in (("stateboard_event", {"stage": "build", "kind": "started"}),
                                        ("stateboard_run", {}), ("stateboard_resume_packet", {}),
                                        ("stateboard_checkpoint", {"stage": "build"}),
                                        ("stateboard_request_approval", {"stage": "build", "action": {}}))]

    for result in anyio.run(calls):
        assert result.is_error, result
        assert result.content[0].text.startswith("invalid_run_id: A run id is a UUID"), result.content[0].text
        assert result.structured_content["code"] == "invalid_run_id"
    assert not Run.objects.get(id=run.id).lease_id
