"""The dashboard pages in Chromium: the live run page, the keyboard inbox, on-call preview, compare, reports.

Every test runs with a route guard (conftest ``page``) that fails it if any request leaves 127.0.0.1.
"""

import pytest
from playwright.sync_api import expect

from ledger.models import Approval, Run
from tests.browser.scenarios import (
    agent_driver,
    approval_workflow,
    awaiting_approval_run,
    escalated_run,
    escalation_workflow,
)
from tests.factories import make_workflow

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def panels_agree(page, state: str):
    """Header badge, drawing, live region and the newest event all show the run's current state."""
    expect(page.locator("#run-badge")).to_have_text(state, timeout=12_000)
    expect(page.locator("#run-live")).to_have_attribute("data-state", state)
    expect(page.locator(".run-path .step.current")).to_have_attribute("data-state", state)
    expect(page.locator("#event-list .polling .badge, #run-badge").first).to_have_text(state)


def test_live_run_page_follows_a_run_through_three_stages(live_server, page, clock, log_in):
    wf = make_workflow(stages=["build", "test", "push"], effect_stages=["push"], approval_stages=[])
    agent = agent_driver(wf)
    run = agent.trigger(intent="live", inputs={"intent": "live"})
    log_in("viewer")
    page.goto(f"{live_server.url}/runs/{run['id']}/")
    page.evaluate("window.__sameDocument = true")
    panels_agree(page, "fresh")
    expect(page.locator("#lease-panel")).to_contain_text("agent")

    for stage, effect in (("build", False), ("test", False)):
        agent.pass_stage(run["id"], stage, effect_stage=effect)
        clock.run_for(3000)  # the page's next refresh (every 3 s), at once (conftest ``clock``)
        panels_agree(page, "checkpointed")
        expect(page.locator(f"#stages-panel tr[data-stage={stage}]")).to_have_attribute("data-status", "succeeded")
        latest = Run.objects.get(id=run["id"]).event_count
        expect(page.locator(f"#seq-{latest}")).to_be_visible()
        expect(page.locator("#checkpoint-panel [data-checkpoint-stage]")).to_have_text(stage)

    agent.pass_stage(run["id"], "push", effect_stage=True)
    clock.run_for(3000)
    panels_agree(page, "completed")
    expect(page.locator("#stages-panel tr[data-stage=push]")).to_have_attribute("data-status", "verified")
    expect(page.locator("#effects-panel tr[data-effect=push]")).to_contain_text("verified")
    expect(page.locator("#lease-panel")).to_have_text("none (terminal)")
    expect(page.locator("#run-live")).not_to_have_attribute("hx-trigger", "every 3s")  # polling stopped
    assert page.evaluate("window.__sameDocument") is True  # swapped in place, never reloaded
    transitions = page.locator(".run-path .arrow")
    assert transitions.count() >= 6


def test_approve_from_the_inbox_with_the_keyboard(live_server, page, log_in):
    agent = agent_driver(approval_workflow())
    (_, first), (_, second) = awaiting_approval_run(agent, "kb-a"), awaiting_approval_run(agent, "kb-b")
    log_in("editor")
    page.goto(f"{live_server.url}/approvals/")
    expect(page.locator(".kbd-hints")).to_contain_text("approve")
    page.keyboard.press("j")
    expect(page.locator("tr.selected")).to_have_count(1)
    page.keyboard.press("j")  # the second request
    selected = page.locator("tr.selected").get_attribute("id")
    page.keyboard.press("k")
    assert page.locator("tr.selected").get_attribute("id") != selected
    target = page.locator("tr.selected").get_attribute("id").removeprefix("approval-")
    page.once("dialog", lambda dialog: dialog.accept())  # the confirm
    page.keyboard.press("a")
    expect(page.locator(f"#approval-{target}")).to_have_attribute("data-status", "approved")
    assert Approval.objects.get(id=target).status == "approved"
    other = second["id"] if target == first["id"] else first["id"]
    page.keyboard.press("j")
    page.keyboard.press("r")
    expect(page.locator(f"#approval-{other} [data-reject-reason]")).to_be_focused()


def test_bulk_retry_shows_its_preview_then_acts(live_server, page, clock, log_in):
    """Ticked rows stay ticked through the page's refreshes (app.js pauses the poll: a trigger filter would
    need eval, which the CSP forbids), and the bulk retry then acts on both, with no console error."""
    errors = []
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: errors.append(str(error)))
    agent = agent_driver(escalation_workflow())
    runs = [escalated_run(agent, f"bulk-{n}")[1] for n in range(2)]
    log_in("oncall")
    page.goto(f"{live_server.url}/oncall/")
    for run in runs:
        page.locator(f"#oncall-{run['id']} input[name=run]").check()
    clock.run_for(11_000)  # two polls' worth (the page's clock moved on: conftest ``clock``)
    for run in runs:
        expect(page.locator(f"#oncall-{run['id']} input[name=run]")).to_be_checked()
    page.locator("[data-preview]").click()
    preview = page.locator("#oncall-preview")
    expect(preview).to_be_visible()
    expect(preview.locator("[data-preview-run]")).to_have_count(2)
    expect(preview.locator("[data-outcome]").first).to_be_visible()
    assert all(Run.objects.get(id=r["id"]).state == "escalated" for r in runs)  # a preview does nothing
    page.once("dialog", lambda dialog: dialog.accept())
    preview.locator("[data-confirm]").click()
    expect(page.locator("#oncall-table")).to_contain_text("Retry: 2 done, 0 refused.")
    assert all(Run.objects.get(id=r["id"]).state != "escalated" for r in runs)
    assert errors == [], errors


def test_compare_two_attempts(live_server, page, log_in):
    failed, escalated = escalated_run(agent_driver(escalation_workflow()), "cmp")
    log_in("viewer")
    page.goto(f"{live_server.url}/runs/{escalated['id']}/")
    page.locator("[data-compare]").click()
    expect(page.locator("h1")).to_have_text("Compare runs")
    expect(page.locator("#compare-decisions")).to_contain_text("retry_budget_exhausted")
    expect(page.locator("#compare-stages tr[data-stage=test]")).to_contain_text("failed")
    assert failed["id"] in page.url and escalated["id"] in page.url


def test_reports_show_a_chart(live_server, page, log_in):
    agent = agent_driver(escalation_workflow())
    escalated_run(agent, "rep")
    log_in("viewer")
    page.goto(f"{live_server.url}/reports/")
    expect(page.locator("figure.chart svg rect.bar").first).to_be_visible()
    page.locator("nav[aria-label=Window] >> text=24h").click()
    expect(page.locator("#reports-body")).to_have_attribute("data-window", "24h")
    expect(page.locator("figure.chart svg rect.bar").first).to_be_visible()


def test_no_request_leaves_the_server(live_server, page, log_in, outside_requests):
    """Every page (API docs included) loads only from the server; the guard itself does catch a stray request."""
    wf = make_workflow(stages=["check"], effect_stages=[], approval_stages=[], schedule="0 3 * * *")
    agent = agent_driver(wf)
    run = agent.trigger(intent="ext", inputs={})
    agent.event(run["id"], "check", "started")
    agent.event(run["id"], "check", "succeeded", evidence=[
        {"uri": "https://ci.example.test/screenshot.png", "observed_at": "2026-11-29T12:00:00+00:00"}])
    log_in("owner")
    for path in ("/", "/runs/", f"/runs/{run['id']}/", "/approvals/", "/oncall/", "/claims/", "/claims/review/",
                 "/workflows/", f"/workflows/{wf.slug}/", "/reports/", f"/runs/compare/?a={run['id']}&b={run['id']}",
                 "/api/v1/docs/", "/no-such-page/"):
        page.goto(f"{live_server.url}{path}")
        page.wait_for_load_state("networkidle")
        assert outside_requests == [], (path, outside_requests)
    page.goto("about:blank")  # (our pages' Content-Security-Policy would stop the fetch before it leaves)
    page.evaluate("fetch('https://example.invalid/beacon').catch(() => null)")
    page.wait_for_timeout(300)
    assert outside_requests == ["https://example.invalid/beacon"]
    outside_requests.clear()  # the deliberate one; teardown checks nothing else left


def test_run_page_path_full_machine_timeline_and_compare_by_prefix(live_server, page, log_in):
    """The path shows the current state, the full machine opens, the timeline has every stage, compare takes prefixes."""
    failed, escalated = escalated_run(agent_driver(escalation_workflow()), "shape")
    log_in("viewer")
    page.goto(f"{live_server.url}/runs/{escalated['id']}/")
    expect(page.locator(".run-path .step.current")).to_have_attribute("data-state", "escalated")
    expect(page.locator("#machine-panel table.machine-table")).not_to_be_visible()
    page.click("#full-machine summary")
    expect(page.locator("#machine-panel table.machine-table tr")).to_have_count(18)
    run = Run.objects.select_related("workflow").get(id=escalated["id"])
    expect(page.locator("#stages-panel tbody tr")).to_have_count(len(run.workflow.stages))
    page.goto(f"{live_server.url}/runs/compare/")
    expect(page.locator("input[name=a]")).to_be_visible()
    page.goto(f"{live_server.url}/runs/compare/?a={failed['id'][:8]}&b={escalated['id'][:8]}")
    expect(page.locator("#compare-body")).to_be_visible()
