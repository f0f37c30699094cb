"""Single sign-on in Chromium (SPEC §17): the sign-in page's button, the real provider's form, back signed in
with the mapped role; sign-out ends the session here and goes on to the provider's end-session page."""

import pytest
from playwright.sync_api import expect

from ledger.models import SsoIdentity
from tests.factories import unique
from tests.stateboard.sso_providers import mock_provider, provider_user

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def idp():
    with mock_provider() as issuer:
        yield issuer


def test_single_sign_on_in_the_browser(live_server, page, idp, settings):
    settings.OIDC_ISSUER, settings.OIDC_CLIENT_ID, settings.OIDC_CLIENT_SECRET = idp, "stateboard-test", "s3cret"
    settings.OIDC_ROLE_MAP = {"deployers": "editor"}
    # The provider's own pages load a stylesheet from the internet (the provider's, not ours): refused quietly.
    page.route(lambda url: url.startswith("https://"), lambda route: route.abort())
    sub, name = unique("sub"), unique("grace")
    provider_user(idp, sub, {"preferred_username": name, "groups": ["deployers", "owner"]})

    page.goto(f"{live_server.url}/login/")
    page.click("#sso-sign-in")
    page.wait_for_url(f"{idp}/oauth2/authorize**")
    page.fill("input[name=sub]", sub)
    page.click("button:text('Authorize')")
    page.wait_for_url(f"{live_server.url}/")
    expect(page.locator(".who")).to_contain_text(f"{name} · editor")  # the IdP's `owner` group: no role
    assert SsoIdentity.objects.get(sub=sub).user.username == name

    page.click(".who button:text('Log out')")
    page.wait_for_url(f"{idp}/oauth2/end_session**")
    page.goto(f"{live_server.url}/approvals/")
    page.wait_for_url(f"{live_server.url}/login/**")
    expect(page.locator("#sso-sign-in")).to_be_visible()
