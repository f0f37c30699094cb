"""Schemathesis over the served OpenAPI schema: every operation, with an agent's and an owner's token,
never answers a server error (bad input is a 4xx JSON with a ``code``, SPEC §8)."""

import json
import time

import pytest
import schemathesis
from django.core import signals
from django.db import close_old_connections
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.renderers import OpenApiJsonRenderer
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error

from stateboard.wsgi import application
from tests.factories import make_agent, make_operator

pytestmark = [pytest.mark.slow, pytest.mark.django_db]  # slow: ~2,700 generated requests (the full suite runs it)

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


@schema.parametrize()
@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True,
          database=None)
def test_schemathesis_no_operation_answers_a_server_error(case, tokens):
    """Generated requests (valid and not) get anything but a 5xx; a 4xx carries a JSON ``code``."""
    for token in tokens.values():
        response = case.call_and_validate(headers={"Authorization": f"Token {token}"}, checks=[not_a_server_error])
        if 400 <= response.status_code < 500:
            assert "code" in json.loads(response.content), (case.method, case.path, response.content[:300])
