"""Amending an action (SPEC §17): an eligible approver amends a pending request instead of deciding it; the new
action satisfies the stage's action_schema; the old request is voided (expired, approval_voided ``amended``); the
new one is the amender's (they cannot approve it) under the same rules; only the amended action's digest finds
the permit."""

import pytest
from django.utils import timezone

from ledger import services
from ledger.models import Approval, AuditEntry, LedgerEvent, Run
from stateboard.errors import Conflict
from tests.ledger.test_approvals import ACTION, Crew, _events
from tests.ledger.test_portability import _export, _import, _lines, _signed, _wipe, export_key  # noqa: F401

pytestmark = pytest.mark.django_db

SCHEMA = {"type": "object", "required": ["system", "operation", "target", "summary"],
          "properties": {"system": {"const": "k8s"}, "operation": {"enum": ["deploy", "canary"]},
                         "target": {"type": "string", "pattern": "^(staging|prod)/"},
                         "summary": {"type": "string", "maxLength": 200}, "replicas": {"type": "integer"}},
          "additionalProperties": False}
AMENDED = {**ACTION, "operation": "canary", "summary": "Canary build 42 on 10 % first", "replicas": 2}


def _crew(**rule) -> Crew:
    return Crew(approval_rules={"deploy": {"action_schema": SCHEMA, **rule}})


def _amend(crew, approval_id, action=AMENDED, reason="canary first", token=None):
    body = {"action": action} if reason is None else {"action": action, "reason": reason}
    return crew.as_(token or crew.editor_token).post(f"/api/v1/approvals/{approval_id}/amend/", body, format="json")


def test_an_amend_voids_the_request_and_opens_the_amenders_own():
    crew = _crew(quorum=1)
    run_id = crew.to_deploy()
    asked = crew.request(run_id)
    answer = _amend(crew, asked["id"])
    assert answer.status_code == 201, answer.content
    new = answer.json()
    assert (new["amended_from"], new["action"], new["status"], new["stage"], new["kind"]) == (
        asked["id"], AMENDED, "pending", "deploy", "high_impact")
    assert new["requested_by"] == f"user:{crew.editor.username}" and new["id"] != asked["id"]
    old = Approval.objects.get(id=asked["id"])
    assert (old.status, old.reason) == ("expired", "amended")
    voided = _events(run_id).get(kind="approval_voided")
    assert (voided.reason_code, voided.data["approval"], voided.actor) == (
        "amended", asked["id"], f"user:{crew.editor.username}")
    requested = _events(run_id).filter(kind="approval_requested").order_by("-seq").first()
    assert (requested.data["amended_from"], requested.data["reason"]) == (asked["id"], "canary first")
    assert Run.objects.get(id=run_id).state == "awaiting_approval"

    refused = crew.decide(new["id"])  # the amender requested it
    assert refused.status_code == 403 and refused.json()["code"] == "requester_cannot_decide"
    assert crew.decide(asked["id"], token=crew.editor2_token).json()["code"] == "approval_decided"
    assert crew.decide(new["id"], token=crew.editor2_token).json()["status"] == "approved"


def test_only_the_amended_actions_digest_finds_the_permit():
    crew = _crew()
    run_id = crew.to_deploy()
    asked = crew.request(run_id)
    new = _amend(crew, asked["id"]).json()
    assert crew.start_deploy(run_id, action=ACTION).json()["code"] == "approval_required"  # nothing approved yet
    crew.decide(new["id"], token=crew.editor2_token)
    before = _events(run_id).count()
    run = Run.objects.get(id=run_id)
    with pytest.raises(Conflict) as void:
        services.permit_find(run=run, stage="deploy", kind="high_impact", action=ACTION, now=timezone.now())
    assert void.value.code == "approval_void" and void.value.extra["reasons"] == ["action_changed"]
    assert str(services.permit_find(run=run, stage="deploy", kind="high_impact", action=AMENDED,
                                    now=timezone.now()).id) == new["id"]
    started_old = crew.start_deploy(run_id, action=ACTION)
    assert started_old.status_code == 409 and started_old.json()["reasons"] == ["action_changed"]
    assert _events(run_id).count() == before and Approval.objects.get(id=new["id"]).consumed_at is None
    started = crew.start_deploy(run_id, action=AMENDED)
    assert started.status_code == 201 and started.json()["data"]["approval"] == new["id"]
    assert Approval.objects.get(id=new["id"]).consumed_seq == started.json()["seq"]


def test_the_amended_request_keeps_the_rules_of_the_one_it_amends():
    crew = _crew(quorum=2)
    asked = crew.request(crew.to_deploy())
    crew.wf.approval_rules = {"deploy": {"action_schema": SCHEMA, "quorum": 1}}
    crew.wf.save(update_fields=["approval_rules"])
    new = _amend(crew, asked["id"]).json()
    assert (new["quorum"], new["approvers"]) == (2, ["role:editor"])


@pytest.mark.parametrize(("action", "reason"), [
    ({**AMENDED, "target": "qa/web"}, "pattern"),
    ({**AMENDED, "operation": "delete"}, "enum"),
    ({**AMENDED, "replicas": "2"}, "integer"),
    ({**AMENDED, "extra": True}, "additional"),
    ({k: v for k, v in AMENDED.items() if k != "summary"}, "required"),
    ([AMENDED], "object"),
    ("deploy", "object"),
])
def test_an_action_outside_the_schema_is_422_invalid_action_and_nothing_changes(action, reason):
    crew = _crew()
    run_id = crew.to_deploy()
    asked = crew.request(run_id)
    before = _events(run_id).count()
    refused = _amend(crew, asked["id"], action=action)
    assert refused.status_code == 422 and refused.json()["code"] == "invalid_action", refused.content
    assert _events(run_id).count() == before
    assert Approval.objects.get(id=asked["id"]).status == "pending" and Approval.objects.count() == 1
    assert AuditEntry.objects.filter(action="amend", code="invalid_action").count() == 1


def test_without_a_schema_any_object_is_an_action():
    crew = Crew()
    asked = crew.request(crew.to_deploy())
    odd = {"anything": [1, {"nested": None}]}
    answer = _amend(crew, asked["id"], action=odd)
    assert answer.status_code == 201 and answer.json()["action"] == odd
    assert _amend(crew, answer.json()["id"], action=[1], token=crew.editor2_token).json()["code"] == "invalid_action"


def test_who_may_amend_and_what():
    crew = _crew()
    crew.wf.approval_rules["deploy"]["approvers"] = [f"user:{crew.editor.username}"]
    crew.wf.save(update_fields=["approval_rules"])
    run_id = crew.to_deploy()
    asked = crew.request(run_id)
    for token, code in ((crew.editor2_token, "not_an_approver"), (crew.viewer_token, "permission_denied"),
                        (crew.oncall_token, "permission_denied"), (None, "permission_denied")):
        client = crew.agent.client if token is None else crew.as_(token)
        refused = client.post(f"/api/v1/approvals/{asked['id']}/amend/", {"action": AMENDED, "reason": "r"},
                              format="json")
        assert refused.status_code == 403 and refused.json()["code"] == code, (code, refused.content)
    assert _amend(crew, asked["id"], reason="  ").json()["code"] == "reason_required"
    assert _amend(crew, asked["id"], reason=None).json()["code"] == "reason_required"
    assert Approval.objects.get(id=asked["id"]).status == "pending" and Approval.objects.count() == 1
    assert crew.decide(asked["id"]).json()["status"] == "approved"
    decided = _amend(crew, asked["id"])
    assert decided.status_code == 409 and decided.json()["code"] == "approval_decided"


def test_an_escalation_cannot_be_amended():
    crew = Crew(max_retries=1)
    escalated = crew.agent.escalated_run()
    escalation = Approval.objects.get(run_id=escalated["id"], kind="escalation", status="pending")
    refused = _amend(crew, escalation.id, token=crew.oncall_token)
    assert refused.status_code == 403 and refused.json()["code"] == "not_amendable"


@pytest.mark.parametrize(("schema", "problem"), [
    ({"type": "objekt"}, "JSON Schema"), ({"type": "array"}, "object"), ({"properties": 3}, "JSON Schema"),
    ({"$ref": "https://schemas.example/action.json"}, "resolve"), ("object", "object"), ({"minProperties": -1}, ""),
])
def test_a_workflow_with_an_invalid_action_schema_is_refused_when_saved(schema, problem):
    from tests.factories import client_for, make_operator

    owner = client_for(make_operator("owner")[1])
    body = {"slug": "amend-wf", "stages": ["build", "deploy"], "effect_stages": ["deploy"],
            "approval_stages": ["deploy"], "approval_rules": {"deploy": {"action_schema": schema}}}
    refused = owner.post("/api/v1/workflows/", body, format="json")
    assert refused.status_code == 422, refused.content
    assert (refused.json()["code"], refused.json()["field"]) == ("invalid_approval_rules", "action_schema")
    assert problem in refused.json()["detail"]
    body["approval_rules"]["deploy"]["action_schema"] = SCHEMA
    assert owner.post("/api/v1/workflows/", body, format="json").status_code == 201


@pytest.mark.postgres  # (the wipe goes around PostgreSQL's triggers)
def test_export_and_import_keep_what_an_amended_request_amends(tmp_path):
    crew = _crew()
    asked = crew.request(crew.to_deploy())
    new = _amend(crew, asked["id"]).json()
    exported = _export()
    _wipe()
    _import(tmp_path, exported)
    assert str(Approval.objects.get(id=new["id"]).amended_from_id) == asked["id"]
    assert Approval.objects.get(id=asked["id"]).status == "expired"
    lines = _lines(exported)[:-1]
    forged = next(line for line in lines if line["type"] == "approval" and line["id"] == new["id"])
    forged["amended_from_id"] = None
    _wipe()
    from django.core.management import CommandError
    with pytest.raises(CommandError, match="amended_from"):
        _import(tmp_path, _signed(lines))
    assert not LedgerEvent.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_on_an_executor_stage_the_executor_performs_the_amended_action():
    from tests.factories import client_for, make_agent, make_operator, make_workflow
    from tests.ledger.helpers import AgentDriver
    from tests.ledger.receiver import Receiver

    proposed = {"system": "k8s", "operation": "deploy", "target": "prod/web", "summary": "v2", "params": {"image": "web:2"}}
    amended = {**proposed, "summary": "v3 instead", "params": {"image": "web:3"}}
    with Receiver() as receiver:
        wf = make_workflow(stages=["build", "deploy"], effect_stages=["deploy"], approval_stages=["deploy"],
                           executors={"deploy": {"handler": "webhook", "config": {"url": receiver.url}}})
        driver = AgentDriver(client_for(make_agent()[1]), wf.slug)
        run_id = driver.trigger()["id"]
        driver.pass_stage(run_id, "build")
        driver.event(run_id, "deploy", "proposed", action=proposed)
        asked = Approval.objects.get(run_id=run_id, status="pending")
        editor, other = client_for(make_operator("editor")[1]), client_for(make_operator("editor")[1])
        not_an_action = editor.post(f"/api/v1/approvals/{asked.id}/amend/",
                                    {"action": {"image": "web:3"}, "reason": "r"}, format="json")
        assert not_an_action.status_code == 422 and not_an_action.json()["code"] == "invalid_action"
        new = editor.post(f"/api/v1/approvals/{asked.id}/amend/", {"action": amended, "reason": "v3"}, format="json")
        assert new.status_code == 201, new.content
        assert Run.objects.get(id=run_id).executor_state["action"] == amended
        assert other.post(f"/api/v1/approvals/{new.json()['id']}/approve/", {}, format="json").status_code == 200
        assert [body["action"] for body in receiver.bodies] == [amended]
    assert Run.objects.get(id=run_id).state == "completed"
