"""Content negotiation (``stateboard.errors.JSONFirstNegotiation``): what agents send is answered as JSON
at once; anything else is negotiated by DRF exactly as before, an unmet ``Accept`` included."""

import json

import pytest

from tests.factories import client_for, make_agent, make_workflow

pytestmark = pytest.mark.django_db


@pytest.fixture
def agent_client():
    make_workflow(stages=["build"])
    _, token = make_agent()
    return client_for(token)


@pytest.mark.parametrize("accept", [None, "*/*", "application/json"])
def test_what_agents_send_is_answered_as_json(agent_client, accept):
    extra = {} if accept is None else {"HTTP_ACCEPT": accept}
    response = agent_client.get("/api/v1/workflows/", **extra)
    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    assert isinstance(json.loads(response.content), (dict, list))


@pytest.mark.parametrize("accept", ["text/html", "application/xml", "image/png"])
def test_an_accept_header_no_renderer_meets_is_refused_with_406(agent_client, accept):
    response = agent_client.get("/api/v1/workflows/", HTTP_ACCEPT=accept)
    assert response.status_code == 406
    assert response.json()["code"] == "not_acceptable"


def test_other_accept_headers_are_negotiated_by_drf(agent_client):
    """Parameters and lists still reach DRF's own negotiation: ``indent`` is honoured, as before."""
    response = agent_client.get("/api/v1/workflows/", HTTP_ACCEPT="application/json; indent=4")
    assert response.status_code == 200
    assert b"\n    " in response.content
    mixed = agent_client.get("/api/v1/workflows/", HTTP_ACCEPT="text/html;q=0.9, application/json;q=0.8")
    assert mixed.status_code == 200 and mixed["Content-Type"] == "application/json"


def test_a_format_query_parameter_still_selects_by_format(agent_client):
    assert agent_client.get("/api/v1/workflows/?format=json").status_code == 200
    assert agent_client.get("/api/v1/workflows/?format=xml").status_code == 404  # DRF: no renderer for the format
