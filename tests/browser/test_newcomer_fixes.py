"""What a newcomer found on the operators' pages (issue 41), in Chromium: the run page's rollback asks first
and says what it did; the ledger table fits 1400 px; j/k in the inbox walk only what the user may decide."""

import os
from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.browser.scenarios import (
    agent_driver,
    approval_workflow,
    awaiting_approval_run,
    completed_run,
    escalated_run,
    escalation_workflow,
)
from tests.factories import make_workflow

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def _shots(tmp_path) -> Path:
    shots = Path(os.environ.get("STATEBOARD_SCREENSHOT_DIR") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    return shots


def test_rollback_from_the_run_page_asks_first_then_says_what_it_did(live_server, page, log_in, tmp_path):
    workflow = make_workflow(stages=["build", "deploy"], effect_stages=["deploy"], approval_stages=[])
    run = completed_run(agent_driver(workflow), workflow, "ship")
    log_in("oncall")
    page.goto(f"{live_server.url}/runs/{run['id']}/")
    form = page.locator("form[data-rollback]")
    form.locator("input[name=reason]").fill("the deploy broke checkout")
    asked = []

    def answer(dialog, accept):
        asked.append(dialog.message)
        dialog.accept() if accept else dialog.dismiss()

    page.once("dialog", lambda dialog: answer(dialog, False))
    form.locator("button[type=submit]").click()
    page.wait_for_timeout(300)
    assert asked and "Roll back" in asked[0]
    expect(page.locator("#run-badge")).to_have_text("completed")  # dismissed: nothing happened

    page.once("dialog", lambda dialog: answer(dialog, True))
    form.locator("button[type=submit]").click()
    expect(page.locator(".flash-success")).to_contain_text("Rolled back to deploy")
    expect(page.locator(".flash-success")).to_contain_text("queued for an agent")
    expect(page.locator("#run-badge")).not_to_have_text("completed")
    page.screenshot(path=str(_shots(tmp_path) / "rollback_done.png"), full_page=False)


def test_the_ledger_table_fits_1400_px_with_long_references_and_evidence(live_server, page, log_in, tmp_path):
    """Long unbroken effect references and evidence URIs wrap: the table is no wider than its card, and the
    evidence column is inside it."""
    workflow = make_workflow(stages=["build", "deploy"], effect_stages=["deploy"], approval_stages=[])
    agent = agent_driver(workflow)
    run = agent.trigger(intent="wide", inputs={"intent": "wide"})
    agent.pass_stage(run["id"], "build")
    reference = "9f2c1e0a" * 8  # the executor's record handler: the 64-hex idempotency key, unbroken
    uri = "https://k8s.example.com/" + "0d15ea5e" * 8
    agent.event(run["id"], "deploy", "started")
    agent.event(run["id"], "deploy", "succeeded", effect={"system": "k8s", "operation": "deploy", "reference": reference})
    agent.event(run["id"], "deploy", "verified", evidence=[
        {"uri": uri, "observed_at": "2026-12-07T12:00:00+00:00", "excerpt": "rollout complete " * 10,
         "digest": "sha256:" + "ab" * 32}])
    log_in("viewer")
    page.set_viewport_size({"width": 1400, "height": 900})
    page.goto(f"{live_server.url}/runs/{run['id']}/")
    card = page.locator("#event-list")
    expect(card.locator("table.events")).to_be_visible()
    sizes = card.evaluate("""card => { const t = card.querySelector('table.events');
        const ev = t.querySelector('tr[data-kind=verified] td:last-child').getBoundingClientRect();
        const box = card.getBoundingClientRect();
        return {table: t.scrollWidth, room: card.clientWidth, page: document.documentElement.scrollWidth,
                viewport: window.innerWidth, evRight: ev.right, evWidth: ev.width, cardRight: box.right}; }""")
    assert sizes["table"] <= sizes["room"], sizes
    assert sizes["page"] <= sizes["viewport"], sizes
    assert sizes["evWidth"] > 150 and sizes["evRight"] <= sizes["cardRight"] + 1, sizes
    card.scroll_into_view_if_needed()
    page.screenshot(path=str(_shots(tmp_path) / "ledger_1400.png"), full_page=False)


def test_editors_j_k_walk_only_the_requests_they_may_decide(live_server, page, log_in):
    """An escalation waits for on-call: an editor's j/k pass it by and stop only on high-impact requests."""
    from ledger.models import Approval

    escalated_run(agent_driver(escalation_workflow()), "nightly")
    agent = agent_driver(approval_workflow())
    wanted = {f"approval-{awaiting_approval_run(agent, intent)[1]['id']}" for intent in ("post-a", "post-b")}
    escalation = f"approval-{Approval.objects.get(kind='escalation').id}"
    log_in("editor")
    page.goto(f"{live_server.url}/approvals/")
    expect(page.locator(f"#{escalation}")).to_be_visible()
    visited = []
    for key in "jjjkkk":
        page.keyboard.press(key)
        visited.append(page.locator("tr.selected").get_attribute("id"))
    assert set(visited) == wanted, visited
