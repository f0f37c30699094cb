"""Notifications in a real browser: the menu badge follows what is read or decided, without a reload."""

import os
from pathlib import Path

import pytest
from playwright.sync_api import expect

from ledger.models import Notification
from tests.browser.scenarios import agent_driver, approval_workflow, awaiting_approval_run

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_the_badge_follows_a_decision_a_read_and_mark_all_read(live_server, page, log_in, tmp_path):
    user = log_in("editor")  # an editor before the requests: each notifies them
    agent = agent_driver(approval_workflow())
    (run_a, approval_a), (run_b, _), _ = [awaiting_approval_run(agent, i) for i in ("n-alpha", "n-beta", "n-gamma")]
    page.reload()
    badge = page.locator("#nav-notifications [data-unread-count]")
    expect(badge).to_have_text("3")

    page.click("nav >> text=Approvals")  # deciding one in the inbox settles its notification
    page.evaluate("window.__sameDocument = true")
    page.once("dialog", lambda dialog: dialog.accept())
    page.locator(f"#approval-{approval_a['id']} [data-action=approve]").click()
    expect(page.locator(f"#approval-{approval_a['id']}")).to_have_attribute("data-status", "approved")
    expect(badge).to_have_text("2")
    assert page.evaluate("window.__sameDocument") is True

    page.click("#nav-notifications")
    decided = page.locator("#notification-table tr", has_text=run_a["id"][:8])
    expect(decided.locator("[data-done]")).to_contain_text(f"approved by user:{user.username}")
    expect(page.locator("#notification-table tr", has_text="n-beta")).to_contain_text(f"run {run_b['id'][:8]}")
    page.evaluate("window.__sameDocument = true")
    page.locator("#notification-table tr", has_text="n-beta").get_by_role("button", name="Mark read").click()
    expect(badge).to_have_text("1")
    page.locator("[data-action=read-all]").click()
    expect(page.locator("#nav-notifications [data-unread-count]")).to_have_count(0)
    expect(page.locator("#notification-table").get_by_role("button", name="Mark read")).to_have_count(0)
    assert page.evaluate("window.__sameDocument") is True
    assert not Notification.objects.filter(user=user, read_at__isnull=True).exists()
    shots = Path(os.environ.get("STATEBOARD_SCREENSHOT_DIR") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(shots / "notifications.png"), full_page=True)
