"""A trigger's reads in few round trips: the store reads querysets declared once (``Reads``) together, one
round trip on PostgreSQL, each statement after the intent's lock seeing what was committed while it waited."""

import threading

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from ledger import services
from ledger.models import Goal, Run, Workflow
from ledger.store import store
from ledger.store.reads import Reads
from tests.factories import make_operator, make_workflow


def _runs(wf):
    for n in range(3):
        services.run_trigger(workflow_slug=wf.slug, inputs={"n": n}, intent=f"i-{n}", actor="agent:a")


READS = Reads(lambda *, workflow_id, slug, intent: [
    Run.objects.filter(workflow=workflow_id).order_by("intent"),
    Run.objects.filter(workflow__slug=slug).order_by("-intent").values_list("intent", "state", "created_at"),
    Run.objects.filter(workflow=workflow_id, intent__gt=intent).order_by("intent").values_list("id", flat=True)[:2],
    Workflow.objects.filter(slug=slug, id=workflow_id)], workflow_id=int, slug=str, intent=str)


@pytest.mark.django_db
def test_reads_answer_what_iterating_each_queryset_answers_for_each_values():
    wf, other = (make_workflow(stages=["work"], effect_stages=[], approval_stages=[]) for _ in range(2))
    _runs(wf)
    for values in ({"workflow_id": wf.id, "slug": wf.slug, "intent": "i-0"},
                   {"workflow_id": other.id, "slug": other.slug, "intent": ""},
                   {"workflow_id": wf.id, "slug": "no-such-workflow", "intent": "i-1"}):
        expected = [list(queryset) for queryset in READS.querysets(values)]
        got = store().reads(READS, **values)
        assert got == expected
        assert [[run.stage_states for run in got[0]]] == [[run.stage_states for run in expected[0]]]  # converted
    assert len(store().reads(READS, workflow_id=wf.id, slug=wf.slug, intent="")[0]) == 3


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_reads_are_one_statement_and_a_new_triggers_service_call_five():
    wf = make_workflow(stages=["work"], effect_stages=[], approval_stages=[])
    _runs(wf)
    with CaptureQueriesContext(connection) as captured:
        store().reads(READS, workflow_id=wf.id, slug=wf.slug, intent="")
    assert len(captured.captured_queries) == 1
    with CaptureQueriesContext(connection) as captured:
        services.run_trigger(workflow_slug=wf.slug, inputs={}, intent="fresh", actor="agent:a")
    sent = [q["sql"] for q in captured.captured_queries]
    assert len(sent) == 5, sent  # BEGIN, the workflow with the intent's lock and its goal, the reads, the insert, COMMIT


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_trigger_waiting_on_the_intents_lock_reads_the_goal_committed_meanwhile():
    wf = make_workflow(stages=["work"], effect_stages=[], approval_stages=[])
    owner, _ = make_operator("owner")
    locked, decided = threading.Event(), {}

    def goal_then_commit():
        try:
            with transaction.atomic():
                services.goal_create(workflow_slug=wf.slug, intent="target", objective="ship it", user=owner)
                locked.set()
                threading.Event().wait(0.5)  # the trigger waits on the lock meanwhile
        finally:
            locked.set()
            connection.close()

    def trigger():
        try:
            run, _ = services.run_trigger(workflow_slug=wf.slug, inputs={}, intent="target", actor="agent:a")
            decided["goal"] = run.goal_version
        finally:
            connection.close()

    first = threading.Thread(target=goal_then_commit)
    first.start()
    assert locked.wait(10)
    second = threading.Thread(target=trigger)
    second.start()
    first.join(10), second.join(10)
    assert Goal.objects.filter(workflow=wf, intent="target").count() == 1
    assert decided == {"goal": 1}


@pytest.mark.postgres
def test_the_stores_statements_are_numbered_once_and_hold_no_other_percent_sign():
    from ledger.store.cursors import numbered

    assert numbered("SELECT %s, %s FROM t WHERE a = %s") == "SELECT $1, $2 FROM t WHERE a = $3"
    with pytest.raises(ValueError):
        numbered("SELECT %s FROM t WHERE name LIKE 'a%'")


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_runs_detail_with_its_intent_known_is_one_statement():
    from ledger import selectors

    wf = make_workflow(stages=["work"], effect_stages=[], approval_stages=[])
    run, _ = services.run_trigger(workflow_slug=wf.slug, inputs={"n": 1}, intent="detail", actor="agent:a")
    with CaptureQueriesContext(connection) as captured:
        detail = selectors.run_detail(run_id=run.id, intent=run.intent)
        assert detail.workflow.slug == wf.slug and list(detail.effects.all()) == [] and detail.inputs == {"n": 1}
    assert len(captured.captured_queries) == 1
