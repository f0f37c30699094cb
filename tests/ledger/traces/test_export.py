"""SPEC §16: runs driven through the API, their traces exported from the ledger to a real local OTLP/HTTP
receiver that decodes the protobuf (``collector.Collector``), with the receiver down and back."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from ledger import services, tasks
from ledger.models import LedgerEvent, Run, TraceMark
from ledger.schedules import SWEEPS
from ledger.store import store
from tests.factories import client_for, make_agent, make_operator, make_workflow
from tests.ledger.helpers import EVIDENCE, AgentDriver
from tests.ledger.traces.collector import Collector

pytestmark = pytest.mark.django_db

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
ACTION = {"system": "k8s", "operation": "deploy", "target": "prod/web", "summary": "Deploy build 42 to prod"}
GEN_AI_NAMES = {"gen_ai.operation.name", "gen_ai.tool.name", "gen_ai.usage.input_tokens",
                "gen_ai.usage.output_tokens", "gen_ai.request.model"}
ERROR = 2  # Status.StatusCode.STATUS_CODE_ERROR


@pytest.fixture
def collector(monkeypatch):
    found = Collector().start()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", found.endpoint)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-tenant=ledger")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")  # a refused export gives up within a second
    for name in ("OTEL_SERVICE_NAME", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_RESOURCE_ATTRIBUTES"):
        monkeypatch.delenv(name, raising=False)
    yield found
    found.stop()


def _export() -> int:
    return services.traces_export(now=timezone.now() + timedelta(seconds=1), lag=timedelta(0))


def _trigger(driver, headers=None, expect=201, **body):
    response = driver.client.post("/api/v1/runs/", {"workflow": driver.workflow, "inputs": {"v": 1}, **body},
                                  format="json", headers=headers or {})
    assert response.status_code == expect, response.content
    return response.json()


def _hashes(run_id) -> dict:
    return {(e.stage, e.kind, e.seq): e.hash for e in LedgerEvent.objects.filter(run_id=run_id)}


def _deploy_run(traceparent=None):
    """A run through build, an approved deploy (its effect performed and verified) and verify."""
    wf = make_workflow(stages=["build", "deploy", "verify"], effect_stages=["deploy"], approval_stages=["deploy"])
    _, token = make_agent()
    agent = AgentDriver(client_for(token), wf.slug)
    run = _trigger(agent, headers={"traceparent": traceparent} if traceparent else None)
    agent.pass_stage(run["id"], "build")
    approval = agent.client.post(f"/api/v1/runs/{run['id']}/approvals/",
                                 {"kind": "high_impact", "stage": "deploy", "action": ACTION}, format="json").json()
    _, editor_token = make_operator("editor")
    assert client_for(editor_token).post(f"/api/v1/approvals/{approval['id']}/approve/", {},
                                         format="json").status_code == 200
    agent.event(run["id"], "deploy", "started", action=ACTION)
    return wf, agent, run


def _finish(agent, run_id):
    agent.event(run_id, "deploy", "succeeded", effect={"system": "k8s", "operation": "deploy",
                                                        "reference": "rollout-7"})
    agent.event(run_id, "deploy", "verified", evidence=EVIDENCE)
    agent.pass_stage(run_id, "verify")
    assert Run.objects.get(id=run_id).state == "completed"


def test_a_run_with_a_traceparent_is_exported_as_its_trace_once_it_ends(collector):
    wf, agent, run = _deploy_run(traceparent=TRACEPARENT)
    assert Run.objects.get(id=run["id"]).traceparent == TRACEPARENT
    assert _export() == 0 and collector.spans() == []  # not ended yet: nothing sent
    _finish(agent, run["id"])
    assert _export() == 1
    spans = collector.spans()
    by_name = {s["name"]: s for s in spans}
    assert sorted(by_name) == sorted([f"invoke_workflow {wf.slug}", "stage build", "stage deploy", "stage verify",
                                      "execute_tool deploy"]) and len(spans) == 5
    root, deploy, tool = by_name[f"invoke_workflow {wf.slug}"], by_name["stage deploy"], by_name["execute_tool deploy"]
    assert {s["trace_id"] for s in spans} == {"4bf92f3577b34da6a3ce929d0e0e4736"}
    assert root["parent_id"] == "00f067aa0ba902b7"  # the trigger's caller's span
    assert {by_name[n]["parent_id"] for n in ("stage build", "stage deploy", "stage verify")} == {root["span_id"]}
    assert tool["parent_id"] == deploy["span_id"]
    assert root["resource"]["service.name"] == "stateboard" and collector.headers[0]["x-tenant"] == "ledger"

    hashes = _hashes(run["id"])
    started = [h for (stage, kind, _), h in hashes.items() if (stage, kind) == ("deploy", "started")]
    assert tool["attributes"] == {
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "deploy", "stateboard.effect.system": "k8s",
        "stateboard.effect.operation": "deploy", "stateboard.effect.reference": "rollout-7",
        "stateboard.receipt_hash": started[0], "stateboard.disposition": "allow",
        "stateboard.effect.status": "succeeded",
        "stateboard.effect.idempotency_key": LedgerEvent.objects.get(run_id=run["id"], stage="deploy",
                                                                     kind="started").idempotency_key}
    assert root["attributes"]["gen_ai.operation.name"] == "invoke_workflow"
    assert root["attributes"]["stateboard.run.id"] == run["id"]
    assert (root["attributes"]["stateboard.intent"], root["attributes"]["stateboard.decision"],
            root["attributes"]["stateboard.reason_code"]) == (wf.slug, "fresh", run["decision"]["reason_code"])
    names = [name for name, _ in root["events"]]
    assert names[0] == "decided" and {"approval_requested", "approved"} <= set(names)
    for name, attributes in root["events"]:  # each span event carries its own event's hash
        assert hashes[(attributes.get("stateboard.stage", ""), name, attributes["stateboard.seq"])] == \
            attributes["stateboard.receipt_hash"]
    assert dict(root["events"])["approved"]["stateboard.disposition"] == "allow"
    assert deploy["attributes"]["stateboard.stage"] == "deploy" and deploy["status"] != ERROR
    assert deploy["start"] <= tool["start"] < tool["end"] <= deploy["end"] <= root["end"]
    for span in spans:
        assert {k for k in span["attributes"] if k.startswith("gen_ai.")} <= GEN_AI_NAMES, span
        assert all(k.startswith(("gen_ai.", "stateboard.")) for k in span["attributes"]), span
    assert _export() == 0 and len(collector.spans()) == 5  # exported once


def test_a_failed_run_without_a_traceparent_is_traced_under_its_run_id(collector):
    wf = make_workflow(stages=["work"], effect_stages=[], approval_stages=[])
    _, token = make_agent()
    agent = AgentDriver(client_for(token), wf.slug)
    run = _trigger(agent, headers={"traceparent": "00-not-a-valid-header"})  # ignored, never refused
    assert Run.objects.get(id=run["id"]).traceparent == ""
    agent.event(run["id"], "work", "started")
    agent.event(run["id"], "work", "failed", reason_code="tests_red")
    assert Run.objects.get(id=run["id"]).state == "failed"
    assert _export() == 1
    root, work = collector.spans()
    assert {root["trace_id"], work["trace_id"]} == {run["id"].replace("-", "")}
    assert root["parent_id"] == "" and work["parent_id"] == root["span_id"]
    assert (work["name"], work["status"], work["status_message"]) == ("stage work", ERROR, "tests_red")
    assert root["status"] == ERROR


def test_a_collector_outage_loses_nothing_and_its_return_sends_the_same_spans(collector):
    _, agent, run = _deploy_run()
    _finish(agent, run["id"])
    collector.stop()  # connection refused
    assert _export() == 0 and not TraceMark.objects.exists()
    collector.start()
    collector.failing = True  # 500
    assert _export() == 0 and collector.spans() == []
    collector.failing = False
    assert _export() == 1
    first = sorted((s["trace_id"], s["span_id"], s["parent_id"], s["name"]) for s in collector.spans())
    assert len(first) == 5 and _export() == 0 and len(collector.spans()) == 5  # nothing twice
    mark = TraceMark.objects.get()
    assert (mark.event_id, mark.last_error) == (LedgerEvent.objects.order_by("at", "id").last().id, "")

    TraceMark.objects.all().delete()  # exported again from the start (a lost mark): the very same spans
    collector.requests.clear()
    assert _export() == 1
    assert sorted((s["trace_id"], s["span_id"], s["parent_id"], s["name"]) for s in collector.spans()) == first


def test_a_failed_export_keeps_the_mark_and_says_why(collector):
    _, agent, run = _deploy_run()
    assert _export() == 0
    before = TraceMark.objects.get()
    _finish(agent, run["id"])
    collector.failing = True
    assert _export() == 0
    after = TraceMark.objects.get()
    assert (after.at, after.event_id) == (before.at, before.event_id) and after.last_error


def test_events_within_the_lag_wait_for_the_next_pass(collector):
    wf = make_workflow(stages=["work"], effect_stages=[], approval_stages=[])
    run, _ = services.run_trigger(workflow_slug=wf.slug, inputs={}, actor="agent:a")
    services.event_append(run_id=run.id, body={"stage": "work", "kind": "started"}, actor="agent:a")
    services.event_append(run_id=run.id, body={"stage": "work", "kind": "succeeded"}, actor="agent:a")
    assert Run.objects.get(id=run.id).state == "completed"
    assert services.traces_export(now=timezone.now()) == 0  # its events are younger than the lag
    assert services.traces_export(now=timezone.now() + timedelta(minutes=1)) == 1


def test_without_an_endpoint_nothing_is_read_or_sent(monkeypatch, django_assert_num_queries):
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    with django_assert_num_queries(0):
        assert services.traces_export(now=timezone.now()) == 0
        assert tasks.traces_export.apply().get() == 0  # beat's task, every 10 s
    assert SWEEPS["stateboard: export traces"] == ("ledger.tasks.traces_export", 10)


def test_beats_task_exports_with_the_standard_variables(collector, monkeypatch):
    _, agent, run = _deploy_run()
    _finish(agent, run["id"])
    assert tasks.traces_export.apply().get() == 0 and collector.spans() == []  # its events are younger than the lag
    monkeypatch.setenv("OTEL_SERVICE_NAME", "stateboard-eu")
    assert services.traces_export(now=timezone.now() + timedelta(minutes=1)) == 1
    assert {s["resource"]["service.name"] for s in collector.spans()} == {"stateboard-eu"}


def _append_statements(run, n) -> int:
    peeked = store().run_peek(run.id)
    with CaptureQueriesContext(connection) as captured:
        services.event_append(run_id=run.id, body={"stage": "work", "kind": "proposed", "client_event_id": f"p{n}"},
                              actor="agent:a", run=peeked)
    return len(captured.captured_queries)


def _trigger_statements(driver, **headers) -> int:
    with CaptureQueriesContext(connection) as captured:
        _trigger(driver, headers=headers, intent=f"i-{len(headers)}-{timezone.now().timestamp()}")
    return len(captured.captured_queries)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)  # as a request's: no test transaction around it
@pytest.mark.parametrize("configured", [False, True])
def test_tracing_adds_no_statement_to_an_append_or_a_trigger(monkeypatch, configured):
    if configured:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    else:
        monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    wf = make_workflow(stages=["work"], effect_stages=[], approval_stages=[])
    run, _ = services.run_trigger(workflow_slug=wf.slug, inputs={}, actor="agent:a", traceparent=TRACEPARENT)
    services.event_append(run_id=run.id, body={"stage": "work", "kind": "started"}, actor="agent:a")
    assert _append_statements(run, 1) == 1  # the append's one write (tests/ledger/test_append_as_read.py)
    _, token = make_agent()
    driver = AgentDriver(client_for(token), make_workflow(stages=["work"], effect_stages=[], approval_stages=[]).slug)
    _trigger(driver)  # the token's first use writes its last use
    assert _trigger_statements(driver) == _trigger_statements(driver, traceparent=TRACEPARENT)


def test_runs_ending_together_are_exported_in_rounds_each_once(collector):
    wf = make_workflow(stages=["a", "b"], effect_stages=[], approval_stages=[])
    runs = []
    for n in range(3):
        run, _ = services.run_trigger(workflow_slug=wf.slug, inputs={"n": n}, intent=f"i{n}", actor="agent:a")
        for stage in ("a", "b"):
            for kind in ("started", "succeeded"):
                services.event_append(run_id=run.id, body={"stage": stage, "kind": kind}, actor="agent:a")
        runs.append(run)
    total = LedgerEvent.objects.filter(run_id__in=[r.id for r in runs]).count()
    assert services.traces_export(now=timezone.now() + timedelta(seconds=1), lag=timedelta(0), batch=4) == 3
    roots = [s for s in collector.spans() if s["name"].startswith("invoke_workflow")]
    assert sorted(s["trace_id"] for s in roots) == sorted(r.id.hex for r in runs)  # each once
    assert len(collector.spans()) == 3 * 3
    assert total > 3 * 4 and len(collector.requests) == 3  # rounds of 4 events, each run ending in its own
    assert TraceMark.objects.get().event_id == LedgerEvent.objects.order_by("at", "id").last().id


def test_on_calls_actions_and_an_effect_that_failed_are_in_the_runs_trace(collector):
    wf = make_workflow(stages=["build", "deploy"], effect_stages=["deploy"], approval_stages=[], max_retries=1)
    _, token = make_agent()
    agent = AgentDriver(client_for(token), wf.slug)
    run = _trigger(agent)
    agent.pass_stage(run["id"], "build")
    agent.event(run["id"], "deploy", "started")
    agent.event(run["id"], "deploy", "failed", reason_code="effect_absent")  # the effect never happened
    assert Run.objects.get(id=run["id"]).state == "failed"
    escalated = _trigger(agent)  # over the retry budget: on-call decides
    assert escalated["state"] == "escalated"
    oncall, oncall_token = make_operator("oncall")
    assert client_for(oncall_token).post(f"/api/v1/runs/{escalated['id']}/abandon/", {"reason": "repo archived"},
                                         format="json").status_code == 200
    assert _export() == 2
    spans = collector.spans()
    failed = {s["name"]: s for s in spans if s["trace_id"] == run["id"].replace("-", "")}
    assert (failed["execute_tool deploy"]["status"], failed["execute_tool deploy"]["status_message"]) == \
        (ERROR, "effect_absent")
    assert failed["execute_tool deploy"]["parent_id"] == failed["stage deploy"]["span_id"]
    assert failed["stage deploy"]["status"] == ERROR and failed["stage build"]["status"] != ERROR
    (root,) = [s for s in spans if s["trace_id"] == escalated["id"].replace("-", "")]
    events = dict(root["events"])
    assert root["attributes"]["stateboard.decision"] == "escalated"
    assert root["attributes"]["stateboard.state"] == "abandoned" and root["status"] != ERROR
    assert events["abandoned"]["stateboard.actor"] == f"user:{oncall.username}"
    assert "escalation_raised" in events and "escalation_closed" in events


def test_the_usage_agents_post_is_on_their_stage_spans_and_the_runs(collector):
    """SPEC §16: usage recorded on events is exported as the GenAI conventions' token counts and model."""
    wf = make_workflow(stages=["draft", "review"], effect_stages=[], approval_stages=[])
    _, token = make_agent()
    agent = AgentDriver(client_for(token), wf.slug)
    run = _trigger(agent)
    agent.event(run["id"], "draft", "started", usage={"input_tokens": 1200, "output_tokens": 300, "model": "m-1",
                                                      "cost_usd": "0.0125"})
    agent.event(run["id"], "draft", "succeeded", usage={"input_tokens": 30})
    agent.pass_stage(run["id"], "review")
    assert _export() == 1
    by_name = {s["name"]: s for s in collector.spans()}
    draft, review = by_name["stage draft"]["attributes"], by_name["stage review"]["attributes"]
    assert (draft["gen_ai.usage.input_tokens"], draft["gen_ai.usage.output_tokens"],
            draft["gen_ai.request.model"]) == (1230, 300, "m-1")
    assert "gen_ai.usage.input_tokens" not in review
    assert by_name[f"invoke_workflow {wf.slug}"]["attributes"]["gen_ai.usage.input_tokens"] == 1230
