"""A run's ledger as one trace (SPEC §16): pure functions from the run and its events to plain spans, with
ids derived from the run and its events' seqs, so exporting a run again gives the same spans.

- the root span ``invoke_workflow <workflow>``, from the run's creation to its end;
- a child span per stage attempt, from its ``started`` to the event that ended it (``succeeded``,
  ``failed``, ``skipped``; ``verified`` on an effect stage), status error on ``failed``;
- under an effect stage's attempt, an ``execute_tool <stage>`` span from the ``started`` that claimed the
  effect to the event that says what became of it; its ``stateboard.receipt_hash`` is that ``started``'s hash;
- span events on the root for decisions, approvals and human actions, each with its own event's hash.

The GenAI semantic conventions' names are used only for what they define (``gen_ai.operation.name``,
``gen_ai.tool.name``, ``gen_ai.usage.*``, ``gen_ai.request.model``); the rest is ``stateboard.*``.
Events and runs are read by attribute (a model instance or any object with the fields), an event's usage
with ``getattr(event, "usage", None)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from ledger.domain.kinds import STAGE_OUTCOME_KINDS
from ledger.domain.kinds import EventKind as K
from ledger.traces.context import span_id, trace_ids

# What the conventions define, and nothing else under gen_ai.*.
OPERATION = "gen_ai.operation.name"
TOOL_NAME = "gen_ai.tool.name"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
MODEL = "gen_ai.request.model"
# Ours.
RECEIPT = "stateboard.receipt_hash"
DISPOSITION = "stateboard.disposition"
COST = "stateboard.usage.cost_usd"

ATTEMPT_ENDS = frozenset({K.SUCCEEDED, K.FAILED, K.SKIPPED})
EFFECT_ATTEMPT_ENDS = frozenset({K.VERIFIED, K.FAILED, K.SKIPPED})
TOOL_ENDS = frozenset({K.SUCCEEDED, K.FAILED, K.UNKNOWN, K.SKIPPED, K.VERIFIED})
OPENS = frozenset({K.STARTED, K.PROPOSED})
# Decisions, approvals and human actions: span events on the root.
SPAN_EVENT_KINDS = frozenset({
    K.DECIDED, K.APPROVAL_REQUESTED, K.APPROVAL_VOTED, K.APPROVED, K.REJECTED, K.EXPIRED, K.APPROVAL_VOIDED,
    K.ESCALATION_RAISED, K.ESCALATION_CLOSED, K.RETRIED, K.ABANDONED, K.ROLLED_BACK, K.GOAL_CHANGED, K.CORRECTED, K.COMPENSATED,
})
DISPOSITIONS = {K.APPROVED: "allow", K.REJECTED: "deny"}


@dataclass
class SpanEvent:
    name: str
    at: datetime
    attributes: dict


@dataclass
class Span:
    name: str
    trace_id: int
    span_id: int
    parent_id: int | None
    start: datetime
    end: datetime
    attributes: dict
    events: list[SpanEvent] = field(default_factory=list)
    error: str | None = None  # the status's description when the span failed
    remote_parent: bool = False  # the parent is the trigger's caller's span (its traceparent)


class _Usage:
    """Usage summed over events: the conventions' token counts and model, and our cost."""

    def __init__(self):
        self.input = self.output = None
        self.cost = None
        self.model = None

    def add(self, usage) -> None:
        if not isinstance(usage, dict):
            return
        if isinstance(usage.get("input_tokens"), int):
            self.input = (self.input or 0) + usage["input_tokens"]
        if isinstance(usage.get("output_tokens"), int):
            self.output = (self.output or 0) + usage["output_tokens"]
        if usage.get("cost_usd") is not None:
            self.cost = round((self.cost or 0.0) + float(usage["cost_usd"]), 6)
        if usage.get("model"):
            self.model = str(usage["model"])

    def attributes(self) -> dict:
        found = {INPUT_TOKENS: self.input, OUTPUT_TOKENS: self.output, MODEL: self.model, COST: self.cost}
        return {key: value for key, value in found.items() if value is not None}


def usage_attributes(events) -> dict:
    """The GenAI attributes of the usage the events carry (SPEC §16: ``usage`` on an event)."""
    total = _Usage()
    for event in events:
        total.add(getattr(event, "usage", None))
    return total.attributes()


def _effect_attributes(events) -> dict:
    """The effect's system, operation and reference: from the first event of the attempt that names them."""
    found = {}
    for event in events:
        effect = getattr(event, "effect", None)
        if isinstance(effect, dict):
            for key in ("system", "operation", "reference"):
                if effect.get(key) and f"stateboard.effect.{key}" not in found:
                    found[f"stateboard.effect.{key}"] = str(effect[key])
    return found


def _event_attributes(event) -> dict:
    attributes = {"stateboard.seq": event.seq, "stateboard.actor": event.actor or "", RECEIPT: event.hash}
    if event.stage:
        attributes["stateboard.stage"] = event.stage
    if event.reason_code:
        attributes["stateboard.reason_code"] = event.reason_code
    data = event.data if isinstance(event.data, dict) else {}
    if event.kind == K.DECIDED and data.get("outcome"):
        attributes["stateboard.decision"] = str(data["outcome"])
    if isinstance(data.get("approval"), str):
        attributes["stateboard.approval.id"] = data["approval"]
    if event.kind in DISPOSITIONS:
        attributes[DISPOSITION] = DISPOSITIONS[event.kind]
    return attributes


class _Attempt:
    def __init__(self, opened, n: int, effect_stage: bool):
        self.opened, self.n, self.effect_stage = opened, n, effect_stage
        self.claim = opened if opened.kind == K.STARTED else None  # the started event that claimed the effect
        self.events = [opened]
        self.closed = None  # the event that ended it
        self.cut = None  # the stage's next start, when it never ended
        self.tool_closed = None

    def ends_with(self, event) -> bool:
        return event.kind in (EFFECT_ATTEMPT_ENDS if self.effect_stage else ATTEMPT_ENDS)


def run_spans(run, events, *, workflow: str, effect_stages=()) -> list[Span]:
    """The run's trace: its root span, its stage attempts' spans and its effects' ``execute_tool`` spans.
    ``events``: the run's events (any order); ``effect_stages``: the workflow's."""
    events = sorted(events, key=lambda e: e.seq)
    trace_id, caller = trace_ids(run.id, getattr(run, "traceparent", "") or "")
    root_id = span_id(run.id, "run")
    start = run.created_at if run.created_at is not None else events[0].at
    end = getattr(run, "ended_at", None) or (events[-1].at if events else start)
    staged = bool(getattr(run, "staged", False))
    attempts, open_by_stage, root_events, counts = [], {}, [], {}
    for event in events:
        attempt = open_by_stage.get(event.stage) if event.stage else None
        if attempt is not None and event.kind == K.STARTED and attempt.claim is None:
            attempt.claim = event  # the executor's start of a proposed stage: the same attempt
            attempt.events.append(event)
            continue
        if event.kind in OPENS and event.stage and not (attempt and event.kind == K.PROPOSED):
            if attempt is not None:  # started again without an end: the earlier attempt ends here, unfinished
                attempt.cut = event
            counts[event.stage] = counts.get(event.stage, 0) + 1
            attempt = _Attempt(event, counts[event.stage], event.stage in effect_stages)
            attempts.append(attempt)
            open_by_stage[event.stage] = attempt
            continue
        if attempt is not None and event.kind not in SPAN_EVENT_KINDS:
            attempt.events.append(event)
            if attempt.claim is not None and attempt.tool_closed is None and event.kind in TOOL_ENDS:
                attempt.tool_closed = event
            if attempt.ends_with(event):
                attempt.closed = event
                del open_by_stage[event.stage]
            continue
        if event.kind in SPAN_EVENT_KINDS or event.kind in STAGE_OUTCOME_KINDS:  # (an outcome outside an attempt)
            root_events.append(SpanEvent(str(event.kind), event.at, _event_attributes(event)))
    decision = run.decision if isinstance(run.decision, dict) else {}
    root_attributes = {
        OPERATION: "invoke_workflow", "stateboard.workflow": workflow, "stateboard.run.id": str(run.id),
        "stateboard.intent": run.intent, "stateboard.decision": str(decision.get("outcome") or ""),
        "stateboard.reason_code": str(decision.get("reason_code") or ""), "stateboard.state": run.state,
        **({RECEIPT: events[-1].hash} if events else {}), **usage_attributes(events),
    }
    if staged:
        root_attributes[DISPOSITION] = "simulate"
    root = Span(f"invoke_workflow {workflow}", trace_id, root_id, caller, start, end, root_attributes, root_events,
                error=(getattr(run, "ended_reason", "") or "failed") if run.state == "failed" else None,
                remote_parent=caller is not None)
    spans = [root]
    for attempt in attempts:
        spans.extend(_attempt_spans(run, attempt, trace_id, root_id, end, staged))
    return spans


def _attempt_spans(run, attempt: _Attempt, trace_id: int, root_id: int, run_end: datetime,
                   staged: bool) -> list[Span]:
    opened, closed, stage = attempt.opened, attempt.closed, attempt.opened.stage
    status = str(closed.kind) if closed is not None else "interrupted" if attempt.cut is not None else "open"
    end = closed.at if closed is not None else attempt.cut.at if attempt.cut is not None else run_end
    attributes = {"stateboard.stage": stage, "stateboard.attempt": attempt.n, "stateboard.status": status,
                  RECEIPT: (closed or opened).hash, **usage_attributes(attempt.events)}
    if closed is not None and closed.reason_code:
        attributes["stateboard.reason_code"] = closed.reason_code
    failed = closed is not None and closed.kind == K.FAILED
    attempt_id = span_id(run.id, opened.seq, "stage")
    spans = [Span(f"stage {stage}", trace_id, attempt_id, root_id, opened.at, end, attributes,
                  error=(closed.reason_code or "failed") if failed else None)]
    claim = attempt.claim
    if attempt.effect_stage and claim is not None:
        tool_end = attempt.tool_closed
        tool = {OPERATION: "execute_tool", TOOL_NAME: stage, **_effect_attributes(attempt.events),
                RECEIPT: claim.hash, DISPOSITION: "simulate" if staged else "allow",
                "stateboard.effect.status": str(tool_end.kind) if tool_end is not None else "open"}
        if getattr(claim, "idempotency_key", ""):
            tool["stateboard.effect.idempotency_key"] = claim.idempotency_key
        tool_failed = tool_end is not None and tool_end.kind == K.FAILED
        spans.append(Span(f"execute_tool {stage}", trace_id, span_id(run.id, claim.seq, "tool"), attempt_id,
                          claim.at, tool_end.at if tool_end is not None else spans[0].end, tool,
                          error=(tool_end.reason_code or "failed") if tool_failed else None))
    return spans
