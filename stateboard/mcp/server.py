"""The MCP server (SPEC §12.1): eight tools with fixed names and the ``stateboard_rules`` prompt.

Answers are the API's JSON as text (and as structured content); a refusal is a tool error whose text is
``<code>: <detail>`` with the API's body as structured content; a write whose answer never came is
``unreachable: … client_event_id=<id>`` (resent with that id, it is recorded once).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, TextContent
from pydantic import Field

from stateboard.client import Client, StateboardError
from stateboard.mcp.kinds import AGENT_KINDS
from stateboard.mcp.tools import AnswerLost, Tools

# The resume packet's own rules (SPEC §9.2, the packet's ``rules``), word for word, then the decision's.
PACKET_RULES = (
    "Old claims are leads, not facts.",
    "Nothing counts as published without a verified effect.",
    "Answer 'no action' when the evidence is insufficient.",
    "Propose, never write.",
)
DECISION_RULES = (
    "Do what the run's decision says, never more: noop -> do nothing and stop; escalated -> stop, "
    "a human decides; verify_only -> only check the effects it lists (effects_to_verify), posting "
    "verified with evidence, or failed with reason_code effect_absent if it never happened, then go on "
    "from resume_from; fresh or resume -> start at decision.resume_from.",
    "Never redo a verified effect: the world already holds it. Never re-execute an effect whose outcome "
    "is unknown: verify it.",
)
STAGE_RULES = (
    "Stages run in the workflow's order: post started, do the work, then succeeded (with effect "
    "{system, operation, reference} on an effect stage) or failed. If you did not see an effect stage's "
    "outcome (a timeout, a crash), post unknown, never failed.",
    "After an effect stage, look at the world and post verified with evidence "
    "[{uri, observed_at, digest?, excerpt?}].",
    "On an approval stage call stateboard_request_approval, wait until an editor approves, then post "
    "started with the same action. On an executor stage post proposed with the action: Stateboard "
    "performs and verifies it.",
    "A refusal is '<code>: <detail>': read the code, do not retry blindly. 'unreachable: ... "
    "client_event_id=<id>' means the answer was lost: send the same call again with that "
    "client_event_id (it is recorded once).",
)
RULES_TEXT = "\n".join(
    ["Stateboard keeps the record of your run; trust it, not your memory. Start every run by reading "
     "stateboard_resume_packet instead of chat history."]
    + [f"- {rule}" for rule in (*PACKET_RULES, *DECISION_RULES, *STAGE_RULES)])
DECIDE = " ".join(DECISION_RULES)
EVENT_KINDS = "; ".join(f"{kind} ({summary})" for kind, summary in AGENT_KINDS)
RUN_BODY = ("Answers the run: id, state, decision {outcome, reason_code, resume_from, verify_effects}, "
            "current_stage, lease.")

Json = dict[str, Any]
RunId = Annotated[str, Field(description="the run's id")]
Stage = Annotated[str, Field(description="a stage of the run's workflow")]
ActionArg = Annotated[Json, Field(description="{system, operation, target, summary, params?}")]


def _text(body: Any) -> str:
    return json.dumps(body, ensure_ascii=False, sort_keys=True)


def _answered(body: Any) -> CallToolResult:
    structured = body if isinstance(body, dict) else {"result": body}
    return CallToolResult(content=[TextContent(type="text", text=_text(body))], structured_content=structured)


def _failed(text: str, body: Json) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=body, is_error=True)


def answer(call: Callable[[], Any]) -> CallToolResult:
    """The tool's answer: the API's JSON, a refusal, or the note that the answer never came."""
    try:
        return _answered(call())
    except AnswerLost as lost:
        again = " ".join(f"{name}={value}" for name, value in lost.resend.items())
        return _failed(f"unreachable: no answer came ({lost.detail}); send the same call again with {again}",
                       {"code": "unreachable", "detail": lost.detail, **lost.resend})
    except StateboardError as exc:
        body = exc.body if isinstance(exc.body, dict) else {"code": exc.code, "detail": exc.detail}
        return _failed(f"{exc.code}: {exc.detail}", {"status": exc.status, **body} if exc.status else body)


def build_server(client: Client) -> MCPServer:
    """The MCP server for one agent token (``client``)."""
    tools = Tools(client)
    server = MCPServer("stateboard", instructions=RULES_TEXT, log_level="WARNING")

    @server.tool(description=f"Trigger a run of a workflow; it is leased to you at once unless the decision "
                             f"is noop or escalated. {RUN_BODY} {DECIDE}")
    def stateboard_trigger(
        workflow: Annotated[str, Field(description="the workflow's slug")],
        inputs: Annotated[Json, Field(description="the run's inputs (source versions, goal, constraints)")],
        intent: Annotated[str | None, Field(description="which job instance; default the workflow slug")] = None,
        trigger_key: Annotated[str | None, Field(description="the same key is the same run")] = None,
        attributes: Annotated[Json | None, Field(description="labels to find the run by: at most 16 keys "
                                                             "[a-z][a-z0-9_]{0,39}, each a string (<= 200 "
                                                             "characters), integer, boolean or ISO 8601 time "
                                                             "with zone; not inputs (no decision reads them)")] = None,
    ) -> CallToolResult:
        return answer(lambda: tools.trigger(workflow, inputs, intent=intent, trigger_key=trigger_key,
                                            attributes=attributes))

    @server.tool(description=f"Lease the queued run that was queued earliest (a schedule tick, a human, a "
                             f'retry), waiting up to wait_seconds; {{"run": null}} when none came. '
                             f"{RUN_BODY} {DECIDE}")
    def stateboard_lease(
        workflows: Annotated[list[str] | None, Field(description="only these workflows' runs")] = None,
        wait_seconds: Annotated[int, Field(ge=0, le=30, description="long-poll up to this long")] = 0,
    ) -> CallToolResult:
        return answer(lambda: tools.lease(workflows, wait_seconds=wait_seconds))

    @server.tool(description=f"Read a run as the server has it now. {RUN_BODY}")
    def stateboard_run(run_id: RunId) -> CallToolResult:
        return answer(lambda: tools.run(run_id))

    @server.tool(description="Read this first when a run starts, instead of chat history: the decision, the "
                             "goal, each stage's status, verified effects, effects to verify, pending intents, "
                             "facts and leads (within budget_tokens), and the rules. " + " ".join(PACKET_RULES)
                             + " " + DECIDE)
    def stateboard_resume_packet(
        run_id: RunId,
        budget_tokens: Annotated[int, Field(ge=200, le=100000)] = 2000,
    ) -> CallToolResult:
        return answer(lambda: tools.resume_packet(run_id, budget_tokens=budget_tokens))

    @server.tool(description=f"Append one event on a stage of a run you hold; kind is one of: {EVENT_KINDS}. "
                             + " ".join(STAGE_RULES) + " " + DECISION_RULES[1])
    def stateboard_event(
        run_id: RunId,
        stage: Stage,
        kind: Annotated[str, Field(description=", ".join(kind for kind, _ in AGENT_KINDS))],
        effect: Annotated[Json | None, Field(description="{system, operation, reference}")] = None,
        evidence: Annotated[list[Json] | None, Field(description="[{uri, observed_at, digest?, excerpt?}]")] = None,
        reason_code: str | None = None,
        data: Annotated[Json | None, Field(description="small facts")] = None,
        action: Annotated[Json | None, Field(description="the approved action (started on an approval "
                                                         "stage) or the proposed one (executor stage)")] = None,
        idempotency_key: str | None = None,
        client_event_id: Annotated[str | None, Field(description="only to resend a call whose answer was "
                                                                 "lost: the id its error named")] = None,
        usage: Annotated[Json | None, Field(description="what this step spent: {input_tokens?, output_tokens? "
                                                        "(integers), cost_usd? (a decimal string such as "
                                                        "\"0.0125\"), model?}")] = None,
    ) -> CallToolResult:
        return answer(lambda: tools.event(run_id, stage, kind, client_event_id=client_event_id, effect=effect,
                                          evidence=evidence, reason_code=reason_code, data=data, action=action,
                                          idempotency_key=idempotency_key, usage=usage))

    @server.tool(description="Ask an editor to approve an action on an approval stage; the run waits in "
                             "awaiting_approval (poll stateboard_run). Once approved, post started on that "
                             "stage with the same action: the approval is a single-use permit for exactly it.")
    def stateboard_request_approval(
        run_id: RunId,
        stage: Stage,
        action: ActionArg,
        kind: Literal["high_impact", "compensation"] = "high_impact",
    ) -> CallToolResult:
        return answer(lambda: tools.request_approval(run_id, stage, action, kind=kind))

    @server.tool(description="Save a checkpoint of a run you hold (the minimum to resume safely; whitelisted "
                             "fields only, no transcripts, at most 64 KiB). The server also saves one itself "
                             "whenever a stage passes.")
    def stateboard_checkpoint(
        run_id: RunId,
        stage: str | None = None,
        resume_after: str | None = None,
        retry_count: int | None = None,
        max_retries: int | None = None,
        allowed_next_stages: list[str] | None = None,
        observed_effects: Annotated[list[str] | None, Field(description="effect keys")] = None,
        state_table: Annotated[Json | None, Field(description="{stage: {status, summary, pointer}}")] = None,
        version_boundary: int | None = None,
        assertions: Annotated[list[Json] | None, Field(description="[{stage, pointer?, digest?}]")] = None,
        pending_intents: list[str] | None = None,
        input_fingerprint: str | None = None,
        policy_version: str | None = None,
        env_fingerprint: str | None = None,
        expires_at: str | None = None,
    ) -> CallToolResult:
        payload = dict(stage=stage, resume_after=resume_after, retry_count=retry_count, max_retries=max_retries,
                       allowed_next_stages=allowed_next_stages, observed_effects=observed_effects,
                       state_table=state_table, version_boundary=version_boundary, assertions=assertions,
                       pending_intents=pending_intents, input_fingerprint=input_fingerprint,
                       policy_version=policy_version, env_fingerprint=env_fingerprint, expires_at=expires_at)
        return answer(lambda: tools.checkpoint(run_id, **payload))

    @server.tool(description="Propose a knowledge claim through the write gate (active, pending review, or "
                             "refused with reasons). Propose, never write: a claim is a lead until it is "
                             "verified; 'verified' needs ledger_event, the id of a verified ledger event.")
    def stateboard_propose_claim(
        key: Annotated[str, Field(description="stable subject id")],
        statement: str,
        source_refs: Annotated[list[str], Field(description="URIs")],
        source_type: Literal["official-doc", "paper", "repo", "run-evidence"],
        scope: Annotated[Json, Field(description="{system, version?, task?}")],
        confidence: Literal["reported", "verified", "engineering-inference"],
        observed_at: Annotated[str, Field(description="ISO 8601 with a timezone")],
        refresh_after: Annotated[str, Field(description="after it the claim is served only as a lead")],
        owner: str | None = None,
        sensitivity: Literal["public", "internal", "sensitive"] | None = None,
        retention_until: str | None = None,
        derived_from: list[str] | None = None,
        ledger_event: int | None = None,
    ) -> CallToolResult:
        fields = dict(key=key, statement=statement, source_refs=source_refs, source_type=source_type, scope=scope,
                      confidence=confidence, observed_at=observed_at, refresh_after=refresh_after, owner=owner,
                      sensitivity=sensitivity, retention_until=retention_until, derived_from=derived_from,
                      ledger_event=ledger_event)
        return answer(lambda: tools.propose_claim(**fields))

    @server.prompt(name="stateboard_rules", description="The rules an agent follows with Stateboard's tools.")
    def stateboard_rules() -> str:
        return RULES_TEXT

    return server
