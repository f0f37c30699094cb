"""The mapping of a run's events to spans (``ledger.traces.spans``), on plain objects: no database, no SDK."""

import uuid
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from types import SimpleNamespace

import pytest

from ledger.traces.context import span_id, trace_ids, traceparent_checked
from ledger.traces.spans import run_spans, usage_attributes

T0 = datetime(2026, 12, 7, 12, 0, tzinfo=dt_timezone.utc)
GEN_AI_NAMES = {"gen_ai.operation.name", "gen_ai.tool.name", "gen_ai.usage.input_tokens",
                "gen_ai.usage.output_tokens", "gen_ai.request.model"}
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def _events(*specs):
    """Events from (stage, kind, extra fields) specs, one second apart, each with its own hash."""
    return [SimpleNamespace(seq=n, at=T0 + timedelta(seconds=n), stage=stage, kind=kind, actor="agent:a",
                            reason_code=extra.get("reason_code", ""), data=extra.get("data", {}),
                            effect=extra.get("effect"), idempotency_key=extra.get("idempotency_key", ""),
                            hash=f"h{n:02d}", **({"usage": extra["usage"]} if "usage" in extra else {}))
            for n, (stage, kind, extra) in enumerate(specs, 1)]


def _run(events, **fields):
    return SimpleNamespace(**{"id": uuid.UUID("a1b2c3d4-0000-4000-8000-000000000001"), "intent": "ship-42",
                              "state": "completed", "staged": False, "traceparent": "", "ended_reason": "",
                              "decision": {"outcome": "fresh", "reason_code": "no_checkpoint"},
                              "created_at": T0, "ended_at": events[-1].at, **fields})


EFFECT = {"system": "git", "operation": "push", "reference": "abc123"}
A_RUN = [("", "decided", {"data": {"outcome": "fresh"}, "reason_code": "no_checkpoint"}),
         ("build", "started", {}),
         ("build", "succeeded", {"usage": {"input_tokens": 100, "output_tokens": 20, "model": "m-1",
                                           "cost_usd": "0.010"}}),
         ("push", "approval_requested", {"data": {"approval": "ap-1"}}),
         ("push", "approved", {"data": {"approval": "ap-1"}}),
         ("push", "started", {"idempotency_key": "k-push"}),
         ("push", "succeeded", {"effect": EFFECT, "usage": {"input_tokens": 5, "output_tokens": 7}}),
         ("push", "verified", {}),
         ("", "transition", {})]


def _by_name(spans):
    return {span.name: span for span in spans}


def test_a_run_is_one_trace_with_its_root_stage_attempts_and_effect():
    events = _events(*A_RUN)
    run = _run(events)
    spans = _by_name(run_spans(run, events, workflow="release", effect_stages=["push"]))
    assert set(spans) == {"invoke_workflow release", "stage build", "stage push", "execute_tool push"}
    root, build, push, tool = (spans[n] for n in ("invoke_workflow release", "stage build", "stage push",
                                                  "execute_tool push"))
    assert {s.trace_id for s in spans.values()} == {run.id.int}  # no traceparent: the run id's 128 bits
    assert root.parent_id is None and build.parent_id == push.parent_id == root.span_id
    assert tool.parent_id == push.span_id
    assert root.attributes["gen_ai.operation.name"] == "invoke_workflow"
    assert (root.attributes["stateboard.run.id"], root.attributes["stateboard.intent"]) == (str(run.id), "ship-42")
    assert (root.attributes["stateboard.decision"], root.attributes["stateboard.reason_code"]) == \
        ("fresh", "no_checkpoint")
    assert (root.start, root.end) == (T0, events[-1].at)
    assert (build.start, build.end, build.error) == (events[1].at, events[2].at, None)
    assert (push.start, push.end) == (events[5].at, events[7].at)  # an effect stage ends when verified
    assert (tool.start, tool.end) == (events[5].at, events[6].at)  # its effect, when it was performed
    assert tool.attributes == {
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "push", "stateboard.effect.system": "git",
        "stateboard.effect.operation": "push", "stateboard.effect.reference": "abc123",
        "stateboard.receipt_hash": "h06",  # the started event that claimed the effect
        "stateboard.disposition": "allow", "stateboard.effect.status": "succeeded",
        "stateboard.effect.idempotency_key": "k-push"}
    assert [(e.name, e.attributes["stateboard.receipt_hash"]) for e in root.events] == \
        [("decided", "h01"), ("approval_requested", "h04"), ("approved", "h05")]
    assert root.events[2].attributes["stateboard.disposition"] == "allow"
    assert root.events[0].attributes["stateboard.decision"] == "fresh"
    for span in spans.values():
        assert {k for k in span.attributes if k.startswith("gen_ai.")} <= GEN_AI_NAMES
        assert all(k.startswith(("gen_ai.", "stateboard.")) for k in span.attributes)


def test_usage_comes_from_each_events_usage_dict():
    events = _events(*A_RUN)
    spans = _by_name(run_spans(_run(events), events, workflow="release", effect_stages=["push"]))
    assert {k: v for k, v in spans["stage build"].attributes.items() if "usage" in k or "model" in k} == {
        "gen_ai.usage.input_tokens": 100, "gen_ai.usage.output_tokens": 20, "gen_ai.request.model": "m-1",
        "stateboard.usage.cost_usd": 0.01}
    root = spans["invoke_workflow release"].attributes
    assert (root["gen_ai.usage.input_tokens"], root["gen_ai.usage.output_tokens"]) == (105, 27)
    assert "gen_ai.usage.input_tokens" not in spans["execute_tool push"].attributes
    assert usage_attributes([SimpleNamespace(seq=1)]) == {}  # an event without usage (before the field)
    assert usage_attributes([SimpleNamespace(usage=None), SimpleNamespace(usage={"output_tokens": 3})]) == \
        {"gen_ai.usage.output_tokens": 3}


def test_a_failed_attempt_is_an_error_and_a_second_attempt_has_its_own_span():
    events = _events(("", "decided", {}), ("build", "started", {}), ("build", "failed", {"reason_code": "tests_red"}),
                     ("build", "started", {}), ("build", "failed", {}), ("", "transition", {}))
    spans = run_spans(_run(events, state="failed", ended_reason="retries_exhausted"), events, workflow="ci")
    root, first, second = spans
    assert (first.name, first.error, first.attributes["stateboard.attempt"]) == ("stage build", "tests_red", 1)
    assert (second.error, second.attributes["stateboard.attempt"]) == ("failed", 2)
    assert first.span_id != second.span_id and root.error == "retries_exhausted"


def test_staged_runs_simulate_and_rejections_deny():
    events = _events(("", "decided", {}), ("push", "approval_requested", {}), ("push", "rejected", {}),
                     ("push", "started", {}), ("push", "succeeded", {"effect": EFFECT}), ("push", "verified", {}))
    spans = _by_name(run_spans(_run(events, staged=True), events, workflow="w", effect_stages=["push"]))
    assert spans["invoke_workflow w"].attributes["stateboard.disposition"] == "simulate"
    assert spans["execute_tool push"].attributes["stateboard.disposition"] == "simulate"
    assert spans["invoke_workflow w"].events[-1].attributes["stateboard.disposition"] == "deny"


def test_a_traceparent_gives_the_trace_id_and_the_roots_remote_parent():
    events = _events(*A_RUN)
    spans = run_spans(_run(events, traceparent=TRACEPARENT), events, workflow="release", effect_stages=["push"])
    assert {s.trace_id for s in spans} == {0x4bf92f3577b34da6a3ce929d0e0e4736}
    assert (spans[0].parent_id, spans[0].remote_parent) == (0x00f067aa0ba902b7, True)


def test_the_same_run_gives_the_same_spans_again():
    events = _events(*A_RUN)
    first = run_spans(_run(events), events, workflow="release", effect_stages=["push"])
    again = run_spans(_run(events), list(reversed(events)), workflow="release", effect_stages=["push"])
    assert [(s.span_id, s.parent_id, s.attributes) for s in first] == [(s.span_id, s.parent_id, s.attributes)
                                                                       for s in again]
    assert len({s.span_id for s in first}) == len(first)


@pytest.mark.parametrize(("value", "kept"), [
    (TRACEPARENT, TRACEPARENT), (TRACEPARENT.upper(), TRACEPARENT), (f" {TRACEPARENT} ", TRACEPARENT),
    ("00-00000000000000000000000000000000-00f067aa0ba902b7-01", ""),  # all-zero trace id
    ("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", ""),  # all-zero span id
    ("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", ""),  # the forbidden version
    (f"{TRACEPARENT}-extra", ""),  # version 00 has four fields
    ("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-later", "00-4bf92f3577b34da6a3ce929d0e0e4736-"
                                                                      "00f067aa0ba902b7-01"),
    ("nonsense", ""), ("", ""), (None, ""), (42, "")])
def test_a_traceparent_is_kept_only_when_valid(value, kept):
    assert traceparent_checked(value) == kept


def test_ids_without_a_traceparent_come_from_the_run():
    run_id = uuid.uuid4()
    assert trace_ids(run_id) == (run_id.int, None)
    assert trace_ids(run_id, "garbage") == (run_id.int, None)
    assert span_id(run_id, 3, "stage") == span_id(str(run_id), 3, "stage") != span_id(run_id, 3, "tool")
    assert 0 < span_id(run_id, "run") < 2 ** 64


def test_an_executor_stage_is_one_attempt_from_the_proposal_its_effect_from_the_executors_start():
    events = _events(("", "decided", {}), ("deploy", "proposed", {}), ("deploy", "started", {}),
                     ("deploy", "unknown", {}), ("deploy", "verified", {"effect": EFFECT}))
    spans = _by_name(run_spans(_run(events), events, workflow="w", effect_stages=["deploy"]))
    assert sorted(spans) == ["execute_tool deploy", "invoke_workflow w", "stage deploy"]
    stage, tool = spans["stage deploy"], spans["execute_tool deploy"]
    assert (stage.start, stage.end) == (events[1].at, events[4].at)
    assert (tool.start, tool.end, tool.parent_id) == (events[2].at, events[3].at, stage.span_id)
    assert (tool.attributes["stateboard.receipt_hash"], tool.attributes["stateboard.effect.status"]) == \
        ("h03", "unknown")
    assert tool.attributes["stateboard.effect.reference"] == "abc123"


def test_a_stage_started_again_cuts_the_attempt_that_never_ended():
    events = _events(("", "decided", {}), ("build", "started", {}), ("build", "started", {}),
                     ("build", "succeeded", {}))
    _, first, second = run_spans(_run(events), events, workflow="w")
    assert (first.end, first.attributes["stateboard.status"], first.error) == (events[2].at, "interrupted", None)
    assert (second.start, second.end, second.attributes["stateboard.status"]) == \
        (events[2].at, events[3].at, "succeeded")
