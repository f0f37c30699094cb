"""A run's ``stage_states`` on the append path: written as the stages that changed, merged with the row's
value by the statement (``sql.json_merge``, ``||``), so a stage's pass sends one entry, not the run's every
stage; and not returned by the write, the kept row (``RunRow``) holding the writer's value. Real
PostgreSQL: the row read back holds what the writer computed."""

import uuid

import pytest
from django.db import connection, transaction
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from ledger import services, sql
from ledger.models import Run
from ledger.services.writer import RunWriter, run_lock, run_snapshots
from stateboard.bench.agentpath import statements_counted
from tests.factories import make_workflow

AGENT = "agent:merge"

_values = st.one_of(st.integers(0, 2), st.dictionaries(st.sampled_from("xy"), st.integers(0, 2), max_size=2))
_objects = st.dictionaries(st.sampled_from(["build", "test", "deploy", "report"]), _values, max_size=4)


@hypothesis_settings(suppress_health_check=[HealthCheck.too_slow])
@given(_objects, _objects)
def test_a_merge_gives_the_new_value_or_is_refused_when_a_key_went_away(before, after):
    merge = sql.json_merge(before, after)
    if not before.keys() <= after.keys():
        assert merge is None
        return
    assert {**before, **merge} == after
    assert all(key not in before or before[key] != value for key, value in merge.items())  # only what changed


def test_not_objects_are_never_merged():
    assert sql.json_merge([], {}) is None
    assert sql.json_merge({}, None) is None


def _append(run_id, stage, kind):
    return services.event_append(run_id=run_id, body={"client_event_id": uuid.uuid4().hex, "stage": stage,
                                                      "kind": kind}, actor=AGENT)[0]


def _build_passed(stages: list[str]):
    """A run of a workflow of ``stages`` whose first stage, build, passed; and build's ``succeeded``."""
    wf = make_workflow(stages=stages)
    run, _ = services.run_trigger(workflow_slug=wf.slug, inputs={}, intent=uuid.uuid4().hex, actor=AGENT)
    _append(run.id, "build", "started")
    return run, _append(run.id, "build", "succeeded")


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("snapshots", [True, False], ids=["from a snapshot", "locking path"])
def test_a_stage_start_sends_its_own_entry_and_the_row_holds_every_stage(snapshots, settings):
    settings.APPEND_FROM_SNAPSHOT = snapshots
    run, passed = _build_passed(["build", "test", "report"])
    with statements_counted() as counted:
        started = _append(run.id, "test", "started")
    written = [m for m in counted.messages if started.hash in m]  # the event, with the test stage's entry
    assert len(written) == 1, counted.messages
    assert passed.hash not in written[0]  # the build stage's entry stayed where it was
    stored = Run.objects.get(id=run.id).stage_states
    assert {stage: entry["status"] for stage, entry in stored.items()} == {"build": "succeeded", "test": "started"}
    assert stored["build"]["digest"] == passed.hash


@pytest.mark.django_db(transaction=True)
def test_a_stage_taken_away_writes_the_whole_value():
    run, _ = _build_passed(["build", "test"])
    _append(run.id, "test", "started")
    with transaction.atomic():
        locked = run_lock(run.id)
        writer = RunWriter(locked, AGENT, locked.updated_at)
        locked.stage_states = {"test": locked.stage_states["test"]}
        writer.emit("proposed", "test", data={})
        writer.flush()
    assert set(Run.objects.get(id=run.id).stage_states) == {"test"}


@pytest.mark.django_db(transaction=True)
def test_the_kept_row_holds_the_written_stages_and_each_run_built_from_it_its_own_copy():
    run, _ = _build_passed(["build", "test"])
    kept = run_snapshots.take(run.id)
    _, run_columns, _ = sql._run_read_statement(connection.vendor, True, False)
    assert kept.values[run_columns.attnames.index("stage_states")] is None  # not sent back by the write
    assert kept.stage_states == Run.objects.get(id=run.id).stage_states
    first, second = kept.run(), kept.run()
    first.stage_states["build"]["status"] = "changed in place"
    assert second.stage_states["build"]["status"] == kept.stage_states["build"]["status"] == "succeeded"
    assert first.stage_states["build"] is not kept.stage_states["build"]
