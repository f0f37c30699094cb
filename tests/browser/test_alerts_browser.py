"""/alerts/ in a real browser, as on-call uses it (SPEC §14): the open alert with the action that resolves it,
acknowledged with a note in place, then resolved after a confirmation (declining it resolves nothing); the
resolved alert moves to its section; no console error."""

import os
import uuid
from pathlib import Path

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from ledger.models import Alert, AlertChange
from tests.factories import make_workflow

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_oncall_acknowledges_then_resolves_an_alert_in_place(live_server, page, log_in, tmp_path):
    errors = []
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    workflow, now = make_workflow(slug="nightly-publish"), timezone.now()
    alert = Alert.objects.create(key="nightly-publish/stuck/run", workflow=workflow, rule="stuck",
                                 kind="escalation_age", severity="page", subject="run", opened_at=now, updated_at=now,
                                 summary="A run has waited in escalated for 2 h.", run_id=uuid.uuid4())
    log_in("oncall")
    page.click("nav >> text=Alerts")
    row = page.locator(f"#alerts-open #alert-{alert.id}")
    expect(row).to_contain_text("A run has waited in escalated for 2 h.")
    expect(row.locator("[data-action=retry]")).to_be_visible()

    row.locator("input[name=reason]").first.fill("on it")
    row.locator("[data-action=acknowledge]").click()
    expect(row).to_have_attribute("data-state", "acknowledged")
    expect(page.locator("[data-changed]")).to_contain_text("Acknowledged nightly-publish/stuck/run")
    expect(row.locator("[data-action=acknowledge]")).to_have_count(0)

    row.locator("input[name=reason][required]").fill("runner restarted")
    page.once("dialog", lambda dialog: dialog.dismiss())
    row.locator("[data-action=resolve]").click()
    page.wait_for_timeout(300)
    assert Alert.objects.get(id=alert.id).state == "acknowledged"
    page.once("dialog", lambda dialog: dialog.accept())
    row.locator("[data-action=resolve]").click()
    resolved = page.locator(f"#alerts-resolved #alert-{alert.id}")
    expect(resolved).to_have_attribute("data-state", "resolved")
    expect(page.locator("#alerts-open")).to_contain_text("No open alerts.")
    assert [c.state for c in AlertChange.objects.filter(alert=alert).order_by("id")] == ["acknowledged", "resolved"]
    shots = Path(os.environ.get("STATEBOARD_SCREENSHOT_DIR") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(shots / "alerts.png"), full_page=True)
    assert errors == []
