"""Contract fixes found from outside (SPEC §8): wrong types and unparsable filters are 4xx with a
``code``, never a 500; one run filter means the same on the page and the API; /metrics leaves out
a figure with no data."""

import uuid
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from knowledge.models import Claim
from ledger.filters import id_prefix_q
from ledger.models import Run
from stateboard.moments import parse_moment
from tests.factories import HX, client_for, login, make_agent, make_operator, make_workflow
from tests.knowledge.conftest import proposal
from tests.ledger.helpers import AgentDriver

pytestmark = pytest.mark.django_db


@pytest.fixture
def fleet():
    """Two workflows, three runs: (agent driver of wf-a, wf-a, wf-b, [run dicts])."""
    wf_a, wf_b = make_workflow(approval_stages=[]), make_workflow(approval_stages=[])
    _, token = make_agent()
    a, b = AgentDriver(client_for(token), wf_a.slug), AgentDriver(client_for(token), wf_b.slug)
    runs = [a.trigger(intent="daily-post"), a.trigger(intent="daily-post-2"), b.trigger(intent="triage")]
    return a, wf_a, wf_b, runs


def _ids(response) -> set[str]:
    assert response.status_code == 200, response.content
    return {r["id"] for r in response.json()["results"]}


def test_trigger_inputs_must_be_an_object():
    """A list (or a string) for ``inputs`` is 422 ``validation_error``; nothing is written."""
    driver = AgentDriver(client_for(make_agent()[1]), make_workflow().slug)
    for inputs in ([1, 2], "x", 3):
        response = driver.client.post("/api/v1/runs/", {"workflow": driver.workflow, "inputs": inputs}, format="json")
        assert response.status_code == 422 and response.json()["code"] == "validation_error"
        assert "inputs" in response.json()["errors"]
    assert not Run.objects.exists()


@pytest.mark.parametrize("field,value", [("sensitivity", {"a": 1}), ("sensitivity", ["sensitive"]),
                                         ("confidence", {"x": 1}), ("source_type", [1]), ("sensitivity", 5)])
def test_claim_propose_wrong_types_are_rejected_with_reasons(field, value):
    """A proposal field of the wrong type is 422 ``write_gate_rejected`` naming the field, never a 500."""
    _, token = make_operator("owner")
    response = client_for(token).post("/api/v1/claims/", proposal(**{field: value}), format="json")
    assert response.status_code == 422, response.content
    assert response.json()["code"] == "write_gate_rejected"
    assert field in {r["field"] for r in response.json()["reasons"]}
    assert not Claim.objects.exists()


def test_claim_times_with_a_large_offset_are_stored_in_utc():
    """``observed_at`` with a +20:58 offset (PostgreSQL refuses offsets past ±15:59) is kept as UTC."""
    _, token = make_operator("owner")
    now = timezone.now()
    observed = (now - timedelta(hours=2)).astimezone(timezone.get_fixed_timezone(20 * 60 + 58))
    response = client_for(token).post("/api/v1/claims/", proposal(observed_at=observed.isoformat()), format="json")
    assert response.status_code == 201, response.content
    assert Claim.objects.get().observed_at == observed


def test_parse_moment_normalises_to_utc_and_refuses_out_of_range():
    """One parser for outside moments: UTC out, None for an offset that overflows, naive only on request."""
    assert parse_moment("2026-01-01T00:00:00+20:58").isoformat() == "2025-12-31T03:02:00+00:00"
    assert parse_moment("9999-12-31T23:59:59-20:58") is None and parse_moment("0001-01-01T00:00:00+20:58") is None
    assert parse_moment("2026-02-30T00:00:00Z") is None and parse_moment("2026-01-01T00:00") is None
    assert parse_moment("2026-01-01T00:00", naive_as_utc=True).isoformat() == "2026-01-01T00:00:00+00:00"


@pytest.mark.parametrize("query,field", [
    ({"state": "teleported"}, "state"), ({"workflow": "no-such-workflow"}, "workflow"),
    ({"created_after": "yesterday"}, "created_after"), ({"created_before": "2026-13-01T00:00:00Z"}, "created_before"),
    ({"created_after": "9999-12-31T23:59:59-20:58"}, "created_after"), ({"intent": "x" * 501}, "intent"),
    ({"intent": "a\x00b"}, "intent"),
])
def test_run_list_filters_that_do_not_parse_are_400(fleet, query, field):
    """An unknown state or workflow, a bad date or offset: 400 ``invalid_filter`` naming the field."""
    driver, *_ = fleet
    response = driver.client.get("/api/v1/runs/", query)
    assert response.status_code == 400, response.content
    assert response.json()["code"] == "invalid_filter" and field in response.json()["errors"]


@pytest.mark.parametrize("url", ["/api/v1/approvals/?status=bogus", "/api/v1/effects/?run=not-a-uuid",
                                 "/api/v1/approvals/?run=zz", "/api/v1/effects/?status=nope"])
def test_other_list_filters_that_do_not_parse_are_400(fleet, url):
    driver, *_ = fleet
    response = driver.client.get(url)
    assert response.status_code == 400 and response.json()["code"] == "invalid_filter"


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


def test_id_prefix_q_is_a_key_range():
    """Hex prefixes (dashes ignored) become a primary-key range; anything else is no id search."""
    run_id = uuid.UUID("3f2a9c00-1111-4222-8333-444455556666")
    q = id_prefix_q("3f2a9c")
    assert q is not None and ("id__gte", uuid.UUID("3f2a9c00-0000-0000-0000-000000000000")) in q.children
    assert id_prefix_q(str(run_id)).children == [("id__gte", run_id), ("id__lte", run_id)]
    assert id_prefix_q("daily") is None and id_prefix_q("") is None and id_prefix_q("0" * 33) is None


def test_metrics_since_with_a_large_offset_is_not_a_server_error(fleet):
    driver, *_ = fleet
    response = driver.client.get("/api/v1/metrics/", {"since": "2026-01-01T00:00:00+20:58"})
    assert response.status_code == 200 and response.json()["since"] == "2025-12-31T03:02:00+00:00"
    bad = driver.client.get("/api/v1/metrics/", {"since": "9999-12-31T23:59:59-20:58"})
    assert bad.status_code == 422 and bad.json()["code"] == "validation_error"


def test_prometheus_leaves_out_a_figure_with_no_data(client):
    """No claim proposal yet: the write-gate rejection rate is left out, never written as ``None``."""
    text = client.get("/metrics").content.decode()
    assert "None" not in text and "nan" not in text.lower()
    assert "stateboard_write_gate_rejection_rate" not in text
    assert "stateboard_open_approvals 0" in text
