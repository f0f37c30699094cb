"""A trigger's reads do not grow with the intent's history (PostgreSQL's plans, after ANALYZE)."""

import json

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from ledger import services, sql
from ledger.models import Run
from tests.factories import make_workflow

pytestmark = pytest.mark.django_db


def _plan_nodes(node):
    yield node
    for child in node.get("Plans", []):
        yield from _plan_nodes(child)


def test_counting_failed_runs_reads_none_of_the_intents_finished_runs():
    wf = make_workflow(stages=["build"])
    for _ in range(40):  # one fresh run, then duplicates decided noop: finished runs of the same fingerprint
        services.run_trigger(workflow_slug=wf.slug, inputs={"n": 1}, intent="nightly", actor="agent:x")
    assert Run.objects.filter(workflow=wf, intent="nightly", state="noop").count() == 39
    with CaptureQueriesContext(connection) as captured:
        services.run_trigger(workflow_slug=wf.slug, inputs={"n": 1}, intent="nightly", actor="agent:x")
    statements = [statement for q in captured.captured_queries for statement in sql.statements_in(q["sql"])]
    failed_read = [statement for statement in statements if "retried_at IS NOT NULL" in _statement_text(statement)]
    assert len(failed_read) == 1, [statement[:120] for statement in statements]
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("ANALYZE ledger_run")
        cursor.execute("SET LOCAL enable_seqscan = off")  # a table this small would be read whole
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + failed_read[0])
        raw = cursor.fetchone()[0]
    plan = (json.loads(raw) if isinstance(raw, str) else raw)[0]["Plan"]
    nodes = list(_plan_nodes(plan))
    assert [n.get("Index Name") for n in nodes if n.get("Index Name")] == ["run_failed_or_retried"], nodes
    assert sum(n.get("Rows Removed by Filter", 0) + n.get("Actual Rows", 0) for n in nodes) == 0, nodes


def _statement_text(sql: str) -> str:
    """The statement itself, also behind ``EXECUTE name(...)`` (``ledger.sql`` prepares the hot reads)."""
    if not sql.startswith("EXECUTE "):
        return sql
    name = sql.split()[1].split("(")[0]
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements WHERE name = %s", [name])
        row = cursor.fetchone()
    return row[0] if row else ""
