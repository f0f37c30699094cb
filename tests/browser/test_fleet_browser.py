"""The fleet in a real browser: an owner's revoke asks first; declining revokes nothing, confirming swaps the
agent's row in place to a revoked token, and the agent's next call is refused."""

import os
from pathlib import Path

import pytest
from playwright.sync_api import expect

from ledger.models import ApiToken, AuditEntry
from tests.factories import client_for, make_agent

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_revoking_an_agents_token_asks_first_then_swaps_the_row(live_server, page, log_in, tmp_path):
    user, token = make_agent()
    assert client_for(token).get("/api/v1/workflows/").status_code == 200  # a last request to show
    log_in("owner")
    page.click("nav >> text=Agents")
    row = page.locator(f'tr[data-agent="{user.username}"]')
    expect(row).to_have_attribute("data-token", "active")
    row.locator("input[name=reason]").fill("key leaked in a log")

    asked = []
    page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.dismiss()))
    row.locator("[data-action=revoke]").click()
    page.wait_for_timeout(300)
    assert asked and "Revoke" in asked[0] and user.username in asked[0], asked
    assert ApiToken.objects.get(user=user).revoked_at is None

    page.once("dialog", lambda dialog: dialog.accept())
    row.locator("[data-action=revoke]").click()
    expect(row).to_have_attribute("data-token", "revoked")
    expect(row.locator("[data-changed]")).to_contain_text("is revoked")
    expect(row.locator("[data-action=revoke]")).to_have_count(0)
    assert AuditEntry.objects.get(action="token_revoke").reason == "key leaked in a log"
    shots = Path(os.environ.get("STATEBOARD_SCREENSHOT_DIR") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(shots / "fleet.png"), full_page=True)
    answer = client_for(token).get("/api/v1/workflows/")
    assert answer.status_code == 401 and answer.json()["code"] == "authentication_failed"
