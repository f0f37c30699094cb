"""Bad input gets a 4xx JSON error with a stable code, never a 500, and the ledger stays as it was."""

import json

import pytest

from ledger.models import Checkpoint, Effect, LedgerEvent, Run
from tests.factories import client_for
from tests.ledger.helpers import driven_run

pytestmark = pytest.mark.django_db


@pytest.fixture
def ctx():
    return driven_run("discovery")


def _snapshot():
    return (LedgerEvent.objects.count(), Run.objects.count(), Effect.objects.count(), Checkpoint.objects.count())


def _post_raw(client, url, raw: bytes):
    return client.generic("POST", url, raw, content_type="application/json")


EVENTS = "/api/v1/runs/{id}/events/"


@pytest.mark.parametrize("raw,status,code", [
    (b'{"stage": "assessment", "kind": ', 400, "malformed_json"),
    (b'{"stage": "assessment", "kind": "started", "data": {"x": "a\\u0000b"}}', 400, "nul_byte"),
    (b'{"stage": "assessment", "kind": "started"}\x00', 400, "nul_byte"),
    (b"[" * 65 + b"]" * 65, 400, "too_deep"),
    (b'{"data": ' + b'{"a": ' * 70 + b"1" + b"}" * 70 + b', "stage": "assessment", "kind": "started"}', 400, "too_deep"),
    (b"[" * 100000 + b"]" * 100000, 413, "body_too_large"),
    (b'\xff\xfe', 400, "malformed_json"),
    (b'["not", "an", "object"]', 422, "validation_error"),
    (b'{"stage": "nope", "kind": "started"}', 422, "unknown_stage"),
    (b'{"stage": "assessment", "kind": "teleported"}', 422, "unknown_kind"),
    (b'{"stage": "assessment", "kind": "transition"}', 422, "kind_reserved"),
    (b'{"stage": "build", "kind": "started"}', 409, "illegal_transition"),
    (b'{"stage": "assessment", "kind": "succeeded"}', 409, "illegal_transition"),
    (b'{"stage": "assessment", "kind": "started", "evidence": "x"}', 422, "invalid_evidence"),
    (b'{"stage": "assessment", "kind": "started", "evidence": [{"uri": "u", "observed_at": "yesterday"}]}',
     422, "invalid_evidence"),
    (b'{"stage": "assessment", "kind": "started", "data": [1]}', 422, "validation_error"),
])
def test_bad_event_bodies_are_refused_with_a_code(ctx, raw, status, code, settings):
    driver, run, _ = ctx
    if code == "body_too_large":
        settings.API_MAX_BODY_BYTES = 100_000
    before = _snapshot()
    response = _post_raw(driver.client, EVENTS.format(id=run["id"]), raw)
    assert response.status_code == status, response.content
    assert response["Content-Type"].startswith("application/json")
    body = response.json()
    assert body["code"] == code and body["detail"]
    assert _snapshot() == before


def test_verified_without_evidence_is_422(ctx):
    driver, run, _ = ctx
    driver.event(run["id"], "assessment", "started")
    before = _snapshot()
    response = driver.event(run["id"], "assessment", "verified", expect=422,
                            evidence=[{"uri": "https://x.test"}])
    assert response["code"] == "evidence_required"
    assert _snapshot() == before


def test_effect_stage_success_needs_the_effect(ctx):
    driver, run, _ = ctx
    for stage in ("assessment", "draft", "build"):
        driver.pass_stage(run["id"], stage)
    driver.event(run["id"], "commit", "started")
    before = _snapshot()
    assert driver.event(run["id"], "commit", "succeeded", expect=422)["code"] == "effect_required"
    assert _snapshot() == before


def test_repeated_client_event_id_returns_the_original_or_409(ctx):
    driver, run, _ = ctx
    url = EVENTS.format(id=run["id"])
    body = {"client_event_id": "same", "stage": "assessment", "kind": "started", "data": {"a": 1, "b": 2}}
    first = driver.client.post(url, body, format="json")
    reordered = json.dumps({"data": {"b": 2, "a": 1}, "kind": "started", "stage": "assessment",
                            "client_event_id": "same"}).encode()
    again = _post_raw(driver.client, url, reordered)
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["seq"] == first.json()["seq"] and again.json()["hash"] == first.json()["hash"]
    before = _snapshot()
    other = driver.client.post(url, {**body, "data": {"a": 2}}, format="json")
    assert other.status_code == 409 and other.json()["code"] == "client_event_id_mismatch"
    assert _snapshot() == before


@pytest.mark.parametrize("body,status,code", [
    ({"workflow": "no-such-workflow", "inputs": {}}, 422, "unknown_workflow"),
    ({"inputs": {}}, 422, "validation_error"),
    ({"workflow": "{wf}", "inputs": {}, "trigger": "telepathy"}, 422, "validation_error"),
])
def test_bad_triggers_are_refused(ctx, body, status, code):
    driver, run, _ = ctx
    body = {k: (v.format(wf=driver.workflow) if isinstance(v, str) else v) for k, v in body.items()}
    before = _snapshot()
    response = driver.client.post("/api/v1/runs/", body, format="json")
    assert response.status_code == status and response.json()["code"] == code
    assert _snapshot() == before


@pytest.mark.parametrize("header,code", [
    ("Token not-a-real-token", "authentication_failed"),
    ("Token", "authentication_failed"),
    ("Token a b", "authentication_failed"),
    (None, "not_authenticated"),
])
def test_bad_tokens_are_401(ctx, header, code):
    from rest_framework.test import APIClient

    driver, run, _ = ctx
    client = APIClient()
    if header:
        client.credentials(HTTP_AUTHORIZATION=header)
    before = _snapshot()
    response = client.post(EVENTS.format(id=run["id"]), {"stage": "assessment", "kind": "started"}, format="json")
    assert response.status_code == 401 and response.json()["code"] == code
    assert _snapshot() == before


def test_revoked_token_is_401(ctx):
    """``revoke_token`` revokes by the key (only its hash is stored) and audits it as the system."""
    from django.core.management import call_command

    from ledger.models import AuditEntry

    driver, run, token = ctx
    call_command("revoke_token", token)
    assert driver.client.get(f"/api/v1/runs/{run['id']}/").status_code == 401
    assert AuditEntry.objects.filter(action="token_revoke", outcome="done", actor="system").count() == 1


@pytest.mark.parametrize("url", ["/api/v1/nope/", "/api/v1/runs/not-a-uuid/", "/api/v1/runs/00000000-0000-0000-0000-000000000000/events/"])
def test_unknown_urls_and_ids_are_json_404(ctx, url):
    driver, _, _ = ctx
    response = driver.client.get(url)
    assert response.status_code == 404 and response.json()["code"] in ("not_found", "run_not_found")


def test_viewer_cannot_append_events(ctx):
    from tests.factories import make_operator

    driver, run, _ = ctx
    _, viewer_token = make_operator("viewer")
    response = client_for(viewer_token).post(EVENTS.format(id=run["id"]), {"stage": "assessment", "kind": "started"},
                                             format="json")
    assert response.status_code == 403 and response.json()["code"] == "permission_denied"
