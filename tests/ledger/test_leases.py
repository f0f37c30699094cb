"""Queued runs and leases (SPEC §9.1): who may append, oldest first, never twice, long-poll, expiry."""

import threading
import time
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

from ledger import services
from ledger.models import LedgerEvent, Run
from tests.factories import client_for, make_agent, make_operator, make_workflow
from tests.ledger.helpers import AgentDriver


def _human_trigger(wf, intent="i", inputs=None):
    _, token = make_operator("owner")
    response = client_for(token).post("/api/v1/runs/", {"workflow": wf.slug, "intent": intent,
                                                        "inputs": inputs or {"v": 1}}, format="json")
    assert response.status_code == 201, response.content
    return response.json()


@pytest.mark.django_db
def test_lease_human_run_is_queued_then_leased_to_one_agent():
    """A run a human triggered is queued (lease null); an agent leases it (leased event); others are fenced."""
    wf = make_workflow(approval_stages=[])
    run = _human_trigger(wf)
    assert run["queued"] is True and run["lease"] is None and run["queued_until"]
    a, b = (AgentDriver(client_for(make_agent(name)[1]), wf.slug) for name in ("lessee", "other"))
    a.event(run["id"], "discovery", "started", expect=409)  # not_leased
    leased = a.lease()
    assert leased["id"] == run["id"] and leased["queued"] is False and leased["lease"]["owner"] == "agent:lessee"
    assert "effects" in leased and leased["state"] == "fresh"
    event = LedgerEvent.objects.filter(run_id=run["id"], kind="leased").get()
    assert event.actor == "agent:lessee" and event.data["lease_id"] == leased["lease"]["id"]
    assert a.lease(expect=204) is None
    refused = b.client.post(f"/api/v1/runs/{run['id']}/events/",
                            {"client_event_id": "x", "stage": "discovery", "kind": "started"}, format="json")
    assert refused.status_code == 409 and refused.json()["code"] == "lease_held"
    fenced = a.client.post(f"/api/v1/runs/{run['id']}/events/",
                           {"client_event_id": "y", "stage": "discovery", "kind": "started",
                            "lease_id": "00000000-0000-0000-0000-000000000000"}, format="json")
    assert fenced.status_code == 409 and fenced.json()["code"] == "lease_held"
    a.event(run["id"], "discovery", "started", lease_id=leased["lease"]["id"])


@pytest.mark.django_db
def test_lease_not_queued_message_and_agent_trigger_is_leased_at_once():
    """A run an agent triggered is leased to it at once (no queue); posting to a queued run is 409 not_leased."""
    wf = make_workflow(approval_stages=[])
    driver = AgentDriver(client_for(make_agent("self")[1]), wf.slug)
    own = driver.trigger(intent="own")
    assert own["queued"] is False and own["lease"]["owner"] == "agent:self" and own["lease"]["id"]
    queued = _human_trigger(wf, intent="q")
    response = driver.client.post(f"/api/v1/runs/{queued['id']}/events/",
                                  {"client_event_id": "z", "stage": "discovery", "kind": "started"}, format="json")
    assert response.status_code == 409 and response.json()["code"] == "not_leased"


@pytest.mark.django_db
def test_lease_oldest_first_and_never_past_queued_until(monkeypatch):
    """The earliest-queued run is handed out first; one past its queued_until never is, and fails not_leased."""
    wf = make_workflow(approval_stages=[], lease_seconds=30)
    first, second = _human_trigger(wf, intent="a"), _human_trigger(wf, intent="b")
    driver = AgentDriver(client_for(make_agent()[1]), wf.slug)
    assert driver.lease()["id"] == first["id"]
    later = timezone.now() + timedelta(seconds=31)
    monkeypatch.setattr(timezone, "now", lambda: later)
    assert driver.lease(expect=204) is None
    assert services.runs_expire_leases(now=later) == 2  # the leased one went silent, the queued one waited
    assert Run.objects.get(id=first["id"]).ended_reason == "lease_expired"
    run = Run.objects.get(id=second["id"])
    assert (run.state, run.ended_reason) == ("failed", "not_leased")


@pytest.mark.django_db
def test_lease_not_leased_does_not_count_toward_retries(monkeypatch):
    """Queued runs that failed not_leased never ran: the next trigger is fresh, not escalated."""
    wf = make_workflow(approval_stages=[], lease_seconds=10, max_retries=1)
    now = timezone.now()
    for n in range(3):
        moment = now + timedelta(seconds=20 * n)
        monkeypatch.setattr(timezone, "now", lambda moment=moment: moment)
        run = _human_trigger(wf, intent="same")
        assert run["decision"]["outcome"] == "fresh" and run["decision"]["retry_count"] == 0, run["decision"]
    reasons = list(Run.objects.filter(workflow=wf, state="failed").values_list("ended_reason", flat=True))
    assert reasons == ["not_leased", "not_leased"]


@pytest.mark.django_db
def test_lease_stale_agent_event_is_refused_and_writes_only_the_failed_move(monkeypatch):
    """The holder's event after its lease expired: 409 lease_expired, and the run's move to failed is committed."""
    wf = make_workflow(approval_stages=[], lease_seconds=5)
    driver = AgentDriver(client_for(make_agent()[1]), wf.slug)
    run = driver.trigger()
    driver.event(run["id"], "discovery", "started")
    before = LedgerEvent.objects.filter(run_id=run["id"]).count()
    later = timezone.now() + timedelta(seconds=6)
    monkeypatch.setattr(timezone, "now", lambda: later)
    driver.event(run["id"], "discovery", "succeeded", expect=409)
    events = list(LedgerEvent.objects.filter(run_id=run["id"]).order_by("seq"))
    assert len(events) == before + 1
    assert (events[-1].kind, events[-1].reason_code, events[-1].data["to"]) == ("transition", "lease_expired", "failed")
    assert Run.objects.get(id=run["id"]).state == "failed"
    assert not LedgerEvent.objects.filter(run_id=run["id"], kind="succeeded").exists()


@pytest.mark.django_db(transaction=True)
def test_lease_sixteen_concurrent_callers_get_one_run():
    """16 agents leasing one queued run at once: exactly one 200, the others 204."""
    wf = make_workflow(approval_stages=[])
    _human_trigger(wf)
    tokens = [make_agent()[1] for _ in range(16)]
    barrier, codes = threading.Barrier(16), []

    def lease(token):
        try:
            barrier.wait()
            codes.append(client_for(token).post("/api/v1/runs/lease/", {}, format="json").status_code)
        finally:
            connection.close()

    threads = [threading.Thread(target=lease, args=(t,)) for t in tokens]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(codes) == [200] + [204] * 15
    assert LedgerEvent.objects.filter(kind="leased").count() == 1


@pytest.mark.django_db(transaction=True)
def test_lease_long_poll_returns_a_run_queued_during_the_wait():
    """A lease call waiting up to 10 s answers with a run queued 0.5 s into its wait."""
    wf = make_workflow(approval_stages=[])
    token = make_agent()[1]
    answers = []

    def wait():
        try:
            started = time.monotonic()
            response = client_for(token).post("/api/v1/runs/lease/", {"wait_seconds": 10}, format="json")
            answers.append((response.status_code, response.json()["id"], time.monotonic() - started))
        finally:
            connection.close()

    waiter = threading.Thread(target=wait)
    waiter.start()
    time.sleep(0.5)
    run = _human_trigger(wf)
    waiter.join(15)
    status, run_id, waited = answers[0]
    assert (status, run_id) == (200, run["id"]) and 0.5 <= waited < 3
    empty = client_for(token).post("/api/v1/runs/lease/", {"wait_seconds": 0.2}, format="json")
    assert empty.status_code == 204
    bad = client_for(token).post("/api/v1/runs/lease/", {"wait_seconds": 31}, format="json")
    assert bad.status_code == 422


@pytest.mark.django_db
def test_a_lease_is_given_back_only_while_the_run_is_as_it_was_answered():
    """The web tier's give-back of an undelivered lease (stateboard.waits) never undoes what its holder did."""
    wf = make_workflow(approval_stages=[])
    run_id = _human_trigger(wf)["id"]
    leased = AgentDriver(client_for(make_agent()[1]), wf.slug).lease()
    lease_id, count = leased["lease"]["id"], leased["event_count"]
    assert not services.lease_release_undelivered(run_id=run_id, lease_id=lease_id, event_count=count - 1)
    assert not services.lease_release_undelivered(run_id=run_id, lease_id=str(run_id), event_count=count)
    assert Run.objects.get(id=run_id).lease_owner.startswith("agent:")
    assert services.lease_release_undelivered(run_id=run_id, lease_id=lease_id, event_count=count)
    run = Run.objects.get(id=run_id)
    assert run.lease_owner == "" and run.lease_id is None and run.queued_until is not None
    released = LedgerEvent.objects.filter(run_id=run_id).order_by("-seq").first()
    assert (released.kind, released.actor, released.reason_code) == ("released", "system:web", "answer_undelivered")
    assert AgentDriver(client_for(make_agent()[1]), wf.slug).lease()["id"] == run_id


@pytest.mark.django_db(transaction=True)
def test_queued_left_says_whether_a_run_is_still_queued_and_not_being_taken():
    """What a woken long-poll that found nothing asks before waking the next waiter (``stateboard.waits``):
    a queued run of the workflow is left (one the caller's ``agents`` kept it from), none once it is
    leased, and on PostgreSQL none while another transaction is taking it (its row locked)."""
    wf, other = make_workflow(approval_stages=[]), make_workflow(approval_stages=[])
    run = _human_trigger(wf)
    assert services.queued_left(wf.slug) and not services.queued_left(other.slug)
    if connection.vendor == "postgresql":
        taking, held = threading.Event(), threading.Event()

        def take():  # another web thread's lease, holding the run's row until told
            try:
                with transaction.atomic():
                    Run.objects.select_for_update().get(id=run["id"])
                    taking.set()
                    held.wait(10)
            finally:
                connection.close()

        thread = threading.Thread(target=take)
        thread.start()
        assert taking.wait(10)
        try:
            assert not services.queued_left(wf.slug)  # being taken: the chain of wake-ups ends here
        finally:
            held.set()
            thread.join()
        assert services.queued_left(wf.slug)  # the taker let it go: still queued
    AgentDriver(client_for(make_agent()[1]), wf.slug).lease()
    assert not services.queued_left(wf.slug)
