"""The hot statements are prepared once per connection (``ledger.sql._execute``) and keep working."""

import uuid

import pytest
from django.db import connection, transaction

from ledger import services, sql
from tests.factories import make_workflow

pytestmark = pytest.mark.django_db


def _prepared() -> dict:
    with connection.cursor() as cursor:
        cursor.execute("SELECT name, statement FROM pg_prepared_statements WHERE name LIKE 'sb\\_%%'")
        return dict(cursor.fetchall())


def _run(query: str, params: list):
    with connection.cursor() as cursor:
        sql._execute(cursor, query, params)
        return cursor.fetchone()


def test_the_appends_statements_are_prepared_and_reused():
    wf = make_workflow(stages=["build"])
    run, _ = services.run_trigger(workflow_slug=wf.slug, inputs={}, actor="agent:p")
    for kind in ("started", "proposed", "proposed"):
        services.event_append(run_id=run.id, body={"client_event_id": uuid.uuid4().hex, "stage": "build",
                                                   "kind": kind}, actor="agent:p")
    statements = _prepared().values()
    assert any("FOR UPDATE OF r" in text for text in statements)  # the run's locking read
    assert any(text.startswith("PREPARE") and "INSERT INTO \"ledger_ledgerevent\"" in text for text in statements)
    assert services.chain_verify(run=run)["ok"]


def test_a_prepared_statement_outlives_a_rollback_and_binds_its_parameters(settings):
    query = f"SELECT %s::int + %s::int, %s::text /* {uuid.uuid4().hex} */"
    name = sql._prepared_name(query)
    settings.DB_PREPARED_STATEMENTS = False
    assert _run(query, [1, 2, "o'neil"]) == (3, "o'neil")
    assert name not in _prepared()
    settings.DB_PREPARED_STATEMENTS = True
    with transaction.atomic():
        assert _run(query, [40, 2, "x"]) == (42, "x")
        transaction.set_rollback(True)
    assert name in _prepared()
    assert _run(query, [None, 1, None]) == (None, None)


@pytest.mark.django_db(transaction=True)
def test_the_latency_metric_commits_alone_and_leaves_synchronous_commit_on():
    """The latency write relaxes synchronous_commit for its own transaction only, never the ledger's."""
    wf = make_workflow(stages=["build"])
    run, _ = services.run_trigger(workflow_slug=wf.slug, inputs={}, actor="agent:p")
    sql.decision_latency_write(run.id, 12.5)
    with connection.cursor() as cursor:
        cursor.execute("SHOW synchronous_commit")
        assert cursor.fetchone()[0] == "on"
    run.refresh_from_db()
    assert run.decision_latency_ms == 12.5


def test_a_triggers_holding_run_read_agrees_with_the_selector():
    """``services.holding_runs`` (hand-written, prepared) reads what ``selectors.intent_holding_runs`` means."""
    from ledger import selectors
    from ledger.models import Run

    wf = make_workflow(stages=["build"])
    for n, state in enumerate(["fresh", "escalated", "escalated", "failed", "completed"]):
        run, _ = services.run_trigger(workflow_slug=wf.slug, inputs={"n": n}, intent=f"i-{n}", actor="agent:p")
        Run.objects.filter(id=run.id).update(state=state, intent="shared")
    staged, _ = services.run_trigger(workflow_slug=wf.slug, inputs={}, intent="shared", actor="agent:p", staged=True)
    expected = {r.id for r in selectors.intent_holding_runs(workflow=wf, intent="shared")}
    assert len(expected) == 3 and staged.id not in expected
    assert {r.id for r in services.holding_runs(workflow=wf, intent="shared")} == expected
    assert {r.id for r in services.holding_runs(workflow=wf, intent="shared", lock=True)} == expected


def test_a_literal_percent_means_the_same_prepared_or_not(settings):
    """``%%`` is a literal ``%`` in a statement with parameters; the PREPAREd text must say ``%`` too."""
    query = f"SELECT %s::text || '%%' /* {uuid.uuid4().hex} */"
    settings.DB_PREPARED_STATEMENTS = False
    assert _run(query, ["5"]) == ("5%",)
    settings.DB_PREPARED_STATEMENTS = True
    assert _run(query, ["6"]) == ("6%",)
    assert sql._prepared_name(query) in _prepared()


def test_the_hot_path_cursor_is_reused_and_reads_the_times_the_orm_reads():
    """One cursor per connection; its C timestamp loader gives the values (and the UTC tzinfo) Django's gives."""
    from datetime import timezone as dt_timezone

    from ledger.models import Run

    wf = make_workflow(stages=["build"])
    run, _ = services.run_trigger(workflow_slug=wf.slug, inputs={}, actor="agent:t")
    services.event_append(run_id=run.id, body={"stage": "build", "kind": "started"}, actor="agent:t")
    with sql._cursor() as first, sql._cursor() as second:
        assert first is second
    assert first.adapters.get_loader(1184, first.format).__module__ != "django.db.backends.postgresql.psycopg_any"
    with transaction.atomic():
        locked, _, _ = sql.run_lock_read(run.id, None)
    orm = Run.objects.get(id=run.id)
    for name in ("created_at", "updated_at", "decided_at", "lease_expires_at"):
        value = getattr(locked, name)
        assert value == getattr(orm, name) and value.tzinfo is dt_timezone.utc, name
    assert locked.workflow.created_at == orm.workflow.created_at and locked.workflow.created_at.tzinfo is dt_timezone.utc


def test_a_trigger_of_an_intent_without_checkpoints_reads_the_checkpoints_once(settings):
    """No checkpoint of the intent at all means none of its fingerprint: the second look is skipped."""
    from django.test.utils import CaptureQueriesContext

    settings.DB_PREPARED_STATEMENTS = False  # the statements' own text, table names included
    wf = make_workflow(stages=["build"])
    with CaptureQueriesContext(connection) as captured:
        run, created = services.run_trigger(workflow_slug=wf.slug, inputs={"n": 1}, intent="fresh-intent",
                                            actor="agent:p")
    assert created and run.state == "fresh"
    checkpoint_reads = [q["sql"] for q in captured.captured_queries
                        if q["sql"].lstrip().upper().startswith("SELECT") and '"ledger_checkpoint"' in q["sql"]]
    assert len(checkpoint_reads) == 1, checkpoint_reads
