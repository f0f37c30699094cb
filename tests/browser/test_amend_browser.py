"""Amending an action in a real browser (SPEC §17): from the inbox to the form generated from the schema, the
change previewed in place by htmx (under the pages' Content-Security-Policy), then the amend."""

import pytest
from playwright.sync_api import expect

from ledger.models import Approval
from tests.browser.scenarios import agent_driver, approval_workflow, awaiting_approval_run

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SCHEMA = {"type": "object", "required": ["system", "operation", "target", "summary"],
          "properties": {"system": {"type": "string"}, "operation": {"enum": ["deploy", "canary"]},
                         "target": {"type": "string"}, "summary": {"type": "string"}}}


def test_an_editor_previews_the_change_then_amends(live_server, page, log_in):
    agent = agent_driver(approval_workflow(approval_rules={"deploy": {"action_schema": SCHEMA}}))
    _, approval = awaiting_approval_run(agent, "post-alpha")
    log_in("editor")
    page.goto(f"{live_server.url}/approvals/")
    page.locator(f"#approval-{approval['id']} [data-action=amend]").click()
    expect(page.locator("h1")).to_have_text("Amend the proposed action")
    page.evaluate("window.__sameDocument = true")

    page.locator("[data-amend-field=operation]").fill("canary")
    page.locator("[data-action=preview]").click()
    expect(page.locator("#amend-preview [data-change=changed]")).to_contain_text("canary")
    expect(page.locator("#amend-preview [data-valid]")).to_be_visible()
    assert page.evaluate("window.__sameDocument") is True  # swapped in place, not a new page

    page.locator("[data-amend-field=operation]").fill("delete")
    page.locator("[data-action=preview]").click()
    expect(page.locator("#amend-preview [data-problem]")).to_contain_text("delete")
    assert Approval.objects.count() == 1

    page.locator("[data-amend-field=operation]").fill("canary")
    page.locator("input[name=reason]").fill("canary first")
    page.locator("[data-action=amend]").click()
    expect(page.locator("h1")).to_have_text("Approvals inbox")
    expect(page.locator("body")).to_contain_text("waits for its approvers")
    new = Approval.objects.get(status="pending")
    expect(page.locator(f"#approval-{new.id} [data-amended-from]")).to_be_visible()
    expect(page.locator(f"#approval-{new.id} [data-action=approve]")).to_have_count(0)  # the amender's own
    assert new.action["operation"] == "canary"
