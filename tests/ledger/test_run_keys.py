"""A run's key (``ledger_runkey``) is written by the database on both PostgreSQL and SQLite: one row per run,
the trigger key unique per workflow across intents, and a run's id, intent and trigger key never change."""

import pytest
from django.db import DatabaseError, IntegrityError, transaction
from django.utils import timezone

from ledger import services
from ledger.models import Run, RunKey
from tests.factories import make_workflow

pytestmark = pytest.mark.django_db


def _run(wf, intent, key):
    now = timezone.now()
    return Run.objects.create(workflow=wf, intent=intent, trigger_key=key, inputs={}, input_fingerprint="f",
                              policy_version="1", created_at=now, updated_at=now)


def test_every_run_gets_its_key_row_from_the_database():
    wf = make_workflow()
    triggered, _ = services.run_trigger(workflow_slug=wf.slug, intent="alpha", inputs={}, actor="agent:a")
    inserted = _run(wf, "beta", "by-hand")
    keys = {k.run_id: (k.intent, k.trigger_key) for k in RunKey.objects.filter(workflow=wf)}
    assert keys == {triggered.id: ("alpha", triggered.trigger_key), inserted.id: ("beta", "by-hand")}


def test_a_trigger_key_is_refused_in_another_intent_and_a_runs_key_never_changes():
    wf = make_workflow()
    run = _run(wf, "alpha", "nightly")
    with pytest.raises(IntegrityError), transaction.atomic():
        _run(wf, "beta", "nightly")
    _run(make_workflow(), "beta", "nightly")  # another workflow may use it
    with pytest.raises(DatabaseError, match="never change"), transaction.atomic():
        Run.objects.filter(id=run.id).update(intent="gamma")
    Run.objects.filter(id=run.id).update(state="failed")  # the rest of the row changes as ever
    assert RunKey.objects.get(run_id=run.id).intent == "alpha"
