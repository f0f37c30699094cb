"""Tombstone GC: only tombstones no live checkpoint could resurrect are removed."""

from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from knowledge import selectors, services
from knowledge.models import Claim, ClaimHead
from tests.knowledge.conftest import make_checkpoint, proposal

pytestmark = pytest.mark.django_db


def dead_claim(agent, editor, **overrides):
    """A claim with two versions, then invalidated; returns the tombstone."""
    first = services.claim_propose(user=agent.user, data=proposal(**overrides))
    services.claim_propose(user=agent.user, data=proposal(key=first.key))
    return services.claim_invalidate(user=editor.user, key=first.key, reason="wrong")


def test_gc_removes_a_tombstone_and_its_history_when_no_checkpoint_holds_it(agent, editor):
    """With every live boundary newer, the tombstone and the versions under it go; the key stays known."""
    tombstone = dead_claim(agent, editor)
    make_checkpoint(version_boundary=tombstone.store_version + 1)
    report = services.tombstones_gc()
    assert [(r["key"], r["store_version"], r["rows_deleted"]) for r in report["removed"]] == [
        (tombstone.key, tombstone.store_version, 3)]
    assert not Claim.objects.filter(key=tombstone.key).exists()
    head = ClaimHead.objects.get(key=tombstone.key)
    assert (head.current, head.gc_status, head.gc_store_version) == (None, "invalidated", tombstone.store_version)


def test_gc_keeps_a_tombstone_a_live_checkpoint_could_resurrect(agent, editor):
    """A non-expired checkpoint taken before the tombstone keeps it; an expired one does not."""
    tombstone = dead_claim(agent, editor)
    make_checkpoint(version_boundary=tombstone.store_version - 1, expires_in=-timedelta(seconds=1))
    make_checkpoint(version_boundary=tombstone.store_version)  # saw the tombstone, but is not newer
    assert services.tombstones_gc()["removed"] == []
    assert Claim.objects.get(key=tombstone.key, version=tombstone.version).status == "invalidated"


def test_gc_after_removal_a_snapshot_still_cannot_resurrect(agent, editor):
    """Even after the GC, reconciling an old snapshot of the key keeps it deleted."""
    first = services.claim_propose(user=agent.user, data=proposal(statement="old"))
    tombstone = services.claim_invalidate(user=editor.user, key=first.key, reason="wrong")
    services.tombstones_gc()
    answer = services.knowledge_reconcile(user=agent.user, entries=[
        {**proposal(key=first.key, statement="old"), "store_version": first.store_version}])
    assert answer["results"][0]["outcome"] == "kept_tombstone"
    assert answer["results"][0]["tombstone_store_version"] == tombstone.store_version
    assert list(selectors.claims_live(user=None, key=first.key)) == []


def test_gc_keeps_live_claims_and_later_versions(agent, editor, owner):
    """Active claims are never touched; a tombstone followed by a pending proposal stays."""
    live = services.claim_propose(user=agent.user, data=proposal())
    revoked = services.claim_propose(user=agent.user, data=proposal())
    services.claim_revoke(user=owner.user, key=revoked.key, reason="leak")
    pending = services.claim_propose(user=agent.user, data=proposal(key=revoked.key))
    assert pending.status == "pending"
    assert services.tombstones_gc()["removed"] == []
    assert Claim.objects.filter(key__in=[live.key, revoked.key]).count() == 4


def test_gc_removed_key_numbers_versions_on_and_stays_revoked(agent, owner):
    """After GC a revoked key still sends new proposals to its owner, with fresh version numbers."""
    claim = services.claim_propose(user=agent.user, data=proposal())
    services.claim_revoke(user=owner.user, key=claim.key, reason="leak")
    services.tombstones_gc()
    again = services.claim_propose(user=agent.user, data=proposal(key=claim.key))
    assert (again.status, again.version, again.pending_reasons) == ("pending", 3, ["revoked_key_needs_owner"])
    accepted = services.claim_accept(user=owner.user, key=claim.key)
    assert (accepted.status, accepted.version) == ("active", 4)


@pytest.mark.slow  # a property: 30 generated histories through the database (the full suite runs it)
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(st.sampled_from(["claim", "tombstone", "checkpoint", "expired_checkpoint"]),
                      min_size=1, max_size=14))
def test_gc_never_removes_what_a_live_checkpoint_could_resurrect(agent, editor, steps):
    """Random claims, tombstones and checkpoints: every tombstone at or after a live boundary survives GC."""
    from ledger.models import Checkpoint

    Checkpoint.objects.all().delete()  # each example starts with no checkpoint (rolled back after the test)
    live_boundaries, tombstones = [], []
    for step in steps:
        if step == "claim":
            services.claim_propose(user=agent.user, data=proposal())
        elif step == "tombstone":
            tombstones.append(dead_claim(agent, editor))
        else:
            boundary = selectors.store_version()
            expired = step == "expired_checkpoint"
            make_checkpoint(version_boundary=boundary, expires_in=timedelta(hours=-1 if expired else 1))
            if not expired:
                live_boundaries.append(boundary)
    removed = {r["key"] for r in services.tombstones_gc()["removed"]}
    floor = min(live_boundaries, default=None)
    for tombstone in tombstones:
        protected = floor is not None and tombstone.store_version >= floor
        assert (tombstone.key in removed) == (not protected)
        assert Claim.objects.filter(pk=tombstone.pk).exists() == protected
