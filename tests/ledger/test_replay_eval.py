"""replay_eval: fault-injected episodes through the API, each decision checked against the reference model."""

import io
import re
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from ledger.models import ApiToken, ReplayEval, Run, Workflow
from ledger.replay.reference import ReferenceModel
from tests.factories import client_for, make_agent, make_operator, make_workflow

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=timezone.utc)
STAGES = ["draft", "push", "build", "deploy", "check"]


def _model(**fields):
    fields = {"stages": STAGES, "effect_stages": ["push", "deploy"], "max_retries": 3, "ttl_seconds": 60, **fields}
    return ReferenceModel(**fields)


def _decide(model, at, fp="a", policy="1", env="img:1"):
    return model.decide(fp=fp, policy=policy, env=env, now=T0 + timedelta(seconds=at))


def _run(model, at, fp="a", policy="1", env="img:1", run_id=None):
    expected = _decide(model, at, fp, policy, env)
    return model.run_decided(run_id=run_id or f"r{len(model.runs)}", fp=fp, policy=policy, env=env,
                             expected=expected), expected


def _events(model, run, at, *pairs):
    for i, (stage, kind) in enumerate(pairs):
        model.event(run, stage, kind, at=T0 + timedelta(seconds=at, milliseconds=i))


def test_reference_push_verified_then_deploy_timed_out_is_verify_only():
    """The model: a verified push then a deploy whose outcome was lost must be verified, never re-run."""
    model = _model()
    run, first = _run(model, 0)
    assert (first.outcome, first.reason_code, first.resume_from) == ("fresh", "no_checkpoint", "draft")
    _events(model, run, 1, ("draft", "started"), ("draft", "succeeded"), ("push", "started"), ("push", "succeeded"),
            ("push", "verified"), ("build", "started"), ("build", "succeeded"), ("deploy", "started"),
            ("deploy", "unknown"))
    model.lease_ran_out(run)
    again = _decide(model, 5)
    assert (again.outcome, again.reason_code, again.resume_from, again.verify_stages) == (
        "verify_only", "effect_unverified", "check", ("deploy",))
    assert run.state == "failed"


def test_reference_env_change_downgrades_only_results_after_the_last_verified_effect():
    """The model: a new image sends `build` (after the verified push) back to pending, not `draft`."""
    model = _model()
    run, _ = _run(model, 0)
    _events(model, run, 1, ("draft", "started"), ("draft", "succeeded"), ("push", "started"), ("push", "succeeded"),
            ("push", "verified"), ("build", "started"), ("build", "succeeded"))
    model.lease_ran_out(run)
    decision = _decide(model, 5, env="img:2")
    assert (decision.outcome, decision.reason_code, decision.resume_from) == (
        "resume", "env_changed_downgraded", "build")
    same_env = _model()
    assert same_env.first_not_done({"draft": "succeeded", "push": "verified", "build": "succeeded"}) == "deploy"


def test_reference_a_retried_run_nobody_leased_spends_no_retry():
    """The model (SPEC §3): on-call's retry starts the budget afresh, and a retried run that nobody leased
    in time never ran, so the next trigger resumes it instead of escalating again."""
    model = _model(max_retries=1)
    run, _ = _run(model, 0)
    _events(model, run, 1, ("draft", "started"), ("draft", "succeeded"), ("push", "started"), ("push", "failed"))
    escalated, decision = _run(model, 10)
    assert (decision.outcome, decision.reason_code) == ("escalated", "retry_budget_exhausted")
    retried = model.retried(escalated, now=T0 + timedelta(seconds=20))
    assert retried.outcome == "resume"
    model.queue_ran_out(escalated)
    after = _decide(model, 30)
    assert (after.outcome, after.reason_code) == ("resume", "resume_incomplete_stage"), after
    assert escalated.state == "failed"


def test_reference_retry_budget_expiry_policy_and_inputs():
    """The model: failures escalate at max_retries, then escalation_pending; expiry, policy and inputs say fresh."""
    model = _model(max_retries=3)
    run, _ = _run(model, 0)
    _events(model, run, 1, ("draft", "started"), ("draft", "succeeded"))
    model.lease_ran_out(run)  # the first failed run: its agent died
    for n in range(2):
        failing, decision = _run(model, 10 + n)
        assert decision.reason_code == "resume_incomplete_stage"
        _events(model, failing, 10.5 + n, ("push", "started"), ("push", "failed"))
    escalated, decision = _run(model, 20)
    assert (decision.outcome, decision.reason_code) == ("escalated", "retry_budget_exhausted")
    assert _decide(model, 21).reason_code == "escalation_pending"
    assert _decide(model, 22, fp="b").reason_code == "input_changed"
    assert _decide(model, 23, fp="a2", policy="2").reason_code == "policy_changed"
    assert model.retried(escalated, now=T0 + timedelta(seconds=24)).reason_code == "resume_incomplete_stage"
    model.lease_ran_out(escalated)
    assert _decide(model, 200).reason_code == "checkpoint_expired"


def test_reference_a_spent_day_escalates_one_trigger_then_noops_and_a_retry_goes_ahead():
    model = _model(cost_usd_per_day=Decimal("0.05"))
    run, expected = _run(model, 0)
    assert expected.outcome == "fresh"
    model.event(run, "draft", "started", at=T0 + timedelta(seconds=1))
    model.event(run, "draft", "succeeded", at=T0 + timedelta(seconds=2), cost=Decimal("0.04"))
    model.lease_ran_out(run)
    assert _decide(model, 10).outcome == "resume"  # under the budget
    model.day_cost += Decimal("0.01")  # (another run of the workflow's)
    escalated, expected = _run(model, 11)
    assert (expected.outcome, expected.reason_code) == ("escalated", "budget_exhausted")
    assert (_decide(model, 12, fp="b").outcome, _decide(model, 12, fp="b").reason_code) == ("noop", "budget_exhausted")
    assert _decide(model, 12).reason_code == "escalation_pending"  # §3's rule 1 comes first
    assert model.retried(escalated, now=T0 + timedelta(seconds=13)).reason_code == "resume_incomplete_stage"


@pytest.mark.slow  # its short-TTL episodes sleep past a real 1 s checkpoint TTL
@pytest.mark.django_db(transaction=True)
def test_replay_eval_passes_records_accuracy_and_metrics_show_it(client):
    """30 episodes: every decision right, no effect twice, a ReplayEval row; /metrics and the API show it (and
    none of the episodes' runs)."""
    out = io.StringIO()
    call_command("replay_eval", episodes=30, seed=20261130, stdout=out, stderr=io.StringIO())
    text = out.getvalue()
    assert "recovery accuracy" in text and "100.00%" in text and "replay_eval passed" in text
    assert "never_leased" in text  # a retried run nobody leased in time, decided right afterwards
    assert "escalated / budget_exhausted" in text and "noop / budget_exhausted" in text  # SPEC §16's day budget
    record = ReplayEval.objects.get()
    assert (record.episodes, record.seed, record.duplicates, record.unverified) == (30, 20261130, 0, 0)
    assert record.decisions > 100 and record.correct == record.decisions and record.accuracy == 1.0
    assert re.search(r"scratch ledger: runs +[1-9]", text) and "scratch ledger: p95_trigger_to_decision_ms" in text
    _, token = make_operator("viewer")
    body = client_for(token).get("/api/v1/metrics/").json()
    assert body["recovery_accuracy"]["accuracy"] == 1.0 and body["recovery_accuracy"]["seed"] == 20261130
    assert body["runs"] == 0 and body["p95_trigger_to_decision_ms"] is None  # the episodes ran elsewhere
    prometheus = client.get("/metrics").content.decode()
    assert "\nstateboard_recovery_accuracy 1.0\n" in prometheus
    assert "stateboard_trigger_to_decision_p95_seconds " not in prometheus  # no replayed run skews it


@pytest.mark.slow  # replay_eval in a scratch database of its own
@pytest.mark.django_db
def test_replay_eval_fails_when_one_recovery_rule_is_broken(monkeypatch):
    """Mutation: rule 3 answering `fresh` instead of `verify_only` makes replay_eval exit non-zero."""
    from ledger.domain import recovery

    original = recovery.recovery_decide

    def rule_3_broken(inp):
        decision = original(inp)
        if decision.outcome == "verify_only":
            return recovery.Decision("fresh", "no_checkpoint", resume_from=inp.workflow.stages[0])
        return decision

    monkeypatch.setattr(recovery, "recovery_decide", rule_3_broken)
    out = io.StringIO()
    with pytest.raises(CommandError, match="accuracy"):
        call_command("replay_eval", episodes=10, seed=11, stdout=out, stderr=io.StringIO())
    assert "MISMATCH" in out.getvalue() and '"outcome": "verify_only"' in out.getvalue()
    record = ReplayEval.objects.get()
    assert record.correct < record.decisions and record.accuracy < 1.0


@pytest.mark.slow  # replay_eval in a scratch database of its own
@pytest.mark.django_db
def test_replay_eval_writes_no_identity_workflow_or_run_into_the_configured_database():
    """The episodes' users, live tokens, workflows and runs go to a scratch database of their own, dropped at
    the end: the configured database's counts stay as they were; the report is printed, the figures recorded."""
    from django.contrib.auth import get_user_model
    from django.db import connection

    make_workflow(), make_agent()

    def counts():
        return [model.objects.count() for model in (get_user_model(), ApiToken, Workflow, Run)]

    before = counts()
    out, err = io.StringIO(), io.StringIO()
    call_command("replay_eval", episodes=3, seed=5, stdout=out, stderr=err)
    assert counts() == before
    assert "recovery accuracy" in out.getvalue() and "replay_eval passed" in out.getvalue()
    assert ReplayEval.objects.get().episodes == 3
    scratch = re.search(r"scratch database '?([^' ]+)'?", err.getvalue()).group(1)
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_database WHERE datname = %s", [scratch])
            assert cursor.fetchone()[0] == 0, f"{scratch} left behind"
    else:
        assert not Path(scratch).exists()
