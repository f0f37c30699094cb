"""Random histories with goal changes and rollbacks, through the real services and PostgreSQL."""

from collections import Counter
from datetime import timedelta

import pytest
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger import services
from ledger.domain.recovery import WorkflowSpec, first_not_done, stage_done
from ledger.models import Approval, Effect, Goal, Run
from ledger.selectors import effects_rebuild_diff
from stateboard.errors import DomainError
from stateboard.roles import actor_for
from tests.factories import make_agent, make_operator, make_workflow

pytestmark = pytest.mark.django_db

STAGES = ["draft", "commit", "deploy", "check"]
EFFECT_STAGES = frozenset({"commit", "deploy"})
SPEC = WorkflowSpec(tuple(STAGES), EFFECT_STAGES)
EVIDENCE = [{"uri": "https://world.test/effect", "observed_at": "2026-11-29T12:00:00+00:00"}]
SIMPLE = st.sampled_from(["step", "step", "step", "step", "step", "step", "fail", "timeout", "crash", "trigger",
                          "goal"])
ACTIONS = st.one_of(SIMPLE, SIMPLE, SIMPLE, st.tuples(st.just("rollback"), st.sampled_from(STAGES), st.booleans()))


class World:
    """The outside world and an honest agent: it performs an effect only after its claim was accepted."""

    def __init__(self, workflow, oncall, editor):
        self.workflow, self.oncall, self.editor = workflow, oncall, editor
        self.agent = make_agent()[0]
        self.actor = actor_for(self.agent)
        self.executions = Counter()  # idempotency key → times the world saw the effect happen
        self.run = None
        self.to_verify = []
        self.untrusted: set[str] = set()  # stages rolled back and not executed again since

    def latest_goal(self):
        return Goal.objects.filter(workflow=self.workflow, intent="job").order_by("-version") \
            .values_list("version", flat=True).first()

    def adopt(self, run, *, decided=False):
        """Go on with the run while it works; a new decision says which effects to verify first."""
        run = Run.objects.get(id=run.id)
        self.check_no_untrusted_done(run)
        if run.queued_until is not None:  # decided again by a goal change or a rollback: queued, leased anew
            leased = services.run_lease(user=self.agent, workflows=[self.workflow.slug])
            assert leased is not None and leased.id == run.id
            run = Run.objects.get(id=run.id)
        if run.state in ("fresh", "resume", "verify_only", "checkpointed", "execute", "verify"):
            self.run = run
            if decided:
                self.to_verify = list(run.decision["verify_effects"])
        else:
            self.run = None

    def check_no_untrusted_done(self, run):
        done = {s for s, e in run.stage_states.items() if stage_done(SPEC, s, e.get("status"))}
        assert not done & self.untrusted, (done, self.untrusted, run.decision)

    def trigger(self):
        run, _ = services.run_trigger(workflow_slug=self.workflow.slug, intent="job", inputs={"v": 1},
                                      actor=self.actor)
        self.adopt(run, decided=True)

    def append(self, stage, kind, **body):
        return services.event_append(run_id=self.run.id, body={"stage": stage, "kind": kind, **body},
                                     actor=self.actor)[0]

    def passed(self, stage):
        self.untrusted.discard(stage)

    def step(self, *, fail=False, timeout=False, crash=False):
        """One stage: verify what is owed first; else start the next stage and report its outcome."""
        run = self.run = Run.objects.get(id=self.run.id)
        if run.is_terminal or run.state in ("escalated", "compensate", "awaiting_approval"):
            self.run = None
            return
        if self.to_verify or run.state == "verify":
            key = self.to_verify.pop(0) if self.to_verify else run.stage_states[run.current_stage]["effect_key"]
            effect = Effect.objects.get(idempotency_key=key)
            if self.executions[key]:
                self.append(effect.stage, "verified", evidence=EVIDENCE, idempotency_key=key)
                self.passed(effect.stage)
            else:
                self.append(effect.stage, "failed", reason_code="effect_absent", idempotency_key=key)
            self.adopt(run)
            return
        stage = first_not_done(SPEC, {s: e["status"] for s, e in run.stage_states.items()})
        try:
            event = self.append(stage, "started")
        except DomainError as exc:
            assert exc.code in ("effect_exists", "goal_superseded"), exc.as_dict()
            if exc.code == "goal_superseded":
                assert run.goal_outdated
            self.run = None
            return
        # Never a stage started under an outdated goal.
        assert Run.objects.get(id=run.id).goal_version == self.latest_goal()
        effect_stage = stage in EFFECT_STAGES
        if effect_stage and not fail:
            self.executions[event.idempotency_key] += 1  # the world performs it
        if crash:
            self.crash()
        elif fail:
            self.append(stage, "failed", reason_code="boom")  # honest: it did not happen
        elif effect_stage and timeout:
            self.append(stage, "unknown", reason_code="timeout")
        elif effect_stage:
            self.append(stage, "succeeded", effect={"system": "w", "operation": stage, "reference": f"r-{event.id}"})
            self.append(stage, "verified", evidence=EVIDENCE)
            self.passed(stage)
        else:
            self.append(stage, "succeeded")
            self.passed(stage)
        if self.run is not None:
            self.adopt(run)

    def crash(self):
        if self.run is not None:
            Run.objects.filter(id=self.run.id).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
            self.run = None

    def goal(self):
        services.goal_create(workflow_slug=self.workflow.slug, intent="job", objective="o", change="amend",
                             constraints=[f"c{len(self.executions)}"], user=self.oncall_owner)
        if self.run is not None:
            before = self.run.decided_at
            self.adopt(self.run)
            if self.run is not None and self.run.decided_at != before:
                self.to_verify = []  # moved to the new goal: decided fresh

    def rollback(self, to_stage, compensate):
        services.runs_expire_leases()  # the crashed agent's run is failed first (the lease sweep)
        target = (Run.objects.filter(workflow=self.workflow, intent="job", staged=False).exclude(state="noop")
                  .order_by("-created_at", "-id").first())
        if target is None:
            return
        try:
            run = services.run_rollback(run_id=target.id, user=self.oncall, to_stage=to_stage,
                                        reason="property", compensate=compensate)
        except DomainError as exc:
            assert exc.code in ("run_active", "active_run_exists"), exc.as_dict()
            return
        self.untrusted |= set(STAGES[STAGES.index(to_stage):])
        if run.state == "compensate":
            approval = Approval.objects.get(run=run, kind="compensation", status="pending")
            services.approval_decide(approval_id=approval.id, user=self.editor, approve=True)
            leased = services.run_lease(user=self.agent, workflows=[self.workflow.slug])  # queued once approved
            assert leased is not None and leased.id == run.id
            services.event_append(run_id=run.id, body={"stage": run.current_stage, "kind": "compensated",
                                                       "action": approval.action, "evidence": EVIDENCE},
                                  actor=self.actor)
        self.adopt(run, decided=True)


@pytest.mark.slow  # a property: 30 generated histories through the database (the full suite runs it)
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(st.lists(ACTIONS, min_size=5, max_size=40))
def test_histories_with_goal_changes_and_rollbacks_keep_their_promises(actions):
    """No key is executed twice; no stage starts under an outdated goal; rolled-back stages are not done
    until executed again."""
    workflow = make_workflow(stages=STAGES, effect_stages=sorted(EFFECT_STAGES), approval_stages=[], max_retries=3)
    oncall, _ = make_operator("oncall")
    owner, _ = make_operator("owner")
    editor, _ = make_operator("editor")
    world = World(workflow, oncall, editor)
    world.oncall_owner = owner
    for action in actions:
        if isinstance(action, tuple):
            world.crash()
            world.rollback(action[1], action[2])
        elif action == "goal":
            world.goal()
        elif action == "trigger" or world.run is None:
            world.crash()
            world.trigger()
        else:
            world.step(fail=action == "fail", timeout=action == "timeout", crash=action == "crash")
        assert max(world.executions.values(), default=0) <= 1, world.executions
    world.crash()
    world.trigger()
    assert effects_rebuild_diff() == []
