"""The run page as the on-call desk, in a real browser: an escalated run's failure, actions with their
preview and lease line; a retry from there."""

import os
from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.browser.scenarios import agent_driver, escalation_workflow

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

ERROR = "FAILED tests/test_login.py::test_redirect - AssertionError: 302 != 200\nAuthorization: Bearer s3cr3t-t0ken"


def test_escalated_run_page_is_the_oncall_desk(live_server, page, clock, log_in, tmp_path):
    agent = agent_driver(escalation_workflow())
    failed = agent.trigger(intent="nightly", inputs={"intent": "nightly"})
    agent.event(failed["id"], "build", "started")
    agent.event(failed["id"], "build", "failed", reason_code="tests_red", data={"error": ERROR})
    run = agent.trigger(intent="nightly", inputs={"intent": "nightly"})
    log_in("oncall")
    page.goto(f"{live_server.url}/runs/{run['id']}/")

    desk = page.locator("#oncall-desk")
    expect(desk).to_be_visible()
    expect(desk.locator("[data-failure-stage]")).to_have_text("build")
    expect(desk.locator("[data-failure-reason]")).to_have_text("tests_red")
    expect(desk.locator("[data-failure-error]")).to_contain_text("AssertionError: 302 != 200")
    expect(desk).not_to_contain_text("s3cr3t-t0ken")
    expect(desk).to_contain_text("retry_budget_exhausted")
    expect(desk.locator("tr[data-desk-action=retry] [data-outcome]")).to_be_visible()
    expect(desk.locator("tr[data-desk-action=compensate]")).to_contain_text("nothing to compensate")
    expect(desk.locator("button[data-action=retry]")).to_be_visible()
    expect(desk.locator("button[data-action=abandon]")).to_be_visible()
    expect(page.locator("#lease-panel")).to_contain_text("waits for on-call")
    box, card = desk.locator("[data-failure-error]").bounding_box(), desk.bounding_box()
    assert box["x"] + box["width"] <= card["x"] + card["width"] + 1, (box, card)

    desk.locator("input[name=reason]").fill("typed while the page refreshes")
    clock.run_for(3500)  # one live refresh (the page's clock moved on: conftest ``clock``): the desk and the reason typed stay
    expect(desk.locator("input[name=reason]")).to_have_value("typed while the page refreshes")
    shots = Path(os.environ.get("STATEBOARD_SCREENSHOT_DIR") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(shots / "run_desk.png"), full_page=False)

    desk.locator("button[data-action=retry]").click()
    expect(page.locator("#run-badge")).not_to_have_text("escalated")
    expect(page.locator(".flash-success")).to_contain_text("Retry:")
    expect(page.locator("#oncall-desk")).to_have_count(0)


def test_workflow_page_grid_and_grouped_runs_list(live_server, page, log_in, tmp_path):
    wf = escalation_workflow(max_retries=3)
    agent = agent_driver(wf)
    for n in range(2):
        run = agent.trigger(intent="nightly", inputs={"intent": "nightly"})
        agent.event(run["id"], "build", "started")
        agent.event(run["id"], "build", "failed", reason_code="tests_red", data={"error": "boom"})
    done = agent.trigger(intent="green", inputs={"intent": "green"})
    agent.pass_stage(done["id"], "build")
    agent.pass_stage(done["id"], "test")
    log_in("viewer")
    page.goto(f"{live_server.url}/workflows/{wf.slug}/")
    grid = page.locator("table[data-section=stage-grid]")
    expect(grid.locator("tbody tr")).to_have_count(3)
    cell = grid.locator(f"tr[data-run='{done['id']}'] td[data-cell=test]")
    expect(cell).to_have_attribute("data-status", "succeeded")
    expect(grid.locator(f"tr[data-run='{done['id']}'] td[data-cell=test] [data-duration]")).not_to_be_empty()
    card, table = page.locator("#recent-runs").bounding_box(), grid.bounding_box()
    assert table["x"] + table["width"] <= card["x"] + card["width"] + 1, (table, card)
    shots = Path(os.environ.get("STATEBOARD_SCREENSHOT_DIR") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    page.locator("#recent-runs").screenshot(path=str(shots / "workflow_grid.png"))

    page.goto(f"{live_server.url}/runs/?group=attempts")
    expect(page.locator("#run-table tbody tr")).to_have_count(2)
    expect(page.locator("[data-attempts='2']")).to_have_text("2 attempts")
    page.screenshot(path=str(shots / "runs_grouped.png"), full_page=False)


def test_oncall_row_names_the_failure_and_links_to_the_desk(live_server, page, log_in, tmp_path):
    agent = agent_driver(escalation_workflow())
    failed = agent.trigger(intent="nightly", inputs={"intent": "nightly"})
    agent.event(failed["id"], "build", "started")
    agent.event(failed["id"], "build", "failed", reason_code="tests_red", data={"error": ERROR + "\n" + "x" * 400})
    run = agent.trigger(intent="nightly", inputs={"intent": "nightly"})
    log_in("oncall")
    page.click("nav >> text=On-call")
    row = page.locator(f"#oncall-{run['id']}")
    expect(row.locator("[data-row-failure]")).to_contain_text("failed at build tests_red")
    expect(row.locator("[data-row-failure]")).to_contain_text("AssertionError: 302 != 200")
    expect(row).not_to_contain_text("s3cr3t-t0ken")
    assert row.bounding_box()["height"] < 200, row.bounding_box()
    shots = Path(os.environ.get("STATEBOARD_SCREENSHOT_DIR") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(shots / "oncall_failure.png"), full_page=False)
    row.locator(f"a[href='/runs/{run['id']}/']").click()
    expect(page.locator("#oncall-desk [data-failure-error]")).to_contain_text("AssertionError")
