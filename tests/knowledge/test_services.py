"""Services and selectors: versions, the append-only guard, citations, metrics, concurrency."""

import threading
from datetime import timedelta

import pytest
from django.db import IntegrityError, ProgrammingError, connection, transaction
from django.utils import timezone

from knowledge import selectors, services
from knowledge.models import Claim, ClaimCitation, ClaimHead, GateDecision
from stateboard.errors import Invalid
from tests.knowledge.conftest import iso, proposal

pytestmark = pytest.mark.django_db


def test_store_version_is_store_wide_and_monotonic(agent, editor):
    """Every version gets the next store_version across keys; the selector reports the latest."""
    assert selectors.store_version() == 0
    a = services.claim_propose(user=agent.user, data=proposal())
    b = services.claim_propose(user=agent.user, data=proposal())
    c = services.claim_invalidate(user=editor.user, key=a.key, reason="x")
    assert [a.store_version, b.store_version, c.store_version] == [1, 2, 3]
    assert [a.version, b.version, c.version] == [1, 1, 2]
    assert selectors.store_version() == 3


def test_claim_rows_refuse_update_and_delete(agent):
    """Claim versions are append-only in the database itself, for every connection."""
    claim = services.claim_propose(user=agent.user, data=proposal())
    with pytest.raises(ProgrammingError, match="Cannot"):
        with transaction.atomic():
            Claim.objects.filter(pk=claim.pk).update(statement="rewritten")
    with pytest.raises(ProgrammingError, match="Cannot"):
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("DELETE FROM knowledge_claim WHERE id = %s", [claim.pk])
    with pytest.raises(ProgrammingError, match="Cannot"):
        with transaction.atomic():
            GateDecision.objects.all().delete()
    assert Claim.objects.get(pk=claim.pk).statement == claim.statement


def test_claim_version_is_unique_per_key(agent):
    """Two rows with the same (key, version) are refused by the database."""
    claim = services.claim_propose(user=agent.user, data=proposal())
    with pytest.raises(IntegrityError):
        with transaction.atomic():
            Claim.objects.create(key=claim.key, version=1, store_version=10_000, status="active",
                                 actor="x", created_at=timezone.now())


def test_claim_rejection_recorded_even_though_the_write_rolls_back(agent):
    """The service raises 422 yet the rejection stays recorded; no version is written."""
    data = proposal(scope=None)
    with pytest.raises(Invalid) as exc:
        services.claim_propose(user=agent.user, data=data)
    assert exc.value.code == "write_gate_rejected"
    assert [r["code"] for r in exc.value.extra["reasons"]] == ["scope_missing"]
    assert GateDecision.objects.filter(key=data["key"], outcome="rejected").count() == 1
    assert not Claim.objects.filter(key=data["key"]).exists()
    assert not ClaimHead.objects.filter(key=data["key"]).exists()


def cite(agent, uris, *, event_id, at=None):
    services.claim_citations_record(event_id=event_id, run_id="run-1", actor=f"agent:{agent.user.username}",
                                    at=at or timezone.now(), uris=uris)


def test_claim_citations_count_stale_superseded_and_tombstoned(agent, editor):
    """Citing a stale, superseded or tombstoned claim counts as a stale claim cited as fact."""
    now = timezone.now()
    past = now - timedelta(days=5)
    fresh = services.claim_propose(user=agent.user, data=proposal())
    stale = services.claim_propose(user=agent.user, now=past, data=proposal(
        observed_at=iso(past - timedelta(hours=1)), refresh_after=iso(now - timedelta(minutes=1))))
    services.claim_propose(user=agent.user, data=proposal(key=fresh.key, statement="v2"))
    dead = services.claim_propose(user=agent.user, data=proposal())
    services.claim_invalidate(user=editor.user, key=dead.key, reason="wrong")
    cite(agent, [f"claim:{fresh.key}", f"claim:{stale.key}", f"claim:{fresh.key}@1", f"claim:{dead.key}",
                 "claim:no.such/key", "https://example.com/not-a-claim"], event_id=1)
    rows = {c.uri: (c.found, c.stale, c.superseded, c.tombstoned) for c in ClaimCitation.objects.all()}
    assert rows == {
        f"claim:{fresh.key}": (True, False, False, False),
        f"claim:{stale.key}": (True, True, False, False),
        f"claim:{fresh.key}@1": (True, False, True, False),
        f"claim:{dead.key}": (True, False, False, True),
        "claim:no.such/key": (False, False, False, False),
    }


def test_claim_citations_judge_the_moment_of_the_event(agent, editor):
    """A citation made before the claim went stale or was deleted is not counted."""
    now = timezone.now()
    claim = services.claim_propose(user=agent.user, now=now - timedelta(days=2), data=proposal(
        observed_at=iso(now - timedelta(days=3)), refresh_after=iso(now - timedelta(days=1))))
    cite(agent, [f"claim:{claim.key}"], event_id=1, at=now - timedelta(days=1, hours=1))
    cite(agent, [f"claim:{claim.key}"], event_id=2, at=now)
    assert list(ClaimCitation.objects.order_by("event_id").values_list("stale", flat=True)) == [False, True]


def test_claim_citations_recorded_once_per_event(agent):
    """The ledger may call twice for one event (a retried POST): one row per (event, uri)."""
    claim = services.claim_propose(user=agent.user, data=proposal())
    cite(agent, [f"claim:{claim.key}"], event_id=9)
    cite(agent, [f"claim:{claim.key}", f"claim:{claim.key}"], event_id=9)
    assert ClaimCitation.objects.count() == 1


def test_knowledge_metrics_rates_and_counts(agent, editor):
    """write_gate_rejection_rate and stale_claim_as_fact_rate come with their counts; None without data."""
    empty = selectors.knowledge_metrics()
    assert (empty["write_gate_rejection_rate"], empty["stale_claim_as_fact_rate"]) == (None, None)
    good = services.claim_propose(user=agent.user, data=proposal())
    services.claim_propose(user=agent.user, data=proposal(confidence="engineering-inference"))
    for bad in (proposal(source_refs=[]), proposal(refresh_after=None)):
        with pytest.raises(Invalid):
            services.claim_propose(user=agent.user, data=bad)
    services.claim_invalidate(user=editor.user, key=good.key, reason="x")
    cite(agent, [f"claim:{good.key}", "claim:unknown"], event_id=3)
    metrics = selectors.knowledge_metrics()
    assert metrics["write_gate"] == {"evaluated": 4, "rejected": 2, "pending": 1, "accepted": 1}
    assert metrics["write_gate_rejection_rate"] == 0.5
    assert (metrics["citations"]["total"], metrics["citations"]["tombstoned"], metrics["citations"]["unknown"]) == (
        2, 1, 1)
    assert metrics["stale_claim_as_fact_rate"] == 0.5
    later = selectors.knowledge_metrics(since=timezone.now() + timedelta(seconds=1))
    assert later["write_gate"]["evaluated"] == 0


@pytest.mark.django_db(transaction=True)
def test_claim_concurrent_proposals_get_distinct_versions(agent):
    """Writers racing on one key get versions 1..n and distinct, gapless store_versions."""
    key = proposal()["key"]
    errors, barrier = [], threading.Barrier(6)

    def write(i):
        try:
            barrier.wait()
            services.claim_propose(user=agent.user, data=proposal(key=key, statement=f"w{i}"))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=write, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    rows = list(Claim.objects.filter(key=key).order_by("version").values_list("version", "store_version"))
    assert [v for v, _ in rows] == [1, 2, 3, 4, 5, 6]
    assert [s for _, s in rows] == sorted(s for _, s in rows)
    assert ClaimHead.objects.get(key=key).current.version == 6


def test_claim_rejection_of_python_values_is_recorded(agent):
    """A service caller passing datetimes still gets its rejection recorded (stored JSON-safe)."""
    data = proposal(observed_at=timezone.now(), refresh_after=timezone.now() - timedelta(days=1))
    with pytest.raises(Invalid):
        services.claim_propose(user=agent.user, data=data)
    decision = GateDecision.objects.get(key=data["key"])
    assert decision.reasons[0]["code"] == "refresh_after_not_after_observed_at"
    assert isinstance(decision.payload["observed_at"], str)


def test_a_ledger_event_citing_a_stale_claim_is_counted_in_the_metrics(agent):
    """End to end: evidence `claim:<key>` on a posted event records the citation; /metrics shows the rate."""
    from tests.factories import client_for, make_workflow
    from tests.ledger.helpers import AgentDriver

    now = timezone.now()
    stale = services.claim_propose(user=agent.user, now=now - timedelta(days=3), data=proposal(
        observed_at=iso(now - timedelta(days=4)), refresh_after=iso(now - timedelta(days=1))))
    fresh = services.claim_propose(user=agent.user, data=proposal())
    workflow = make_workflow(stages=["assess"], effect_stages=[], approval_stages=[])
    driver = AgentDriver(client_for(agent.token), workflow.slug)
    run = driver.trigger()
    driver.event(run["id"], "assess", "started")
    driver.event(run["id"], "assess", "succeeded", evidence=[
        {"uri": f"claim:{stale.key}", "observed_at": iso(now)}, {"uri": f"claim:{fresh.key}", "observed_at": iso(now)}])
    assert ClaimCitation.objects.filter(stale=True).count() == 1
    metrics = driver.client.get("/api/v1/metrics/").json()
    assert metrics["stale_claim_as_fact_rate"] == 0.5
