"""The approvals inbox in a real browser: htmx swaps rows in place, refusals are shown, roles gate buttons."""

import os
from pathlib import Path

import pytest
from playwright.sync_api import Error, expect

from ledger import services
from ledger.models import Approval, Run
from tests.browser.scenarios import agent_driver, approval_workflow, awaiting_approval_run

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def two_requests():
    agent = agent_driver(approval_workflow())
    return [awaiting_approval_run(agent, intent) for intent in ("post-alpha", "post-beta")]


def row(page, approval):
    return page.locator(f"#approval-{approval['id']}")


def _refresh(request) -> bool:
    """The inbox's 5-second refresh of its pending rows (htmx's GET of the page itself)."""
    return request.method == "GET" and request.headers.get("hx-request") == "true" and \
        request.url.split("?")[0].endswith("/approvals/") and "section=" not in request.url


class HeldRefreshes:
    """The inbox's refreshes, read from the server when sent and answered only on ``release()``: a refresh
    under way is held at a moment the test chooses, no timing involved."""

    def __init__(self, page):
        self.page, self.held = page, []
        page.route("**/approvals/", self._hold)

    def _hold(self, route):
        if _refresh(route.request):
            self.held.append((route, route.fetch()))  # the rows as they are now
        else:
            route.continue_()

    def under_way(self):
        """Wait for the next refresh to be sent and read (every 5 s while something is pending): the page's
        clock (conftest ``clock``) is moved on a quarter of a second at a time until one is."""
        for _ in range(60):
            if self.held:
                return
            self.page.clock.run_for(250)
            self.page.wait_for_timeout(20)
        raise AssertionError("the inbox sent no refresh in 15 s")

    def release(self):
        """Answer the held refreshes with what was read; then wait until the inbox has handled them."""
        for route, answer in self.held:
            try:
                route.fulfill(response=answer)
            except Error:  # aborted by the page meanwhile: nothing to answer
                pass
        self.held.clear()
        self.page.wait_for_function("() => document.querySelector('#approval-table.htmx-request') === null",
                                    timeout=15_000)


@pytest.fixture
def refreshes(page, clock):  # (the clock installed: under_way moves it on to the next refresh)
    return HeldRefreshes(page)


def test_editor_approves_and_rejects_without_a_reload(live_server, page, log_in, two_requests, tmp_path,
                                                      refreshes):
    """The rows each decision swaps in place. The inbox's refresh, which takes decided rows out of the
    list, is held for the test's length (it was the flake: a refresh landing between a decision and the
    checks of its row removed the row); the tests below prove what the refresh does."""
    (run_a, approval_a), (run_b, approval_b) = two_requests
    log_in("editor")
    page.click("nav >> text=Approvals")
    expect(page.locator("h1")).to_have_text("Approvals inbox")
    page.wait_for_load_state("load")  # htmx has taken the page's forms (a click before it posts the plain form)
    page.evaluate("window.__sameDocument = true")  # gone if the page reloads

    page.once("dialog", lambda dialog: dialog.accept())  # hx-confirm on Approve
    row(page, approval_a).locator("[data-action=approve]").click()
    expect(row(page, approval_a)).to_have_attribute("data-status", "approved")
    expect(row(page, approval_a).locator("[data-action]")).to_have_count(0)
    expect(row(page, approval_a).locator("[data-moved]")).to_contain_text("Decided")  # it says where it went
    expect(page.locator(f"#approval-history #decided-{approval_a['id']}")).to_contain_text("approved")

    page.once("dialog", lambda dialog: dialog.accept())  # hx-confirm on Reject
    row(page, approval_b).locator("[data-reject-reason]").fill("not during the release freeze")
    row(page, approval_b).locator("[data-action=reject]").click()
    expect(row(page, approval_b)).to_have_attribute("data-status", "rejected")
    expect(row(page, approval_b)).to_contain_text("not during the release freeze")

    assert page.evaluate("window.__sameDocument") is True
    assert Approval.objects.get(id=approval_a["id"]).status == "approved"
    assert Run.objects.get(id=run_b["id"]).state == "abandoned"

    # The run page of the approved request: the drawn state machine, decision, stages and events.
    page.goto(f"{live_server.url}/runs/{run_a['id']}/")
    expect(page.locator(".run-path .step.current")).to_have_attribute("data-state", "awaiting_approval")
    expect(page.locator("#event-list")).to_contain_text("approved")
    shots = Path(os.environ.get("STATEBOARD_SCREENSHOT_DIR") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(shots / "run-detail.png"), full_page=True)


def test_a_refresh_read_before_a_decision_never_shows_it_undone(live_server, page, log_in, two_requests,
                                                               refreshes):
    """A refresh already under way when the editor approves was read with the request still pending: the
    decision aborts it (stateboard/static/stateboard/app.js), so the row stays decided; the next refresh,
    read after the decision, takes it out of the list."""
    (_, approval), _ = two_requests
    log_in("editor")
    page.click("nav >> text=Approvals")
    refreshes.under_way()  # read now, with the request pending

    page.once("dialog", lambda dialog: dialog.accept())
    row(page, approval).locator("[data-action=approve]").click()
    expect(row(page, approval)).to_have_attribute("data-status", "approved")
    refreshes.release()  # the rows read before the decision, were the refresh not aborted
    assert row(page, approval).get_attribute("data-status") == "approved"

    refreshes.under_way()  # the next one, read after the decision
    refreshes.release()
    expect(row(page, approval)).to_have_count(0)


def test_a_reason_typed_while_a_refresh_is_under_way_is_kept(live_server, page, log_in, two_requests,
                                                             refreshes):
    """A refresh sent before someone began typing a reason is not swapped in over it."""
    (_, approval), _ = two_requests
    log_in("editor")
    page.click("nav >> text=Approvals")
    refreshes.under_way()
    reason = row(page, approval).locator("[data-reject-reason]")
    reason.fill("typed during a refresh")
    refreshes.release()
    expect(reason).to_have_value("typed during a refresh")


def test_a_refused_action_is_shown_in_the_error_area(live_server, page, log_in, two_requests):
    """htmx does not swap a 409: app.js shows the service's message instead of silently doing nothing."""
    (_, approval), _ = two_requests
    user = log_in("editor")
    page.click("nav >> text=Approvals")
    expect(page.locator("#htmx-error")).to_be_hidden()
    services.approval_decide(approval_id=approval["id"], user=user, approve=False, reason="decided elsewhere")

    page.once("dialog", lambda dialog: dialog.accept())
    row(page, approval).locator("[data-action=approve]").click()
    expect(page.locator("#htmx-error")).to_be_visible()
    expect(page.locator("#htmx-error")).to_contain_text("This request is already rejected.")
    expect(row(page, approval).locator("[data-action=approve]")).to_be_visible()  # nothing swapped


def test_a_viewer_sees_no_buttons(live_server, page, log_in, two_requests):
    (_, approval), _ = two_requests
    log_in("viewer")
    page.goto(f"{live_server.url}/approvals/")
    expect(row(page, approval)).to_be_visible()
    expect(page.locator("[data-action]")).to_have_count(0)
    expect(page.locator("#approval-table form")).to_have_count(0)


def test_a_reason_typed_at_human_speed_survives_the_refresh_and_no_page_logs_an_error(
        live_server, page, clock, log_in, two_requests):
    """The inbox refreshes every 5 s, but not while someone types in it: a reason typed over 12 s stays (no
    refresh is even sent), and Reject then sends it. The Content-Security-Policy forbids eval, so the pause
    lives in app.js (an htmx trigger filter would be dropped, with an EvalError on every poll). The page's
    clock is moved on (conftest ``clock``): its 12 s and each refresh take no real time."""
    errors = []
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: errors.append(str(error)))
    (_, approval), _ = two_requests
    log_in("editor")
    page.click("nav >> text=Approvals")
    reason = row(page, approval).locator("[data-reject-reason]")
    reason.click()
    page.wait_for_load_state("load")  # htmx has set up the page's refresh
    page.evaluate("""document.addEventListener("htmx:beforeRequest", (event) => {
        if (event.detail.elt.hasAttribute("data-refresh-when-idle")) { window.__due = (window.__due || 0) + 1; }
    })""")  # each refresh due, whether app.js calls it off or not
    sent = []
    page.on("request", lambda request: sent.append(request.url) if _refresh(request) else None)
    for key in "not before the audit":  # 20 keys, one every 600 ms: 12 s, two refreshes due
        reason.press_sequentially(key)
        clock.run_for(600)
    clock.run_for(5500)  # and one more refresh due while it sits typed
    expect(reason).to_have_value("not before the audit")
    assert page.evaluate("window.__due") == 3 and sent == [], (page.evaluate("window.__due"), sent)

    page.once("dialog", lambda dialog: dialog.accept())
    row(page, approval).locator("[data-action=reject]").click()
    expect(row(page, approval)).to_have_attribute("data-status", "rejected")
    assert Approval.objects.get(id=approval["id"]).reason == "not before the audit"
    for path in ("/approvals/", "/oncall/", "/"):
        page.goto(f"{live_server.url}{path}")
        clock.run_for(5600)  # past a poll
    assert errors == [], errors
