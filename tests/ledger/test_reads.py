"""``ledger.sql.reads``: several reads in one round trip, each answered as if it ran alone, after the lock
that precedes them; a new trigger's reads travel in two messages."""

import pytest
from django.db import connection, transaction
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger import selectors, services, sql
from ledger.models import Checkpoint, Run
from stateboard.bench.agentpath import statements_counted
from tests.factories import make_workflow

pytestmark = pytest.mark.django_db

TEXT = st.text(alphabet=st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), max_size=12)


@settings(max_examples=200, deadline=None)
@given(values=st.lists(st.tuples(TEXT, TEXT), min_size=1, max_size=4))
def test_statements_in_splits_a_message_at_its_own_semicolons_only(values):
    connection.ensure_connection()
    raw = connection.connection
    statements = [sql._bound(raw, "SELECT %s, %s", list(pair)).decode() for pair in values]
    assert sql.statements_in("; ".join(statements)) == statements


def test_reads_answer_each_read_as_alone_and_after_the_lock():
    wf = make_workflow(stages=["build"])
    run, _ = services.run_trigger(workflow_slug=wf.slug, inputs={}, intent="a", actor="agent:r")
    services.run_trigger(workflow_slug=wf.slug, inputs={}, intent="b", actor="agent:r")
    by_intent = "workflow_id = %s AND intent = %s"
    with transaction.atomic():
        locks_before = _advisory_locks_held()
        lock, runs_a, states, none = sql.reads(
            sql.IntentLock(wf.id, "c"),
            sql.Rows(Run, by_intent, [wf.id, "a"], lock=True),
            sql.Rows(Run, "workflow_id = %s", [wf.id], fields=("intent", "state"), order="intent"),
            sql.Rows(Checkpoint, by_intent, [wf.id, "none"], limit=1),
        )
        assert _advisory_locks_held() == locks_before + 1  # the intent's lock, held by this transaction
    assert lock == [] and none == []
    assert [r.id for r in runs_a] == [run.id] and runs_a[0].state == run.state
    assert states == sql.select_rows(Run, ["intent", "state"], "workflow_id = %s", [wf.id], order="intent")
    assert states == [("a", "fresh"), ("b", "fresh")]


def test_a_new_trigger_reads_in_two_round_trips_after_the_workflow():
    wf = make_workflow(stages=["build"])
    services.run_trigger(workflow_slug=wf.slug, inputs={}, intent="warm", actor="agent:r")  # statements prepared
    with statements_counted() as counted:
        run, created = services.run_trigger(workflow_slug=wf.slug, inputs={}, intent="new", actor="agent:r")
    assert created
    # the workflow; the intent lock with the goal and the holding runs; the checkpoints, effects and failed
    # runs; the new run with its events (and the COMMIT)
    assert counted.round_trips == 4, counted.messages
    assert len(counted.statements) == 9, counted.statements


def test_a_keyed_trigger_looks_for_its_duplicate_again_with_the_intent_lock_not_after_it():
    wf = make_workflow(stages=["build"])
    services.run_trigger(workflow_slug=wf.slug, inputs={}, intent="warm", trigger_key="w", actor="agent:r")
    with statements_counted() as counted:
        run, created = services.run_trigger(workflow_slug=wf.slug, inputs={}, intent="new", trigger_key="k",
                                            actor="agent:r")
    assert created
    # the trigger-key lookup before any lock; then as an unkeyed trigger, the lookup again in the intent
    # lock's message (the same trigger may have committed while this one waited)
    assert counted.round_trips == 5, counted.messages
    assert len(counted.statements) == 11, counted.statements


def test_the_same_trigger_committed_while_waiting_for_the_intent_is_answered_as_a_duplicate(monkeypatch):
    wf = make_workflow(stages=["build"])
    first, created = services.run_trigger(workflow_slug=wf.slug, inputs={"v": 1}, intent="i", trigger_key="k",
                                          actor="agent:r")
    assert created
    # as if the first trigger committed after this one's lookup before the lock had found nothing
    unread = services.runs._trigger_key_run

    def lookup_misses_before_the_lock(*args, existing=services.runs._UNREAD, **kwargs):
        if existing is services.runs._UNREAD:
            return None
        return unread(*args, existing=existing, **kwargs)

    monkeypatch.setattr(services.runs, "_trigger_key_run", lookup_misses_before_the_lock)
    again, created = services.run_trigger(workflow_slug=wf.slug, inputs={"v": 1}, intent="i", trigger_key="k",
                                          actor="agent:r")
    assert (again.id, created, again.workflow.slug) == (first.id, False, wf.slug)
    assert Run.objects.filter(workflow=wf).count() == 1


def test_the_latest_checkpoint_is_one_prepared_read_that_agrees_with_the_orm():
    wf = make_workflow(stages=["build", "test"])
    real, _ = services.run_trigger(workflow_slug=wf.slug, inputs={}, intent="i", actor="agent:r")
    staged, _ = services.run_trigger(workflow_slug=wf.slug, inputs={}, intent="i", actor="agent:r", staged=True)
    assert selectors.checkpoint_latest(run=real) is None
    for run, note in ((real, "first"), (staged, "staged"), (real, "second"), (staged, "staged again")):
        services.checkpoint_save(run_id=run.id, payload={"stage": "build", "pending_intents": [note]},
                                 actor="agent:r")
    for run, note in ((real, "second"), (staged, "staged again")):
        orm = Checkpoint.objects.filter(workflow_id=run.workflow_id, intent=run.intent,
                                        staged=run.staged).order_by("-id").first()
        with statements_counted() as counted:
            latest = selectors.checkpoint_latest(run=run)
        assert counted.round_trips == 1 and len(counted.statements) == 1, counted.messages
        assert counted.messages[0].startswith("EXECUTE sb_"), counted.messages  # prepared, not the ORM's query
        assert latest.payload["pending_intents"] == [note]  # real runs never see a staged run's, nor the reverse
        assert {f.attname: getattr(latest, f.attname) for f in Checkpoint._meta.concrete_fields} == \
            {f.attname: getattr(orm, f.attname) for f in Checkpoint._meta.concrete_fields}


def _advisory_locks_held() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()")
        return cursor.fetchone()[0]
