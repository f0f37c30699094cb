"""``ledger.rows.from_row`` builds the instances of the hot reads as ``Model.from_db`` would, and
``ledger.rows.model_new`` a new event as ``Model.__init__`` would: the same values, the same state, deferred
fields still loaded on access, and ``Model.__init__`` itself whenever something listens to a model's init
signals."""

import uuid
from datetime import datetime, timezone

import pytest
from django.db.models.signals import post_init

from ledger import rows, services, sql
from ledger.models import LedgerEvent, Run, Workflow
from tests.factories import make_workflow

pytestmark = [pytest.mark.django_db, pytest.mark.skipif(not sql.available(), reason="PostgreSQL only")]


def _fields(instance) -> dict:
    return {k: v for k, v in instance.__dict__.items() if k != "_state"}


@pytest.fixture
def run_id():
    wf = make_workflow(stages=["build", "test"])
    run, _ = services.run_trigger(workflow_slug=wf.slug, intent="i", inputs={"n": 1}, trigger="api",
                                  trigger_key="k-1", actor="user:t")
    return run.id


def test_the_locked_read_gives_what_the_orm_gives(run_id):
    run, _, _ = sql.run_lock_read(run_id, None, lock=False)
    orm = Run.objects.select_related("workflow").defer("inputs").get(id=run_id)
    assert _fields(run) == _fields(orm)
    assert _fields(run.workflow) == _fields(orm.workflow)
    assert (run._state.adding, run._state.db) == (orm._state.adding, orm._state.db) == (False, "default")
    assert run.get_deferred_fields() == orm.get_deferred_fields() == {"inputs"}
    assert run.inputs == {"n": 1}  # loaded on access, as for the ORM's instance


def test_a_model_with_an_init_receiver_is_built_by_its_own_init(run_id):
    seen = []

    def receiver(sender, instance, **kwargs):
        seen.append(type(instance))

    post_init.connect(receiver, sender=Workflow)
    try:
        run, _, _ = sql.run_lock_read(run_id, None, lock=False)
    finally:
        post_init.disconnect(receiver, sender=Workflow)
    assert seen == [Workflow]
    assert run.workflow.stages == ["build", "test"]


@pytest.mark.parametrize("values", [
    {},
    {"run_id": uuid.uuid4(), "seq": 3, "kind": "proposed", "data": {"a": 1}, "client_event_id": None},
    {"run_id": uuid.uuid4(), "seq": 1, "at": datetime(2026, 1, 2, tzinfo=timezone.utc), "stage": "build",
     "kind": "started", "actor": "agent:a", "evidence": [{"uri": "u"}], "hash": "h" * 64},
])
def test_a_new_event_is_built_as_its_init_builds_it(values):
    built, orm = rows.model_new(LedgerEvent, dict(values)), LedgerEvent(**values)
    assert list(built.__dict__) == list(orm.__dict__)  # the same attributes, in the same order
    assert _fields(built) == _fields(orm)
    assert (built._state.adding, built._state.db) == (orm._state.adding, orm._state.db) == (True, None)
    assert rows.model_new(LedgerEvent, {}).evidence is not rows.model_new(LedgerEvent, {}).evidence  # fresh defaults


def test_a_new_instance_given_anything_but_attnames_is_built_by_its_init():
    wf = make_workflow(stages=["build"])
    run = Run(workflow=wf, intent="i", inputs={})
    event = rows.model_new(LedgerEvent, {"run": run, "seq": 1})
    assert event.run is run and event.run_id == run.id
    with pytest.raises(TypeError):
        rows.model_new(LedgerEvent, {"nonsense": 1})
    seen = []

    def receiver(sender, instance, **kwargs):
        seen.append(instance)

    post_init.connect(receiver, sender=LedgerEvent)
    try:
        event = rows.model_new(LedgerEvent, {"seq": 2})
    finally:
        post_init.disconnect(receiver, sender=LedgerEvent)
    assert seen == [event]
