"""The bulk loader writes rows the models read back as the services would have shaped them."""

import random

import pytest
from django.db import connection
from django.utils import timezone

from knowledge.models import Claim, ClaimHead
from ledger import selectors, services
from ledger.models import Checkpoint, Effect, LedgerEvent, Run
from ledger.ops.bench import loader

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _postgres_only():
    if connection.vendor != "postgresql":
        pytest.skip("the loader uses PostgreSQL COPY")


def test_loader_history_rows_hang_together():
    """Every run's events are seq 1..event_count ending at last_hash; checkpoints and effects belong to its intent."""
    history = loader.LedgerHistory(say=lambda line: None, seed=7)
    history.load(events_target=400, runs_target=40, label="test")
    assert history.totals["runs"] == Run.objects.count() >= 40
    assert history.totals["events"] == LedgerEvent.objects.count()
    assert history.totals["checkpoints"] == Checkpoint.objects.count() > 0
    assert history.totals["effects"] == Effect.objects.count() > 0
    for run in Run.objects.select_related("workflow"):
        seqs = list(LedgerEvent.objects.filter(run=run).order_by("seq").values_list("seq", "hash"))
        assert [s for s, _ in seqs] == list(range(1, run.event_count + 1))
        assert seqs[-1][1] == run.last_hash
    for checkpoint in Checkpoint.objects.select_related("run"):
        assert (checkpoint.run.workflow_id, checkpoint.run.intent) == (checkpoint.workflow_id, checkpoint.intent)
    for effect in Effect.objects.select_related("run__workflow"):
        assert effect.idempotency_key == services.effect_key_default(
            workflow_slug=effect.run.workflow.slug, intent=effect.intent, fingerprint=effect.input_fingerprint,
            stage=effect.stage)
    latest = Checkpoint.objects.order_by("-id").select_related("run").first()
    assert selectors.checkpoint_latest(run=latest.run) == latest


def test_claims_load_heads_point_at_the_latest_version():
    """One head per key, at its highest version; live exactly for the keys whose latest version is active."""
    loaded = loader.claims_load(system="load-test", prefix="load.test/", n_keys=30, rng=random.Random(3),
                                now=timezone.now())
    assert loader.claim_heads_build(system="load-test") == 30
    assert Claim.objects.filter(scope_system="load-test").count() == loaded.versions
    heads = {h.key: h for h in ClaimHead.objects.filter(system="load-test").select_related("current")}
    assert sorted(heads) == sorted(loaded.live_keys + loaded.dead_keys)
    for key, head in heads.items():
        newest = Claim.objects.filter(key=key).order_by("-version").first()
        assert head.current == newest and head.latest_version == newest.version
        assert head.live == (key in loaded.live_keys) == (newest.status == "active")


def test_rows_delete_removes_only_the_queryset_rows():
    """A filtered one-statement delete: the other rows stay."""
    loader.claims_load(system="load-del", prefix="load.del/", n_keys=5, rng=random.Random(1), now=timezone.now())
    loader.claim_heads_build(system="load-del")
    assert loader.rows_delete(ClaimHead.objects.filter(key__in=["load.del/k0000000", "load.del/k0000001"])) == 2
    assert sorted(ClaimHead.objects.filter(system="load-del").values_list("key", flat=True)) == [
        "load.del/k0000002", "load.del/k0000003", "load.del/k0000004"]
