"""POST /runs/{id}/events/ with a JSON array: in order, one transaction, all or nothing (API.md)."""

import itertools
from datetime import timedelta

import pytest
from django.utils import timezone

from ledger.models import Effect, LedgerEvent, Run
from tests.factories import client_for, make_agent, make_workflow
from tests.ledger.helpers import EVIDENCE, AgentDriver

_ids = itertools.count(1)
STAGES = ["discovery", "draft", "push", "announce"]


def _item(stage, kind, **fields):
    return {"client_event_id": f"b-{next(_ids)}", "stage": stage, "kind": kind, **fields}


def _setup(**fields):
    wf = make_workflow(stages=STAGES, effect_stages=["push"], approval_stages=[], **fields)
    client = client_for(make_agent()[1])
    run = AgentDriver(client, wf.slug).trigger()
    return client, run["id"]


def _post(client, run_id, items):
    return client.post(f"/api/v1/runs/{run_id}/events/", items, format="json")


def _kinds(run_id):
    return list(LedgerEvent.objects.filter(run_id=run_id).order_by("seq").values_list("kind", flat=True))


@pytest.mark.django_db
def test_batch_appends_in_order_and_answers_201_with_the_events():
    """A batch of four events is appended in order and answered 201 with a JSON array of them."""
    client, run_id = _setup()
    items = [_item("discovery", "started"), _item("discovery", "succeeded"), _item("draft", "started"),
             _item("draft", "succeeded", data={"n": 1})]
    response = _post(client, run_id, items)
    assert response.status_code == 201, response.content
    body = response.json()
    assert [(e["stage"], e["kind"]) for e in body] == [(i["stage"], i["kind"]) for i in items]
    assert [e["client_event_id"] for e in body] == [i["client_event_id"] for i in items]
    assert [e["seq"] for e in body] == sorted(e["seq"] for e in body)
    assert Run.objects.get(id=run_id).stage_states["draft"]["status"] == "succeeded"
    chain = client.get(f"/api/v1/runs/{run_id}/verify-chain/").json()
    assert chain["ok"], chain


@pytest.mark.django_db
def test_batch_refused_third_item_writes_nothing_and_answers_index_2():
    """A refused third item refuses the batch: its status and code, index 2, and not one row written."""
    client, run_id = _setup()
    before_events, before_run = _kinds(run_id), Run.objects.get(id=run_id)
    items = [_item("discovery", "started"), _item("discovery", "succeeded"), _item("announce", "started")]
    response = _post(client, run_id, items)
    assert response.status_code == 409, response.content
    assert (response.json()["code"], response.json()["index"]) == ("illegal_transition", 2)
    after = Run.objects.get(id=run_id)
    assert _kinds(run_id) == before_events
    assert (after.state, after.event_count, after.stage_states) == (before_run.state, before_run.event_count,
                                                                     before_run.stage_states)


@pytest.mark.django_db
def test_batch_invalid_item_is_422_with_its_index():
    """A validation refusal of one item keeps its 422 and code and names the item's index."""
    client, run_id = _setup()
    items = [_item("discovery", "started"), _item("discovery", "succeeded", data="not an object")]
    response = _post(client, run_id, items)
    assert response.status_code == 422 and response.json()["code"] == "validation_error", response.content
    assert response.json()["index"] == 1
    assert "started" not in _kinds(run_id)


@pytest.mark.django_db
def test_batch_repeated_answers_200_with_the_same_events():
    """The same batch sent again answers 200 with the same events and writes nothing."""
    client, run_id = _setup()
    items = [_item("discovery", "started"), _item("discovery", "succeeded")]
    first = _post(client, run_id, items)
    count = LedgerEvent.objects.filter(run_id=run_id).count()
    again = _post(client, run_id, items)
    assert (first.status_code, again.status_code) == (201, 200), again.content
    assert again.json() == first.json()
    assert LedgerEvent.objects.filter(run_id=run_id).count() == count


@pytest.mark.django_db
def test_batch_partly_recorded_is_409_mismatch_with_index():
    """A batch whose first event was recorded before but not its second is 409 client_event_id_mismatch, index 1."""
    client, run_id = _setup()
    first = _item("discovery", "started")
    assert _post(client, run_id, first).status_code == 201
    count = LedgerEvent.objects.filter(run_id=run_id).count()
    response = _post(client, run_id, [first, _item("discovery", "succeeded")])
    assert response.status_code == 409, response.content
    assert (response.json()["code"], response.json()["index"]) == ("client_event_id_mismatch", 1)
    assert LedgerEvent.objects.filter(run_id=run_id).count() == count


@pytest.mark.django_db
def test_batch_recorded_with_another_body_is_409_mismatch_with_index():
    """A recorded client_event_id resent in a batch with another body is 409 client_event_id_mismatch at its index."""
    client, run_id = _setup()
    items = [_item("discovery", "started"), _item("discovery", "succeeded")]
    assert _post(client, run_id, items).status_code == 201
    changed = [items[0], {**items[1], "data": {"other": True}}]
    response = _post(client, run_id, changed)
    assert response.status_code == 409 and response.json()["code"] == "client_event_id_mismatch", response.content
    assert response.json()["index"] == 1


@pytest.mark.django_db
def test_batch_effect_start_not_last_is_422_claim_not_last():
    """A started on an effect stage before the batch's last item is 422 claim_not_last; as the last item it claims."""
    client, run_id = _setup()
    head = [_item("discovery", "started"), _item("discovery", "succeeded"), _item("draft", "started"),
            _item("draft", "succeeded")]
    response = _post(client, run_id, [*head, _item("push", "started"), _item("push", "succeeded")])
    assert response.status_code == 422, response.content
    assert (response.json()["code"], response.json()["index"]) == ("claim_not_last", 4)
    assert not Effect.objects.filter(run_id=run_id).exists() and "started" not in _kinds(run_id)
    ok = _post(client, run_id, [*head, _item("push", "started")])
    assert ok.status_code == 201, ok.content
    assert Effect.objects.get(run_id=run_id).status == "attempted"


@pytest.mark.django_db
def test_batch_too_large_and_empty_are_422():
    """More than 100 events is 422 batch_too_large; an empty array is 422; nothing is written."""
    client, run_id = _setup()
    before = _kinds(run_id)
    items = [_item("discovery", "proposed") for _ in range(101)]
    too_large = _post(client, run_id, items)
    assert too_large.status_code == 422 and too_large.json()["code"] == "batch_too_large", too_large.content
    empty = _post(client, run_id, [])
    assert empty.status_code == 422 and empty.json()["code"] == "validation_error", empty.content
    assert _kinds(run_id) == before


@pytest.mark.django_db
def test_batch_item_without_client_event_id_is_422_with_index():
    """Each event of a batch carries its client_event_id: one without is 422 with its index."""
    client, run_id = _setup()
    response = _post(client, run_id, [_item("discovery", "started"), {"stage": "discovery", "kind": "succeeded"}])
    assert response.status_code == 422 and response.json()["index"] == 1, response.content


@pytest.mark.django_db
def test_batch_after_lease_expiry_is_refused_and_commits_only_the_failed_move(monkeypatch):
    """A batch from the holder after its lease expired: 409 lease_expired at index 0, the move to failed committed."""
    client, run_id = _setup(lease_seconds=5)
    assert _post(client, run_id, _item("discovery", "started")).status_code == 201
    before = LedgerEvent.objects.filter(run_id=run_id).count()
    later = timezone.now() + timedelta(seconds=6)
    monkeypatch.setattr(timezone, "now", lambda: later)
    response = _post(client, run_id, [_item("discovery", "succeeded"), _item("draft", "started")])
    assert response.status_code == 409, response.content
    assert (response.json()["code"], response.json()["index"]) == ("lease_expired", 0)
    events = list(LedgerEvent.objects.filter(run_id=run_id).order_by("seq"))
    assert len(events) == before + 1 and events[-1].reason_code == "lease_expired"
    assert Run.objects.get(id=run_id).state == "failed"


@pytest.mark.django_db
def test_batch_of_a_whole_effect_stage_tail_verifies_and_completes():
    """succeeded + verified on an effect stage and the rest of the run in one batch complete the run."""
    client, run_id = _setup()
    head = [_item("discovery", "started"), _item("discovery", "succeeded"), _item("draft", "started"),
            _item("draft", "succeeded"), _item("push", "started")]
    assert _post(client, run_id, head).status_code == 201
    effect = {"system": "git", "operation": "push", "reference": "abc"}
    tail = [_item("push", "succeeded", effect=effect), _item("push", "verified", effect=effect, evidence=EVIDENCE),
            _item("announce", "started"), _item("announce", "succeeded")]
    response = _post(client, run_id, tail)
    assert response.status_code == 201, response.content
    assert Run.objects.get(id=run_id).state == "completed"
    assert Effect.objects.get(run_id=run_id).status == "verified"
