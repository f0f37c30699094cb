"""The common append in one statement (PostgreSQL): applied to the run as read without its lock and
written only if the run's row is still that version; anything else takes the run's lock as before."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from ledger import services
from ledger.models import LedgerEvent, Run
from ledger.services import RunWriter, chain_verify
from ledger.store import StatementRefused, statements_refused, store
from tests.factories import client_for, make_agent, make_workflow
from tests.ledger.helpers import race, raised

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def _statements(call) -> list[str]:
    with CaptureQueriesContext(connection) as captured:
        call()
    return [q["sql"] for q in captured.captured_queries]


def _working_run(stages=("work", "ship")):
    wf = make_workflow(stages=list(stages), effect_stages=[], approval_stages=[])
    run, _ = services.run_trigger(workflow_slug=wf.slug, inputs={}, actor="agent:a")
    services.event_append(run_id=run.id, body={"stage": stages[0], "kind": "started"}, actor="agent:a")
    return run


def _proposal(n: int) -> dict:
    return {"stage": "work", "kind": "proposed", "client_event_id": f"p-{n}", "data": {"n": n}}


def test_a_plain_append_is_two_statements_through_the_service_and_three_over_http():
    run = _working_run()
    assert len(_statements(lambda: services.event_append(run_id=run.id, body=_proposal(1), actor="agent:a"))) == 2
    peeked = store().run_peek(run.id)
    sent = _statements(lambda: services.event_append(run_id=run.id, body=_proposal(2), actor="agent:a", run=peeked))
    assert len(sent) == 1 and sent[0].startswith("WITH u AS (UPDATE"), sent  # no BEGIN, no COMMIT

    agent, token = make_agent()
    wf = make_workflow(stages=["work"], effect_stages=[], approval_stages=[])
    client = client_for(token)
    run_id = client.post("/api/v1/runs/", {"workflow": wf.slug, "inputs": {}}, format="json").json()["id"]
    assert client.post(f"/api/v1/runs/{run_id}/events/", {"stage": "work", "kind": "started"},
                       format="json").status_code == 201
    sent = _statements(lambda: client.post(f"/api/v1/runs/{run_id}/events/", _proposal(3), format="json"))
    assert len(sent) == 3, sent  # the token, the run as read (with its workflow's agents), the write
    assert LedgerEvent.objects.filter(run_id=run_id, kind="proposed").count() == 1


def test_a_run_changed_since_it_was_read_is_not_written_and_the_append_takes_the_lock():
    run = _working_run()
    stale = store().run_peek(run.id)
    moved, _ = services.event_append(run_id=run.id, body=_proposal(1), actor="agent:a")  # the row moves on
    assert moved.seq == stale.event_count + 1
    event, created = services.event_append(run_id=run.id, body=_proposal(2), actor="agent:a", run=stale)
    assert created and event.seq == moved.seq + 1 and event.prev_hash == moved.hash  # never a second seq
    assert chain_verify(run=Run.objects.get(id=run.id))["ok"]


def test_the_guarded_write_refuses_a_stale_row_version_and_writes_nothing():
    run = _working_run()
    stale = store().run_peek(run.id)
    services.event_append(run_id=run.id, body=_proposal(1), actor="agent:a")
    before = LedgerEvent.objects.filter(run_id=run.id).count()
    writer = RunWriter(stale, "agent:a", timezone.now())
    writer.emit("proposed", "work", data={"late": True})
    assert writer.flush_unless_changed(stale.row_version) is False
    assert LedgerEvent.objects.filter(run_id=run.id).count() == before


def test_a_repeated_client_event_id_still_answers_the_original():
    run = _working_run()
    first, created = services.event_append(run_id=run.id, body=_proposal(1), actor="agent:a")
    again, created_again = services.event_append(run_id=run.id, body=_proposal(1), actor="agent:a",
                                                 run=store().run_peek(run.id))
    assert created and not created_again and again.id == first.id


def test_appends_racing_on_one_run_keep_one_gapless_chain():
    run = _working_run()
    results = race(8, lambda i: services.event_append(run_id=run.id, body=_proposal(i), actor="agent:a",
                                                      run=store().run_peek(run.id)))
    assert not raised(results), results
    seqs = list(LedgerEvent.objects.filter(run_id=run.id).order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, len(seqs) + 1))
    assert LedgerEvent.objects.filter(run_id=run.id, kind="proposed").count() == 8
    assert chain_verify(run=Run.objects.get(id=run.id))["ok"]


def test_a_stage_that_needs_more_than_the_run_takes_the_lock():
    """An effect stage's start claims its key (another statement): written under the lock, all of it."""
    wf = make_workflow(stages=["commit"], effect_stages=["commit"], approval_stages=[])
    run, _ = services.run_trigger(workflow_slug=wf.slug, inputs={}, actor="agent:a")
    event, created = services.event_append(run_id=run.id, body={"stage": "commit", "kind": "started"},
                                           actor="agent:a", run=store().run_peek(run.id))
    assert created and event.idempotency_key
    assert Run.objects.get(id=run.id).stage_states["commit"]["status"] == "started"


def test_statements_refused_raises_before_anything_is_sent():
    with pytest.raises(StatementRefused), statements_refused():
        Run.objects.count()
    assert Run.objects.count() >= 0  # the connection is usable afterwards
