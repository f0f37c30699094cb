"""Browser tests: Playwright's sync API drives the Debian Chromium against pytest-django's live_server."""

import os
from pathlib import Path

import pytest

# Playwright's sync API runs an event loop in this thread; Django's ORM would refuse to run beside it.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
PASSWORD = "browser-test-password"


@pytest.fixture(scope="session")
def browser():
    if not CHROMIUM.exists():
        if os.environ.get("STATEBOARD_REQUIRE_BROWSER"):  # CI installs it: a missing browser is a failure there
            pytest.fail(f"{CHROMIUM} is not installed and STATEBOARD_REQUIRE_BROWSER is set")
        pytest.skip(f"{CHROMIUM} is not installed (apt-get install -y chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1360, "height": 900})
    page = context.new_page()
    page.set_default_timeout(10_000)
    yield page
    context.close()


@pytest.fixture
def log_in(live_server, page):
    """Log a new operator in through the real login form; returns the user."""
    from tests.factories import make_operator

    def _log_in(role: str):
        user, _ = make_operator(role)
        user.set_password(PASSWORD)
        user.save(update_fields=["password"])
        page.goto(f"{live_server.url}/login/")
        page.fill("input[name=username]", user.get_username())
        page.fill("input[name=password]", PASSWORD)
        page.click("button[type=submit]")
        page.wait_for_url(f"{live_server.url}/")
        return user

    return _log_in
