"""``ledger.fastpath``: the agent's append answered without the page stack gives byte for byte the full
stack's answer, headers included, and hands everything it cannot answer the same way to the full stack."""

import json
import re
import uuid

import pytest
from django.test import override_settings

from ledger import auth
from ledger.fastpath import AgentFastPath
from ledger.models import AuditEntry, LedgerEvent
from ledger.auth import token_revoke
from stateboard.roles import ONCALL
from tests.factories import client_for, make_operator
from tests.ledger.helpers import agent_run, comparable, fast_post  # noqa: F401 (agent_run: a fixture)

pytestmark = pytest.mark.django_db

def _post(client, run_id, body, *, fast: bool, **extra):
    return fast_post(client, f"/api/v1/runs/{run_id}/events/", body, fast=fast, **extra)


def test_a_repeated_event_gets_the_same_bytes_and_headers_from_both_paths(agent_run):
    client, run_id = agent_run
    body = {"client_event_id": "same", "stage": "build", "kind": "proposed", "data": {"note": "é", "x": 1e16}}
    first, answered = _post(client, run_id, body, fast=True)
    assert (first.status_code, answered) == (201, 1), first.content
    assert first.json()["data"] == {"note": "é", "x": 10**16}
    full, answered_full = _post(client, run_id, body, fast=False)
    fast, answered_fast = _post(client, run_id, body, fast=True)
    assert (answered_full, answered_fast) == (0, 1)
    assert full.status_code == 200
    assert comparable(fast) == comparable(full)
    assert json.loads(first.content) == json.loads(full.content)
    assert set(full.headers) >= {"Content-Type", "Allow", "X-Frame-Options", "Content-Length",
                                 "X-Content-Type-Options"}


def test_a_repeated_batch_gets_the_same_answer_from_both_paths(agent_run):
    client, run_id = agent_run
    batch = [{"client_event_id": f"b-{n}", "stage": "build", "kind": "proposed"} for n in range(3)]
    created, answered = _post(client, run_id, batch, fast=True)
    assert (created.status_code, answered, len(created.json())) == (201, 1, 3)
    full, _ = _post(client, run_id, batch, fast=False)
    fast, _ = _post(client, run_id, batch, fast=True)
    assert full.status_code == 200 and comparable(fast) == comparable(full)


@pytest.mark.parametrize("case", ["mismatch", "bad_kind", "missing_run", "bad_batch_item", "not_an_object",
                                  "bad_client_event_id"])
def test_refusals_get_the_same_answer_from_both_paths(agent_run, case):
    client, run_id = agent_run
    _post(client, run_id, {"client_event_id": "taken", "stage": "build", "kind": "proposed"}, fast=False)
    body = {
        "mismatch": {"client_event_id": "taken", "stage": "build", "kind": "succeeded"},
        "bad_kind": {"stage": "build", "kind": "exploded"},
        "missing_run": {"stage": "build", "kind": "proposed"},
        "bad_batch_item": [{"stage": "build", "kind": "proposed"}, {"stage": "nowhere", "kind": "proposed"}],
        "not_an_object": "just a string",
        "bad_client_event_id": {"client_event_id": "", "stage": "build", "kind": "proposed"},
    }[case]
    target = str(uuid.uuid4()) if case == "missing_run" else run_id
    events = LedgerEvent.objects.count()
    full, _ = _post(client, target, body, fast=False)
    fast, answered = _post(client, target, body, fast=True)
    assert full.status_code >= 400 and answered == 1, full.content
    assert comparable(fast) == comparable(full)
    assert LedgerEvent.objects.count() == events


@pytest.mark.parametrize("extra, expected", [
    ({"QUERY_STRING": "format=json"}, 201),
    ({"HTTP_ACCEPT": "text/html"}, 406),
    ({"HTTP_ACCEPT": "application/json; indent=4"}, 201),
])
def test_other_forms_of_the_request_are_handed_to_the_full_stack(agent_run, extra, expected):
    client, run_id = agent_run
    response, answered = _post(client, run_id, {"stage": "build", "kind": "proposed"}, fast=True, **extra)
    assert (response.status_code, answered) == (expected, 0), response.content


def test_a_body_that_does_not_parse_is_answered_by_the_full_stack(agent_run):
    client, run_id = agent_run
    before = AgentFastPath.answered
    response = client.post(f"/api/v1/runs/{run_id}/events/", b"{not json", content_type="application/json")
    assert (response.status_code, response.json()["code"], AgentFastPath.answered - before) == \
        (400, "malformed_json", 0)


def test_a_token_not_yet_cached_goes_through_the_full_stack_which_caches_it(agent_run):
    client, run_id = agent_run
    auth._cache.clear()
    response, answered = _post(client, run_id, {"stage": "build", "kind": "proposed"}, fast=True)
    assert (response.status_code, answered) == (201, 0)
    response, answered = _post(client, run_id, {"stage": "build", "kind": "proposed"}, fast=True)
    assert (response.status_code, answered) == (201, 1)


def test_a_revoked_token_is_refused_by_the_full_stack_and_nothing_is_written(agent_run):
    client, run_id = agent_run
    token = client._credentials["HTTP_AUTHORIZATION"].split()[1]
    assert token_revoke(key=token)
    events = LedgerEvent.objects.count()
    response, answered = _post(client, run_id, {"stage": "build", "kind": "proposed"}, fast=True)
    assert (response.status_code, answered) == (401, 0), response.content
    assert LedgerEvent.objects.count() == events


def test_a_role_that_may_not_append_is_refused_and_audited_by_the_full_stack(agent_run):
    _, run_id = agent_run
    user, token = make_operator(ONCALL)
    client = client_for(token)
    audits = AuditEntry.objects.filter(outcome="refused").count()
    for _ in range(2):  # the first caches the token; the second would be the fast path's
        response, answered = _post(client, run_id, {"stage": "build", "kind": "proposed"}, fast=True)
        assert (response.status_code, answered) == (403, 0), response.content
    assert AuditEntry.objects.filter(outcome="refused").count() == audits + 2


@pytest.mark.parametrize("content_type, expected, fast", [
    ("application/json; charset=utf-8", 201, 1),
    ("Application/JSON", 201, 0),  # DRF matches it too; the fast path takes only the exact spelling
    ("text/plain", 415, 0),
])
def test_the_content_type_decides_as_drf_would(agent_run, content_type, expected, fast):
    client, run_id = agent_run
    before = AgentFastPath.answered
    response = client.post(f"/api/v1/runs/{run_id}/events/", json.dumps({"stage": "build", "kind": "proposed"}),
                           content_type=content_type)
    assert (response.status_code, AgentFastPath.answered - before) == (expected, fast), response.content


def test_a_host_outside_allowed_hosts_is_refused_by_the_full_stack(agent_run):
    client, run_id = agent_run
    events = LedgerEvent.objects.count()
    response, answered = _post(client, run_id, {"stage": "build", "kind": "proposed"}, fast=True,
                               HTTP_HOST="evil.example")
    assert (response.status_code, answered) == (400, 0)
    assert LedgerEvent.objects.count() == events


@override_settings(DISALLOWED_USER_AGENTS=[re.compile("badbot")])
def test_a_refused_user_agent_is_refused_by_the_full_stack(agent_run):
    client, run_id = agent_run
    response, answered = _post(client, run_id, {"stage": "build", "kind": "proposed"}, fast=True,
                               HTTP_USER_AGENT="badbot/1.0")
    assert (response.status_code, answered) == (403, 0)
