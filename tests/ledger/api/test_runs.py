"""The runs API's contract (SPEC §8): wrong types and unparsable filters are 4xx with a ``code``,
never a 500."""

import uuid

import pytest

from ledger.filters import id_prefix_q
from ledger.models import Run
from tests.factories import client_for, make_agent, make_workflow
from tests.ledger.helpers import AgentDriver

pytestmark = pytest.mark.django_db


def test_trigger_inputs_must_be_an_object():
    """A list (or a string) for ``inputs`` is 422 ``validation_error``; nothing is written."""
    driver = AgentDriver(client_for(make_agent()[1]), make_workflow().slug)
    for inputs in ([1, 2], "x", 3):
        response = driver.client.post("/api/v1/runs/", {"workflow": driver.workflow, "inputs": inputs}, format="json")
        assert response.status_code == 422 and response.json()["code"] == "validation_error"
        assert "inputs" in response.json()["errors"]
    assert not Run.objects.exists()


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


def test_id_prefix_q_is_a_key_range():
    """Hex prefixes (dashes ignored) become a primary-key range; anything else is no id search."""
    run_id = uuid.UUID("3f2a9c00-1111-4222-8333-444455556666")
    q = id_prefix_q("3f2a9c")
    assert q is not None and ("id__gte", uuid.UUID("3f2a9c00-0000-0000-0000-000000000000")) in q.children
    assert id_prefix_q(str(run_id)).children == [("id__gte", run_id), ("id__lte", run_id)]
    assert id_prefix_q("daily") is None and id_prefix_q("") is None and id_prefix_q("0" * 33) is None
