"""SPEC §7 metrics: figures without data are left out of /metrics, the text parses, latency is measured."""


import pytest
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from ledger.models import LedgerEvent, ReplayEval, Run
from tests.factories import client_for, make_agent, make_operator, make_workflow
from tests.ledger.helpers import AgentDriver


def _families(client) -> dict:
    response = client.get("/metrics")
    assert response.status_code == 200
    text = response.content.decode()
    return text, {family.name: family for family in text_string_to_metric_families(text)}


@pytest.mark.django_db
def test_prometheus_text_without_data_parses_and_leaves_figures_out(client):
    """An empty ledger: no `None`, every line parses, accuracy and P95 are absent rather than non-numbers."""
    text, families = _families(client)
    assert "None" not in text and "nan" not in text.lower()
    assert "stateboard_open_approvals" in families
    for absent in ("stateboard_recovery_accuracy", "stateboard_trigger_to_decision_p95_seconds",
                   "stateboard_write_gate_rejection_rate", "stateboard_stale_claim_as_fact_rate"):
        assert absent not in families
    assert all(family.samples for family in families.values())


@pytest.mark.django_db
def test_prometheus_label_values_are_escaped():
    """A label value with a quote, a backslash and a newline still parses back to itself."""
    from ledger.web.home import _prometheus_label

    value = 'a"b\\c\nd'
    line = f'stateboard_x{{v="{_prometheus_label(value)}"}} 1\n'
    (family,) = text_string_to_metric_families(line)
    assert family.samples[0].labels == {"v": value}


@pytest.mark.django_db
def test_metrics_recovery_accuracy_is_null_before_the_first_replay_then_the_latest(client):
    """`recovery_accuracy` is null until a replay_eval is recorded, then the latest one with its seed."""
    _, token = make_operator("viewer")
    api = client_for(token)
    assert api.get("/api/v1/metrics/").json()["recovery_accuracy"] is None
    ReplayEval.objects.create(episodes=5, decisions=20, correct=19, accuracy=0.95, seed=1, duplicates=0, unverified=0)
    ReplayEval.objects.create(episodes=9, decisions=40, correct=40, accuracy=1.0, seed=2, duplicates=0, unverified=0)
    figure = api.get("/api/v1/metrics/").json()["recovery_accuracy"]
    assert (figure["accuracy"], figure["episodes"], figure["seed"]) == (1.0, 9, 2) and figure["at"]
    _, families = _families(client)
    assert families["stateboard_recovery_accuracy"].samples[0].value == 1.0


@pytest.mark.django_db(transaction=True)
def test_trigger_records_its_decision_latency_once_committed(client):
    """A trigger's latency (arrival to committed decision) is stored; a duplicate trigger decides nothing."""
    wf = make_workflow(stages=["build"], effect_stages=[], approval_stages=[])
    _, token = make_agent()
    driver = AgentDriver(client_for(token), wf.slug)
    run = driver.trigger(trigger_key="k1")
    latency = Run.objects.get(id=run["id"]).decision_latency_ms
    assert latency is not None and 0 < latency < 10_000
    driver.trigger(trigger_key="k1", expect=200)
    assert Run.objects.get(id=run["id"]).decision_latency_ms == latency
    _, viewer = make_operator("viewer")
    body = client_for(viewer).get("/api/v1/metrics/").json()
    assert (body["p95_trigger_to_decision_ms"], body["trigger_to_decision_samples"]) == (latency, 1)
    _, families = _families(client)
    assert families["stateboard_trigger_to_decision_p95_seconds"].samples[0].value == pytest.approx(latency / 1000)


@pytest.mark.django_db
def test_duplicate_metric_counts_a_second_execution_only_without_proof_of_absence():
    """Unknown, checked absent, executed again: not a duplicate. Two executions with nothing between: one."""
    from ledger import metrics_selectors

    wf = make_workflow(stages=["deploy"], effect_stages=["deploy"], approval_stages=[])
    _, token = make_agent()
    driver = AgentDriver(client_for(token), wf.slug)
    run = driver.trigger()
    driver.event(run["id"], "deploy", "started")
    driver.event(run["id"], "deploy", "unknown", reason_code="timeout")
    driver.event(run["id"], "deploy", "failed", reason_code="effect_absent")
    driver.event(run["id"], "deploy", "started")
    last = driver.event(run["id"], "deploy", "succeeded", effect={"system": "k8s", "operation": "deploy",
                                                                  "reference": "d1"})
    assert metrics_selectors.metrics(workflow_slug=wf.slug)["duplicate_side_effects"] == 0
    LedgerEvent.objects.create(  # what a broken claim would let through: the same key executed again
        run_id=run["id"], intent=run["intent"], seq=Run.objects.get(id=run["id"]).event_count + 1, at=timezone.now(), stage="deploy",
        kind="succeeded", actor="agent:x",
        input_fingerprint=run["input_fingerprint"], policy_version="1", idempotency_key=last["idempotency_key"],
        hash="0" * 64)
    assert metrics_selectors.metrics(workflow_slug=wf.slug)["duplicate_side_effects"] == 1


@pytest.mark.django_db
def test_metrics_since_with_a_large_offset_is_not_a_server_error(fleet):
    driver, *_ = fleet
    response = driver.client.get("/api/v1/metrics/", {"since": "2026-01-01T00:00:00+20:58"})
    assert response.status_code == 200 and response.json()["since"] == "2025-12-31T03:02:00+00:00"
    bad = driver.client.get("/api/v1/metrics/", {"since": "9999-12-31T23:59:59-20:58"})
    assert bad.status_code == 422 and bad.json()["code"] == "validation_error"


@pytest.mark.django_db
def test_prometheus_leaves_out_a_figure_with_no_data(client):
    """No claim proposal yet: the write-gate rejection rate is left out, never written as ``None``."""
    text = client.get("/metrics").content.decode()
    assert "None" not in text and "nan" not in text.lower()
    assert "stateboard_write_gate_rejection_rate" not in text
    assert "stateboard_open_approvals 0" in text
