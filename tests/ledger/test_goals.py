"""Goal versions (SPEC §10.1): versions per intent; holding runs move to the new goal when they owe nothing."""

import pytest

from ledger.models import Approval, Effect, Goal, LedgerEvent, Run
from tests.factories import client_for, make_agent, make_operator, make_workflow
from tests.ledger.helpers import EVIDENCE, AgentDriver

pytestmark = pytest.mark.django_db

ACTION = {"system": "k8s", "operation": "deploy", "target": "prod", "summary": "deploy v2"}


class Team:
    def __init__(self, **fields):
        fields = {"stages": ["build", "deploy", "verify"], "effect_stages": ["deploy"], "approval_stages": [],
                  **fields}
        self.wf = make_workflow(**fields)
        _, agent_token = make_agent()
        self.agent = AgentDriver(client_for(agent_token), self.wf.slug)
        _, owner_token = make_operator("owner")
        self.owner = client_for(owner_token)
        self.editor_user, editor_token = make_operator("editor")
        self.editor = client_for(editor_token)

    def goal(self, client=None, expect=201, **body):
        body.setdefault("intent", self.wf.slug)
        response = (client or self.owner).post(f"/api/v1/workflows/{self.wf.slug}/goals/", body, format="json")
        assert response.status_code == expect, response.content
        return response.json()


def _kinds(run_id):
    return list(LedgerEvent.objects.filter(run_id=run_id).order_by("seq").values_list("kind", flat=True))


def _queued_then_leased(team, run_id):
    """A moved run is queued for an agent, its lease cleared (SPEC §10.1); an agent leases it again."""
    run = Run.objects.get(id=run_id)
    assert run.lease_owner == "" and run.lease_id is None and run.queued_until is not None
    assert team.agent.lease()["id"] == run_id


def test_goal_versions_amend_and_replace():
    """amend appends constraints and acceptance (objective kept unless given); replace takes the body whole."""
    team = Team()
    first = team.goal(objective="ship v2", constraints=["no downtime"], acceptance=["200 on /health"], change="replace")
    assert first["version"] == 1 and first["created_by"].startswith("user:")
    second = team.goal(constraints=["before 18:00"], change="amend")
    assert second["version"] == 2 and second["objective"] == "ship v2"
    assert second["constraints"] == ["no downtime", "before 18:00"]
    assert second["acceptance"] == ["200 on /health"]
    third = team.goal(client=team.agent.client, objective="ship v3", change="replace")
    assert third["version"] == 3 and third["constraints"] == [] and third["objective"] == "ship v3"
    other = team.goal(intent="another", objective="x")
    assert other["version"] == 1  # versions count per intent
    listed = team.agent.client.get(f"/api/v1/workflows/{team.wf.slug}/goals/", {"intent": team.wf.slug}).json()
    assert [g["version"] for g in listed["results"]] == [3, 2, 1]


def test_goal_create_refuses_bad_input_and_roles():
    """A viewer or on-call may not set goals (403); bad fields are 422 and write nothing."""
    team = Team()
    _, viewer_token = make_operator("viewer")
    _, oncall_token = make_operator("oncall")
    team.goal(client=client_for(viewer_token), expect=403, objective="x")
    team.goal(client=client_for(oncall_token), expect=403, objective="x")
    assert team.goal(expect=422, change="rewrite")["code"] == "validation_error"
    assert team.goal(expect=422, constraints="not a list")["code"] == "validation_error"
    assert team.goal(expect=422, intent="")["code"] == "validation_error"
    missing = team.owner.post("/api/v1/workflows/nope/goals/", {"intent": "x"}, format="json")
    assert missing.status_code == 404
    assert not team.agent.client.get(f"/api/v1/workflows/{team.wf.slug}/goals/").json()["results"]


def test_trigger_records_goal_version_in_the_fingerprint():
    """A run records the intent's latest goal version; the fingerprint (and so the effect keys) changes with it."""
    team = Team()
    before = team.agent.trigger(inputs={"v": 1}, intent="a")
    assert before["goal_version"] is None
    team.goal(intent="b", objective="x")
    after = team.agent.trigger(inputs={"v": 1}, intent="b")
    assert after["goal_version"] == 1
    from ledger.services import input_fingerprint

    goal_less = input_fingerprint(workflow_slug=team.wf.slug, intent="b", inputs={"v": 1},
                                  policy_version=team.wf.policy_version)
    assert after["input_fingerprint"] != goal_less
    assert after["input_fingerprint"] == input_fingerprint(workflow_slug=team.wf.slug, intent="b", inputs={"v": 1},
                                                           policy_version=team.wf.policy_version, goal_version=1)


def test_goal_change_between_stages_moves_the_run_at_once():
    """A run between stages is decided again: goal_changed {from, to}, then fresh / goal_changed."""
    team = Team()
    run = team.agent.trigger()
    team.agent.pass_stage(run["id"], "build")
    old_fp = run["input_fingerprint"]
    answer = team.goal(objective="ship it carefully")
    assert answer["moved"] == [run["id"]] and answer["deferred"] == []
    moved = team.agent.run(run["id"])
    assert moved["state"] == "fresh" and moved["decision"]["reason_code"] == "goal_changed"
    assert moved["goal_version"] == 1 and moved["input_fingerprint"] != old_fp
    assert moved["decision"]["resume_from"] == "build"  # the old goal's results are not taken for the new one
    changed = LedgerEvent.objects.get(run_id=run["id"], kind="goal_changed")
    assert changed.data == {"from": None, "to": 1}
    assert _kinds(run["id"])[-5:] == ["transition", "transition", "decided", "transition", "released"]
    assert team.agent.client.get(f"/api/v1/runs/{run['id']}/verify-chain/").json()["ok"] is True
    refused = team.agent.event(run["id"], "build", "started", expect=409)  # queued: the old lease is gone
    assert refused["code"] == "not_leased"
    _queued_then_leased(team, run["id"])
    team.agent.pass_stage(run["id"], "build")  # it goes on under the new goal


def test_goal_change_during_execute_records_the_outcome_then_moves():
    """In execute the run keeps its goal: the outcome is recorded under it, then the run is moved."""
    team = Team()
    run = team.agent.trigger()
    team.agent.event(run["id"], "build", "started")
    answer = team.goal(objective="new goal")
    assert answer["deferred"] == [run["id"]] and answer["moved"] == []
    assert Run.objects.get(id=run["id"]).state == "execute"
    succeeded = team.agent.event(run["id"], "build", "succeeded")
    assert succeeded["input_fingerprint"] == run["input_fingerprint"]  # recorded under the old goal
    moved = team.agent.run(run["id"])
    assert moved["state"] == "fresh" and moved["decision"]["reason_code"] == "goal_changed"
    assert moved["goal_version"] == 1 and not Run.objects.get(id=run["id"]).goal_outdated
    _queued_then_leased(team, run["id"])  # the poster's lease was not renewed by the move


def test_goal_change_during_an_effect_waits_for_its_verification():
    """An attempted effect is owed to the world: no stage may start under the old goal until it is verified."""
    team = Team()
    run = team.agent.trigger()
    team.agent.pass_stage(run["id"], "build")
    team.agent.event(run["id"], "deploy", "started")
    team.agent.event(run["id"], "deploy", "succeeded", effect={"system": "k8s", "operation": "deploy", "reference": "d1"})
    team.goal(objective="new goal")
    refused = team.agent.event(run["id"], "verify", "started", expect=409)
    assert refused["code"] == "goal_superseded"
    team.agent.event(run["id"], "deploy", "verified", evidence=EVIDENCE)
    moved = team.agent.run(run["id"])
    assert moved["state"] == "fresh" and moved["decision"]["reason_code"] == "goal_changed"
    assert Effect.objects.get(run_id=run["id"]).status == "verified"  # the world holds it, under the old key
    _queued_then_leased(team, run["id"])


def test_goal_change_voids_pending_and_approved_permits():
    """Pending requests of a moved run expire; an approved, unconsumed permit no longer covers the inputs."""
    team = Team(approval_stages=["deploy"])
    run = team.agent.trigger()
    team.agent.pass_stage(run["id"], "build")
    request = team.agent.client.post(f"/api/v1/runs/{run['id']}/approvals/",
                                     {"kind": "high_impact", "stage": "deploy", "action": ACTION}, format="json")
    assert request.status_code == 201
    team.goal(objective="first change")
    approval = Approval.objects.get(id=request.json()["id"])
    assert approval.status == "expired" and team.agent.run(run["id"])["state"] == "fresh"
    late = team.editor.post(f"/api/v1/approvals/{approval.id}/approve/", {}, format="json")
    assert late.status_code == 409 and late.json()["code"] == "approval_decided"

    _queued_then_leased(team, run["id"])
    team.agent.pass_stage(run["id"], "build")
    request = team.agent.client.post(f"/api/v1/runs/{run['id']}/approvals/",
                                     {"kind": "high_impact", "stage": "deploy", "action": ACTION}, format="json")
    assert team.editor.post(f"/api/v1/approvals/{request.json()['id']}/approve/", {}, format="json").status_code == 200
    team.goal(objective="second change")  # approved, not yet consumed
    _queued_then_leased(team, run["id"])
    team.agent.pass_stage(run["id"], "build")
    void = team.agent.event(run["id"], "deploy", "started", action=ACTION, expect=409)
    assert void["code"] == "approval_void" and "inputs_changed" in void["reasons"]


def test_started_naming_an_old_goal_version_is_refused():
    """An agent that names the goal version it works under is fenced once the run moved on."""
    team = Team()
    run = team.agent.trigger()
    team.goal(objective="x")
    _queued_then_leased(team, run["id"])
    stale = team.agent.event(run["id"], "build", "started", goal_version=None, expect=409)
    assert stale["code"] == "goal_superseded"
    team.agent.event(run["id"], "build", "started", goal_version=1)


def test_oncall_retry_decides_under_the_latest_goal():
    """An escalated run retried after a goal change is decided fresh / goal_changed."""
    team = Team(max_retries=1)
    escalated = team.agent.escalated_run()
    team.goal(objective="x")
    _, oncall_token = make_operator("oncall")
    retried = client_for(oncall_token).post(f"/api/v1/runs/{escalated['id']}/retry/", {}, format="json").json()
    assert retried["state"] == "fresh" and retried["decision"]["reason_code"] == "goal_changed"
    assert retried["goal_version"] == 1


def test_goal_change_queues_the_moved_run_for_any_agent_and_fences_the_old_lease():
    """A run moved by an owner's goal change is queued, not kept by its old holder: the old lease is
    refused, and the next agent's lease is a new one."""
    team = Team()
    run = team.agent.trigger()
    old_lease = Run.objects.get(id=run["id"]).lease_id
    team.agent.pass_stage(run["id"], "build")
    _, other_token = make_agent()
    other = AgentDriver(client_for(other_token), team.wf.slug)
    assert team.goal(objective="set by the owner")["moved"] == [run["id"]]
    moved = Run.objects.get(id=run["id"])
    assert moved.state == "fresh" and moved.lease_owner == "" and moved.lease_id is None
    assert moved.queued_at is not None and moved.queued_until is not None
    stale = team.agent.event(run["id"], "build", "started", lease_id=str(old_lease), expect=409)
    assert stale["code"] == "not_leased"
    leased = other.lease()
    assert leased["id"] == run["id"] and leased["lease"]["owner"].startswith("agent:")
    assert Run.objects.get(id=run["id"]).lease_id not in (None, old_lease)
    assert team.agent.event(run["id"], "build", "started", expect=409)["code"] == "lease_held"
    other.pass_stage(run["id"], "build")


def test_an_agent_may_not_change_the_goal_of_a_run_another_agent_holds():
    """SPEC §11.1: another agent's goal post is 409 lease_held and changes nothing (no takeover)."""
    team = Team()
    run = team.agent.trigger()
    _, other_token = make_agent()
    refused = team.goal(client=client_for(other_token), objective="takeover", expect=409)
    assert refused["code"] == "lease_held"
    assert Run.objects.get(id=run["id"]).lease_owner == run["lease"]["owner"]
    assert Goal.objects.filter(workflow=team.wf).count() == 0


def test_a_run_the_posting_agent_holds_stays_its_own_under_a_new_lease_id():
    """The holder's own goal post moves its run and keeps it leased to it, under a new lease id."""
    team = Team()
    run = team.agent.trigger()
    team.agent.pass_stage(run["id"], "build")
    old = Run.objects.get(id=run["id"])
    assert team.goal(client=team.agent.client, objective="mine")["moved"] == [run["id"]]
    moved = Run.objects.get(id=run["id"])
    assert moved.lease_owner == old.lease_owner and moved.lease_id not in (None, old.lease_id)
    assert moved.queued_until is None
    team.agent.pass_stage(run["id"], "build")
