"""The classic field failures, end to end through the API: every decision right, zero duplicate effects."""

from datetime import timedelta

import pytest
from django.utils import timezone

from ledger.models import Effect, LedgerEvent, Run
from ledger.selectors import effects_rebuild_diff
from tests.factories import client_for, make_agent, make_workflow
from tests.ledger.helpers import EVIDENCE, AgentDriver

pytestmark = pytest.mark.django_db

STAGES = ["discovery", "assessment", "draft", "build", "commit", "push", "deploy", "verify"]


@pytest.fixture
def agent():
    wf = make_workflow(approval_stages=[])
    _, token = make_agent()
    return AgentDriver(client_for(token), wf.slug), wf


def _executed_twice() -> int:
    """Idempotency keys with more than one executed outcome in the ledger (the duplicate side-effect count)."""
    from django.db.models import Count

    return (LedgerEvent.objects.filter(kind__in=("succeeded", "unknown"), idempotency_key__gt="")
            .values("idempotency_key").annotate(n=Count("id")).filter(n__gt=1).count())


def _expire_lease(run_id):
    Run.objects.filter(id=run_id).update(lease_expires_at=timezone.now() - timedelta(seconds=1))


def test_five_duplicate_triggers_make_one_run(agent):
    """Five deliveries of one trigger key return the same run; new keys while it runs are noops."""
    driver, wf = agent
    first = driver.trigger(trigger_key="slot-1", intent="daily")
    for _ in range(4):
        again = driver.trigger(trigger_key="slot-1", intent="daily", expect=200)
        assert again["id"] == first["id"] and again["duplicate"] is True
    for n in range(5):
        other = driver.trigger(trigger_key=f"other-{n}", intent="daily", expect=201)
        assert other["decision"]["outcome"] == "noop"
        assert other["decision"]["reason_code"] == "active_run_exists"
        assert other["decision"]["prior_run"] == first["id"]
    mismatch = driver.client.post("/api/v1/runs/", {"workflow": wf.slug, "intent": "daily", "trigger_key": "slot-1",
                                                     "inputs": {"v": 2}}, format="json")
    assert mismatch.status_code == 409 and mismatch.json()["code"] == "trigger_key_mismatch"
    assert Run.objects.filter(workflow=wf, trigger_key="slot-1").count() == 1


def test_five_deploys_succeeded_but_never_verified_are_verified_not_repeated(agent):
    """The agent died after deploy succeeded; each next trigger is verify_only and nothing deploys twice."""
    driver, wf = agent
    for n in range(5):
        intent = f"post-{n}"
        run = driver.trigger(intent=intent, inputs={"post": n})
        for stage in STAGES[:6]:
            driver.pass_stage(run["id"], stage, effect_stage=stage in wf.effect_stages)
        driver.event(run["id"], "deploy", "started")
        driver.event(run["id"], "deploy", "succeeded",
                     effect={"system": "k8s", "operation": "deploy", "reference": f"dep-{n}"})
        _expire_lease(run["id"])  # the agent died before verifying
        retry = driver.trigger(intent=intent, inputs={"post": n})
        decision = retry["decision"]
        assert (decision["outcome"], decision["reason_code"]) == ("verify_only", "effect_unverified")
        deploy_key = Effect.objects.get(run_id=run["id"], stage="deploy").idempotency_key
        assert decision["verify_effects"] == [deploy_key]
        assert decision["resume_from"] == "verify"
        refused = driver.event(retry["id"], "deploy", "started", expect=409)
        assert refused["code"] == "illegal_transition"
        driver.event(retry["id"], "deploy", "verified", evidence=EVIDENCE)
        driver.pass_stage(retry["id"], "verify")
        assert driver.run(retry["id"])["state"] == "completed"
        done = driver.trigger(intent=intent, inputs={"post": n})
        assert done["decision"]["reason_code"] == "verified_effect_same_fingerprint"
    assert Effect.objects.filter(workflow=wf, status="verified", stage="deploy").count() == 5
    assert _executed_twice() == 0
    assert effects_rebuild_diff() == []


def test_five_source_updates_start_fresh(agent):
    """New source versions change the fingerprint: fresh / input_changed, and effects run for the new input."""
    driver, wf = agent
    for version in range(1, 6):
        run = driver.trigger(intent="report", inputs={"source": version})
        expected = ("fresh", "no_checkpoint") if version == 1 else ("fresh", "input_changed")
        assert (run["decision"]["outcome"], run["decision"]["reason_code"]) == expected
        for stage in STAGES[:5]:
            driver.pass_stage(run["id"], stage, effect_stage=stage in wf.effect_stages)
        _expire_lease(run["id"])
    keys = list(Effect.objects.filter(workflow=wf, stage="commit").values_list("idempotency_key", flat=True))
    assert len(keys) == len(set(keys)) == 5
    assert _executed_twice() == 0


def test_five_build_failures_resume_then_escalate(agent):
    """A failing build resumes from build while retries last, then escalates once; later triggers are noops."""
    driver, wf = agent
    run = driver.trigger(intent="nightly")
    for stage in STAGES[:3]:
        driver.pass_stage(run["id"], stage)
    decisions = []
    for attempt in range(5):
        if run["state"] in ("fresh", "resume"):
            driver.event(run["id"], "build", "started")
            driver.event(run["id"], "build", "failed", reason_code="tests_red")
        run = driver.trigger(intent="nightly")
        decisions.append((run["decision"]["outcome"], run["decision"]["reason_code"], run["decision"]["resume_from"]))
    assert decisions[:2] == [("resume", "resume_incomplete_stage", "build")] * 2
    assert decisions[2] == ("escalated", "retry_budget_exhausted", "build")
    assert decisions[3:] == [("noop", "escalation_pending", None)] * 2
    assert Run.objects.filter(workflow=wf, intent="nightly", state="failed").count() == 3
    assert Run.objects.filter(workflow=wf, intent="nightly", state="escalated").count() == 1


def test_unknown_outcome_is_verified_and_absent_effect_runs_again(agent):
    """A timeout leaves the effect unknown: verify_only; found absent, the stage may run again, once."""
    driver, wf = agent
    run = driver.trigger(intent="t")
    for stage in STAGES[:4]:
        driver.pass_stage(run["id"], stage)
    driver.event(run["id"], "commit", "started")
    driver.event(run["id"], "commit", "unknown", reason_code="timeout")
    _expire_lease(run["id"])
    retry = driver.trigger(intent="t")
    assert retry["decision"]["outcome"] == "verify_only"
    driver.event(retry["id"], "commit", "failed", reason_code="effect_absent")
    assert driver.run(retry["id"])["state"] == "checkpointed"
    driver.pass_stage(retry["id"], "commit", effect_stage=True)
    effect = Effect.objects.get(workflow=wf, stage="commit")
    assert (effect.status, effect.attempts) == ("verified", 2)
    assert effects_rebuild_diff() == []


def test_lease_expiry_fails_the_dead_run_and_counts_it(agent):
    """A run whose agent went silent is moved to failed by the next trigger (a transition event)."""
    driver, wf = agent
    run = driver.trigger(intent="x")
    driver.pass_stage(run["id"], "discovery")
    _expire_lease(run["id"])
    nxt = driver.trigger(intent="x")
    assert nxt["decision"]["outcome"] == "resume"
    dead = Run.objects.get(id=run["id"])
    assert dead.state == "failed"
    last = LedgerEvent.objects.filter(run=dead).order_by("-seq").first()
    assert (last.kind, last.reason_code, last.actor) == ("transition", "lease_expired", "system")


def test_env_change_downgrades_through_the_api(agent):
    """A new image tag after build: non-effect stages go back to pending, verified effects stay."""
    driver, wf = agent
    run = driver.trigger(intent="e", env_fingerprint="img:1")
    for stage in STAGES[:4]:
        driver.pass_stage(run["id"], stage)
    _expire_lease(run["id"])
    again = driver.trigger(intent="e", env_fingerprint="img:2")
    assert (again["decision"]["outcome"], again["decision"]["reason_code"]) == ("resume", "env_changed_downgraded")
    assert again["decision"]["resume_from"] == "discovery"
