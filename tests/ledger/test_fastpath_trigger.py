"""``ledger.fastpath`` on ``POST /api/v1/runs/``: a trigger answered at the door gives the full stack's
answer, its cached token is confirmed by the trigger's first read (one round trip for a duplicate), and
whatever it cannot answer the same way is handed over before anything is written."""

import pytest
from django.contrib.auth.models import Group

from ledger import auth
from ledger.models import AuditEntry, Run
from ledger.auth import token_revoke
from stateboard.bench.agentpath import statements_counted
from stateboard.roles import VIEWER
from tests.factories import client_for, make_operator, make_workflow
from tests.ledger.helpers import cached_agent, comparable, fast_post

pytestmark = pytest.mark.django_db

@pytest.fixture
def agent():
    """(client, workflow, agent user) with the agent's token cached by one trigger (the full stack)."""
    def warm_up(client, wf):
        response, answered = _trigger(client, {"workflow": wf.slug, "intent": "warm-up", "inputs": {}}, fast=False)
        assert (response.status_code, answered) == (201, 0), response.content

    with cached_agent(warm_up) as agent:
        yield agent


def _trigger(client, body, *, fast: bool, **extra):
    return fast_post(client, "/api/v1/runs/", body, fast=fast, **extra)


def test_a_duplicate_trigger_gets_the_same_bytes_and_headers_from_both_paths(agent):
    client, wf, _ = agent
    body = {"workflow": wf.slug, "intent": "deploy", "inputs": {"sha": "abc", "note": "é"}, "trigger_key": "k-1"}
    first, answered = _trigger(client, body, fast=True)
    assert (first.status_code, answered) == (201, 1), first.content
    full, answered_full = _trigger(client, body, fast=False)
    fast, answered_fast = _trigger(client, body, fast=True)
    assert (answered_full, answered_fast) == (0, 1)
    assert full.status_code == 200 and full.json()["duplicate"] is True
    assert comparable(fast) == comparable(full)
    assert full.json()["id"] == first.json()["id"]
    assert set(full.headers) >= {"Content-Type", "Allow", "X-Frame-Options", "Content-Length"}
    assert Run.objects.filter(trigger_key="k-1").count() == 1


def test_a_new_trigger_answered_at_the_door_is_the_full_stacks_run(agent, django_capture_on_commit_callbacks):
    client, wf, _ = agent
    with django_capture_on_commit_callbacks(execute=True):
        fast, answered = _trigger(client, {"workflow": wf.slug, "intent": "a", "inputs": {"n": 1}}, fast=True)
    full, _ = _trigger(client, {"workflow": wf.slug, "intent": "b", "inputs": {"n": 1}}, fast=False)
    assert (fast.status_code, full.status_code, answered) == (201, 201, 1)
    varying = {"id", "intent", "trigger_key", "input_fingerprint", "created_at", "updated_at", "decided_at", "lease"}
    fast_body, full_body = fast.json(), full.json()
    assert {k: v for k, v in fast_body.items() if k not in varying} == \
        {k: v for k, v in full_body.items() if k not in varying}
    assert fast_body["trigger"] == "api" and fast_body["duplicate"] is False
    assert set(fast.headers) == set(full.headers)
    run = Run.objects.get(id=fast_body["id"])  # its decision latency was recorded once it committed
    assert run.decision_latency_ms is not None and run.decision_latency_ms >= 0


@pytest.mark.parametrize("case", ["no_workflow", "unknown_workflow", "inputs_not_an_object", "not_an_object",
                                  "bad_trigger", "key_mismatch", "reserved_key", "too_long_intent"])
def test_refusals_get_the_same_answer_from_both_paths_and_write_nothing(agent, case):
    client, wf, _ = agent
    _trigger(client, {"workflow": wf.slug, "intent": "keyed", "inputs": {"v": 1}, "trigger_key": "used"}, fast=False)
    body = {
        "no_workflow": {"inputs": {}},
        "unknown_workflow": {"workflow": "nowhere", "inputs": {}},
        "inputs_not_an_object": {"workflow": wf.slug, "inputs": [1, 2]},
        "not_an_object": ["just", "a", "list"],
        "bad_trigger": {"workflow": wf.slug, "inputs": {}, "trigger": "telepathy"},
        "key_mismatch": {"workflow": wf.slug, "intent": "keyed", "inputs": {"v": 2}, "trigger_key": "used"},
        "reserved_key": {"workflow": wf.slug, "inputs": {}, "trigger_key": "schedule:tick"},
        "too_long_intent": {"workflow": wf.slug, "intent": "x" * 501, "inputs": {}},
    }[case]
    runs = Run.objects.count()
    full, _ = _trigger(client, body, fast=False)
    fast, answered = _trigger(client, body, fast=True)
    assert full.status_code in (400, 404, 409, 422) and answered == 1, full.content
    assert comparable(fast) == comparable(full)
    assert Run.objects.count() == runs


def test_a_duplicate_through_the_door_is_one_round_trip_with_its_token_confirmed(agent):
    client, wf, _ = agent
    body = {"workflow": wf.slug, "intent": "dup", "inputs": {"v": 1}, "trigger_key": "dup-1"}
    _trigger(client, body, fast=True)
    with statements_counted() as counted:
        response, answered = _trigger(client, body, fast=True)
    assert (response.status_code, answered) == (200, 1)
    assert (len(counted.statements), counted.round_trips) == (2, 1), counted.statements  # the run, the token


@pytest.mark.parametrize("keyed", [True, False])
def test_a_token_revoked_while_cached_is_refused_and_nothing_is_written(agent, keyed):
    client, wf, _ = agent
    body = {"workflow": wf.slug, "intent": "after-revoke", "inputs": {}, **({"trigger_key": "k"} if keyed else {})}
    token = client._credentials["HTTP_AUTHORIZATION"].split()[1]
    assert token_revoke(key=token)
    runs = Run.objects.count()
    response, answered = _trigger(client, body, fast=True)
    assert (response.status_code, answered) == (401, 0), response.content
    assert Run.objects.count() == runs


@pytest.mark.parametrize("fast", [True, False])
def test_a_role_removed_while_cached_is_seen_by_the_first_read_and_refused(agent, fast):
    client, wf, user = agent
    user.groups.set([Group.objects.get_or_create(name=VIEWER)[0]])
    audits = AuditEntry.objects.filter(outcome="refused").count()
    runs = Run.objects.count()
    response, answered = _trigger(client, {"workflow": wf.slug, "intent": "demoted", "inputs": {}}, fast=fast)
    assert (response.status_code, answered) == (403, 0), response.content
    assert Run.objects.count() == runs
    assert AuditEntry.objects.filter(outcome="refused").count() == audits + 1


def test_a_role_that_may_not_trigger_is_refused_and_audited_by_the_full_stack():
    auth._cache.clear()
    wf = make_workflow(stages=["build"])
    _, token = make_operator(VIEWER)
    client = client_for(token)
    audits = AuditEntry.objects.filter(outcome="refused").count()
    for _ in range(2):  # the first caches the token; the second would be the fast path's
        response, answered = _trigger(client, {"workflow": wf.slug, "inputs": {}}, fast=True)
        assert (response.status_code, answered) == (403, 0), response.content
    assert AuditEntry.objects.filter(outcome="refused").count() == audits + 2
    assert not Run.objects.filter(workflow=wf).exists()
    auth._cache.clear()
