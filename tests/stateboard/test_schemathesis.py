"""Schemathesis over the served OpenAPI schema: every operation, with an agent's and an owner's token,
never answers a server error (bad input is a 4xx JSON with a ``code``, SPEC §8)."""

import base64
import json
import time
from urllib.parse import urlencode

import pytest
import schemathesis
from django.core import signals
from django.db import close_old_connections
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.renderers import OpenApiJsonRenderer
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.generation.meta import TestPhase

from stateboard.wsgi import application
from tests.factories import client_for, make_agent, make_operator, make_workflow
from tests.ledger.helpers import AgentDriver

pytestmark = [pytest.mark.slow, pytest.mark.django_db]  # slow: ~5,000 generated requests (the full suite runs it)

# The schema /api/v1/schema/ serves, built in-process (collection has no database), called over WSGI.
schema = schemathesis.openapi.from_dict(json.loads(OpenApiJsonRenderer().render(
    SchemaGenerator().get_schema(request=None, public=True), renderer_context={})))
schema.app = application


class _InstantClock:
    """The lease long-poll's clock (``ledger.services.leases.time``): a sleep passes at once. The poll still
    asks for a run after each pause and answers as it would at the deadline; nothing can be queued meanwhile
    (one request at a time here), so only the waiting is skipped: a generated ``wait_seconds`` of up to 30
    cost that many seconds per call (test_leases and test_webserver wait on the real clock)."""

    def __init__(self):
        self.now = time.monotonic()

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += max(seconds, 0)

    def __getattr__(self, name):
        return getattr(time, name)


@pytest.fixture(autouse=True)
def _long_polls_do_not_wait(monkeypatch):
    from ledger.services import leases

    monkeypatch.setattr(leases, "time", _InstantClock())


@pytest.fixture
def tokens(db):
    # Like Django's test client: the WSGI handler must not close the test's connection between requests.
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    yield {"agent": make_agent()[1], "owner": make_operator("owner")[1]}
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)


def _refused_by_role(response) -> bool:
    return response.status_code == 403 and json.loads(response.content).get("code") == "permission_denied"


@schema.parametrize()
@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True,
          database=None)
def test_schemathesis_no_operation_answers_a_server_error(case, tokens):
    """Generated requests (valid and not) get anything but a 5xx; a 4xx carries a JSON ``code``.

    The fuzzing phase sends each request as the agent and as the owner. The coverage phase's ~2,800 explicit
    cases (every parameter and property missing, mistyped, out of range, every method the path lacks) are
    sent as the agent, and as the owner where the agent's role is refused (403 ``permission_denied``, which
    reads no body): each case reaches the validation of an identity the operation lets in, not twice the same
    code path."""
    for token in tokens.values():
        response = case.call_and_validate(headers={"Authorization": f"Token {token}"}, checks=[not_a_server_error])
        if 400 <= response.status_code < 500:
            assert "code" in json.loads(response.content), (case.method, case.path, response.content[:300])
        if case.meta is not None and case.meta.phase.name == TestPhase.COVERAGE and not _refused_by_role(response):
            break


# ---------------------------------------------------------------- cursors as DRF's CursorPagination encodes them

def _cursor(**tokens) -> str:
    """A cursor built as DRF builds one (``o`` offset, ``r`` reverse, ``p`` position), base64 of its query."""
    return base64.b64encode(urlencode(tokens).encode()).decode()


_LISTS = sorted(path for path, operations in schema.raw_schema["paths"].items()
                if any(p["name"] == "cursor" for p in operations.get("get", {}).get("parameters", [])))
_HOSTILE_POSITIONS = ["9" * 40, "2026-01-01\x00", "x", "", "\x00", "-1", "9999-12-31T23:59:59-10:00",
                      "0001-01-01T00:00:00+14:00", "2026-01-01T00:00:00", "1e9", "9223372036854775808", "nan"]
_texts = st.text(st.characters(exclude_categories=("Cs",)), max_size=40)
_positions = st.one_of(st.sampled_from(_HOSTILE_POSITIONS), _texts, st.integers().map(str),
                       st.datetimes(timezones=st.timezones()).map(lambda moment: moment.isoformat()))
_cursors = st.one_of(
    st.builds(lambda r, p: _cursor(r=r, p=p), st.sampled_from(["0", "1"]), _positions),
    st.builds(lambda o, p: _cursor(o=o, p=p), st.one_of(st.integers(min_value=0).map(str), _texts), _positions),
    st.builds(lambda o, r, p: _cursor(o=o, r=r, p=p), _texts, _texts, _texts))


def test_the_api_fuzz_covers_every_cursor_paginated_list():
    assert {"/api/v1/runs/", "/api/v1/runs/{run_id}/events/", "/api/v1/approvals/", "/api/v1/effects/",
            "/api/v1/notifications/", "/api/v1/claims/"} <= set(_LISTS)


@pytest.mark.parametrize("path", _LISTS)
@given(cursor=_cursors)
@example(cursor=_cursor(r="1", p="9" * 40))
@example(cursor=_cursor(p="2026-01-01\x00"))
@example(cursor=_cursor(o="9" * 40, p="x"))
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True, database=None)
def test_a_decodable_cursor_with_a_hostile_position_is_400_invalid_cursor(path, cursor, tokens):
    """Any cursor a client may forge is answered 200 (it names a place in the list) or 400 ``invalid_cursor``."""
    if "run_id" not in tokens:
        tokens["run_id"] = AgentDriver(client_for(tokens["agent"]), make_workflow().slug).trigger()["id"]
    run_id = tokens["run_id"]
    url = path.replace("{run_id}", run_id)
    for token in ("agent", "owner"):
        response = client_for(tokens[token]).get(url, {"cursor": cursor})
        assert response.status_code in (200, 400), (url, cursor, response.status_code, response.content[:300])
        if response.status_code == 400:
            assert response.json()["code"] == "invalid_cursor", (url, cursor, response.content[:300])
