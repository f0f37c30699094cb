"""The append path serves a token from the per-process cache and confirms it in the run's locking read:
a revoked token, a deactivated user or a removed role are refused at once, and nothing is written."""

import pytest
from django.contrib.auth.models import Group

from ledger import auth, token_sql
from ledger.auth import token_revoke
from ledger.models import ApiToken, LedgerEvent
from stateboard.roles import AGENT
from tests.factories import client_for, make_agent, make_workflow
from tests.ledger.helpers import AgentDriver

pytestmark = pytest.mark.django_db


@pytest.fixture
def agent_run():
    """(driver, run id, agent user, token) with the token already cached by one append."""
    auth._cache.clear()
    wf = make_workflow(stages=["build", "test"])
    user, token = make_agent()
    driver = AgentDriver(client_for(token), wf.slug)
    run_id = driver.trigger()["id"]
    driver.event(run_id, "build", "started")
    assert ApiToken.objects.get(user=user).key_hash in auth._cache
    yield driver, run_id, user, token
    auth._cache.clear()


def _post(driver, run_id, body):
    return driver.client.post(f"/api/v1/runs/{run_id}/events/", body, format="json")


def test_a_cached_token_skips_the_token_read(agent_run, monkeypatch):
    driver, run_id, _, _ = agent_run
    reads = []
    real = token_sql.token_user_read
    monkeypatch.setattr(token_sql, "token_user_read", lambda key_hash: reads.append(key_hash) or real(key_hash))
    driver.event(run_id, "build", "proposed")
    driver.event(run_id, "build", "succeeded")
    assert reads == []
    driver.run(run_id)  # a GET is not on the append path: it reads the token every time
    assert len(reads) == 1


def test_a_revoked_token_is_refused_at_once(agent_run):
    driver, run_id, _, token = agent_run
    before = LedgerEvent.objects.filter(run_id=run_id).count()
    assert token_revoke(key=token)
    response = _post(driver, run_id, {"client_event_id": "after-revoke", "stage": "build", "kind": "proposed"})
    assert response.status_code == 401, response.content
    assert LedgerEvent.objects.filter(run_id=run_id).count() == before
    batch = [{"client_event_id": "b-1", "stage": "build", "kind": "proposed"}]
    assert _post(driver, run_id, batch).status_code == 401
    assert LedgerEvent.objects.filter(run_id=run_id).count() == before


def test_a_revoked_token_gets_401_before_a_validation_error_or_a_missing_run(agent_run):
    driver, run_id, _, token = agent_run
    token_revoke(key=token)
    assert _post(driver, run_id, {"client_event_id": 5, "stage": "build", "kind": "proposed"}).status_code == 401
    assert _post(driver, run_id, []).status_code == 401
    malformed = driver.client.post(f"/api/v1/runs/{run_id}/events/", data=b"{not json",
                                   content_type="application/json")
    assert malformed.status_code == 401, malformed.content
    missing = "00000000-0000-4000-8000-000000000000"
    assert _post(driver, missing, {"stage": "build", "kind": "proposed"}).status_code == 401


def test_a_deactivated_agent_is_refused_at_once(agent_run):
    driver, run_id, user, _ = agent_run
    user.is_active = False
    user.save(update_fields=["is_active"])
    assert _post(driver, run_id, {"client_event_id": "x", "stage": "build", "kind": "proposed"}).status_code == 401


def test_a_removed_role_is_refused_at_once_and_nothing_is_written(agent_run):
    driver, run_id, user, _ = agent_run
    before = LedgerEvent.objects.filter(run_id=run_id).count()
    user.groups.remove(Group.objects.get(name=AGENT))
    response = _post(driver, run_id, {"client_event_id": "no-role", "stage": "build", "kind": "proposed"})
    assert response.status_code == 403, response.content
    assert response.json()["code"] == "permission_denied"
    assert LedgerEvent.objects.filter(run_id=run_id).count() == before


def test_changed_roles_that_still_permit_go_on_with_the_new_roles(agent_run):
    driver, run_id, user, token = agent_run
    user.groups.add(Group.objects.get_or_create(name="editor")[0])
    driver.event(run_id, "build", "proposed")  # re-authenticated afresh, then appended once
    assert LedgerEvent.objects.filter(run_id=run_id, kind="proposed").count() == 1
    cached = auth._cache[ApiToken.objects.get(user=user).key_hash]
    assert cached[2] == frozenset({AGENT, "editor"})
