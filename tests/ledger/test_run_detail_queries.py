"""GET /runs/{id}/ reads a constant number of queries, whatever its effects and approvals."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from ledger import services
from ledger.models import Approval, Effect
from ledger.store import store
from tests.factories import client_for, make_agent, make_workflow

pytestmark = pytest.mark.django_db


def _run_with(n: int):
    wf = make_workflow()
    run, _ = services.run_trigger(workflow_slug=wf.slug, inputs={"n": n}, actor="agent:x")
    now = timezone.now()
    for i in range(n):
        assert store().effect_insert(Effect(
            idempotency_key=f"{run.id}-{i}", workflow=wf, intent=run.intent, input_fingerprint=run.input_fingerprint,
            stage="commit", run=run, status="attempted", claimed_seq=i + 1, last_seq=i + 1, created_at=now,
            updated_at=now))
        Approval.objects.create(kind=Approval.Kind.HIGH_IMPACT, run=run, stage="deploy", action={"i": i},
                                status="approved",
                                action_digest=str(i), policy_version=run.policy_version,
                                input_fingerprint=run.input_fingerprint, requested_by="agent:x", created_at=now,
                                deadline=now + timedelta(hours=1))
    return run


def _queries(client, run) -> tuple[int, dict]:
    with CaptureQueriesContext(connection) as captured:
        response = client.get(f"/api/v1/runs/{run.id}/")
    assert response.status_code == 200, response.content
    return len(captured.captured_queries), response.json()


def test_run_detail_query_count_is_constant_in_effects_and_approvals():
    """One effect and approval or six of each: the same number of queries (no query per effect or approval)."""
    client = client_for(make_agent()[1])
    small, large = _run_with(1), _run_with(6)
    _queries(client, small)  # warm the token's and the content types' first reads
    small_count, small_body = _queries(client, small)
    large_count, large_body = _queries(client, large)
    assert (len(small_body["effects"]), len(large_body["approvals"])) == (1, 6)
    assert large_body["effects"][0]["workflow"] == large.workflow.slug
    assert large_body["approvals"][0]["workflow"] == large.workflow.slug
    assert large_count == small_count, (small_count, large_count)
