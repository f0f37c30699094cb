"""``python -m stateboard.mcp`` driven by the mcp SDK's own stdio client, as a separate process, against a live
server: the tools and the prompt, a whole run, a refusal, and a lost answer resent and recorded once."""

import json
import sys
import threading
from pathlib import Path
from urllib.parse import urlsplit

import anyio
import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from ledger.models import Effect, LedgerEvent, Run
from stateboard.client import Client
from tests.factories import make_agent, make_operator, make_workflow
from tests.stateboard.client_support import EVIDENCE, FaultyProxy

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]
STAGES = ["discovery", "draft", "push", "announce"]
TOOLS = ["stateboard_trigger", "stateboard_lease", "stateboard_run", "stateboard_resume_packet",
         "stateboard_event", "stateboard_request_approval", "stateboard_checkpoint", "stateboard_propose_claim"]
PUSH = {"system": "git", "operation": "push", "reference": "abc123"}


def small_workflow():
    return make_workflow(stages=STAGES, effect_stages=["push"], approval_stages=[], lease_seconds=60)


def with_mcp(url: str, token: str, script):
    """Start ``python -m stateboard.mcp`` as the SDK's stdio client does, run ``script(session)``, stop it."""
    params = StdioServerParameters(command=sys.executable, args=["-m", "stateboard.mcp"], cwd=str(ROOT),
                                   env={"STATEBOARD_URL": url, "STATEBOARD_TOKEN": token})

    async def main():
        async with stdio_client(params) as streams, ClientSession(*streams) as session:
            await session.initialize()
            return await script(session)

    return anyio.run(main)


class Tools:
    """Calls a tool and decodes its JSON text; refuses an error unless ``error=True``."""

    def __init__(self, session: ClientSession):
        self.session = session

    async def __call__(self, name: str, error: bool = False, **arguments):
        result = await self.session.call_tool(name, arguments)
        assert result.is_error is error, result.content[0].text
        text = result.content[0].text
        return (text, result.structured_content) if error else json.loads(text)


def real_events(run_id) -> list[tuple[str, str]]:
    return [(e.stage, e.kind) for e in LedgerEvent.objects.filter(run_id=run_id).order_by("seq")
            if e.kind not in ("transition", "decided", "checkpointed", "leased")]


def test_mcp_lists_the_eight_tools_and_the_rules_prompt(live_server):
    """The tool names are exactly SPEC §12.1's; the descriptions and the prompt carry the decision's rules."""
    async def script(session):
        tools = (await session.list_tools()).tools
        prompts = (await session.list_prompts()).prompts
        rules = await session.get_prompt("stateboard_rules")
        return tools, prompts, rules

    tools, prompts, rules = with_mcp(live_server.url, make_agent()[1], script)
    assert [tool.name for tool in tools] == TOOLS
    by_name = {tool.name: tool for tool in tools}
    assert set(by_name["stateboard_event"].input_schema["properties"]) == {
        "run_id", "stage", "kind", "effect", "evidence", "reason_code", "data", "action", "idempotency_key",
        "client_event_id", "usage"}
    assert by_name["stateboard_lease"].input_schema["properties"]["wait_seconds"]["maximum"] == 30
    for name in ("stateboard_trigger", "stateboard_lease", "stateboard_resume_packet"):
        assert "Never redo a verified effect" in by_name[name].description
    assert [prompt.name for prompt in prompts] == ["stateboard_rules"]
    text = rules.messages[0].content.text
    assert "Never redo a verified effect" in text and "client_event_id" in text


def test_mcp_whole_run_lease_packet_stages_effect_verify_completed(live_server):
    """A queued run leased over MCP, read through its resume packet, driven stage by stage to completed, with
    the effect verified; the packet's own rules are all in the prompt."""
    wf = small_workflow()
    _, human = make_operator("owner")
    with Client(live_server.url, human) as owner:
        queued = owner.trigger(wf.slug, {"source": "v1"})
    assert queued.raw["queued"] is True

    async def script(session):
        call = Tools(session)
        run = await call("stateboard_lease", workflows=[wf.slug])
        packet = await call("stateboard_resume_packet", run_id=run["id"])
        for stage in STAGES:
            await call("stateboard_event", run_id=run["id"], stage=stage, kind="started")
            if stage == "push":
                await call("stateboard_event", run_id=run["id"], stage=stage, kind="succeeded", effect=PUSH)
                await call("stateboard_event", run_id=run["id"], stage=stage, kind="verified", evidence=EVIDENCE)
            else:
                await call("stateboard_event", run_id=run["id"], stage=stage, kind="succeeded")
        final = await call("stateboard_run", run_id=run["id"])
        none = await call("stateboard_lease", workflows=[wf.slug])
        rules = (await session.get_prompt("stateboard_rules")).messages[0].content.text
        return run, packet, final, none, rules

    run, packet, final, none, rules = with_mcp(live_server.url, make_agent()[1], script)
    assert run["id"] == queued.id and run["lease"]["id"]
    assert packet["decision"]["outcome"] == "fresh" and [s["stage"] for s in packet["stages"]] == STAGES
    assert packet["rules"] and all(rule in rules for rule in packet["rules"])
    assert final["state"] == "completed" and none == {"run": None}
    assert real_events(run["id"]) == [
        ("discovery", "started"), ("discovery", "succeeded"), ("draft", "started"), ("draft", "succeeded"),
        ("push", "started"), ("push", "succeeded"), ("push", "verified"),
        ("announce", "started"), ("announce", "succeeded")]
    assert list(Effect.objects.filter(run_id=run["id"]).values_list("status", "reference")) == [("verified", "abc123")]


def test_mcp_refusal_is_code_and_detail_with_the_body(live_server):
    """The MCP process sends the lease id it was given: once the run was queued again (a goal change) and
    another process of the same agent leased it, the old lease is refused, lease_held, as a tool error
    with the API's body; nothing is written. A trigger of an unknown workflow is refused the same way."""
    wf = small_workflow()
    agent_token = make_agent()[1]
    _, owner_token = make_operator("owner")
    with Client(live_server.url, owner_token) as owner:
        owner.trigger(wf.slug, {"source": "v1"})
    relet = {}

    async def script(session):
        call = Tools(session)
        run = await call("stateboard_lease", workflows=[wf.slug])
        await call("stateboard_event", run_id=run["id"], stage="discovery", kind="started")
        await call("stateboard_event", run_id=run["id"], stage="discovery", kind="succeeded")

        def elsewhere():  # the owner changes the goal; the run is queued and another process leases it
            with Client(live_server.url, owner_token) as owner, Client(live_server.url, agent_token) as twin:
                owner.goal(wf.slug, wf.slug, objective="a new goal")
                relet["run"] = twin.lease([wf.slug])

        await anyio.to_thread.run_sync(elsewhere)
        stale = await call("stateboard_event", error=True, run_id=run["id"], stage="draft", kind="started")
        unknown = await call("stateboard_trigger", error=True, workflow="no-such-workflow", inputs={})
        return run, stale, unknown

    run, (text, body), (unknown_text, unknown_body) = with_mcp(live_server.url, agent_token, script)
    assert relet["run"] is not None and relet["run"].id == run["id"] and relet["run"].lease["id"] != run["lease"]["id"]
    assert text.startswith("lease_held: ") and body["code"] == "lease_held" and body["status"] == 409
    assert text == f"lease_held: {body['detail']}"
    assert ("draft", "started") not in real_events(run["id"])
    assert unknown_text.split(":")[0] == unknown_body["code"] and unknown_body["status"] in (404, 422)


def test_mcp_lost_answer_is_unreachable_then_resent_and_recorded_once(live_server):
    """Every answer to an event is lost after the server recorded it: the tool error names the
    client_event_id; the same call resent with it answers the one recorded event."""
    parts = urlsplit(live_server.url)
    losing = threading.Event()
    proxy = FaultyProxy((parts.hostname, parts.port),
                        lambda method, path: "drop" if losing.is_set() and path.endswith("/events/") else None)
    wf = small_workflow()

    async def script(session):
        call = Tools(session)
        run = await call("stateboard_trigger", workflow=wf.slug, inputs={"source": "v1"})
        losing.set()
        text, body = await call("stateboard_event", error=True, run_id=run["id"], stage="discovery", kind="started")
        losing.clear()
        event_id = text.rpartition("client_event_id=")[2]
        again = await call("stateboard_event", run_id=run["id"], stage="discovery", kind="started",
                           client_event_id=event_id)
        return run, text, body, event_id, again

    try:
        run, text, body, event_id, again = with_mcp(proxy.url, make_agent()[1], script)
    finally:
        proxy.close()
    assert text.startswith("unreachable: ") and body == {"code": "unreachable", "detail": body["detail"],
                                                        "client_event_id": event_id}
    dropped = [seen for seen in proxy.seen if seen[2] == "drop"]
    assert len(dropped) >= 2  # the client resent it itself, with the same id, before giving up
    recorded = LedgerEvent.objects.filter(run_id=run["id"], client_event_id=event_id)
    assert recorded.count() == 1 and again["seq"] == recorded.get().seq
    assert real_events(run["id"]) == [("discovery", "started")]
    assert Run.objects.get(id=run["id"]).state == "execute"


def test_mcp_trigger_carries_attributes_and_the_holder_changes_them(live_server):
    """SPEC §15 over MCP: the trigger's ``attributes``, then ``attributes_set`` on the run's current stage."""
    wf = small_workflow()

    async def script(session):
        call = Tools(session)
        run = await call("stateboard_trigger", workflow=wf.slug, inputs={"source": "v1"},
                         attributes={"team": "infra", "tier": 2})
        await call("stateboard_event", run_id=run["id"], stage=run["current_stage"], kind="attributes_set",
                   data={"attributes": {"tier": None, "hot": True}})
        bad = await call("stateboard_trigger", error=True, workflow=wf.slug, inputs={"source": "v2"},
                         attributes={"ratio": 0.5})
        return run, await call("stateboard_run", run_id=run["id"]), bad

    run, final, (text, body) = with_mcp(live_server.url, make_agent()[1], script)
    assert run["attributes"] == {"team": "infra", "tier": 2}
    assert final["attributes"] == {"team": "infra", "hot": True}
    assert text.startswith("invalid_attributes: ") and body["status"] == 422


def test_mcp_event_carries_usage_and_a_bad_one_is_refused(live_server):
    """SPEC §16 over MCP: ``usage`` on ``stateboard_event``; a token count as a string is ``invalid_usage``."""
    wf = small_workflow()

    async def script(session):
        call = Tools(session)
        run = await call("stateboard_trigger", workflow=wf.slug, inputs={"source": "v1"})
        await call("stateboard_event", run_id=run["id"], stage="discovery", kind="started",
                   usage={"input_tokens": 30, "output_tokens": 4, "cost_usd": "0.0125", "model": "m-1"})
        bad = await call("stateboard_event", error=True, run_id=run["id"], stage="discovery", kind="succeeded",
                         usage={"input_tokens": "12"})
        return await call("stateboard_run", run_id=run["id"]), bad

    final, (text, body) = with_mcp(live_server.url, make_agent()[1], script)
    assert final["usage"] == {"input_tokens": 30, "output_tokens": 4, "cost_usd": "0.0125"}
    assert text.startswith("invalid_usage: ") and body["status"] == 422
