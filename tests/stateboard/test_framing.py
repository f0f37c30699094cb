"""Bad input and framing never reach a view half-read, and never answer 5xx (SPEC §8, §11.3)."""

import io

import pytest
from django.core.handlers.wsgi import WSGIRequest
from django.http import HttpResponse
from django.test import RequestFactory

from ledger.models import Checkpoint, LedgerEvent
from stateboard.errors import BodySizeLimitMiddleware
from tests.factories import client_for, make_agent, make_operator, make_workflow, page_client
from tests.ledger.helpers import AgentDriver

pytestmark = pytest.mark.django_db


def _reached(request):
    return HttpResponse(str(len(request.body)))


def _environ(body: bytes, **headers) -> dict:
    environ = RequestFactory().post("/api/v1/runs/").environ
    environ.pop("CONTENT_LENGTH", None)
    environ.update({"wsgi.input": io.BytesIO(body), **headers})
    return environ


def test_a_chunked_body_over_the_limit_is_413_and_one_within_it_is_read(settings):
    settings.API_MAX_BODY_BYTES = 1000
    guard = BodySizeLimitMiddleware(_reached)
    over = guard(WSGIRequest(_environ(b"x" * 5000, HTTP_TRANSFER_ENCODING="chunked")))
    assert over.status_code == 413 and b"body_too_large" in over.content
    within = guard(WSGIRequest(_environ(b'{"a": 1}', HTTP_TRANSFER_ENCODING="chunked")))
    assert within.status_code == 200 and within.content == b"8"


def test_a_body_shorter_than_its_content_length_is_never_executed():
    guard = BodySizeLimitMiddleware(lambda request: pytest.fail("the view ran"))
    short = guard(WSGIRequest(_environ(b'{"kind": "started"}', CONTENT_LENGTH="69")))
    assert short.status_code == 400 and b"body_incomplete" in short.content


@pytest.mark.parametrize("url", ["/api/v1/workflows/{slug}/goals/?intent=a%00b", "/api/v1/metrics/?workflow=%00",
                                 "/api/v1/runs/?intent=%00", "/claims/?q=%00", "/claims/?system=%00"])
def test_a_nul_in_a_query_parameter_is_400_invalid_filter(url):
    wf = make_workflow()
    for client in (client_for(make_operator("viewer")[1]), page_client(make_operator("viewer")[0])):
        response = client.get(url.format(slug=wf.slug))
        assert response.status_code == 400 and response.json()["code"] == "invalid_filter", response.content


@pytest.mark.parametrize("path", ["/api/v1/claims/a%00b/", "/claims/a%00b/history/"])
def test_a_nul_in_a_path_is_404(path):
    response = client_for(make_operator("viewer")[1]).get(path)
    assert response.status_code == 404


def test_a_forged_cursor_is_400_invalid_cursor():
    wf = make_workflow(stages=["build"], effect_stages=[], approval_stages=[])
    agent = AgentDriver(client_for(make_agent()[1]), wf.slug)
    run = agent.trigger()
    viewer = client_for(make_operator("viewer")[1])
    for url in ("/api/v1/runs/?cursor=bz14", f"/api/v1/runs/{run['id']}/events/?cursor=bz14"):
        response = viewer.get(url)
        assert response.status_code == 400 and response.json()["code"] == "invalid_cursor", response.content


def test_checkpoint_values_out_of_range_or_words_not_of_the_contract_are_422_and_nothing_is_saved():
    wf = make_workflow(stages=["build", "deploy"], effect_stages=["deploy"], approval_stages=[])
    agent = AgentDriver(client_for(make_agent()[1]), wf.slug)
    run = agent.trigger()
    saved = Checkpoint.objects.count()
    for payload, code in (({"version_boundary": 2**70}, "validation_error"),
                          ({"state_table": {"build": {"status": "bogus"}}}, "invalid_stage_status")):
        response = agent.client.post(f"/api/v1/runs/{run['id']}/checkpoints/", payload, format="json")
        assert response.status_code == 422 and response.json()["code"] == code, response.content
    assert Checkpoint.objects.count() == saved


def test_an_effect_on_a_stage_that_is_not_an_effect_stage_is_refused():
    wf = make_workflow(stages=["build", "deploy"], effect_stages=["deploy"], approval_stages=[])
    agent = AgentDriver(client_for(make_agent()[1]), wf.slug)
    run = agent.trigger()
    before = LedgerEvent.objects.filter(run_id=run["id"]).count()
    refused = agent.event(run["id"], "build", "started", expect=422,
                          effect={"system": "git", "operation": "push", "reference": "x"})
    assert refused["code"] == "effect_not_expected"
    assert LedgerEvent.objects.filter(run_id=run["id"]).count() == before


def test_pages_send_a_content_security_policy_that_allows_only_the_server():
    response = page_client(make_operator("viewer")[0]).get("/runs/")
    policy = response["Content-Security-Policy"]
    assert "default-src 'self'" in policy and "http" not in policy and "*" not in policy


def test_an_evidence_link_is_redacted_in_its_href_too():
    from ledger.web.common import evidence_view

    view = evidence_view({"uri": "https://ci.test/run?token=abc123secret&page=2", "observed_at": "x"})
    assert "abc123secret" not in view["href"] and "abc123secret" not in view["uri"] and "page=2" in view["href"]


def _get_routes():
    from tests.stateboard.test_policy_matrix import endpoints, methods_of

    return sorted({route for route, _, view in endpoints() if "GET" in methods_of(view)})


@pytest.mark.parametrize("route", _get_routes())
def test_every_read_answers_hostile_parameters_without_a_server_error(route):
    """Generated from the URLconf: for every GET (API and pages), a NUL in the path is 404, a NUL in a
    query parameter 400 ``invalid_filter``, huge integers and a forged cursor a 4xx — never a 5xx."""
    from tests.stateboard.test_policy_matrix import _url

    wf = make_workflow()
    run = AgentDriver(client_for(make_agent()[1]), wf.slug).trigger()
    values = {"run_id": run["id"], "slug": wf.slug, "key": "k", "approval_id": run["id"], "notification_id": "1"}
    api = route.startswith("api/")
    client = client_for(make_operator("oncall")[1]) if api else page_client(make_operator("oncall")[0])
    url = _url(route, values)
    nul_query = client.get(url, {"intent": "a\x00b"})
    assert nul_query.status_code == 400 and nul_query.json()["code"] == "invalid_filter", (url, nul_query.content)
    for params in ({"page_size": str(2**70), "budget_tokens": str(2**70), "since": "9" * 40},
                   {"cursor": "bz14"}, {"cursor": "%%%"}, {"limit": "-1", "offset": str(2**64)}):
        response = client.get(url, params)
        assert response.status_code < 500, (url, params, response.status_code, response.content[:200])
    nul_path = client.get(url + "a%00b/")
    assert nul_path.status_code == 404, (url, nul_path.status_code)
