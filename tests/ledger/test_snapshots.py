"""Appends from a run snapshot (``services.writer.RunSnapshots``): one statement that locks the run and
writes only if neither its row nor its workflow's changed since this process's last write; the locking
path whenever the rules need anything else, refuse, or the snapshot is out of date. Real transactions:
a snapshot is kept only once a write committed."""

import re
import threading
import uuid

import psycopg

import pytest
from django.db import connection, connections
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger import rows, services, sql
from ledger.auth import token_revoke
from ledger.models import Effect, LedgerEvent, Run, Workflow
from ledger.services import events, writer
from stateboard.bench.agentpath import statements_counted
from stateboard.errors import Conflict, Invalid
from tests.factories import make_workflow
from tests.ledger.helpers import agent_run, event_count_seen_elsewhere, fast_post  # noqa: F401 (agent_run: a fixture)

pytestmark = pytest.mark.django_db(transaction=True)

AGENT = "agent:snap"


def _proposed(**data) -> dict:
    return {"client_event_id": uuid.uuid4().hex, "stage": "build", "kind": "proposed", "data": data}


def _append(run_id, body, actor=AGENT):
    return services.event_append(run_id=run_id, body=body, actor=actor)


@pytest.fixture
def started():
    """A run whose build stage an agent started (through the locking path: nothing was kept before)."""
    wf = make_workflow(stages=["build", "test"])
    run, _ = services.run_trigger(workflow_slug=wf.slug, inputs={}, intent=uuid.uuid4().hex, actor=AGENT)
    _append(run.id, {"stage": "build", "kind": "started"})
    return wf, run.id


@pytest.fixture
def guarded(monkeypatch):
    """The outcome of each write from a snapshot: True written, False refused by its guard."""
    outcomes, original = [], sql.events_and_run_write

    def spy(*args, guard=None, **kwargs):
        result = original(*args, guard=guard, **kwargs)
        if guard is not None:
            outcomes.append(result is not False)
        return result

    monkeypatch.setattr(sql, "events_and_run_write", spy)
    return outcomes


def _count(run_id) -> int:
    return Run.objects.get(id=run_id).event_count


def test_the_next_append_of_the_writer_is_one_statement_in_one_round_trip(started, guarded):
    _, run_id = started
    before = _count(run_id)
    with statements_counted() as counted:
        event, created = _append(run_id, _proposed(n=1))
    assert created and event.seq == before + 1
    assert (counted.round_trips, len(counted.statements), guarded) == (1, 1, [True]), counted.messages
    run = Run.objects.get(id=run_id)
    assert (run.event_count, run.last_hash, run.lease_owner) == (before + 1, event.hash, AGENT)
    assert services.chain_verify(run=run)["ok"]


def test_the_snapshot_write_is_a_transaction_of_its_own_committed_when_it_returns(started, guarded):
    _, run_id = started
    _append(run_id, _proposed(n=1))
    with statements_counted() as counted:
        event, _ = _append(run_id, _proposed(n=2))
    assert guarded == [True, True]
    assert not re.search(r"\b(BEGIN|COMMIT)\b", counted.messages[0]), counted.messages[0][:200]
    assert connection.connection.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert event_count_seen_elsewhere(run_id) == event.seq  # another connection sees it


def test_the_workflow_row_is_converted_once_while_it_stays_unchanged(started, monkeypatch):
    wf, run_id = started
    _append(run_id, _proposed(n=1))
    first = writer.run_snapshots.take(uuid.UUID(str(run_id))).workflow
    converted, python_values = [], rows.python_values
    monkeypatch.setattr(rows, "python_values", lambda columns, values, db: converted.append(columns.attnames)
                        or python_values(columns, values, db))
    workflow_attnames = sql._run_read_statement(connection.vendor, True, False)[2].attnames
    for n in range(2, 5):
        _append(run_id, _proposed(n=n))
    assert len(converted) == 3 and workflow_attnames not in converted  # the run's columns at each append; the
    # workflow's were converted at the first append from the kept row (n=1), not again
    kept = writer.run_snapshots.take(uuid.UUID(str(run_id))).workflow
    assert kept is first
    assert kept._python[_workflow_index("stages")] == ["build", "test"]
    Workflow.objects.filter(id=wf.id).update(stages=["build", "test", "ship"])
    _append(run_id, _proposed(n=5))  # the guard sees the new version: read again and kept anew
    renewed = writer.run_snapshots.take(uuid.UUID(str(run_id))).workflow
    assert renewed is not first and renewed.version != first.version
    run = writer.run_snapshots.take(uuid.UUID(str(run_id))).run()
    assert run.workflow.stages == ["build", "test", "ship"]


def _workflow_index(name: str) -> int:
    _, _, workflow_columns = sql._run_read_statement(connection.vendor, True, False)
    return workflow_columns.attnames.index(name)


def _drive(wf, intent, snapshots: bool, monkeypatch) -> tuple[list, dict]:
    """A run through both stages with a proposal in each, as (events, run) in comparable form."""
    if not snapshots:
        monkeypatch.setattr(writer.run_snapshots, "take", lambda run_id: None)
    run, _ = services.run_trigger(workflow_slug=wf.slug, inputs={}, intent=intent, actor=AGENT)
    for stage in ("build", "test"):
        for kind in ("started", "proposed", "succeeded"):
            _append(run.id, {"client_event_id": f"{stage}-{kind}", "stage": stage, "kind": kind,
                             "data": {"note": kind}})
    monkeypatch.undo()
    run = Run.objects.get(id=run.id)
    events = [(e.seq, e.stage, e.kind, e.actor, e.data, e.client_event_id, e.idempotency_key, e.reason_code)
              for e in LedgerEvent.objects.filter(run=run).order_by("seq")]
    assert services.chain_verify(run=run)["ok"]
    state = {"state": run.state, "current_stage": run.current_stage, "event_count": run.event_count,
             "stages": {s: v.get("status") for s, v in run.stage_states.items()}, "lease_owner": run.lease_owner,
             "checkpoints": run.checkpoints.count()}
    return events, state


def test_the_snapshot_path_writes_what_the_locking_path_writes(monkeypatch, guarded):
    wf = make_workflow(stages=["build", "test"])
    with_snapshots = _drive(wf, "with", True, monkeypatch)
    assert guarded.count(True) >= 3, guarded  # the proposals and passes after a write of this process
    assert _drive(wf, "without", False, monkeypatch) == with_snapshots
    assert with_snapshots[1]["state"] == "completed"


def test_a_write_from_elsewhere_is_seen_and_the_locking_path_appends(started, guarded):
    _, run_id = started
    _append(run_id, _proposed(n=1))  # kept
    before = _count(run_id)
    with connection.cursor() as cursor:  # another writer touched the row (its version changes)
        cursor.execute("UPDATE ledger_run SET updated_at = updated_at WHERE id = %s", [run_id])
    with statements_counted() as counted:
        event, created = _append(run_id, _proposed(n=2))
    assert created and event.seq == before + 1
    assert guarded == [True, False] and counted.round_trips == 3, counted.messages  # the guard, then read + write
    assert services.chain_verify(run=Run.objects.get(id=run_id))["ok"]
    with statements_counted() as counted:
        _append(run_id, _proposed(n=3))
    assert counted.round_trips == 1  # kept again by the locking path's write


def test_a_changed_workflow_is_read_again(started):
    wf, run_id = started
    _append(run_id, _proposed(n=1))
    Workflow.objects.filter(id=wf.id).update(lease_seconds=7)
    event, _ = _append(run_id, _proposed(n=2))
    run = Run.objects.get(id=run_id)
    assert (run.lease_expires_at - event.at).total_seconds() == 7


def test_a_repeated_client_event_id_is_answered_with_the_original(started):
    _, run_id = started
    body = _proposed(n=1)
    first, created = _append(run_id, body)
    again, created_again = _append(run_id, body)
    assert (created, created_again, again.id) == (True, False, first.id)
    with pytest.raises(Conflict) as refused:
        _append(run_id, {**body, "data": {"n": 2}})
    assert refused.value.code == "client_event_id_mismatch"
    assert _count(run_id) == first.seq


def test_a_refusal_is_the_locking_paths_and_writes_nothing(started):
    _, run_id = started
    _append(run_id, _proposed(n=1))
    before = _count(run_id)
    with pytest.raises(Conflict) as refused:
        _append(run_id, _proposed(n=2), actor="agent:other")
    assert refused.value.code == "lease_held"
    with pytest.raises(Conflict) as refused:
        _append(run_id, {"stage": "test", "kind": "succeeded"})
    assert refused.value.code == "illegal_transition"
    assert _count(run_id) == before
    assert _append(run_id, _proposed(n=3))[0].seq == before + 1


def test_rules_that_read_send_nothing_from_the_snapshot(monkeypatch, guarded):
    wf = make_workflow(stages=["build", "deploy"], effect_stages=["deploy"], approval_stages=[])
    run, _ = services.run_trigger(workflow_slug=wf.slug, inputs={}, intent="fx", actor=AGENT)
    _append(run.id, {"stage": "build", "kind": "started"})
    _append(run.id, {"stage": "build", "kind": "succeeded"})
    refused = []

    def noted(self, *args):  # each statement refused before it was sent, by its text
        refused.append(args)
        Exception.__init__(self, *args)

    monkeypatch.setattr(sql.Speculative, "__init__", noted)
    del guarded[:]
    event, _ = _append(run.id, {"stage": "deploy", "kind": "started"})  # claims the effect: reads first
    assert [args for args in refused if args], "the claim's read was refused before it was sent"
    assert guarded == []
    assert event.idempotency_key and Run.objects.get(id=run.id).stage_states["deploy"]["status"] == "started"
    # learnt: the same kind of event of another run of the workflow goes to the locking path at once
    other, _ = services.run_trigger(workflow_slug=wf.slug, inputs={}, intent="fx2", actor=AGENT)
    for kind in ("started", "succeeded"):
        _append(other.id, {"stage": "build", "kind": kind})
    del refused[:], guarded[:]
    _append(other.id, {"stage": "deploy", "kind": "started"})
    assert refused == [] and guarded == []


def test_concurrent_appends_to_one_run_keep_one_chain(started):
    _, run_id = started
    _append(run_id, _proposed(n=0))
    before = _count(run_id)
    errors = []

    def agent(n):
        try:
            for i in range(15):
                _append(run_id, _proposed(thread=n, i=i))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=agent, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    run = Run.objects.get(id=run_id)
    seqs = list(LedgerEvent.objects.filter(run=run).order_by("seq").values_list("seq", flat=True))
    assert run.event_count == before + 60 and seqs == list(range(1, before + 61))
    assert services.chain_verify(run=run)["ok"]


@pytest.fixture
def deploying():
    """A run executing its effect stage: the claim's append (the locking path: it reads) was kept."""
    wf = make_workflow(stages=["deploy", "report"], effect_stages=["deploy"], approval_stages=[])
    run, _ = services.run_trigger(workflow_slug=wf.slug, inputs={}, intent=uuid.uuid4().hex, actor=AGENT)
    _append(run.id, {"stage": "deploy", "kind": "started"})
    return run.id, Effect.objects.get(run_id=run.id, stage="deploy")


_REF = {"system": "git", "operation": "push", "reference": "abc123"}
_EVIDENCE = [{"uri": "https://ci.example/abc123", "observed_at": "2026-12-02T10:00:00Z"}]


def test_an_effects_move_is_made_by_the_snapshot_write_in_its_one_statement(deploying, guarded):
    run_id, effect = deploying
    with statements_counted() as counted:
        succeeded, _ = _append(run_id, {"stage": "deploy", "kind": "succeeded", "effect": _REF})
    assert (counted.round_trips, guarded) == (1, [True]), counted.messages
    effect.refresh_from_db()
    assert (effect.status, effect.reference, effect.last_seq) == ("effective", "abc123", succeeded.seq)
    with statements_counted() as counted:
        verified, _ = _append(run_id, {"stage": "deploy", "kind": "verified", "effect": _REF, "evidence": _EVIDENCE})
    assert (counted.round_trips, guarded) == (1, [True, True]), counted.messages
    effect.refresh_from_db()
    run = Run.objects.get(id=run_id)
    assert (effect.status, effect.last_seq, run.state) == ("verified", verified.seq, "checkpointed")
    assert run.stage_states["deploy"]["status"] == "verified"
    assert services.chain_verify(run=run)["ok"]


def test_a_run_changed_elsewhere_leaves_the_effect_where_it_was_for_the_locking_path(deploying, guarded):
    run_id, effect = deploying
    succeeded, _ = _append(run_id, {"stage": "deploy", "kind": "succeeded", "effect": _REF})
    with connection.cursor() as cursor:  # another writer: the kept version is out of date
        cursor.execute("UPDATE ledger_run SET updated_at = updated_at WHERE id = %s", [run_id])
    verified, _ = _append(run_id, {"stage": "deploy", "kind": "verified", "effect": _REF, "evidence": _EVIDENCE})
    assert guarded == [True, False]  # the guard refused: had the move been made anyway, the locking path
    effect.refresh_from_db()         # would have found nothing left to verify
    assert (effect.status, effect.last_seq) == ("verified", verified.seq)


def test_a_locking_read_the_rules_want_is_learnt_like_any_statement(guarded):
    wf = make_workflow(stages=["build", "ship"], effect_stages=[], approval_stages=["ship"])
    run, _ = services.run_trigger(workflow_slug=wf.slug, inputs={}, intent=uuid.uuid4().hex, actor=AGENT)
    for kind in ("started", "succeeded"):
        _append(run.id, {"stage": "build", "kind": kind})
    events._READING.discard((wf.id, "ship", "started"))
    with pytest.raises(Conflict):  # no approval yet: the locking path's answer
        _append(run.id, {"stage": "ship", "kind": "started"})
    assert (wf.id, "ship", "started") in events._READING  # the permit's SELECT ... FOR UPDATE: read, learnt
    assert guarded == [True]  # build's succeeded; ship's start never reached a write from the snapshot


def test_an_effect_that_is_not_there_to_move_stops_the_snapshot_write_and_the_locking_path_answers(deploying,
                                                                                                     guarded):
    run_id, effect = deploying
    Effect.objects.filter(id=effect.id).update(status="verified")  # moved elsewhere; the run's row unchanged
    before = _count(run_id)
    with pytest.raises(Conflict) as refused:
        _append(run_id, {"stage": "deploy", "kind": "succeeded", "effect": _REF})
    assert "No claimed effect" in str(refused.value)
    assert guarded == [False]  # the guard held, the move found nothing: nothing written
    effect.refresh_from_db()
    assert (effect.status, effect.reference, _count(run_id)) == ("verified", "", before)


def test_over_http_the_snapshot_write_confirms_the_cached_token_and_a_revoked_one_is_refused(agent_run, guarded):
    client, run_id = agent_run
    token = client._credentials["HTTP_AUTHORIZATION"].split()[1]
    path = f"/api/v1/runs/{run_id}/events/"
    response, answered = fast_post(client, path, _proposed(n=1), fast=True)
    assert (response.status_code, answered) == (201, 1)
    with statements_counted() as counted:
        response, answered = fast_post(client, path, _proposed(n=2), fast=True)
    assert (response.status_code, answered) == (201, 1)
    assert counted.round_trips == 1 and guarded[-1] is True, counted.messages  # the token confirmed in it
    assert token_revoke(key=token)
    events = LedgerEvent.objects.count()
    response, _ = fast_post(client, path, _proposed(n=3), fast=True)
    assert response.status_code == 401, response.content
    assert LedgerEvent.objects.count() == events


STEPS = st.lists(st.tuples(st.sampled_from(["agent:snap"] * 4 + ["agent:other", "touch"]),
                           st.sampled_from(["build"] * 3 + ["deploy", "test"]),
                           st.sampled_from(["proposed"] * 3 + ["started", "succeeded", "succeeded", "verified", "failed",
                                                               "skipped", "unknown", "corrected"]),
                           st.booleans()),
                 min_size=1, max_size=12).map(lambda steps: [("agent:snap", "build", "started", False), *steps])


def _outcomes(wf, steps, *, snapshots: bool) -> tuple[list, list, dict]:
    """Each step's outcome, the ledger and the run (its effects too), with ``RunSnapshots`` on or off; "touch" is another
    writer changing the run's row version."""
    run, _ = services.run_trigger(workflow_slug=wf.slug, inputs={}, intent=uuid.uuid4().hex, actor=AGENT)
    outcomes = []
    for n, (actor, stage, kind, with_effect) in enumerate(steps):
        if not snapshots:
            writer.run_snapshots.forget(run.id)
        if actor == "touch":
            with connection.cursor() as cursor:
                cursor.execute("UPDATE ledger_run SET updated_at = updated_at WHERE id = %s", [run.id])
            continue
        body = {"client_event_id": f"c{n}", "stage": stage, "kind": kind}
        if with_effect and kind in ("succeeded", "verified"):
            body["effect"] = {"system": "git", "operation": stage, "reference": "r1"}
        if with_effect and kind == "verified":
            body["evidence"] = _EVIDENCE
        try:
            event, created = _append(run.id, body, actor=actor)
            outcomes.append(("ok", event.seq, event.kind, created))
        except (Conflict, Invalid) as refused:
            outcomes.append(("refused", refused.code))
    run = Run.objects.get(id=run.id)
    assert services.chain_verify(run=run)["ok"]
    ledger = [(e.seq, e.stage, e.kind, e.actor, e.data, e.reason_code, e.client_event_id, bool(e.idempotency_key))
              for e in LedgerEvent.objects.filter(run=run).order_by("seq")]
    state = {"state": run.state, "current_stage": run.current_stage, "lease_owner": run.lease_owner,
             "stages": {s: v.get("status") for s, v in run.stage_states.items()}, "count": run.event_count,
             "effects": sorted((e.stage, e.status, e.reference, e.last_seq) for e in Effect.objects.filter(run=run))}
    return outcomes, ledger, state


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=STEPS)
def test_any_sequence_of_appends_gives_the_same_answers_and_ledger_with_and_without_snapshots(steps):
    wf = make_workflow(stages=["build", "deploy", "test"], effect_stages=["deploy"], approval_stages=[])
    assert _outcomes(wf, steps, snapshots=True) == _outcomes(wf, steps, snapshots=False)


def test_with_the_switch_off_every_append_locks_and_reads_first(started, settings, guarded):
    _, run_id = started  # its last write was kept
    settings.APPEND_FROM_SNAPSHOT = False
    for n in range(2):
        with statements_counted() as counted:
            _append(run_id, _proposed(n=n))
        assert counted.round_trips == 2 and guarded == [], counted.messages
