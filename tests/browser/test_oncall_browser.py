"""On-call in a real browser: what needs a human now apart from history, superseded failures on demand."""

import os
from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.browser.scenarios import agent_driver, escalated_run, escalation_workflow, failed_run

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_needs_now_apart_from_history_and_superseded_on_demand(live_server, page, log_in, tmp_path):
    agent = agent_driver(escalation_workflow(max_retries=2))
    superseded = failed_run(agent, "fixed-later")
    again = agent.trigger(intent="fixed-later", inputs={"intent": "fixed-later"})
    agent.pass_stage(again["id"], "test")
    lone = failed_run(agent, "still-broken")
    _, escalated = escalated_run(agent_driver(escalation_workflow()), "needs-you")
    log_in("oncall")

    page.click("nav >> text=On-call")
    now, history = page.locator("table[data-section=now]"), page.locator("table[data-section=history]")
    expect(now.locator(f"#oncall-{escalated['id']}")).to_be_visible()
    expect(now.locator("tr[data-state=failed]")).to_have_count(0)
    expect(history.locator(f"#oncall-{lone['id']}")).to_contain_text("the next trigger decides")
    expect(history.locator(f"#oncall-{superseded['id']}")).to_have_count(0)
    expect(page.locator("[data-needs=escalated] .n")).to_have_text("1")

    page.click("[data-superseded=show]")
    row = page.locator(f"table[data-section=history] #oncall-{superseded['id']}")
    expect(row.locator("[data-superseded-mark]")).to_be_visible()
    expect(row).to_contain_text(f"run {again['id'][:8]}, which completed")
    shots = Path(os.environ.get("STATEBOARD_SCREENSHOT_DIR") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(shots / "oncall.png"), full_page=True)

    page.click("[data-needs=escalated]")  # the tile filters on-call to the escalations
    expect(page.locator("table[data-section=now] tr[data-state=escalated]")).to_have_count(1)
    expect(page.locator("table[data-section=history]")).to_have_count(0)


def test_dashboard_needs_a_human_first_and_recent_runs_stay_in_their_card(live_server, page, log_in, tmp_path):
    agent = agent_driver(escalation_workflow())
    for n in range(3):
        escalated_run(agent, f"pipeline/2026-12-06-185340-288/a-rather-long-intent-name-number-{n}/nightly")
    log_in("viewer")
    expect(page.locator("[data-needs=escalated] .n")).to_have_text("3")
    expect(page.locator("[data-state-count]")).to_have_count(2)  # failed and escalated: no tiles of 0
    expect(page.locator("[data-empty-states]")).to_contain_text("captured")
    card = page.locator("section[aria-labelledby=recent-title]")
    first = card.locator("tbody tr").first
    box, row = card.bounding_box(), first.bounding_box()
    assert row["x"] + row["width"] <= box["x"] + box["width"] + 1, (row, box)
    assert row["height"] < 60, row  # the intent and its workflow, not five lines
    shots = Path(os.environ.get("STATEBOARD_SCREENSHOT_DIR") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(shots / "dashboard.png"), full_page=True)


def test_a_bulk_action_on_an_attribute_filtered_set(live_server, page, log_in):
    """SPEC §15: /oncall/?attr.team=infra shows infra's escalations only; every one selected and abandoned in
    one bulk action (htmx posts the filters with it), the other team's run untouched; the chip removes the
    filter."""
    from ledger.models import Run

    agent = agent_driver(escalation_workflow())
    runs = {intent: escalated_run(agent, intent)[1] for intent in ("infra-a", "infra-b", "web-a")}
    for intent, run in runs.items():
        Run.objects.filter(id=run["id"]).update(attributes={"team": intent.split("-")[0]})
    log_in("oncall")
    page.goto(f"{live_server.url}/oncall/?attr.team=infra")
    now = page.locator("table[data-section=now]")
    expect(now.locator("tr[data-state=escalated]")).to_have_count(2)
    for box in page.locator("input[name=run][form=bulk-form]").all():
        box.check()
    page.select_option("select[name=action]", "abandon")
    page.fill("#bulk-form input[name=reason]", "team retired")
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("[data-apply]")
    expect(page.locator("#oncall-table")).to_contain_text("Abandon: 2 done, 0 refused.")
    states = dict(Run.objects.filter(id__in=[r["id"] for r in runs.values()]).values_list("intent", "state"))
    assert states == {"infra-a": "abandoned", "infra-b": "abandoned", "web-a": "escalated"}
    page.click("[data-attr-filter=team]")
    expect(page.locator(f"#oncall-{runs['web-a']['id']}")).to_be_visible()
