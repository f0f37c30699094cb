"""Triggers are serialised per intent, not per workflow (real threads, each with its own connection)."""

import threading

import pytest
from django.db import OperationalError, connection, transaction

from ledger import services
from ledger.models import Run
from stateboard.errors import Conflict
from tests.factories import make_workflow
from tests.ledger.helpers import race

pytestmark = pytest.mark.django_db(transaction=True)


def test_trigger_sixteen_intents_of_one_workflow_concurrently_all_succeed():
    """Sixteen threads triggering sixteen intents of one workflow at once: sixteen fresh runs, no error."""
    wf = make_workflow()
    results = race(16, lambda i: services.run_trigger(workflow_slug=wf.slug, inputs={"i": i}, intent=f"job-{i}",
                                                       actor="agent:x"))
    assert not [r for r in results if isinstance(r, Exception)], results
    assert sorted(run.intent for run, _ in results) == sorted(f"job-{i}" for i in range(16))
    assert {run.decision["outcome"] for run, _ in results} == {"fresh"}
    assert Run.objects.filter(workflow=wf, state="fresh").count() == 16


def _hold_trigger(wf, intent, held: threading.Event, release: threading.Event, errors: list):
    """Trigger ``intent`` and keep its transaction open (with every lock it took) until ``release``."""
    try:
        with transaction.atomic():
            services.run_trigger(workflow_slug=wf.slug, inputs={}, intent=intent, actor="agent:x")
            held.set()
            release.wait(30)
    except Exception as exc:  # reported to the test
        errors.append(exc)
        held.set()
    finally:
        connection.close()


def _trigger_with_lock_timeout(wf, intent):
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL lock_timeout = '1500ms'")
        return services.run_trigger(workflow_slug=wf.slug, inputs={}, intent=intent, actor="agent:y")


def test_trigger_of_another_intent_does_not_wait_for_an_open_trigger():
    """While a trigger of intent a is uncommitted, one of intent b goes through and another of a waits."""
    wf = make_workflow()
    held, release, errors = threading.Event(), threading.Event(), []
    holder = threading.Thread(target=_hold_trigger, args=(wf, "a", held, release, errors))
    holder.start()
    try:
        assert held.wait(30) and not errors, errors
        run, created = _trigger_with_lock_timeout(wf, "b")
        assert created and run.decision["outcome"] == "fresh"
        with pytest.raises(OperationalError, match="lock timeout"):
            _trigger_with_lock_timeout(wf, "a")
    finally:
        release.set()
        holder.join(30)
    assert not errors, errors
    assert sorted(Run.objects.filter(workflow=wf).values_list("intent", flat=True)) == ["a", "b"]


def test_trigger_one_key_from_many_intents_concurrently_makes_one_run():
    """One trigger key sent for eight intents at once: one run; the others are 409 trigger_key_mismatch."""
    wf = make_workflow()
    results = race(8, lambda i: services.run_trigger(workflow_slug=wf.slug, inputs={"a": 1}, intent=f"i{i}",
                                                      trigger_key="shared", actor="agent:x"))
    runs = [r for r in results if not isinstance(r, Exception)]
    errors = [r for r in results if isinstance(r, Exception)]
    assert len(runs) == 1 and runs[0][1] is True, results
    assert {type(e) for e in errors} == {Conflict} and {e.code for e in errors} == {"trigger_key_mismatch"}
    assert Run.objects.filter(workflow=wf).count() == 1


def test_trigger_duplicate_key_concurrently_with_new_intents_stays_one_run():
    """Eight resends of one keyed trigger racing eight triggers of other intents: one run for the key, 9 runs."""
    wf = make_workflow()

    def trigger(i):
        if i % 2:
            return services.run_trigger(workflow_slug=wf.slug, inputs={"a": 1}, intent="same", trigger_key="k",
                                        actor="agent:x")
        return services.run_trigger(workflow_slug=wf.slug, inputs={"a": i}, intent=f"other-{i}", actor="agent:x")

    results = race(16, trigger)
    assert not [r for r in results if isinstance(r, Exception)], results
    keyed = [results[i] for i in range(1, 16, 2)]
    assert len({run.id for run, _ in keyed}) == 1 and sum(created for _, created in keyed) == 1
    assert Run.objects.filter(workflow=wf).count() == 9
