"""Amending from the inbox (SPEC §17): a form generated from the stage's action_schema (or a JSON text without
one), the change previewed before it is sent (htmx, or a plain GET), the amend posted through the page's
policy; only the request's approvers see the link and the page."""

import json

import pytest
from django.urls import reverse

from ledger.models import Approval, LedgerEvent
from tests.browser.scenarios import agent_driver, approval_workflow, awaiting_approval_run
from tests.factories import HX, make_operator, page_client, page_queries, texts

pytestmark = pytest.mark.django_db

SECRET = "sk-abcdefghijklmnopqrstuvwx"
ACTION = {"system": "k8s", "operation": "deploy", "target": "prod/web", "summary": f"Deploy with key {SECRET}"}
SCHEMA = {"type": "object", "required": ["system", "operation", "target", "summary"],
          "properties": {"system": {"type": "string"}, "operation": {"enum": ["deploy", "canary"]},
                         "target": {"type": "string", "description": "namespace/name"},
                         "summary": {"type": "string"}, "replicas": {"type": "integer"}},
          "additionalProperties": False}


def _awaiting(schema=SCHEMA, approvers=("role:editor",)):
    rules = {"deploy": {"approvers": list(approvers), **({"action_schema": schema} if schema else {})}}
    return awaiting_approval_run(agent_driver(approval_workflow(approval_rules=rules)), "post-a", action=ACTION)[1]


def _url(approval) -> str:
    return reverse("ledger:approval_amend", args=[approval["id"]])


def test_the_form_has_one_input_per_property_shown_redacted():
    approval = _awaiting()
    editor = page_client(make_operator("editor")[0])
    assert page_queries(editor, _url(approval)) <= 12
    html = texts(editor.get(_url(approval)))
    assert [part.split('"')[0] for part in html.split('data-amend-field="')[1:]] == [
        "system", "operation", "target", "summary", "replicas"]
    assert SECRET not in html and 'value="prod/web"' in html and "namespace/name" in html
    assert 'name="action_json"' not in html
    inbox = texts(editor.get(reverse("ledger:approval_list")))
    assert f'href="{_url(approval)}" data-action="amend"' in inbox


def test_the_preview_shows_the_change_and_what_the_schema_refuses_and_writes_nothing():
    approval = _awaiting()
    editor = page_client(make_operator("editor")[0])
    form = {f"field_{k}": v for k, v in ACTION.items()} | {"field_summary": texts_redacted_summary(),
                                                           "field_operation": "canary", "field_replicas": "3",
                                                           "preview": "1"}
    shown = texts(editor.get(_url(approval), form, **HX))
    assert shown.strip().startswith('<div id="amend-preview"') and "<html" not in shown
    assert 'data-change="changed"' in shown and "operation" in shown and "canary" in shown
    assert 'data-change="added"' in shown and "replicas" in shown and "data-valid" in shown
    assert "summary" not in shown  # sent back as shown (redacted): unchanged
    refused = texts(editor.get(_url(approval), {**form, "field_operation": "delete"}, **HX))
    assert "data-problem" in refused and "delete" in refused
    plain = texts(editor.get(_url(approval), form))  # without JS: the whole page, with the change
    assert "<html" in plain and 'data-change="changed"' in plain
    assert Approval.objects.count() == 1 and not LedgerEvent.objects.filter(kind="approval_voided").exists()


def texts_redacted_summary() -> str:
    from stateboard.redact import redact
    return redact(ACTION["summary"])


def test_amending_posts_through_the_page_and_keeps_a_secret_it_did_not_touch():
    approval = _awaiting()
    editor_user = make_operator("editor")[0]
    editor = page_client(editor_user)
    form = {f"field_{k}": v for k, v in ACTION.items()} | {"field_summary": texts_redacted_summary(),
                                                           "field_operation": "canary", "reason": "canary first"}
    answer = editor.post(_url(approval), form)
    assert answer.status_code == 302 and answer["Location"].startswith(reverse("ledger:approval_list"))
    new = Approval.objects.get(status="pending")
    assert new.action == {**ACTION, "operation": "canary"}  # the summary's key kept, not its mask
    assert str(new.amended_from_id) == approval["id"] and new.requested_by == f"user:{editor_user.username}"
    inbox = texts(editor.get(answer["Location"]))
    assert "waits for its approvers" in inbox and f'data-amended-from="{approval["id"]}"' in inbox
    row = inbox.split(f'id="approval-{new.id}"')[1].split("</tr>")[0]
    assert 'data-action="approve"' not in row  # the amender requested it


def test_without_a_schema_the_action_is_a_json_text():
    approval = _awaiting(schema=None)
    editor = page_client(make_operator("editor")[0])
    html = texts(editor.get(_url(approval)))
    assert 'name="action_json"' in html and "data-amend-field" not in html and SECRET not in html
    bad = editor.post(_url(approval), {"action_json": "{not json", "reason": "r"}, **HX)
    assert bad.status_code == 422 and "not JSON" in texts(bad)
    amended = {"anything": ["goes"]}
    done = editor.post(_url(approval), {"action_json": json.dumps(amended), "reason": "r"}, **HX)
    assert done.status_code == 204 and done["HX-Redirect"].startswith(reverse("ledger:approval_list"))
    assert Approval.objects.get(status="pending").action == amended


def test_only_the_requests_approvers_amend():
    alice = make_operator("editor", name="alice")[0]
    approval = _awaiting(approvers=("user:alice",))
    for user in (make_operator("editor")[0], make_operator("viewer")[0], make_operator("oncall")[0]):
        client = page_client(user)
        assert client.get(_url(approval)).status_code == 403
        assert client.post(_url(approval), {"action_json": "{}", "reason": "r"}, **HX).status_code == 403
        assert 'data-action="amend"' not in texts(client.get(reverse("ledger:approval_list")))
    assert page_client(alice).get(_url(approval)).status_code == 200
    assert Approval.objects.count() == 1


def test_a_decided_request_has_nothing_to_amend():
    approval = _awaiting()
    editor = page_client(make_operator("editor")[0])
    Approval.objects.filter(id=approval["id"]).update(status="rejected")
    html = texts(editor.get(_url(approval)))
    assert "data-not-pending" in html and 'data-action="amend"' not in html
    refused = editor.post(_url(approval), {"field_system": "k8s", "reason": "r"}, **HX)
    assert refused.status_code == 409 and "already rejected" in texts(refused)
