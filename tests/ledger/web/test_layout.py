"""What every page shares: sign-in required, the menu on error pages, the favicon, and times shown in
UTC or as the operator chose."""

import re

import pytest
from django.urls import reverse

from tests.browser.scenarios import agent_driver, approval_workflow, awaiting_approval_run
from tests.factories import HX, login, make_operator, texts
from tests.ledger.web.test_run_page import long_run

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("name,args", [
    ("ledger:run_compare", []), ("ledger:reports", []), ("ledger:workflow_list", []),
    ("ledger:workflow_detail", ["x"]), ("knowledge:claim_list", []), ("ledger:oncall_preview", []),
])
def test_new_pages_require_login(client, name, args):
    response = client.get(reverse(name, args=args))
    assert response.status_code == 302 and response["Location"].startswith(reverse("login"))
    response = client.get(reverse(name, args=args), **HX)
    assert response.status_code == 401 and response["HX-Redirect"].startswith(reverse("login"))


def test_time_component_utc_by_default_relative_on_choice():
    _, run = long_run(1, "t")
    viewer, _ = login("viewer")
    url = reverse("ledger:run_detail", args=[run["id"]])
    html = texts(viewer.get(url))
    assert 'data-when="utc"' in html and " UTC</time>" in html and 'title="20' in html
    assert viewer.post(reverse("time_mode"), {"mode": "relative", "next": url})["Location"] == url
    assert 'data-when="relative"' in texts(viewer.get(url)) and "just now</time>" in texts(viewer.get(url))
    viewer.post(reverse("time_mode"), {"mode": "local", "next": "https://evil.example/"})
    assert 'data-when="local"' in texts(viewer.get(url))


def test_error_pages_keep_the_menu_and_the_api_keeps_json():
    viewer, _ = login("viewer")
    page = viewer.get("/no/such/page/")
    assert page.status_code == 404 and 'class="nav"' in texts(page) and "Not found" in texts(page)
    api = viewer.get("/api/v1/no-such-thing/")
    assert api.status_code == 404 and api.json()["code"] == "not_found"
    from django.test import RequestFactory

    from stateboard.errors import handler403, handler500

    request = RequestFactory().get("/runs/")
    request.user = make_operator("viewer")[0]
    assert handler403(request).status_code == 403 and b"Not allowed" in handler403(request).content
    assert handler500(request).status_code == 500
    api_request = RequestFactory().get("/api/v1/runs/")
    assert handler500(api_request)["Content-Type"] == "application/json"


def test_favicon_is_served_locally():
    viewer, _ = login("viewer")
    html = texts(viewer.get(reverse("dashboard")))
    assert 'rel="icon" type="image/svg+xml" href="/static/stateboard/favicon.svg"' in html
    from django.contrib.staticfiles import finders

    assert finders.find("stateboard/favicon.svg")


def test_times_follow_the_chosen_mode_on_the_inbox():
    make_operator("editor")
    awaiting_approval_run(agent_driver(approval_workflow()), "timed")
    editor, _ = login("editor")
    html = texts(editor.get(reverse("ledger:approval_list")))
    table = html.split('id="approval-table"', 1)[1].split("</section>")[0]
    assert " ago" not in table and 'data-when="relative"' not in table  # "utc" by default
    assert re.search(r'deadline <time [^>]*data-when="utc">\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC</time>', table)
