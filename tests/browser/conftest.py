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


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Keep each phase's report on the test item, so fixtures can tell a failed test at teardown."""
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)


@pytest.fixture
def outside_requests():
    """Every request the page tried to send anywhere but the test server (SPEC §6: nothing leaves it)."""
    return []


@pytest.fixture
def page(browser, request, outside_requests, tmp_path):
    context = browser.new_context(viewport={"width": 1360, "height": 900})

    def guard(route):
        url = route.request.url
        host = url.split("//", 1)[-1].split("/", 1)[0].split(":")[0]
        if url.startswith(("data:", "blob:", "about:")) or host in ("127.0.0.1", "localhost"):
            route.continue_()
        else:
            outside_requests.append(url)
            route.abort()

    context.route("**/*", guard)
    page = context.new_page()
    page.set_default_timeout(10_000)
    from playwright.sync_api import expect

    expect.set_options(timeout=10_000)  # assertions wait as long as actions (5 s was short beside a full suite)
    yield page
    failed = getattr(request.node, "rep_call", None)
    if failed is not None and failed.failed:  # screenshot on failure, for the CI artefacts
        shots = Path(os.environ.get("STATEBOARD_SCREENSHOT_DIR") or tmp_path)
        shots.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(shots / f"{request.node.name}.png"), full_page=True)
    context.close()
    assert outside_requests == [], f"requests left the server: {outside_requests}"


class PageClock:
    """The page's clock (Playwright's): its timers, htmx's refreshes every few seconds among them, run when the
    test moves the clock on instead of after real seconds. Time also goes on as usual meanwhile."""

    def __init__(self, page):
        self.page = page
        page.clock.install()  # before the test's first page: every page of the context runs on it

    def run_for(self, ms: int) -> None:
        """``ms`` of the page's time at once, each timer due in it fired; then wait until every htmx request
        they sent is answered and handled (htmx takes ``htmx-request`` off once the answer is swapped in)."""
        self.page.clock.run_for(ms)
        self.page.wait_for_function("() => document.querySelector('.htmx-request') === null")


@pytest.fixture
def clock(page):
    """A page whose clock the test moves on (``PageClock``): a wait for the pages' refreshes takes no time."""
    return PageClock(page)


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
