"""Checkpoint pruning (SPEC §5.3): expired checkpoints go unless the latest of their intent or fingerprint."""

from datetime import timedelta

import pytest
from django.utils import timezone

from ledger import services
from ledger.models import Checkpoint, Run
from tests.factories import make_workflow, unique
from tests.ledger.helpers import race, raised


def _checkpoint(workflow, intent, fingerprint, *, expired=True) -> int:
    now = timezone.now()
    run = Run.objects.create(workflow=workflow, intent=intent, trigger_key=unique("tk"), inputs={},
                             input_fingerprint=fingerprint, policy_version="1", state="completed", created_at=now,
                             updated_at=now)
    return Checkpoint.objects.create(
        workflow=workflow, intent=intent, run=run, source="server", payload={"stage": "build"},
        input_fingerprint=fingerprint, policy_version="1", created_at=now,
        expires_at=now + (-timedelta(seconds=1) if expired else timedelta(hours=1))).id


def _scenario():
    """Returns (checkpoints that must go, checkpoints that must stay)."""
    wf = make_workflow()
    a1 = _checkpoint(wf, "a", "f1")
    a2 = _checkpoint(wf, "a", "f1")          # latest of fingerprint f1
    a3 = _checkpoint(wf, "a", "f2")          # latest of intent a (and of f2)
    b1 = _checkpoint(wf, "b", "f1", expired=False)
    b2 = _checkpoint(wf, "b", "f1")          # latest of b
    c1 = _checkpoint(wf, "c", "f3")
    c2 = _checkpoint(wf, "c", "f3", expired=False)
    return {a1, c1}, {a2, a3, b1, b2, c2}


@pytest.mark.django_db
def test_prune_keeps_the_latest_of_intent_and_fingerprint():
    """Only expired checkpoints superseded within their fingerprint (hence their intent) are deleted."""
    gone, kept = _scenario()
    assert services.checkpoints_prune(batch_size=1) == len(gone)
    assert set(Checkpoint.objects.values_list("id", flat=True)) == kept
    assert services.checkpoints_prune() == 0


@pytest.mark.django_db(transaction=True)
def test_prune_run_twice_concurrently_deletes_each_once():
    """Two prunes at once (small batches, SKIP LOCKED) delete every prunable checkpoint exactly once."""
    wf = make_workflow()
    for i in range(30):
        _checkpoint(wf, f"i{i % 3}", "f")
    removed = race(2, lambda i: services.checkpoints_prune(batch_size=4))
    assert not raised(removed), removed
    assert sum(removed) == 27
    assert Checkpoint.objects.count() == 3
