"""Races on real PostgreSQL with real threads, each with its own connection."""

import pytest

from ledger import services
from ledger.domain.effects import effect_key_namespaced
from ledger.models import Effect, LedgerEvent, Run
from tests.factories import make_workflow
from tests.ledger.helpers import race, raised

pytestmark = pytest.mark.django_db(transaction=True)


def test_sixteen_triggers_with_one_key_make_one_run():
    wf = make_workflow()
    results = race(16, lambda i: services.run_trigger(workflow_slug=wf.slug, inputs={"a": 1},
                                                      trigger_key="same", actor="agent:x"))
    assert not raised(results), results
    assert len({run.id for run, _ in results}) == 1
    assert sum(1 for _, created in results if created) == 1
    assert Run.objects.filter(workflow=wf).count() == 1


def test_concurrent_triggers_leave_one_active_run_per_intent():
    wf = make_workflow()
    results = race(16, lambda i: services.run_trigger(workflow_slug=wf.slug, inputs={"a": 1}, intent="job",
                                                      trigger_key=f"k{i}", actor="agent:x"))
    assert not raised(results), results
    outcomes = sorted(run.decision["outcome"] for run, _ in results)
    assert outcomes.count("fresh") == 1 and outcomes.count("noop") == 15
    assert Run.objects.filter(workflow=wf, intent="job", state="fresh").count() == 1


def test_sixteen_intents_starting_with_one_key_each_claim_their_own():
    """Sixteen runs (of sixteen intents with the same key of their own) race to start one effect: each key is
    namespaced by its intent before it is claimed (API.md), so sixteen claims, none of another's key."""
    wf = make_workflow(stages=["commit"], effect_stages=["commit"], approval_stages=[])
    runs = [services.run_trigger(workflow_slug=wf.slug, inputs={}, intent=f"i{i}", actor="agent:x")[0]
            for i in range(16)]

    def start(i):
        return services.event_append(run_id=runs[i].id, actor="agent:x",
                                     body={"stage": "commit", "kind": "started", "idempotency_key": "one-key"})

    results = race(16, start)
    assert not raised(results), results
    keys = {effect_key_namespaced(workflow_slug=wf.slug, intent=f"i{i}", key="one-key") for i in range(16)}
    assert {event.idempotency_key for event, _ in results} == keys
    assert set(Effect.objects.filter(workflow=wf).values_list("idempotency_key", flat=True)) == keys
    assert not LedgerEvent.objects.filter(idempotency_key="one-key").exists()


def test_seq_stays_gapless_under_concurrent_appends():
    wf = make_workflow(stages=["work"], effect_stages=[], approval_stages=[])
    run, _ = services.run_trigger(workflow_slug=wf.slug, inputs={}, actor="agent:x")
    services.event_append(run_id=run.id, body={"stage": "work", "kind": "started"}, actor="agent:x")
    results = race(12, lambda i: services.event_append(
        run_id=run.id, actor="agent:x", body={"stage": "work", "kind": "proposed", "client_event_id": f"c{i % 6}"}))
    assert not raised(results), results
    seqs = list(LedgerEvent.objects.filter(run=run).order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, len(seqs) + 1))
    assert LedgerEvent.objects.filter(run=run, kind="proposed").count() == 6  # retried ids returned the original
    assert services.chain_verify(run=run)["ok"]
