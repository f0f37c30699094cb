"""Checkpoints: whitelisted, small, immutable, server-written when a stage passes."""

import pytest

from ledger.models import Checkpoint, LedgerEvent
from tests.ledger.helpers import driven_run

pytestmark = pytest.mark.django_db


@pytest.fixture
def ctx():
    driver, run, _ = driven_run(intent="cp")
    return driver, run


def _save(driver, run, payload):
    return driver.client.post(f"/api/v1/runs/{run['id']}/checkpoints/", payload, format="json")


def test_server_writes_a_checkpoint_when_a_stage_passes(ctx):
    """The agent never saves one, yet the latest checkpoint asserts each done stage by its ledger event."""
    driver, run = ctx
    driver.pass_stage(run["id"], "discovery")
    latest = driver.client.get(f"/api/v1/runs/{run['id']}/checkpoint/").json()
    assert latest["source"] == "server" and latest["expired"] is False
    payload = latest["payload"]
    assert payload["state_table"]["discovery"]["status"] == "succeeded"
    [assertion] = payload["assertions"]
    seq = int(assertion["pointer"].rsplit("/", 1)[1])
    event = LedgerEvent.objects.get(run_id=run["id"], seq=seq)
    assert (event.kind, event.stage, event.hash) == ("succeeded", "discovery", assertion["digest"])
    assert payload["allowed_next_stages"] == ["assessment"]


def test_agent_saves_a_richer_checkpoint(ctx):
    driver, run = ctx
    driver.pass_stage(run["id"], "discovery")
    response = _save(driver, run, {"stage": "discovery", "state_table": {"discovery": {
        "status": "succeeded", "summary": "3 sources found", "pointer": "s3://bucket/discovery.json"}},
        "assertions": [{"stage": "discovery", "pointer": "s3://bucket/discovery.json", "digest": "sha256:ab"}],
        "pending_intents": ["draft intro"], "version_boundary": 0})
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["source"] == "agent" and body["payload"]["input_fingerprint"] == run["input_fingerprint"]
    saved = Checkpoint.objects.get(id=body["id"])
    assert (str(saved.run_id), saved.source, saved.payload["pending_intents"]) == (run["id"], "agent", ["draft intro"])
    latest = driver.client.get(f"/api/v1/runs/{run['id']}/checkpoint/").json()
    assert latest["id"] == body["id"]


@pytest.mark.parametrize("payload,code", [
    ({"messages": [{"role": "user", "content": "hi"}]}, "checkpoint_transcript_rejected"),
    ({"pending_intents": [{"role": "assistant", "content": "I will deploy"}]}, "checkpoint_transcript_rejected"),
    ({"state_table": {"draft": {"status": "succeeded", "summary": "x"}}, "summary_chain": ["a", "b"]},
     "checkpoint_transcript_rejected"),
    ({"tool_schemas": [{"name": "deploy"}]}, "checkpoint_transcript_rejected"),
    ({"scratchpad": "thoughts"}, "checkpoint_field_not_allowed"),
    ({"state_table": {"draft": {"status": "succeeded", "summary": "x" * 281}}}, "summary_too_long"),
    ({"state_table": {"nope": {"status": "succeeded"}}}, "unknown_stage"),
    ({"pending_intents": ["x" * 70000]}, "checkpoint_too_large"),
    ({"input_fingerprint": "0" * 64}, "checkpoint_mismatch"),
    ({"version_boundary": -1}, "validation_error"),
])
def test_bad_checkpoints_are_refused_with_a_clear_error(ctx, payload, code):
    driver, run = ctx
    before = Checkpoint.objects.count(), LedgerEvent.objects.count()
    response = _save(driver, run, payload)
    assert response.status_code == 422, response.content
    assert response.json()["code"] == code and response.json()["detail"]
    assert (Checkpoint.objects.count(), LedgerEvent.objects.count()) == before


def test_no_checkpoint_yet_is_404(ctx):
    driver, run = ctx
    response = driver.client.get(f"/api/v1/runs/{run['id']}/checkpoint/")
    assert response.status_code == 404 and response.json()["code"] == "no_checkpoint"


def test_agent_checkpoint_that_claims_unasserted_work_escalates_the_next_trigger(ctx):
    """A done stage without an assertion pointer fails the recovery assertions."""
    from datetime import timedelta

    from django.utils import timezone

    from ledger.models import Run

    driver, run = ctx
    driver.pass_stage(run["id"], "discovery")
    assert _save(driver, run, {"state_table": {"discovery": {"status": "succeeded"},
                                               "assessment": {"status": "succeeded"}}}).status_code == 201
    Run.objects.filter(id=run["id"]).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    nxt = driver.trigger(intent="cp")
    assert (nxt["decision"]["outcome"], nxt["decision"]["reason_code"]) == ("escalated", "checkpoint_inconsistent")
    assert any(a.startswith("unasserted_stages") for a in nxt["decision"]["failed_assertions"])
