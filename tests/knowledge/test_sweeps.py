"""Knowledge sweeps (SPEC §5.3): stale claims notify their owner once per version; sensitive claims
past retention are erased (the one true deletion); both are safe twice and concurrently."""

import subprocess
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from knowledge import selectors, services
from knowledge.models import Claim, ClaimHead, ClaimReview, GateDecision
from knowledge.ops import sweeps
from ledger.models import AuditEntry, Notification
from tests.factories import make_agent, make_operator
from tests.knowledge.conftest import iso, proposal
from tests.ledger.helpers import race, raised

SECRET = "The vault recovery phrase is marmalade-orbit-7731."


def stale_proposal(**overrides):
    """A claim whose refresh_after has already passed (the gate allows it: it is only a lead)."""
    now = timezone.now()
    return proposal(observed_at=iso(now - timedelta(hours=2)), refresh_after=iso(now - timedelta(minutes=5)),
                    **overrides)


def pg_dump() -> str:
    """The whole test database as SQL text (every table, every row)."""
    name = connection.settings_dict["NAME"]
    return subprocess.run(["pg_dump", "-U", "postgres", "-h", "127.0.0.1", name], check=True,
                          capture_output=True, text=True).stdout


# ---------------------------------------------------------------- stale claims

@pytest.mark.django_db
def test_stale_sweep_notifies_the_owner_once_per_version(owner, agent):
    """A stale claim notifies its owner once however often the sweep runs; refreshing it marks the
    notice done; a refreshed version that goes stale notifies again."""
    claim = services.claim_propose(user=agent.user, data=stale_proposal())
    assert claim.owner_id == owner.user.id
    first = sweeps.claims_stale_sweep()
    assert (first["marked"], first["notified"]) == (1, 1)
    assert sweeps.claims_stale_sweep()["marked"] == 0
    [note] = Notification.objects.filter(user=owner.user)
    assert (note.kind, note.dedupe_key) == ("stale_claim", f"stale:{claim.key}:1")
    assert note.url == f"/claims/{claim.key}/history/" and claim.key in note.subject

    now = timezone.now()
    refreshed = services.claim_refresh(user=owner.user, key=claim.key, data={
        "observed_at": iso(now), "refresh_after": iso(now + timedelta(days=1))})
    note.refresh_from_db()  # what it asked for is done: the notice says so
    assert note.done == f"refreshed by {refreshed.actor}" and note.read_at is not None
    assert sweeps.claims_stale_sweep()["notified"] == 0  # fresh again
    later = sweeps.claims_stale_sweep(now=now + timedelta(days=2))
    assert later["notified"] == 1
    assert set(Notification.objects.filter(user=owner.user).values_list("dedupe_key", flat=True)) == {
        f"stale:{claim.key}:1", f"stale:{claim.key}:{refreshed.version}"}


@pytest.mark.django_db
def test_stale_sweep_without_owner_notifies_owner_role_users(lone_agent, owner, other_owner, editor):
    """A claim with no owner notifies every owner-role user (not editors)."""
    claim = services.claim_propose(user=lone_agent.user, data=stale_proposal())
    assert claim.owner_id is None
    sweeps.claims_stale_sweep()
    assert set(Notification.objects.values_list("user_id", flat=True)) == {owner.user.id, other_owner.user.id}


@pytest.mark.django_db
def test_stale_sweep_skips_fresh_pending_and_tombstoned_claims(agent, editor, owner):
    """Only live claims past refresh_after are notified: not fresh ones, pending ones or tombstones."""
    services.claim_propose(user=agent.user, data=proposal())
    services.claim_propose(user=agent.user, data=stale_proposal(confidence="engineering-inference"))
    dead = services.claim_propose(user=agent.user, data=stale_proposal())
    services.claim_invalidate(user=editor.user, key=dead.key, reason="wrong")
    assert sweeps.claims_stale_sweep()["notified"] == 0
    assert not Notification.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_stale_sweep_run_twice_concurrently_notifies_each_claim_once():
    """Two sweeps at once (small batches, SKIP LOCKED) share the work: each stale claim, one notification."""
    owner, _ = make_operator("owner")
    agent, _ = make_agent(owner=owner)
    keys = {services.claim_propose(user=agent, data=stale_proposal()).key for _ in range(40)}
    reports = race(2, lambda i: sweeps.claims_stale_sweep(batch_size=3))
    assert not raised(reports), reports
    assert sum(r["marked"] for r in reports) == 40
    assert sorted(Notification.objects.values_list("dedupe_key", flat=True)) == sorted(f"stale:{k}:1" for k in keys)
    assert not ClaimHead.objects.filter(refresh_due_at__isnull=False).exists()


# ---------------------------------------------------------------- retention

def expired_sensitive_claim(owner, agent, **overrides):
    """A sensitive claim accepted an hour ago whose retention ran out a minute ago, a pending
    agent proposal of the same secret, and a refused proposal that quoted it."""
    past = timezone.now() - timedelta(hours=1)
    data = proposal(statement=SECRET, sensitivity="sensitive", source_refs=["https://vault.example.com/phrase"],
                    observed_at=iso(past - timedelta(minutes=5)),
                    retention_until=iso(timezone.now() - timedelta(minutes=1)), **overrides)
    claim = services.claim_propose(user=owner.user, data=data, now=past)
    pending = services.claim_propose(user=agent.user, data={**data, "key": claim.key}, now=past)
    assert (claim.status, pending.status) == ("active", "pending")
    with pytest.raises(services.WriteGateRejected):
        services.claim_propose(user=owner.user, data={**data, "key": claim.key, "retention_until": None}, now=past)
    return claim


@pytest.mark.django_db
def test_retention_sweep_erases_the_claim_and_leaves_a_tombstone_and_an_audit_entry(owner, agent):
    """Past retention_until: every version's statement and sources are gone, a retention_expired
    tombstone is the current value, an audit entry names the versions, the owner is told."""
    claim = expired_sensitive_claim(owner, agent)
    keeps = services.claim_propose(user=owner.user, data=proposal(
        sensitivity="sensitive", statement="still kept", retention_until=iso(timezone.now() + timedelta(days=1))))
    derived = services.claim_propose(user=owner.user, data=proposal(derived_from=[claim.key]))
    report = sweeps.claims_retention_sweep()
    assert (report["keys"], report["erased"], report["tombstones"]) == (1, 2, 1)
    versions = list(Claim.objects.filter(key=claim.key).order_by("version"))
    assert [(v.status, v.statement, v.source_refs) for v in versions] == [
        ("active", "", []), ("pending", "", []), ("invalidated", "", [])]
    assert versions[-1].reason == "retention_expired" and versions[0].erased_at is not None
    assert not GateDecision.objects.filter(key=claim.key, payload__isnull=False).exists()
    assert GateDecision.objects.filter(key=claim.key, outcome="rejected").exists()  # the record stays
    audit = AuditEntry.objects.get(action="retention_erase")
    assert (audit.target, audit.data["versions"], audit.outcome) == (claim.key, [1, 2], "done")
    assert Notification.objects.filter(user=owner.user, kind="retention_expired").count() == 1
    assert selectors.claims_live(user=owner.user, key=claim.key).count() == 0
    assert Claim.objects.get(id=keeps.id).statement == "still kept"
    assert ClaimReview.objects.filter(key=derived.key, source_key=claim.key, reason="derived_from_invalidated").exists()
    assert sweeps.claims_retention_sweep()["erased"] == 0
    with pytest.raises(services.Conflict):
        services.claim_accept(user=owner.user, key=claim.key, version=2)  # the erased pending version


@pytest.mark.django_db
def test_retention_sweep_leaves_unexpired_and_public_claims_alone(owner):
    """Sensitive claims within retention and non-sensitive ones are not touched."""
    sensitive = services.claim_propose(user=owner.user, data=proposal(
        sensitivity="sensitive", retention_until=iso(timezone.now() + timedelta(hours=1))))
    public = services.claim_propose(user=owner.user, data=proposal(sensitivity="public"))
    assert sweeps.claims_retention_sweep()["erased"] == 0
    assert sweeps.claims_retention_sweep(now=timezone.now() + timedelta(hours=2))["erased"] == 1
    assert Claim.objects.get(id=public.id).statement and not Claim.objects.get(id=sensitive.id).statement


@pytest.mark.django_db(transaction=True)
def test_retention_run_twice_concurrently_leaves_no_trace_of_the_statement_in_any_table():
    """Two sweeps at once erase once (one tombstone, one audit entry), and pg_dump of the whole
    database no longer contains the statement."""
    from tests.knowledge.conftest import Actor

    owner = Actor(*make_operator("owner"))
    agent = Actor(*make_agent(owner=owner.user))
    claim = expired_sensitive_claim(owner, agent)
    assert SECRET in pg_dump()  # the check can fail: the secret is there before the sweep
    reports = race(2, lambda i: sweeps.claims_retention_sweep())
    assert not raised(reports), reports
    assert sum(r["tombstones"] for r in reports) == 1 and sum(r["erased"] for r in reports) == 2
    assert AuditEntry.objects.filter(action="retention_erase", target=claim.key).count() == 1
    assert Claim.objects.filter(key=claim.key, reason="retention_expired").count() == 1
    dump = pg_dump()
    assert SECRET not in dump and "marmalade-orbit" not in dump
    assert "https://vault.example.com/phrase" not in dump
    assert claim.key in dump  # the key and its tombstone remain


@pytest.mark.django_db
def test_retention_path_is_the_only_way_past_the_guard(owner):
    """Outside the sweep a claim version still refuses UPDATE."""
    from django.db import DatabaseError, transaction

    claim = services.claim_propose(user=owner.user, data=proposal())
    with pytest.raises(DatabaseError), transaction.atomic():
        Claim.objects.filter(id=claim.id).update(statement="")
    assert Claim.objects.get(id=claim.id).statement


@pytest.mark.django_db
def test_a_claim_both_stale_and_flagged_is_one_claim_to_review(owner, agent):
    """The needs-a-human count reads claims to review once per key."""
    from ledger import selectors as ledger_selectors

    stale = services.claim_propose(user=agent.user, data=stale_proposal())
    assert ledger_selectors.needs_human(user=owner.user)["claims"] == 1
    ClaimReview.objects.create(key=stale.key, source_key="its/source", source_store_version=stale.store_version + 1,
                               reason="source_tombstoned", actor="system", created_at=timezone.now())
    assert selectors.claims_flagged(user=owner.user).filter(key=stale.key).exists()  # stale and flagged
    assert ledger_selectors.needs_human(user=owner.user)["claims"] == 1
