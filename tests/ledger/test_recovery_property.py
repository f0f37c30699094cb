"""Random histories through the real services and PostgreSQL: no effect ever executes twice."""

from collections import Counter
from datetime import timedelta

import pytest
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger import services
from ledger.domain.machine import TRANSITIONS
from ledger.models import Effect, LedgerEvent, Run
from stateboard.errors import DomainError
from tests.factories import make_workflow

pytestmark = pytest.mark.django_db

EVIDENCE = [{"uri": "https://world.test/effect", "observed_at": "2026-11-29T12:00:00+00:00"}]
ACTIONS = st.sampled_from([
    "step", "step", "step", "step", "fail", "crash", "crash_before_report", "timeout", "trigger",
    "trigger", "input_change", "env_change",
])


class World:
    """The outside world and an honest agent: it executes an effect only after its start was accepted."""

    def __init__(self, workflow):
        self.workflow = workflow
        self.executions = Counter()  # idempotency key → times the world saw the effect happen
        self.inputs_version = 1
        self.env = "env-1"
        self.run = None
        self.to_verify = []

    def trigger(self):
        run, _ = services.run_trigger(workflow_slug=self.workflow.slug, intent="job",
                                      inputs={"v": self.inputs_version}, env_fingerprint=self.env, actor="agent:a")
        self.check_decision(run)
        if run.state in ("fresh", "resume", "verify_only"):
            self.run = run
            self.to_verify = list(run.decision["verify_effects"])
        return run

    def check_decision(self, run):
        outcome = run.decision["outcome"]
        effects = Effect.objects.filter(workflow=self.workflow, intent="job", input_fingerprint=run.input_fingerprint)
        statuses = {e.stage: e.status for e in effects}
        others_active = Run.objects.filter(workflow=self.workflow, intent="job", state__in=(
            "fresh", "resume", "verify_only", "execute", "checkpointed", "verify", "awaiting_approval",
            "compensate")).exclude(id=run.id).exists()
        if others_active:
            assert outcome == "noop"
            return
        if run.decision["reason_code"] == "escalation_pending":
            return
        if statuses.get("publish") == "verified":
            assert outcome == "noop", run.decision  # a verified final effect: the work is done
        elif any(s in ("attempted", "effective", "unknown") for s in statuses.values()):
            assert outcome == "verify_only", run.decision  # never a re-execution

    def append(self, stage, kind, **body):
        return services.event_append(run_id=self.run.id, body={"stage": stage, "kind": kind, **body},
                                     actor="agent:a")[0]

    def step(self, *, fail=False, crash_before_report=False, timeout=False):
        run = self.run = Run.objects.get(id=self.run.id)
        if run.is_terminal or run.state in ("escalated", "compensate"):
            self.run = None
            return
        if self.to_verify:
            key = self.to_verify.pop(0)
            effect = Effect.objects.get(idempotency_key=key)
            if self.executions[key]:
                self.append(effect.stage, "verified", evidence=EVIDENCE, idempotency_key=key)
            else:
                self.append(effect.stage, "failed", reason_code="effect_absent", idempotency_key=key)
            return
        if run.state == "verify":
            stage = run.current_stage
            key = run.stage_states[stage]["effect_key"]
            if self.executions[key]:
                self.append(stage, "verified", evidence=EVIDENCE)
            else:
                self.append(stage, "failed", reason_code="effect_absent")
            return
        if run.state == "execute":
            stage = run.current_stage
            if fail:
                if stage in self.workflow.effect_stages:
                    # An honest agent reports `failed` only when the attempt had no effect in the world.
                    self.executions[run.stage_states[stage]["effect_key"]] -= 1
                self.append(stage, "failed", reason_code="boom")
            elif stage in self.workflow.effect_stages:
                if timeout:
                    self.append(stage, "unknown", reason_code="timeout")
                else:
                    self.append(stage, "succeeded", effect={"system": "w", "operation": stage, "reference": "r"})
            else:
                self.append(stage, "succeeded")
            return
        stage = run.decision.get("resume_from") if run.state in ("fresh", "resume") else None
        from ledger.domain.recovery import WorkflowSpec, first_not_done

        spec = WorkflowSpec(tuple(self.workflow.stages), frozenset(self.workflow.effect_stages))
        stage = first_not_done(spec, {s: e["status"] for s, e in run.stage_states.items()})
        try:
            event = self.append(stage, "started")
        except DomainError as exc:
            assert exc.code == "effect_exists", exc.as_dict()
            return  # the agent verifies instead of re-executing; the next trigger decides
        if stage in self.workflow.effect_stages:
            self.executions[event.idempotency_key] += 1
            if crash_before_report:
                self.crash()  # it happened, then the agent died before reporting

    def crash(self):
        if self.run is not None:
            Run.objects.filter(id=self.run.id).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
            self.run = None


@pytest.mark.slow  # a property: 30 generated histories through the database (the full suite runs it)
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(st.lists(ACTIONS, min_size=5, max_size=40))
def test_random_histories_never_execute_an_effect_twice(actions):
    """Triggers, crashes, timeouts, input and env changes: every key executes at most once."""
    workflow = make_workflow(stages=["draft", "commit", "publish"], effect_stages=["commit", "publish"],
                             approval_stages=[], max_retries=3)
    world = World(workflow)
    for action in actions:
        if action in ("trigger", "input_change", "env_change") or world.run is None:
            if action == "input_change":
                world.inputs_version += 1
            elif action == "env_change":
                world.env = f"env-{world.inputs_version}-{len(world.executions)}"
            world.crash()
            world.trigger()
        elif action == "crash":
            world.crash()
        else:
            world.step(fail=action == "fail", crash_before_report=action == "crash_before_report",
                       timeout=action == "timeout")
        assert max(world.executions.values(), default=0) <= 1, world.executions
    # Closing: one more trigger applies the decision invariants to the final state.
    world.crash()
    world.trigger()
    from ledger.selectors import effects_rebuild_diff

    assert effects_rebuild_diff() == []
    taken = {(e.data["from"], e.data["cause"], e.data["to"])
             for e in LedgerEvent.objects.filter(run__workflow=workflow, kind="transition")}
    assert taken <= TRANSITIONS, taken - TRANSITIONS
