"""SPEC §11.2 as a property: for any history built through the real API (staged runs, queued runs and
leases, effects, goals, approvals decided, escalations retried or abandoned), export → import into the
emptied database → every intent's next trigger gets the decision it would have got before."""

from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger import services
from ledger.models import Approval, Run
from stateboard.errors import DomainError
from tests.factories import client_for, make_agent, make_operator, make_workflow
from tests.ledger.helpers import AgentDriver
from tests.ledger.test_portability import _export, _import, _wipe, export_key  # noqa: F401 (the key)

pytestmark = [pytest.mark.django_db, pytest.mark.postgres, pytest.mark.slow]

INTENTS = ("i0", "i1", "i2")
STEPS = st.lists(st.tuples(
    st.sampled_from(["run", "staged", "queued_then_leased", "goal", "approval", "fail", "retry", "abandon",
                     "rollback", "executor"]),
    st.sampled_from(INTENTS), st.integers(0, 4), st.booleans()), min_size=2, max_size=7)


def _world():
    plain = make_workflow(stages=["fetch", "build", "push", "check"], effect_stages=["push"], approval_stages=[],
                          max_retries=1)
    gated = make_workflow(stages=["draft", "publish"], effect_stages=["publish"], approval_stages=["publish"],
                          executors={"publish": {"handler": "record", "config": {}}})
    agent = AgentDriver(client_for(make_agent()[1]), plain.slug)
    gated_agent = AgentDriver(agent.client, gated.slug)
    editor_user, editor_token = make_operator("editor")
    oncall_user, _ = make_operator("oncall")
    return plain, gated, agent, gated_agent, client_for(editor_token), editor_user, oncall_user


def _play(step, world) -> None:
    plain, gated, agent, gated_agent, editor, editor_user, oncall_user = world
    action, intent, depth, flag = step
    inputs = {"v": depth % 2}
    if action == "run":
        run = agent.trigger(inputs=inputs, intent=intent)
        if run["decision"]["outcome"] in ("fresh", "resume"):
            start = plain.stages.index(run["decision"]["resume_from"])
            for stage in plain.stages[start:start + depth]:
                agent.pass_stage(run["id"], stage, effect_stage=stage in plain.effect_stages, verify=flag)
                if stage in plain.effect_stages and not flag:
                    break  # the effect waits for its verification: the agent went away here
        if Run.objects.filter(id=run["id"], state__in=("fresh", "resume", "verify_only", "execute", "verify",
                                                       "checkpointed")).exists():
            # the agent is gone: its lease runs out, and the next trigger decides what is left
            Run.objects.filter(id=run["id"]).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    elif action == "staged":
        agent.trigger(inputs=inputs, intent=f"{intent}-staged", staged=True)
    elif action == "queued_then_leased":
        AgentDriver(editor, plain.slug).trigger(inputs=inputs, intent=f"{intent}-queued")
        if flag:  # 200, or 204 when the trigger found the intent busy and queued nothing
            agent.client.post("/api/v1/runs/lease/", {"workflows": [plain.slug]}, format="json")
    elif action == "goal":
        editor.post(f"/api/v1/workflows/{plain.slug}/goals/", {"intent": intent, "objective": f"o{depth}"},
                    format="json")
    elif action == "approval":
        run = gated_agent.trigger(inputs=inputs, intent=intent)
        if run["state"] in ("fresh", "resume") and run["decision"]["resume_from"] == "draft":
            gated_agent.pass_stage(run["id"], "draft")
            action_body = {"system": "cms", "operation": "publish", "target": intent, "summary": "s"}
            gated_agent.event(run["id"], "publish", "proposed", action=action_body)  # the executor's stage
            pending = Approval.objects.filter(run_id=run["id"], status="pending").first()
            if pending is not None and depth:
                services.approval_decide(approval_id=pending.id, user=editor_user, approve=flag, reason="checked")
    elif action == "fail":
        run = agent.trigger(inputs=inputs, intent=intent)
        if run["state"] in ("fresh", "resume"):
            agent.fail_stage(run["id"], run["decision"]["resume_from"])
    elif action == "rollback":
        services.runs_expire_leases()
        target = Run.objects.filter(workflow=plain, intent=intent, staged=False).exclude(state="noop").order_by(
            "-created_at", "-id").first()
        if target is not None:
            try:
                services.run_rollback(run_id=target.id, user=oncall_user, to_stage=plain.stages[depth % 3],
                                      reason="property", compensate=flag)
            except DomainError:
                pass  # an active run, say: the history goes on without it
    elif action == "executor":  # an approved publish performed by Stateboard's executor
        for held in Run.objects.filter(workflow=gated, lease_owner="system:executor").exclude(state="awaiting_approval"):
            services.executor_run(run_id=held.id, stage="publish")
    else:  # retry / abandon an escalated run of the intent, if there is one
        escalated = Run.objects.filter(workflow=plain, intent=intent, state="escalated").first()
        if escalated is not None:
            if action == "retry":
                services.run_retry(run_id=escalated.id, user=oncall_user, reason="try again")
            else:
                services.run_abandon(run_id=escalated.id, user=oncall_user, reason="not worth it")


def _decisions(world) -> dict:
    plain, gated = world[0], world[1]
    found = {}
    with transaction.atomic():
        for workflow in (plain, gated):
            for intent in sorted(set(INTENTS) | set(Run.objects.filter(workflow=workflow).values_list("intent", flat=True))):
                for v in (0, 1):
                    run, _ = services.run_trigger(workflow_slug=workflow.slug, intent=intent, inputs={"v": v},
                                                  actor="system", staged=intent.endswith("-staged"))
                    found[(workflow.slug, intent, v)] = (run.decision["outcome"], run.decision["reason_code"])
        transaction.set_rollback(True)
    return found


@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
@given(STEPS)
def test_export_import_then_trigger_decides_as_the_source_did(tmp_path_factory, steps):
    _wipe()
    world = _world()
    for step in steps:
        _play(step, world)
    before = _decisions(world)
    assert before  # every history decides something
    approvals = sorted(Approval.objects.values_list("id", "status", "decided_by", "consumed_seq"))
    exported = _export()
    _wipe()
    _import(tmp_path_factory.mktemp("import"), exported)
    assert sorted(Approval.objects.values_list("id", "status", "decided_by", "consumed_seq")) == approvals
    assert _decisions(world) == before
