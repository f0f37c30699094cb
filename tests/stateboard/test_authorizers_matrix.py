"""Role × action matrix generated from the authorizers: every ``may_*`` of ledger/authorizers.py and
knowledge/authorizers.py has a case here; for every role, the page and the API give the same verdict
(both refused with 403, or both let through) and it is the authorizer's verdict."""

import inspect
import json
from dataclasses import dataclass
from datetime import timedelta
from typing import Callable

import pytest
from django.test import Client
from django.urls import resolve, reverse
from django.utils import timezone

from knowledge import authorizers as knowledge_authorizers
from knowledge import services as knowledge_services
from knowledge.models import Claim, ClaimHead
from ledger import authorizers as ledger_authorizers
from ledger.models import Alert, Approval, AuditEntry, Run, Workflow
from stateboard.roles import allowed
from tests.browser.scenarios import (
    ACTION,
    agent_driver,
    approval_workflow,
    awaiting_approval_run,
    completed_run,
    escalated_run,
    escalation_workflow,
)
from tests.factories import HX, client_for, make_agent, make_operator, make_workflow, unique
from tests.knowledge.conftest import iso, proposal

pytestmark = pytest.mark.django_db

ROLES = ("viewer", "editor", "owner", "oncall", "agent")


def authorizer_functions() -> dict[str, Callable]:
    return {f"{module.__name__}.{name}": fn for module in (ledger_authorizers, knowledge_authorizers)
            for name, fn in inspect.getmembers(module, inspect.isfunction)
            if name.startswith("may_") and fn.__module__ == module.__name__}


@dataclass
class Case:
    authorizer: Callable
    make: Callable                     # (people) -> made: the objects of one channel
    subject: Callable                  # (made) -> the object the authorizer judges (read afresh)
    api: Callable | None = None        # (client, made) -> response, when the API offers the action
    page: Callable | None = None       # (client, made) -> response, when a page offers the action


# ---------------------------------------------------------------- objects

def _awaiting(people):
    run, approval = awaiting_approval_run(agent_driver(approval_workflow()), unique("post"))
    return {"run": run["id"], "approval": approval["id"]}


def _escalated(people):
    _, run = escalated_run(agent_driver(escalation_workflow()), unique("nightly"))
    approval = Approval.objects.get(run_id=run["id"], kind=Approval.Kind.ESCALATION, status="pending")
    return {"run": run["id"], "approval": str(approval.id)}


def _completed(people):
    workflow = escalation_workflow()
    return {"run": completed_run(agent_driver(workflow), workflow, unique("release"))["id"]}


def _fresh_run(people):
    run = agent_driver(approval_workflow()).trigger(intent=unique("i"))
    return {"run": run["id"], "slug": run["workflow"]}


def _workflow(people):
    return {"slug": make_workflow().slug}


def _claim(people, owner_role="owner", **fields):
    owner = people[owner_role][0] if owner_role else None
    data = proposal(**fields)
    if owner is not None:
        data["owner"] = owner.get_username()
    return {"key": knowledge_services.claim_propose(user=people["owner"][0], data=data).key}


def _stale_claim(people):
    then = timezone.now() - timedelta(days=30)
    claim = knowledge_services.claim_propose(user=people["owner"][0], now=then, data=proposal(
        observed_at=iso(then - timedelta(hours=1)), refresh_after=iso(then + timedelta(days=5))))
    return {"key": claim.key}


def _pending(people, **fields):
    agent, _ = make_agent(owner=people["owner"][0])
    claim = knowledge_services.claim_propose(user=agent, data=proposal(**fields))
    assert claim.status == "pending", claim.pending_reasons
    return {"key": claim.key, "version": claim.version}


def _pending_after_revoke(people):
    """A proposal for a revoked key: it waits for the claim's owner (the matrix's owner-role user)."""
    made = _claim(people, owner_role="owner")
    knowledge_services.claim_revoke(user=people["owner"][0], key=made["key"], reason="withdrawn")
    agent, _ = make_agent(owner=people["owner"][0])
    claim = knowledge_services.claim_propose(user=agent, data=proposal(key=made["key"]))
    assert claim.status == "pending", claim.pending_reasons
    return {"key": claim.key, "version": claim.version}


ALERT_RULE = {"name": "stuck", "kind": "escalation_age", "severity": "page", "notify": ["inapp"], "minutes": 5}


def _alert(people):
    workflow = make_workflow(alerts=[ALERT_RULE])
    now = timezone.now()
    alert = Alert.objects.create(key=f"{workflow.slug}/stuck/x", workflow=workflow, rule="stuck",
                                 kind="escalation_age", severity="page", subject="x", summary="matrix",
                                 opened_at=now, updated_at=now)
    return {"alert": alert.id, "slug": workflow.slug}


def _mailed_link(people):
    """An editor's e-mailed Approve link of a pending request (SPEC §17)."""
    from tests.ledger.web.test_approval_links import link_to

    made = _awaiting(people)
    return {**made, "path": link_to(made["approval"], people["editor"][0])}


def _link(made):
    from ledger.approval_links import approval_link_read

    kwargs = resolve(made["path"]).kwargs
    return approval_link_read(kwargs["token"], approval_id=kwargs["approval_id"])


def _approval(made):
    return Approval.objects.get(id=made["approval"])


def _run(made):
    return Run.objects.get(id=made["run"])


def _head(made):
    return ClaimHead.objects.get(key=made["key"])


def _pending_version(made):
    return Claim.objects.get(key=made["key"], version=made["version"])


# ---------------------------------------------------------------- calls

def _post(client, url, body):
    return client.post(url, body, format="json")


def _decide(verb):
    return dict(
        api=lambda c, m: _post(c, f"/api/v1/approvals/{m['approval']}/{verb}/", {"reason": "matrix"}),
        page=lambda c, m: c.post(reverse(f"ledger:approval_{verb}", args=[m["approval"]]), {"reason": "matrix"}, **HX))


AMENDED = {"system": "k8s", "operation": "canary", "target": "prod/web", "summary": "Canary first"}


def _amend():
    return dict(
        api=lambda c, m: _post(c, f"/api/v1/approvals/{m['approval']}/amend/", {"action": AMENDED, "reason": "matrix"}),
        page=lambda c, m: c.post(reverse("ledger:approval_amend", args=[m["approval"]]),
                                 {"action_json": json.dumps(AMENDED), "reason": "matrix"}, **HX))


def _oncall(verb):
    return dict(
        api=lambda c, m: _post(c, f"/api/v1/runs/{m['run']}/{verb}/", {"reason": "matrix"}),
        page=lambda c, m: c.post(reverse(f"ledger:run_{verb}", args=[m["run"]]), {"reason": "matrix"}, **HX))


def _claim_call(verb, api_body, page_body=None):
    return dict(
        api=lambda c, m: _post(c, f"/api/v1/claims/{m['key']}/{verb}/", api_body(m)),
        page=lambda c, m: c.post(reverse(f"knowledge:claim_{verb}"), {"key": m["key"], **(page_body or api_body)(m)},
                                 **HX))


def _refresh_dates(m):
    now = timezone.now()
    return {"observed_at": iso(now - timedelta(minutes=5)), "refresh_after": iso(now + timedelta(days=10))}


def _refresh_page(m):
    now = timezone.now()
    return {"observed_at": (now - timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M"),
            "refresh_after": (now + timedelta(days=10)).strftime("%Y-%m-%dT%H:%M")}


L, K = "ledger.authorizers.", "knowledge.authorizers."
A = authorizer_functions()
CASES = {
    "approve high_impact": Case(A[L + "may_decide_approval"], _awaiting, _approval, **_decide("approve")),
    "reject high_impact": Case(A[L + "may_decide_approval"], _awaiting, _approval, **_decide("reject")),
    "approve escalation": Case(A[L + "may_decide_approval"], _escalated, _approval, **_decide("approve")),
    "reject escalation": Case(A[L + "may_decide_approval"], _escalated, _approval, **_decide("reject")),
    "use approval link": Case(A[L + "may_use_approval_link"], _mailed_link, _link,
                              page=lambda c, m: c.post(m["path"], {"reason": "matrix"}, **HX)),
    "amend high_impact": Case(A[L + "may_amend_approval"], _awaiting, _approval, **_amend()),
    "retry": Case(A[L + "may_retry"], _escalated, _run, **_oncall("retry")),
    "compensate": Case(A[L + "may_compensate"], _escalated, _run, **_oncall("compensate")),
    "abandon": Case(A[L + "may_abandon"], _escalated, _run, **_oncall("abandon")),
    "rollback": Case(A[L + "may_rollback"], _completed, _run,
                     api=lambda c, m: _post(c, f"/api/v1/runs/{m['run']}/rollback/", {"to_stage": "build",
                                                                                      "reason": "matrix"}),
                     page=lambda c, m: c.post(reverse("ledger:run_rollback", args=[m["run"]]),
                                              {"to_stage": "build", "reason": "matrix"}, **HX)),
    "trigger": Case(A[L + "may_trigger"], _workflow, lambda m: Workflow.objects.get(slug=m["slug"]),
                    api=lambda c, m: _post(c, "/api/v1/runs/", {"workflow": m["slug"], "inputs": {"n": unique("n")}})),
    "append_event": Case(A[L + "may_append_event"], _fresh_run, _run, api=lambda c, m: _post(
        c, f"/api/v1/runs/{m['run']}/events/", {"client_event_id": unique("m"), "stage": "build", "kind": "started"})),
    "request_approval": Case(A[L + "may_request_approval"], _fresh_run, _run, api=lambda c, m: _post(
        c, f"/api/v1/runs/{m['run']}/approvals/", {"kind": "high_impact", "stage": "deploy", "action": ACTION})),
    "save_checkpoint": Case(A[L + "may_save_checkpoint"], _fresh_run, _run, api=lambda c, m: _post(
        c, f"/api/v1/runs/{m['run']}/checkpoints/", {"state_table": {}})),
    "create workflow": Case(A[L + "may_edit_workflow"], _workflow, lambda m: None,
                            api=lambda c, m: _post(c, "/api/v1/workflows/", {"slug": unique("wf")})),
    "edit workflow": Case(A[L + "may_edit_workflow"], _workflow, lambda m: Workflow.objects.get(slug=m["slug"]),
                          api=lambda c, m: c.patch(f"/api/v1/workflows/{m['slug']}/", {"title": "T"}, format="json")),
    "acknowledge alert": Case(A[L + "may_handle_alert"], _alert, lambda m: Alert.objects.get(id=m["alert"]),
                              api=lambda c, m: _post(c, f"/api/v1/alerts/{m['alert']}/acknowledge/", {})),
    "resolve alert": Case(A[L + "may_handle_alert"], _alert, lambda m: Alert.objects.get(id=m["alert"]),
                          api=lambda c, m: _post(c, f"/api/v1/alerts/{m['alert']}/resolve/", {"reason": "matrix"})),
    "silence alert rule": Case(A[L + "may_silence_alert"], _alert, lambda m: Workflow.objects.get(slug=m["slug"]),
                               api=lambda c, m: _post(c, f"/api/v1/workflows/{m['slug']}/alerts/stuck/silence/",
                                                      {"minutes": 5, "reason": "matrix"})),
    "post goal": Case(A[L + "may_post_goal"], _workflow, lambda m: Workflow.objects.get(slug=m["slug"]),
                      api=lambda c, m: _post(c, f"/api/v1/workflows/{m['slug']}/goals/",
                                             {"intent": unique("i"), "objective": "matrix"})),
    "lease": Case(A[L + "may_lease"], _workflow, lambda m: None,
                  api=lambda c, m: _post(c, "/api/v1/runs/lease/", {"workflows": [m["slug"]]})),
    "save view": Case(A[L + "may_save_view"], lambda p: {}, lambda m: None, page=lambda c, m: c.post(
        reverse("ledger:saved_view_create"), {"name": unique("view"), "query": "state=failed"}, **HX)),
    "bulk retry": Case(A[L + "may_act_in_bulk"], _escalated, lambda m: "retry", page=lambda c, m: c.post(
        reverse("ledger:oncall_bulk"), {"action": "retry", "run": [m["run"]], "reason": "matrix"}, **HX)),
    "see fleet": Case(A[L + "may_see_fleet"], lambda p: {}, lambda m: None,
                      api=lambda c, m: c.get("/api/v1/agents/"),
                      page=lambda c, m: c.get(reverse("ledger:agent_list"), **HX)),
    "revoke agent": Case(A[L + "may_revoke_agent"], lambda p: {"name": make_agent()[0].username}, lambda m: None,
                         api=lambda c, m: _post(c, f"/api/v1/agents/{m['name']}/revoke/", {"reason": "matrix"}),
                         page=lambda c, m: c.post(reverse("ledger:agent_revoke", args=[m["name"]]),
                                                  {"reason": "matrix"}, **HX)),
    "reconcile": Case(A[K + "may_reconcile"], lambda p: {}, lambda m: None,
                      api=lambda c, m: _post(c, "/api/v1/knowledge/reconcile/", {"entries": []})),
    "propose": Case(A[K + "may_propose"], lambda p: {}, lambda m: None,
                    api=lambda c, m: _post(c, "/api/v1/claims/", proposal())),
    "accept inference": Case(A[K + "may_accept"], lambda p: _pending(p, confidence="engineering-inference"),
                             _pending_version, **_claim_call("accept", lambda m: {"version": m["version"]})),
    "accept sensitive": Case(A[K + "may_accept"], lambda p: _pending(
        p, sensitivity="sensitive", retention_until=iso(timezone.now() + timedelta(days=90))),
        _pending_version, **_claim_call("accept", lambda m: {"version": m["version"]})),
    "accept after revoke": Case(A[K + "may_accept"], _pending_after_revoke, _pending_version,
                                **_claim_call("accept", lambda m: {"version": m["version"]})),
    "refresh": Case(A[K + "may_refresh"], _stale_claim, _head, **_claim_call("refresh", _refresh_dates, _refresh_page)),
    "invalidate": Case(A[K + "may_invalidate"], _claim, _head,
                       **_claim_call("invalidate", lambda m: {"reason": "matrix"})),
    "revoke someone else's": Case(A[K + "may_revoke"], lambda p: _claim(p, owner_role="editor"), _head,
                                  **_claim_call("revoke", lambda m: {"reason": "matrix"})),
    "revoke owned by the owner": Case(A[K + "may_revoke"], _claim, _head,
                                      **_claim_call("revoke", lambda m: {"reason": "matrix"})),
    "revoke owned by a viewer": Case(A[K + "may_revoke"], lambda p: _claim(p, owner_role="viewer"), _head,
                                     **_claim_call("revoke", lambda m: {"reason": "matrix"})),
    "revoke unowned": Case(A[K + "may_revoke"], lambda p: _claim(p, owner_role=None), _head,
                           **_claim_call("revoke", lambda m: {"reason": "matrix"})),
}


@pytest.fixture
def people():
    """One identity per role: (user, token)."""
    found = {role: make_operator(role) for role in ("viewer", "editor", "owner", "oncall")}
    found["agent"] = make_agent()
    return found


def test_authorizers_matrix_covers_every_authorizer():
    """Adding an authorizer without a matrix case fails here."""
    assert set(A) == {case.authorizer.__module__ + "." + case.authorizer.__name__ for case in CASES.values()}


def test_authorizers_matrix_every_authorizer_backs_an_endpoint():
    """Each authorizer is the rule of at least one endpoint's policy (an API view or a page), so none is dead."""
    from tests.stateboard.test_policy_matrix import declared, endpoints, methods_of

    used = {getattr(declared(view, method), "authorizer", None) for _, _, view in endpoints()
            for method in methods_of(view)}
    assert set(A.values()) <= used, set(A) - {f"{f.__module__}.{f.__name__}" for f in used if f}


def _refused(response) -> bool:
    assert response.status_code < 500, response.content
    return response.status_code == 403


@pytest.mark.parametrize("name", list(CASES))
def test_authorizers_matrix_page_and_api_agree(name, people):
    """For every role: the API (token), the page (session, htmx) and the authorizer give one verdict."""
    case = CASES[name]
    api_made, page_made = case.make(people), case.make(people) if case.page and case.api else None
    verdicts = {}
    # Refused roles first: a refusal writes nothing, so every role meets the object as it was made.
    order = sorted(ROLES, key=lambda role: allowed(case.authorizer, people[role][0], case.subject(api_made)))
    for role in order:
        user, token = people[role]
        expected_refused = not allowed(case.authorizer, user, case.subject(api_made))
        row = {"authorizer": expected_refused}
        if case.api:
            row["api"] = _refused(case.api(client_for(token), api_made))
        if case.page:
            page = Client()
            page.force_login(user)
            made = page_made or api_made
            assert expected_refused == (not allowed(case.authorizer, user, case.subject(made)))
            row["page"] = _refused(case.page(page, made))
        verdicts[role] = row
        assert len(set(row.values())) == 1, (name, role, row)
    assert any(not row["authorizer"] for row in verdicts.values()), f"{name}: nobody may do it"
    assert any(row["authorizer"] for row in verdicts.values()), f"{name}: everybody may do it"


def test_authorizers_matrix_refusals_are_audited_once_per_attempt(people):
    """A refused page attempt and a refused API attempt each leave exactly one audit entry."""
    made = _escalated(people)
    user, token = people["viewer"]
    page = Client()
    page.force_login(user)
    assert page.post(reverse("ledger:run_retry", args=[made["run"]]), {"reason": "r"}, **HX).status_code == 403
    assert _post(client_for(token), f"/api/v1/runs/{made['run']}/retry/", {"reason": "r"}).status_code == 403
    entries = AuditEntry.objects.filter(run_id=made["run"], action="retry", outcome="refused")
    assert [(e.code, e.reason, e.actor) for e in entries] == [("permission_denied", "r", f"user:{user.username}")] * 2


def test_authorizers_matrix_claim_refusals_are_audited_alike_on_page_and_api(people):
    """Revoking someone else's claim: the page and the API refuse it with one code, each audited once."""
    made = _claim(people, owner_role="owner")
    user, token = people["editor"]
    page = Client()
    page.force_login(user)
    assert page.post(reverse("knowledge:claim_revoke"), {"key": made["key"], "reason": "r"}, **HX).status_code == 403
    api = _post(client_for(token), f"/api/v1/claims/{made['key']}/revoke/", {"reason": "r"})
    assert api.status_code == 403 and api.json()["code"] == "not_claim_owner"
    entries = AuditEntry.objects.filter(target=made["key"], action="claim_revoke", outcome="refused")
    assert [e.code for e in entries] == ["not_claim_owner"] * 2


def test_the_services_ask_the_authorizers_their_policies_name(people):
    """A caller of the service (not only of the API) meets the rule: a goal, a lease, a reconcile and a
    saved view are refused to whom their policy refuses them."""
    from knowledge import services as knowledge_services
    from ledger import services
    from stateboard.errors import Refused

    workflow = make_workflow()
    viewer, editor = people["viewer"][0], people["editor"][0]
    for call in (lambda: services.goal_create(workflow_slug=workflow.slug, intent="i", objective="o", user=viewer),
                 lambda: services.run_lease(user=editor, workflows=[workflow.slug]),
                 lambda: knowledge_services.knowledge_reconcile(user=viewer, entries=[]),
                 lambda: services.saved_view_save(name="v", query="", user=people["agent"][0])):
        with pytest.raises(Refused):
            call()
