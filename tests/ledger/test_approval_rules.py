"""Who approves (SPEC §17): a workflow's approval_rules, checked when saved; a request keeps the rules in force
when it was asked; votes (each a ledger event) until the quorum; one eligible reject rejects; the requester and
anyone outside the approvers never count; export and import rebuild the votes."""

from datetime import timedelta

import pytest
from django.core.management import CommandError
from django.utils import timezone

from ledger.domain.approval_rules import RulesInvalid, approvers_match, rules_checked, rules_for
from ledger.identities import operator_create
from ledger.models import Approval, ApproverGroup, AuditEntry, LedgerEvent, Run
from tests.factories import client_for, make_operator
from tests.ledger.test_approvals import ACTION, Crew, _events
from tests.ledger.test_portability import _export, _import, _lines, _signed, _wipe, export_key  # noqa: F401
from tests.ledger.test_slack import TEAM, Desk, changed, chat, payload, press, reply_of  # noqa: F401

QUORUM_2 = {"deploy": {"approvers": ["role:editor"], "quorum": 2}}


# ---------------------------------------------------------------- the rules, checked (pure)

STAGES, APPROVAL_STAGES = ["build", "deploy", "verify"], ["deploy"]


@pytest.mark.parametrize(("rules", "stage", "field"), [
    ([], "", "approval_rules"),
    ({"nope": {}}, "nope", "stage"),
    ({"build": {}}, "build", "stage"),  # a stage, not an approval stage
    ({"deploy": []}, "deploy", "stage"),
    ({"deploy": {"approvers": ["role:editor"], "quorom": 2}}, "deploy", "quorom"),
    ({"deploy": {"approvers": []}}, "deploy", "approvers"),
    ({"deploy": {"approvers": "role:editor"}}, "deploy", "approvers"),
    ({"deploy": {"approvers": ["role:owner"]}}, "deploy", "approvers"),
    ({"deploy": {"approvers": ["alice"]}}, "deploy", "approvers"),
    ({"deploy": {"approvers": ["user:"]}}, "deploy", "approvers"),
    ({"deploy": {"approvers": ["group: sre"]}}, "deploy", "approvers"),
    ({"deploy": {"approvers": ["user:a", "user:a"]}}, "deploy", "approvers"),
    ({"deploy": {"approvers": [7]}}, "deploy", "approvers"),
    ({"deploy": {"quorum": 0}}, "deploy", "quorum"),
    ({"deploy": {"quorum": 6}}, "deploy", "quorum"),
    ({"deploy": {"quorum": "2"}}, "deploy", "quorum"),
    ({"deploy": {"quorum": 2.0}}, "deploy", "quorum"),
    ({"deploy": {"quorum": True}}, "deploy", "quorum"),
    ({"deploy": {"approvers": ["user:a"], "quorum": 2}}, "deploy", "quorum"),  # never met
    ({"deploy": {"action_schema": "object"}}, "deploy", "action_schema"),
])
def test_rules_refused_name_the_stage_and_the_field(rules, stage, field):
    with pytest.raises(RulesInvalid) as refused:
        rules_checked(rules, stages=STAGES, approval_stages=APPROVAL_STAGES)
    assert (refused.value.stage, refused.value.field) == (stage, field)


@pytest.mark.parametrize("rules", [
    {}, {"deploy": {}}, {"deploy": {"quorum": 5}}, QUORUM_2,
    {"deploy": {"approvers": ["user:alice", "group:release-managers", "role:editor"], "quorum": 3}},
    {"deploy": {"approvers": ["user:a", "user:b"], "quorum": 2, "action_schema": {"type": "object"}}},
])
def test_rules_accepted_and_what_a_request_takes(rules):
    assert rules_checked(rules, stages=STAGES, approval_stages=APPROVAL_STAGES) is rules
    approvers, quorum = rules_for(rules, "deploy")
    assert approvers == rules.get("deploy", {}).get("approvers", ["role:editor"])
    assert quorum == rules.get("deploy", {}).get("quorum", 1)


@pytest.mark.parametrize(("approvers", "username", "groups", "matches"), [
    (["role:editor"], "bob", set(), True),
    (["user:alice"], "alice", set(), True),
    (["user:alice"], "bob", set(), False),
    (["user:alice"], "alice2", set(), False),
    (["group:sre"], "bob", {"sre"}, True),
    (["group:sre"], "bob", {"sre-oncall"}, False),
    (["user:alice", "group:sre"], "bob", {"dev"}, False),
    (["user:alice", "group:sre"], "bob", {"dev", "sre"}, True),
])
def test_who_is_among_the_approvers(approvers, username, groups, matches):
    assert approvers_match(approvers, username=username, groups=groups) is matches


# ---------------------------------------------------------------- on the workflow: POST, PATCH, apply, export

@pytest.mark.django_db
def test_workflow_rules_are_saved_checked_and_exported_without_a_policy_bump():
    owner = client_for(make_operator("owner")[1])
    body = {"slug": "rules-wf", "stages": STAGES, "effect_stages": ["deploy"], "approval_stages": APPROVAL_STAGES}
    refused = owner.post("/api/v1/workflows/", {**body, "approval_rules": {"build": {"quorum": 2}}}, format="json")
    assert refused.status_code == 422, refused.content
    assert (refused.json()["code"], refused.json()["stage"], refused.json()["field"]) == (
        "invalid_approval_rules", "build", "stage")
    created = owner.post("/api/v1/workflows/", {**body, "approval_rules": QUORUM_2}, format="json")
    assert created.status_code == 201 and created.json()["approval_rules"] == QUORUM_2
    changed = {"deploy": {"approvers": ["group:release-managers"], "quorum": 1}}
    patched = owner.patch("/api/v1/workflows/rules-wf/", {"approval_rules": changed}, format="json")
    assert patched.status_code == 200 and patched.json()["approval_rules"] == changed
    assert patched.json()["policy_version"] == "1"  # no bump needed
    bad = owner.patch("/api/v1/workflows/rules-wf/", {"approval_rules": {"deploy": {"quorum": 9}}}, format="json")
    assert bad.status_code == 422 and bad.json()["code"] == "invalid_approval_rules"
    assert owner.get("/api/v1/workflows/rules-wf/").json()["approval_rules"] == changed  # nothing written

    from ledger import services
    from ledger.models import Workflow
    exported = services.file_form(Workflow.objects.filter(slug="rules-wf"))
    assert "approval_rules" in exported and "group:release-managers" in exported
    assert [o.result for o in services.workflows_apply(definitions=services.file_parse(
        exported.encode(), json_format=False))] == ["unchanged"]
    definition = services.file_parse(exported.encode(), json_format=False)[0]
    applied = owner.post("/api/v1/workflows/apply/", {"workflows": [{**definition, "approval_rules": QUORUM_2}]},
                         format="json")
    assert applied.status_code == 200, applied.content
    assert applied.json()["results"][0]["changes"]["approval_rules"] == {"old": changed, "new": QUORUM_2}
    refused = owner.post("/api/v1/workflows/apply/", {"workflows": [{**definition, "approval_rules": {
        "deploy": {"approvers": ["role:oncall"]}}}]}, format="json")
    assert refused.status_code == 422 and refused.json()["code"] == "invalid_approval_rules"


# ---------------------------------------------------------------- quorum and votes

def _vote_bodies(approval: dict) -> list[tuple]:
    return [(vote["by"], vote["reason"]) for vote in approval["votes"]]


@pytest.mark.django_db
def test_a_quorum_of_two_needs_two_editors_and_each_vote_is_a_ledger_event():
    crew = Crew(approval_rules=QUORUM_2)
    run_id = crew.to_deploy()
    asked = crew.request(run_id)
    assert (asked["quorum"], asked["approvers"], asked["votes"], asked["amended_from"]) == (
        2, ["role:editor"], [], None)
    first = crew.decide(asked["id"], reason="looks right")
    assert first.status_code == 200 and first.json()["status"] == "pending", first.content
    assert _vote_bodies(first.json()) == [(f"user:{crew.editor.username}", "looks right")]
    assert first.json()["votes"][0]["at"].endswith("Z")
    voted = _events(run_id).get(kind="approval_voted")
    assert (voted.actor, voted.data["reason"], voted.data["votes"], voted.data["quorum"]) == (
        f"user:{crew.editor.username}", "looks right", 1, 2)
    assert crew.start_deploy(run_id, action=ACTION).json()["code"] == "approval_required"  # no permit yet

    before = _events(run_id).count()
    again = crew.decide(asked["id"])  # the same person twice: nothing changes
    assert again.status_code == 200 and again.json()["status"] == "pending" and len(again.json()["votes"]) == 1
    assert _events(run_id).count() == before

    second = crew.decide(asked["id"], token=crew.editor2_token)
    assert second.status_code == 200 and second.json()["status"] == "approved"
    assert _vote_bodies(second.json()) == [(f"user:{crew.editor.username}", "looks right"),
                                           (f"user:{crew.editor2.username}", "")]
    approved = _events(run_id).get(kind="approved")
    assert approved.actor == f"user:{crew.editor2.username}" and approved.data["votes"] == 2
    assert second.json()["decided_by"] == f"user:{crew.editor2.username}"
    listed = crew.as_(crew.viewer_token).get(f"/api/v1/approvals/?run={run_id}").json()["results"][0]
    assert listed["votes"] == second.json()["votes"] and listed["quorum"] == 2
    assert crew.start_deploy(run_id, action=ACTION).status_code == 201  # the permit, once the quorum is met


@pytest.mark.django_db
def test_one_reject_by_an_eligible_approver_rejects_whatever_the_votes():
    crew = Crew(approval_rules=QUORUM_2)
    run_id = crew.to_deploy()
    asked = crew.request(run_id)
    assert crew.decide(asked["id"]).json()["status"] == "pending"
    rejected = crew.decide(asked["id"], "reject", token=crew.editor2_token, reason="wrong build")
    assert rejected.status_code == 200 and rejected.json()["status"] == "rejected"
    assert len(rejected.json()["votes"]) == 1 and Run.objects.get(id=run_id).state == "abandoned"
    late = crew.decide(asked["id"], token=crew.editor2_token)
    assert late.status_code == 409 and late.json()["code"] == "approval_decided"


@pytest.mark.django_db
def test_someone_outside_the_approvers_is_refused_not_an_approver_and_audited():
    crew = Crew()
    crew.wf.approval_rules = {"deploy": {"approvers": [f"user:{crew.editor.username}"]}}
    crew.wf.save(update_fields=["approval_rules"])
    run_id = crew.to_deploy()
    asked = crew.request(run_id)
    assert asked["approvers"] == [f"user:{crew.editor.username}"]
    before = _events(run_id).count()
    for verb, reason in (("approve", None), ("reject", "no")):
        refused = crew.decide(asked["id"], verb, token=crew.editor2_token, reason=reason)
        assert refused.status_code == 403 and refused.json()["code"] == "not_an_approver", refused.content
    assert _events(run_id).count() == before and Approval.objects.get(id=asked["id"]).status == "pending"
    assert AuditEntry.objects.filter(action="approve", outcome="refused", code="not_an_approver").count() == 1
    assert crew.decide(asked["id"], token=crew.viewer_token).json()["code"] == "permission_denied"
    assert crew.decide(asked["id"]).json()["status"] == "approved"  # the one named


@pytest.mark.django_db
def test_a_group_approver_decides_through_approver_group_membership_while_an_editor():
    crew = Crew(approval_rules={"deploy": {"approvers": ["group:release-managers"], "quorum": 1}})
    group = ApproverGroup.objects.create(name="release-managers")
    group.members.add(crew.editor2, crew.viewer)
    ApproverGroup.objects.create(name="editor").members.add(crew.editor)  # a group named like a role gives nothing
    run_id = crew.to_deploy()
    asked = crew.request(run_id)
    assert crew.decide(asked["id"]).json()["code"] == "not_an_approver"
    assert crew.decide(asked["id"], token=crew.viewer_token).json()["code"] == "permission_denied"  # not an editor
    approved = crew.decide(asked["id"], token=crew.editor2_token)
    assert approved.status_code == 200 and approved.json()["status"] == "approved"


@pytest.mark.django_db
def test_a_request_keeps_the_rules_in_force_when_it_was_asked():
    crew = Crew(approval_rules={"deploy": {"approvers": [f"user:{crew_name}" for crew_name in ("a", "b")],
                                           "quorum": 2}})
    operator_create(name="a", role="editor")
    b, b_token = make_operator("editor", name="b")
    run_id = crew.to_deploy()
    asked = crew.request(run_id)
    crew.wf.approval_rules = {"deploy": {"approvers": ["role:editor"], "quorum": 1}}  # changed while it is open
    crew.wf.save(update_fields=["approval_rules"])
    assert crew.decide(asked["id"]).json()["code"] == "not_an_approver"  # the old approvers still decide it
    voted = crew.decide(asked["id"], token=b_token)
    assert voted.json()["status"] == "pending" and voted.json()["quorum"] == 2
    assert Approval.objects.get(id=asked["id"]).approvers == ["user:a", "user:b"]

    crew.as_(b_token).post(f"/api/v1/approvals/{asked['id']}/reject/", {"reason": "redo"}, format="json")
    later_run = crew.to_deploy(inputs={"v": 2})
    later = crew.request(later_run)
    assert (later["approvers"], later["quorum"]) == (["role:editor"], 1)  # a later request takes the new rules
    assert crew.decide(later["id"]).json()["status"] == "approved"


@pytest.mark.django_db
def test_a_compensation_follows_the_rules_of_the_stage_it_compensates_and_its_requester_never_counts():
    crew = Crew(approval_rules=QUORUM_2)
    run_id = crew.to_deploy()
    asked = crew.request(run_id)
    crew.decide(asked["id"])
    crew.decide(asked["id"], token=crew.editor2_token)
    assert crew.start_deploy(run_id, action=ACTION).status_code == 201
    crew.agent.event(run_id, "deploy", "succeeded",
                     effect={"system": "k8s", "operation": "deploy", "reference": "deployment-7781"})
    crew.agent.event(run_id, "deploy", "failed", reason_code="health_check_failed")
    assert Run.objects.get(id=run_id).state == "compensate"
    operator_create(name=crew.oncall.username, role="editor")  # the on-call engineer is also an editor
    answered = crew.as_(crew.oncall_token).post(f"/api/v1/runs/{run_id}/compensate/", {"reason": "undo"},
                                                format="json")
    asked = answered.json()["approval"]
    assert (asked["kind"], asked["stage"], asked["quorum"]) == ("compensation", "deploy", 2)
    assert crew.decide(asked["id"], token=crew.oncall_token).json()["code"] == "requester_cannot_decide"
    assert crew.decide(asked["id"]).json()["status"] == "pending"
    assert crew.decide(asked["id"], token=crew.editor2_token).json()["status"] == "approved"


@pytest.mark.django_db
def test_an_escalation_is_decided_by_on_call_as_before():
    crew = Crew(max_retries=1, approval_rules={"deploy": {"approvers": ["user:nobody"]}})
    escalated = crew.agent.escalated_run()
    escalation = Approval.objects.get(run_id=escalated["id"], kind="escalation", status="pending")
    assert (escalation.approvers, escalation.quorum) == (["role:oncall"], 1)
    retried = crew.decide(escalation.id, token=crew.oncall_token)
    assert retried.status_code == 200 and retried.json()["status"] == "approved"


@pytest.mark.django_db
def test_an_expired_request_with_votes_expires_as_before():
    crew = Crew(approval_rules=QUORUM_2)
    run_id = crew.to_deploy()
    asked = crew.request(run_id)
    crew.decide(asked["id"])
    from ledger import services
    assert services.approvals_expire(now=timezone.now() + timedelta(days=2)) == 1
    expired = Approval.objects.get(id=asked["id"])
    assert expired.status == "expired" and len(expired.votes) == 1
    late = crew.decide(asked["id"], token=crew.editor2_token)
    assert late.status_code == 409 and late.json()["code"] == "approval_decided"


# ---------------------------------------------------------------- export and import rebuild the votes

@pytest.mark.postgres  # (the wipe goes around PostgreSQL's triggers)
@pytest.mark.django_db
def test_export_and_import_rebuild_the_votes_and_refuse_a_forged_one(tmp_path):
    crew, other = Crew(approval_rules=QUORUM_2), Crew(approval_rules=QUORUM_2)
    asked = crew.request(crew.to_deploy())
    crew.decide(asked["id"], reason="one")
    pending = other.request(other.to_deploy())
    other.decide(pending["id"], token=other.editor2_token, reason="half")
    crew.decide(asked["id"], token=crew.editor2_token, reason="two")
    rows = {a.id: (a.status, a.votes, a.approvers, a.quorum) for a in Approval.objects.all()}
    exported = _export()
    _wipe()
    _import(tmp_path, exported)
    assert {a.id: (a.status, a.votes, a.approvers, a.quorum) for a in Approval.objects.all()} == rows
    assert _export() == exported

    lines = _lines(exported)[:-1]
    forged = next(line for line in lines if line["type"] == "approval" and line["id"] == pending["id"])
    forged["votes"] = [*forged["votes"], {"by": "user:nobody", "at": forged["votes"][0]["at"], "reason": ""}]
    _wipe()
    with pytest.raises(CommandError, match="votes"):
        _import(tmp_path, _signed(lines))
    for line in lines:  # a file from before the votes were kept: the ledger's are taken
        if line["type"] == "approval":
            for field in ("votes", "approvers", "quorum", "amended_from_id"):
                line.pop(field, None)
    _import(tmp_path, _signed(lines))
    assert {a.id: (a.status, a.votes, a.approvers, a.quorum) for a in Approval.objects.all()} == rows
    assert LedgerEvent.objects.filter(kind="approval_voted").count() == 2


# ---------------------------------------------------------------- chat approvals follow the same rules

@pytest.mark.django_db
def test_slack_votes_follow_the_rules_and_an_outsider_is_refused(chat):  # noqa: F811 (the chat fixture)
    desk = Desk(approval_rules={"publish": {"approvers": ["user:ed", "user:ed2"], "quorum": 2}})
    operator_create(name="ed2", role="editor", slack_id=f"{TEAM}:UEDITOR2")
    operator_create(name="ed3", role="editor", slack_id=f"{TEAM}:UEDITOR3")
    approval = desk.pending()
    before = changed(approval)
    press(payload("approve", str(approval.id), user="UEDITOR3", response_url=chat.url("/outsider")))
    assert changed(approval) == before
    assert "Not done (not_an_approver)" in reply_of(chat, "/outsider")["text"]

    press(payload("approve", str(approval.id), user="UEDITOR", response_url=chat.url("/first")))
    approval.refresh_from_db()
    assert approval.status == "pending" and [v["by"] for v in approval.votes] == ["user:ed"]
    assert "1 of 2 approvals" in reply_of(chat, "/first")["text"]
    assert LedgerEvent.objects.get(run_id=approval.run_id, kind="approval_voted").data["via"] == "slack"
    press(payload("approve", str(approval.id), user="UEDITOR2", response_url=chat.url("/second")))
    approval.refresh_from_db()
    assert approval.status == "approved" and [v["by"] for v in approval.votes] == ["user:ed", "user:ed2"]
    assert "Approved by user:ed2 via Slack" in reply_of(chat, "/second")["text"]


@pytest.mark.django_db
def test_a_request_notifies_the_editors_its_approvers_name():
    from ledger.models import Notification

    crew = Crew(approval_rules={"deploy": {"approvers": ["user:crew-x", "group:release"]}})
    named = operator_create(name="crew-x", role="editor")[0]
    member = make_operator("editor")[0]
    ApproverGroup.objects.create(name="release").members.add(member, crew.viewer)
    asked = crew.request(crew.to_deploy())
    notified = Notification.objects.filter(dedupe_key=f"approval:{asked['id']}")
    assert sorted(notified.values_list("user__username", flat=True)) == sorted([named.username, member.username])
    other = Crew()  # role:editor: every editor, as before
    default = other.request(other.to_deploy())
    everyone = Notification.objects.filter(dedupe_key=f"approval:{default['id']}").values_list("user_id", flat=True)
    assert {crew.editor.pk, crew.editor2.pk, other.editor.pk, named.pk, member.pk} <= set(everyone)


@pytest.mark.django_db
def test_the_migration_fills_earlier_requests_as_an_import_rebuilds_them():
    """0030_approval_rules: an earlier approved request's one vote is its approved event; an escalation's
    approvers are on-call's."""
    import importlib

    from django.apps import apps

    backfill = importlib.import_module("ledger.migrations.0030_approval_rules").rules_and_votes_backfill
    crew = Crew(max_retries=1)
    approved = crew.request(crew.to_deploy())
    crew.decide(approved["id"], reason="ship it")
    escalation = Approval.objects.get(run_id=crew.agent.escalated_run(stage="build", intent="other")["id"],
                                      kind="escalation")
    expected = {str(a.id): (a.votes, a.approvers) for a in Approval.objects.all()}
    assert expected[str(escalation.id)] == ([], ["role:oncall"]) and len(expected[approved["id"]][0]) == 1
    Approval.objects.update(votes=[], approvers=["role:editor"])  # as the columns' defaults left them
    backfill(apps, None)
    assert {str(a.id): (a.votes, a.approvers) for a in Approval.objects.all()} == expected


@pytest.mark.postgres  # (the wipe goes around PostgreSQL's triggers)
@pytest.mark.django_db
def test_an_import_refuses_rules_the_api_would_refuse(tmp_path):
    Crew(approval_rules=QUORUM_2)
    lines = _lines(_export())[:-1]
    next(line for line in lines if line["type"] == "workflow")["approval_rules"] = {"deploy": {"quorum": 7}}
    _wipe()
    with pytest.raises(CommandError, match="approval_rules"):
        _import(tmp_path, _signed(lines))
