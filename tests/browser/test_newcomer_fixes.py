"""What a newcomer found on the operators' pages (issue 41), in Chromium: the run page's rollback asks first
and says what it did; the ledger table fits 1400 px."""

import os
from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.browser.scenarios import agent_driver, completed_run
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
