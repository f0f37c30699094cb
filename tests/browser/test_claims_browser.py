"""The claims page in a real browser: a claim's owner revokes an active claim in place, then reads its history."""

import os
from pathlib import Path

import pytest
from playwright.sync_api import expect

from knowledge import services
from knowledge.models import ClaimHead
from tests.knowledge.conftest import proposal

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_owner_revokes_an_active_claim_in_place_and_its_history_tells_the_truth(live_server, page, log_in, tmp_path):
    owner = log_in("owner")
    claim = services.claim_propose(user=owner, data=proposal(statement="Billing retries twice."))
    other = services.claim_propose(user=owner, data=proposal(statement="Billing pages on-call after 5 min."))
    page.goto(f"{live_server.url}/claims/")
    row = page.locator(f'tr[data-claim="{claim.key}"]')
    expect(row).to_have_attribute("data-status", "active")
    page.evaluate("window.__sameDocument = true")  # gone if the page reloads

    row.get_by_label(f"Reason for revoking {claim.key}").fill("the retry policy changed in 2.2")
    page.once("dialog", lambda dialog: dialog.accept())  # hx-confirm on Revoke
    row.locator("[data-action=revoke]").click()
    expect(row).to_have_attribute("data-status", "revoked")
    expect(row).to_have_attribute("data-version", "2")
    expect(row).to_contain_text("the retry policy changed in 2.2")
    expect(row.locator("[data-action]")).to_have_count(0)
    expect(page.locator(f'tr[data-claim="{other.key}"] [data-action=revoke]')).to_be_visible()  # only its row moved
    assert page.evaluate("window.__sameDocument") is True
    assert ClaimHead.objects.select_related("current").get(key=claim.key).current.status == "revoked"

    shots = Path(os.environ.get("STATEBOARD_SCREENSHOT_DIR") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(shots / "claims-after-revoke.png"), full_page=True)

    row.get_by_role("link", name=claim.key).click()
    current = page.locator("#claim-current")
    expect(current).to_have_attribute("data-status", "revoked")
    expect(current.locator("[data-current-line]")).to_contain_text("Version 2 is current: revoked")
    expect(page.locator("#version-2")).to_have_class("current")
    expect(page.locator("#version-1 [data-provenance]")).to_contain_text("proposed")
    page.screenshot(path=str(shots / "claim-history.png"), full_page=True)
