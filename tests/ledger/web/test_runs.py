"""The runs list (/runs/): search by id prefix and intent, filters (the same on the page and the API;
one that does not parse is said, or ignored), saved views, in a constant number of queries."""

import re
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from ledger import services
from ledger.models import RunState, SavedView
from tests.factories import HX, login, make_workflow, page_queries, texts

pytestmark = pytest.mark.django_db


def test_run_search_by_id_prefix_and_intent():
    wf = make_workflow()
    one, _ = services.run_trigger(workflow_slug=wf.slug, inputs={}, intent="alpha-job")
    services.run_trigger(workflow_slug=wf.slug, inputs={}, intent="beta-job")
    viewer, _ = login("viewer")
    by_id = texts(viewer.get(reverse("ledger:run_list"), {"q": str(one.id)}, **HX))
    assert "alpha-job" in by_id and "beta-job" not in by_id
    by_prefix = texts(viewer.get(reverse("ledger:run_list"), {"q": str(one.id)[:6]}, **HX))
    assert "alpha-job" in by_prefix
    by_intent = texts(viewer.get(reverse("ledger:run_list"), {"q": "beta"}))
    assert "beta-job" in by_intent and "alpha-job" not in by_intent


def test_run_prefix_url_redirects_when_unique():
    wf = make_workflow()
    run, _ = services.run_trigger(workflow_slug=wf.slug, inputs={}, intent="p")
    viewer, _ = login("viewer")
    response = viewer.get(f"/runs/{str(run.id)[:8]}/")
    assert response.status_code == 302 and response["Location"] == reverse("ledger:run_detail", args=[run.id])
    assert viewer.get("/runs/ffff0000ffff/").status_code in (302, 404)
    assert viewer.get("/runs/zz/").status_code == 404


def test_unknown_filter_values_are_said_on_the_page():
    viewer, _ = login("viewer")
    for extra in ({}, HX):
        html = texts(viewer.get(reverse("ledger:run_list"), {"workflow": "nope", "state": "bogus"}, **extra))
        assert "There is no workflow “nope”" in html and "There is no state “bogus”" in html


def test_saved_views_are_stored_and_shared():
    wf = make_workflow()
    editor, _ = login("editor")
    response = editor.post(reverse("ledger:saved_view_create"),
                           {"name": "escalated", "query": f"state=escalated&workflow={wf.slug}&evil=1"})
    view = SavedView.objects.get(name="escalated")
    assert "evil" not in view.query and response["Location"] == view.url()
    viewer, _ = login("viewer")
    assert f'href="{view.url().replace("&", "&amp;")}"' in texts(viewer.get(reverse("ledger:run_list")))


def test_saved_view_with_a_blank_name_is_refused_with_a_message():
    """A name of spaces saves nothing and says that a name is required."""
    editor, _ = login("editor")
    response = editor.post(reverse("ledger:saved_view_create"), {"name": "   ", "query": "state=failed"}, follow=True)
    assert "A name is required." in texts(response) and not SavedView.objects.exists()


def test_run_list_query_count_is_constant_with_search_and_saved_views():
    wf = make_workflow()
    viewer, _ = login("viewer")
    for n in range(2):
        services.run_trigger(workflow_slug=wf.slug, inputs={}, intent=f"s-{n}")
        SavedView.objects.create(name=f"v{n}", query="state=failed", created_by="x")
    few = page_queries(viewer, reverse("ledger:run_list"), {"q": "s-"})
    for n in range(2, 10):
        services.run_trigger(workflow_slug=wf.slug, inputs={}, intent=f"s-{n}")
        SavedView.objects.create(name=f"v{n}", query="state=failed", created_by="x")
    assert page_queries(viewer, reverse("ledger:run_list"), {"q": "s-"}) == few


def test_run_state_filter_options_are_the_badges_words():
    viewer, _ = login("viewer")
    html = texts(viewer.get(reverse("ledger:run_list")))
    select = html.split('name="state"', 1)[1].split("</select>")[0]
    options = re.findall(r'<option value="(\w+)"[^>]*>([^<]+)</option>', select)
    assert options == [(s, s) for s in RunState.values]


def _ids(response) -> set[str]:
    assert response.status_code == 200, response.content
    return {r["id"] for r in response.json()["results"]}


def test_run_filter_fields_mean_the_same_on_the_api_and_the_page(fleet):
    """workflow, state, intent (exact), created_after/before (any offset, converted to UTC) and q
    (id, id prefix, intent substring) select the same runs on GET /api/v1/runs/ and on /runs/."""
    driver, wf_a, wf_b, runs = fleet
    viewer, _ = login("viewer")
    first = runs[0]["id"]
    soon = (timezone.now() + timedelta(hours=1)).astimezone(timezone.get_fixed_timezone(20 * 60 + 58))
    cases = [
        ({"workflow": wf_a.slug}, {runs[0]["id"], runs[1]["id"]}),
        ({"workflow": wf_b.slug, "state": runs[2]["state"]}, {runs[2]["id"]}),
        ({"intent": "daily-post"}, {first}),
        ({"intent": "DAILY-POST"}, set()),
        ({"q": "DAILY-POST"}, {runs[0]["id"], runs[1]["id"]}),
        ({"q": first}, {first}),
        ({"q": first[:8]}, {r["id"] for r in runs if r["id"].startswith(first[:8])}),
        ({"q": first[:13].upper()}, {r["id"] for r in runs if r["id"].startswith(first[:13])}),
        ({"created_after": soon.isoformat()}, set()),
        ({"created_before": soon.isoformat()}, {r["id"] for r in runs}),
    ]
    for query, expected in cases:
        assert _ids(driver.client.get("/api/v1/runs/", query)) == expected, query
        html = viewer.get(reverse("ledger:run_list"), query, **HX).content.decode()
        shown = {r["id"] for r in runs if f'/runs/{r["id"]}/' in html}
        assert shown == expected, query


def test_run_page_ignores_a_filter_that_does_not_parse(fleet):
    """The page shows the runs the valid filters select (the API refuses instead)."""
    driver, wf_a, _, runs = fleet
    viewer, _ = login("viewer")
    html = viewer.get(reverse("ledger:run_list"), {"workflow": wf_a.slug, "created_after": "soon"}, **HX)
    assert html.status_code == 200
    assert all(f'/runs/{r["id"]}/' in html.content.decode() for r in runs[:2])
