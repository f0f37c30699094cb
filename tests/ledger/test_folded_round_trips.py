"""An append's BEGIN travels with its locking read and its COMMIT with its write (``sql.write_transaction``):
two round trips, and still all or nothing."""

import contextlib
import uuid

import psycopg
import pytest
from django.db import connection, transaction
from psycopg import _connection_base

from ledger import services
from ledger.models import LedgerEvent, Run
from stateboard.errors import Conflict
from tests.factories import make_workflow
from tests.ledger.helpers import event_count_seen_elsewhere

pytestmark = pytest.mark.django_db(transaction=True)

ACTOR = "agent:fold"


@contextlib.contextmanager
def commands_sent():
    """The transaction commands psycopg sends on its own (BEGIN before a first statement, COMMIT, ROLLBACK)."""
    sent, original = [], _connection_base.BaseConnection._exec_command

    def spy(self, command, *args, **kwargs):
        sent.append(command if isinstance(command, bytes) else str(command).encode())
        return (yield from original(self, command, *args, **kwargs))

    _connection_base.BaseConnection._exec_command = spy
    try:
        yield sent
    finally:
        _connection_base.BaseConnection._exec_command = original


def _body(kind="proposed", **extra):
    return {"client_event_id": uuid.uuid4().hex, "stage": "build", "kind": kind, **extra}


@pytest.fixture
def run():
    wf = make_workflow(stages=["build", "ship"])
    run, _ = services.run_trigger(workflow_slug=wf.slug, inputs={}, actor=ACTOR)
    services.event_append(run_id=run.id, body=_body("started"), actor=ACTOR)
    services.event_append(run_id=run.id, body=_body(), actor=ACTOR)  # its statements are prepared now
    return run


def test_a_plain_append_sends_no_begin_or_commit_of_its_own_and_is_committed_when_it_returns(run):
    with commands_sent() as sent:
        event, created = services.event_append(run_id=run.id, body=_body(), actor=ACTOR)
        events, _ = services.events_append(run_id=run.id, bodies=[_body(), _body()], actor=ACTOR)
    assert created and [e.seq for e in events] == [event.seq + 1, event.seq + 2]
    assert sent == []
    assert event_count_seen_elsewhere(run.id) == event.seq + 2
    assert connection.connection.autocommit
    assert connection.connection.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert services.chain_verify(run=Run.objects.get(id=run.id))["ok"]


def test_an_append_that_writes_more_after_its_events_commits_on_its_own(run):
    """A ``claim:`` citation is written after the events: the events' statement must not commit."""
    with commands_sent() as sent:
        event, _ = services.event_append(
            run_id=run.id, body=_body(evidence=[{"uri": "claim:missing", "observed_at": "2026-12-01T00:00:00Z"}]),
            actor=ACTOR)
    assert sent == [b"COMMIT"]
    assert event_count_seen_elsewhere(run.id) == event.seq


def test_a_refused_append_writes_nothing_and_the_connection_goes_on(run):
    before = Run.objects.get(id=run.id).event_count
    with pytest.raises(Conflict) as refused:
        services.event_append(run_id=run.id, body=_body("succeeded", stage="ship"), actor=ACTOR)
    assert refused.value.code == "illegal_transition"
    assert event_count_seen_elsewhere(run.id) == before
    event, created = services.event_append(run_id=run.id, body=_body(), actor=ACTOR)
    assert created and event.seq == before + 1


def test_a_write_the_database_refuses_leaves_neither_the_event_nor_the_run_change(run):
    """The write carries the COMMIT: when the database refuses it, the COMMIT never runs and the run row
    (updated by the same statement) keeps its old chain head."""
    with connection.cursor() as cursor:
        cursor.execute("""CREATE FUNCTION test_refuse_boom() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN IF NEW.data ? 'boom' THEN RAISE EXCEPTION 'boom refused'; END IF; RETURN NEW; END $$""")
        cursor.execute("CREATE TRIGGER test_refuse_boom BEFORE INSERT ON ledger_ledgerevent "
                       "FOR EACH ROW EXECUTE FUNCTION test_refuse_boom()")
    try:
        before = Run.objects.get(id=run.id)
        with pytest.raises(Exception, match="boom refused"):
            services.event_append(run_id=run.id, body=_body(data={"boom": 1}), actor=ACTOR)
        after = Run.objects.get(id=run.id)
        assert (after.event_count, after.last_hash) == (before.event_count, before.last_hash)
        assert event_count_seen_elsewhere(run.id) == before.event_count
        event, created = services.event_append(run_id=run.id, body=_body(), actor=ACTOR)
        assert created and event.seq == before.event_count + 1
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP TRIGGER test_refuse_boom ON ledger_ledgerevent")
            cursor.execute("DROP FUNCTION test_refuse_boom()")


def test_an_append_inside_an_outer_transaction_leaves_the_commit_to_it(run):
    before = Run.objects.get(id=run.id).event_count
    with transaction.atomic():
        event, _ = services.event_append(run_id=run.id, body=_body(), actor=ACTOR)
        services.events_append(run_id=run.id, bodies=[_body()], actor=ACTOR)
        assert event_count_seen_elsewhere(run.id) == before  # not committed by the append's own statement
        transaction.set_rollback(True)
    assert event_count_seen_elsewhere(run.id) == before
    assert not LedgerEvent.objects.filter(id=event.id).exists()


def test_a_new_trigger_commits_with_its_insert():
    wf = make_workflow(stages=["build"])
    services.run_trigger(workflow_slug=wf.slug, inputs={}, intent="warm-up", actor=ACTOR)  # statements prepared
    with commands_sent() as sent:
        run, created = services.run_trigger(workflow_slug=wf.slug, inputs={"n": 1}, intent="i-1", trigger_key="k-1",
                                            actor=ACTOR)
    assert created and sent == []
    assert event_count_seen_elsewhere(run.id) == run.event_count > 0


def test_a_trigger_whose_insert_the_database_refuses_looks_again_after_the_rollback():
    """The database's backstop (a unique constraint that fires in a race) aborts the transaction; the
    trigger rolls it back, then looks the key up, and answers 409 with nothing written."""
    wf = make_workflow(stages=["build"])
    with connection.cursor() as cursor:
        cursor.execute("""CREATE FUNCTION test_refuse_run() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN IF NEW.intent = 'raced' THEN RAISE unique_violation USING MESSAGE = 'raced'; END IF;
            RETURN NEW; END $$""")
        cursor.execute("CREATE TRIGGER test_refuse_run BEFORE INSERT ON ledger_run "
                       "FOR EACH ROW EXECUTE FUNCTION test_refuse_run()")
    try:
        with pytest.raises(Conflict) as refused:
            services.run_trigger(workflow_slug=wf.slug, inputs={}, intent="raced", trigger_key="k-raced",
                                 actor=ACTOR)
        assert refused.value.code == "active_run_exists"
        assert not Run.objects.filter(workflow=wf).exists()
        run, created = services.run_trigger(workflow_slug=wf.slug, inputs={}, intent="calm", actor=ACTOR)
        assert created and event_count_seen_elsewhere(run.id) == run.event_count
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP TRIGGER test_refuse_run ON ledger_run")
            cursor.execute("DROP FUNCTION test_refuse_run()")


def test_the_run_counters_come_from_the_last_event_written_with_them(run):
    """The write reads the run's event_count, last_hash and updated_at from the inserted last event (they are
    not sent twice): after one append and after a batch, the stored run repeats its last event's columns."""
    services.event_append(run_id=run.id, body=_body(), actor=ACTOR)
    services.events_append(run_id=run.id, bodies=[_body(), _body(), _body()], actor=ACTOR)
    stored = Run.objects.get(id=run.id)
    events = list(LedgerEvent.objects.filter(run_id=run.id).order_by("seq"))
    last = events[-1]
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert (stored.event_count, stored.last_hash, stored.updated_at) == (last.seq, last.hash, last.at)
    assert services.chain_verify(run=stored)["ok"]
