"""``POST /api/v1/workflows/apply/`` (owners; the same apply as the command, audited) and the workflow page's
definition in the file form apply takes."""

import html

import pytest
import yaml
from django.urls import reverse

from ledger import services
from ledger.models import AuditEntry, Workflow
from tests.factories import client_for, login, make_agent, make_operator, make_workflow

pytestmark = pytest.mark.django_db

URL = "/api/v1/workflows/apply/"
DEFINITION = {"slug": "hello", "title": "Hello", "stages": ["draft", "publish", "verify"],
              "effect_stages": ["publish"], "approval_stages": ["publish"], "policy_version": "1",
              "executors": {"publish": {"handler": "record", "config": {}}}}


@pytest.fixture
def owner():
    user, token = make_operator("owner")
    return user, client_for(token)


def test_apply_api_creates_changes_and_answers_per_workflow(owner):
    user, client = owner
    response = client.post(URL, {"workflows": [DEFINITION]}, format="json")
    assert response.status_code == 200, response.content
    assert response.json() == {"dry_run": False, "results": [{"workflow": "hello", "result": "created", "changes": {}}]}
    changed = client.post(URL, {"workflows": [{**DEFINITION, "title": "Hi", "max_retries": 5}]}, format="json").json()
    assert changed["results"] == [{"workflow": "hello", "result": "changed", "changes": {
        "title": {"old": "Hello", "new": "Hi"}, "max_retries": {"old": 3, "new": 5}}}]
    entries = list(AuditEntry.objects.filter(action="workflow_apply").order_by("id"))
    assert [(e.actor, e.outcome, e.target, e.data["result"]) for e in entries] == [
        (f"user:{user.username}", "done", "hello", "created"), (f"user:{user.username}", "done", "hello", "changed")]
    assert entries[1].data["changes"]["max_retries"] == {"old": 3, "new": 5}
    same = client.post(URL, {"workflows": [{**DEFINITION, "title": "Hi", "max_retries": 5}]}, format="json").json()
    assert same["results"][0]["result"] == "unchanged" and AuditEntry.objects.filter(action="workflow_apply").count() == 2


def test_apply_api_dry_run_and_prune(owner):
    user, client = owner
    client.post(URL, {"workflows": [DEFINITION, {"slug": "old"}]}, format="json")
    make_workflow(slug="by-api", owner=user)
    make_workflow(slug="not-mine", owner=make_operator("owner")[0])
    dry = client.post(URL, {"workflows": [DEFINITION], "prune": True, "dry_run": True}, format="json").json()
    assert dry == {"dry_run": True, "results": [{"workflow": "hello", "result": "unchanged", "changes": {}},
                                                {"workflow": "old", "result": "archived", "changes": {}}]}
    assert Workflow.objects.get(slug="old").archived_at is None
    done = client.post(URL, {"workflows": [DEFINITION], "prune": True}, format="json").json()
    assert [r["result"] for r in done["results"]] == ["unchanged", "archived"]
    assert Workflow.objects.get(slug="old").archived_at is not None
    assert Workflow.objects.get(slug="by-api").archived_at is None
    everything = client.post(URL, {"workflows": [], "prune_all": True}, format="json").json()
    assert [(r["workflow"], r["result"]) for r in everything["results"]] == [("by-api", "archived")]  # the caller's
    assert not Workflow.objects.filter(slug__in=["hello", "not-mine"], archived_at__isnull=False).exists()
    restored = client.post(URL, {"workflows": [{"slug": "old"}]}, format="json").json()
    assert restored["results"] == [{"workflow": "old", "result": "restored", "changes": {}}]


def test_apply_api_refuses_all_or_nothing_with_each_error_and_audits_the_refusal(owner):
    user, client = owner
    client.post(URL, {"workflows": [DEFINITION]}, format="json")
    body = {"workflows": [{"slug": "fine"}, {**DEFINITION, "stages": ["draft", "publish"]},
                          {"slug": "typed", "policy_version": 1.1}]}
    response = client.post(URL, body, format="json")
    assert response.status_code == 409 and response.json()["code"] == "policy_version_required"
    assert [(e["workflow"], e["field"], e["code"]) for e in response.json()["errors"]] == [
        ("hello", "policy_version", "policy_version_required"), ("typed", "policy_version", "validation_error")]
    assert not Workflow.objects.filter(slug="fine").exists()
    assert Workflow.objects.get(slug="hello").stages == ["draft", "publish", "verify"]
    refusal = AuditEntry.objects.get(action="workflow_apply", outcome="refused")
    assert refusal.actor == f"user:{user.username}" and refusal.code == "policy_version_required"
    assert [e["workflow"] for e in refusal.data["errors"]] == ["hello", "typed"]


@pytest.mark.parametrize("body", [{"workflows": {"slug": "x"}}, {"workflows": [], "dry_run": "yes"},
                                  {"workflows": [], "prune": 1}, {"workflows": [], "prune": True, "prune_all": True},
                                  {"workflows": ["x"]}, []])
def test_apply_api_refuses_bad_bodies_with_a_code(owner, body):
    _, client = owner
    response = client.post(URL, body, format="json")
    assert response.status_code == 422 and response.json()["code"] == "validation_error", response.content


@pytest.mark.parametrize("role", ["viewer", "editor", "oncall", "agent"])
def test_apply_api_is_for_owners_only_and_a_refusal_is_audited(role):
    token = make_agent()[1] if role == "agent" else make_operator(role)[1]
    response = client_for(token).post(URL, {"workflows": [DEFINITION]}, format="json")
    assert response.status_code == 403 and response.json()["code"] == "permission_denied"
    assert not Workflow.objects.exists()
    assert AuditEntry.objects.get(action="workflow_apply").outcome == "refused"


def test_a_workflow_named_apply_is_still_created_by_apply_and_listed(owner):
    """The apply route sits before the detail route; a workflow slugged `apply` is still listed and applied."""
    _, client = owner
    assert client.post(URL, {"workflows": [{"slug": "apply"}]}, format="json").status_code == 200
    assert [w["slug"] for w in client.get("/api/v1/workflows/").json()["results"]] == ["apply"]


# ---------------------------------------------------------------- the page's definition

def _definition_block(page: str) -> str:
    start = page.index('<pre id="definition-yaml"')
    start = page.index(">", start) + 1
    return html.unescape(page[start:page.index("</pre>", start)])


def test_workflow_page_shows_the_definition_in_the_file_form_apply_takes(tmp_path, django_assert_max_num_queries):
    owner_user, _ = make_operator("owner")
    services.workflows_apply(definitions=[{**DEFINITION, "owner": owner_user.username}])
    wf = Workflow.objects.get(slug="hello")
    owner, _ = login("owner")
    with django_assert_max_num_queries(9):
        page = owner.get(reverse("ledger:workflow_detail", args=[wf.slug]))
    assert page.status_code == 200
    block = _definition_block(page.content.decode())
    assert block == services.file_form([wf])  # the same function as export_workflows
    assert yaml.safe_load(block)["workflows"][0]["executors"] == DEFINITION["executors"]
    assert 'data-copy="#definition-yaml"' in page.content.decode()
    again = services.workflows_apply(definitions=services.file_parse(block.encode(), json_format=False))
    assert [o.result for o in again] == ["unchanged"]
    viewer, _ = login("viewer")
    seen = _definition_block(viewer.get(reverse("ledger:workflow_detail", args=[wf.slug])).content.decode())
    assert "executors" not in yaml.safe_load(seen)["workflows"][0]  # executors are shown to owners only


def test_workflow_page_query_count_does_not_grow_with_the_definition():
    from tests.factories import page_queries

    viewer, _ = login("viewer")
    small = make_workflow(slug="small")
    big = make_workflow(slug="big", stages=[f"s{n}" for n in range(40)], effect_stages=["s1"], approval_stages=[],
                        owner=make_operator("owner")[0], agents=[f"a{n}" for n in range(30)])
    assert page_queries(viewer, reverse("ledger:workflow_detail", args=[small.slug])) == page_queries(
        viewer, reverse("ledger:workflow_detail", args=[big.slug]))


def test_workflow_page_says_an_archived_workflow_is_archived(owner):
    _, client = owner
    make_workflow(slug="gone", owner=owner[0])
    client.post(URL, {"workflows": [], "prune_all": True}, format="json")
    viewer, _ = login("viewer")
    page = viewer.get(reverse("ledger:workflow_detail", args=["gone"])).content.decode()
    assert ">archived</span>" in page and "restores it" in page
