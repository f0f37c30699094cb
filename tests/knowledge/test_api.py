"""The claims API: shapes, status codes, retrieval as fact or lead, roles."""

from datetime import timedelta

import pytest
from django.urls import URLPattern, URLResolver, get_resolver
from django.utils import timezone

from knowledge import selectors, services
from knowledge.models import Claim
from tests.factories import client_for, make_agent, make_operator
from tests.knowledge.conftest import iso, proposal

pytestmark = pytest.mark.django_db


def propose(actor, **overrides):
    response = actor.client.post("/api/v1/claims/", proposal(**overrides), format="json")
    assert response.status_code == 201, response.json()
    return response.json()


def listed(actor, **params):
    response = actor.client.get("/api/v1/claims/", params)
    assert response.status_code == 200
    return response.json()


def test_claim_propose_answers_201_with_the_active_version(agent, owner):
    """A good proposal is 201 `active`, version 1, owned by the agent's owner, served as a fact."""
    body = propose(agent, key="svc.billing/api/timeout")
    assert (body["status"], body["use_as"], body["version"], body["owner"]) == ("active", "fact", 1,
                                                                                owner.user.username)
    assert body["store_version"] == selectors.store_version()
    assert body["scope"] == {"system": "billing", "version": "2.1", "task": "triage"}


def test_claim_list_filters_by_scope_and_key(agent):
    """GET /claims/ filters on system, task and key."""
    a = propose(agent, scope={"system": "sys-a", "task": "t1"})
    b = propose(agent, scope={"system": "sys-a", "task": "t2"})
    propose(agent, scope={"system": "sys-b", "task": "t1"})
    assert [c["key"] for c in listed(agent, system="sys-a")["results"]] == sorted([a["key"], b["key"]])
    assert [c["key"] for c in listed(agent, system="sys-a", task="t2")["results"]] == [b["key"]]
    assert [c["key"] for c in listed(agent, key=a["key"])["results"]] == [a["key"]]


def test_claim_list_paginates_by_cursor(agent):
    """Pages of `limit` keys, with a `next` link until the last page."""
    keys = sorted(propose(agent, scope={"system": "paged"})["key"] for _ in range(5))
    first = listed(agent, system="paged", limit=2)
    assert [c["key"] for c in first["results"]] == keys[:2]
    second = agent.client.get(first["next"]).json()
    third = agent.client.get(second["next"]).json()
    assert [c["key"] for c in second["results"] + third["results"]] == keys[2:]
    assert third["next"] is None


def test_claim_past_refresh_after_is_a_lead_at_once(agent):
    """A claim whose refresh_after just passed is served as a stale lead, with no sweep in between."""
    now = timezone.now()
    then = now - timedelta(days=3)
    stale = services.claim_propose(user=agent.user, now=then, data=proposal(
        scope={"system": "expiry"}, observed_at=iso(then - timedelta(hours=1)),
        refresh_after=iso(now - timedelta(seconds=1))))
    fresh = propose(agent, scope={"system": "expiry"})
    version_before = selectors.store_version()
    by_key = {c["key"]: c for c in listed(agent, system="expiry")["results"]}
    assert (by_key[stale.key]["status"], by_key[stale.key]["use_as"]) == ("stale", "lead")
    assert (by_key[fresh["key"]]["status"], by_key[fresh["key"]]["use_as"]) == ("active", "fact")
    assert [c["key"] for c in listed(agent, system="expiry", use_as="fact")["results"]] == [fresh["key"]]
    assert [c["key"] for c in listed(agent, system="expiry", use_as="lead")["results"]] == [stale.key]
    assert selectors.store_version() == version_before


def test_claim_tombstoned_is_never_retrieved(agent, editor):
    """After invalidate, the key disappears from retrieval (the history keeps it)."""
    key = propose(agent, scope={"system": "tomb"})["key"]
    response = editor.client.post(f"/api/v1/claims/{key}/invalidate/", {"reason": "wrong"}, format="json")
    assert response.status_code == 200
    assert (response.json()["status"], response.json()["use_as"]) == ("invalidated", None)
    assert listed(agent, system="tomb")["results"] == []
    assert listed(agent, key=key)["results"] == []
    detail = agent.client.get(f"/api/v1/claims/{key}/").json()
    assert [v["status"] for v in detail["history"]] == ["invalidated", "active"]


def test_claim_pending_and_rejected_never_hide_the_current_value(agent):
    """A pending proposal and a refused one leave the live value served as it was."""
    key = propose(agent, statement="v1")["key"]
    pending = propose(agent, key=key, statement="v2 guess", confidence="engineering-inference")
    assert pending["status"] == "pending"
    refused = agent.client.post("/api/v1/claims/", proposal(key=key, statement="v3", source_refs=[]), format="json")
    assert refused.status_code == 422
    (served,) = listed(agent, key=key)["results"]
    assert (served["statement"], served["version"], served["use_as"]) == ("v1", 1, "fact")
    detail = agent.client.get(f"/api/v1/claims/{key}/").json()
    assert detail["current"]["statement"] == "v1"
    assert [p["version"] for p in detail["pending"]] == [2]
    assert [r["reasons"][0]["code"] for r in detail["rejections"]] == ["sources_missing"]


def test_claim_detail_shows_current_and_full_history(agent, editor):
    """GET /claims/{key}/ has the current version and every version, newest first."""
    key = propose(agent, key="docs.example/a/b.c")["key"]
    editor.client.post(f"/api/v1/claims/{key}/refresh/", {
        "observed_at": iso(timezone.now()), "refresh_after": iso(timezone.now() + timedelta(days=10))}, format="json")
    body = agent.client.get(f"/api/v1/claims/{key}/").json()
    assert body["current"]["version"] == 2
    assert [(v["version"], v["use_as"]) for v in body["history"]] == [(2, "fact"), (1, None)]
    assert agent.client.get("/api/v1/claims/no/such/key/").status_code == 404
    assert agent.client.get("/api/v1/claims/no/such/key/").json()["code"] == "claim_not_found"


def test_claim_refresh_by_editor_makes_a_new_version(agent, editor):
    """Editors refresh: a new version with new evidence and dates and a new store_version."""
    old = propose(agent, key="svc/x.y/refresh-me")
    now = timezone.now()
    response = editor.client.post(f"/api/v1/claims/{old['key']}/refresh/", {
        "observed_at": iso(now), "refresh_after": iso(now + timedelta(days=60)),
        "source_refs": ["https://docs.example.com/v2"], "reason": "re-read the docs"}, format="json")
    assert response.status_code == 200, response.json()
    new = response.json()
    assert (new["version"], new["source_refs"], new["reason"]) == (2, ["https://docs.example.com/v2"],
                                                                    "re-read the docs")
    assert new["store_version"] > old["store_version"]
    assert new["provenance"] == {"action": "refresh", "of_version": 1, "of_store_version": old["store_version"]}
    assert new["statement"] == old["statement"] and new["owner"] == old["owner"]


def test_claim_refresh_goes_through_the_gate(agent, editor):
    """A refresh without new dates is refused with the gate's reasons."""
    key = propose(agent)["key"]
    response = editor.client.post(f"/api/v1/claims/{key}/refresh/", {"colour": "red"}, format="json")
    assert response.status_code == 422
    assert [r["code"] for r in response.json()["reasons"]] == [
        "unknown_field", "observed_at_missing", "refresh_after_missing"]


def test_claim_refresh_is_refused_to_agents_and_viewers(agent, viewer):
    """Only owners and editors refresh."""
    key = propose(agent)["key"]
    body = {"observed_at": iso(timezone.now()), "refresh_after": iso(timezone.now() + timedelta(days=1))}
    assert agent.client.post(f"/api/v1/claims/{key}/refresh/", body, format="json").status_code == 403
    assert viewer.client.post(f"/api/v1/claims/{key}/refresh/", body, format="json").status_code == 403


def test_claim_revoke_is_refused_to_an_agent(agent):
    """An agent cannot revoke, not even a claim it proposed."""
    key = propose(agent)["key"]
    response = agent.client.post(f"/api/v1/claims/{key}/revoke/", {"reason": "mine"}, format="json")
    assert response.status_code == 403
    assert listed(agent, key=key)["results"][0]["status"] == "active"


def test_claim_revoke_only_by_its_owner(agent, owner, other_owner, editor):
    """An editor and another owner are refused (403 not_claim_owner); the claim's owner revokes."""
    key = propose(agent)["key"]  # owned by the agent's owner
    for intruder in (editor, other_owner):
        response = intruder.client.post(f"/api/v1/claims/{key}/revoke/", {"reason": "no"}, format="json")
        assert response.status_code == 403
    assert response.json()["code"] == "not_claim_owner"
    response = owner.client.post(f"/api/v1/claims/{key}/revoke/", {"reason": "leaked"}, format="json")
    assert response.status_code == 200
    assert (response.json()["status"], response.json()["reason"], response.json()["actor"]) == (
        "revoked", "leaked", f"user:{owner.user.username}")


def test_claim_revoke_without_owner_by_any_owner(lone_agent, other_owner, editor):
    """A claim with no owner may be revoked by any user with the owner role, still not by an editor."""
    key = propose(lone_agent)["key"]
    assert listed(lone_agent, key=key)["results"][0]["owner"] is None
    assert editor.client.post(f"/api/v1/claims/{key}/revoke/", {"reason": "x"}, format="json").status_code == 403
    assert other_owner.client.post(f"/api/v1/claims/{key}/revoke/", {"reason": "x"},
                                   format="json").status_code == 200


def test_claim_tombstone_needs_a_reason(agent, owner, editor):
    """Invalidate and revoke without a reason are 422 reason_required and write nothing."""
    key = propose(agent)["key"]
    before = selectors.store_version()
    for actor, action in ((editor, "invalidate"), (owner, "revoke")):
        response = actor.client.post(f"/api/v1/claims/{key}/{action}/", {"reason": "  "}, format="json")
        assert (response.status_code, response.json()["code"]) == (422, "reason_required")
    assert selectors.store_version() == before


def test_claim_invalidate_twice_changes_nothing(agent, editor):
    """A repeated invalidate answers 200 with the same tombstone, no new version."""
    key = propose(agent)["key"]
    first = editor.client.post(f"/api/v1/claims/{key}/invalidate/", {"reason": "a"}, format="json").json()
    second = editor.client.post(f"/api/v1/claims/{key}/invalidate/", {"reason": "b"}, format="json").json()
    assert first == second


def test_claim_invalidated_key_takes_a_new_proposal(agent, editor):
    """After invalidate, a proposal with fresh sources is a new active version like any other."""
    key = propose(agent)["key"]
    editor.client.post(f"/api/v1/claims/{key}/invalidate/", {"reason": "outdated"}, format="json")
    again = propose(agent, key=key, source_refs=["https://docs.example.com/new"])
    assert (again["status"], again["version"]) == ("active", 3)


def test_claim_revoked_key_waits_for_its_owner(agent, owner, other_owner, editor):
    """After revoke, an agent's proposal is pending until the claim's owner accepts it."""
    key = propose(agent)["key"]
    owner.client.post(f"/api/v1/claims/{key}/revoke/", {"reason": "wrong source"}, format="json")
    pending = propose(agent, key=key, statement="re-proposed")
    assert (pending["status"], pending["pending_reasons"]) == ("pending", ["revoked_key_needs_owner"])
    assert listed(agent, key=key)["results"] == []
    for intruder in (editor, other_owner):
        response = intruder.client.post(f"/api/v1/claims/{key}/accept/", {}, format="json")
        assert (response.status_code, response.json()["code"]) == (403, "not_allowed_to_accept")
    accepted = owner.client.post(f"/api/v1/claims/{key}/accept/", {}, format="json")
    assert accepted.status_code == 200
    body = accepted.json()
    assert (body["status"], body["version"], body["statement"]) == ("active", 4, "re-proposed")
    assert body["store_version"] > pending["store_version"]
    assert body["provenance"]["of_version"] == pending["version"]
    assert listed(agent, key=key)["results"][0]["version"] == 4


def test_claim_accept_inference_by_editor(agent, editor):
    """A pending engineering inference is accepted by an editor as a new version."""
    pending = propose(agent, confidence="engineering-inference", refresh_after=iso(timezone.now() + timedelta(days=5)))
    assert pending["status"] == "pending"
    assert listed(agent, key=pending["key"])["results"] == []
    body = editor.client.post(f"/api/v1/claims/{pending['key']}/accept/", {}, format="json").json()
    assert (body["status"], body["version"], body["use_as"]) == ("active", 2, "fact")


def test_claim_accept_sensitive_by_owner_only(agent, owner, editor):
    """An agent's sensitive claim waits in pending; an editor may not accept it, an owner may."""
    pending = propose(agent, sensitivity="sensitive", retention_until=iso(timezone.now() + timedelta(days=90)))
    assert (pending["status"], pending["pending_reasons"]) == ("pending", ["sensitive_needs_owner"])
    refused = editor.client.post(f"/api/v1/claims/{pending['key']}/accept/", {}, format="json")
    assert refused.status_code == 403
    assert owner.client.post(f"/api/v1/claims/{pending['key']}/accept/", {}, format="json").status_code == 200


def test_claim_accept_refuses_a_superseded_pending_version(agent, editor):
    """Accepting a pending version older than the current value would put old over new: 409."""
    key = propose(agent, statement="v1")["key"]
    propose(agent, key=key, statement="guess", confidence="engineering-inference")
    propose(agent, key=key, statement="v3")
    response = editor.client.post(f"/api/v1/claims/{key}/accept/", {"version": 2}, format="json")
    assert (response.status_code, response.json()["code"]) == (409, "pending_superseded")
    assert listed(agent, key=key)["results"][0]["statement"] == "v3"


def test_claim_accept_without_pending_is_409(agent, editor):
    """Nothing pending to accept: 409 nothing_pending."""
    key = propose(agent)["key"]
    response = editor.client.post(f"/api/v1/claims/{key}/accept/", {}, format="json")
    assert (response.status_code, response.json()["code"]) == (409, "nothing_pending")


def test_claim_derived_from_invalidated_is_flagged_for_review(agent, editor):
    """Invalidating a claim flags its live derivations: `needs_review` and served as a lead until refreshed."""
    base = propose(agent)["key"]
    child = propose(agent, derived_from=[base])["key"]
    other = propose(agent)["key"]
    editor.client.post(f"/api/v1/claims/{base}/invalidate/", {"reason": "wrong"}, format="json")
    (served,) = listed(agent, key=child)["results"]
    assert (served["needs_review"], served["use_as"], served["status"]) == (True, "lead", "active")
    assert listed(agent, key=other)["results"][0]["needs_review"] is False
    detail = agent.client.get(f"/api/v1/claims/{child}/").json()
    assert [(r["reason"], r["source_key"]) for r in detail["reviews"]] == [("derived_from_invalidated", base)]
    now = timezone.now()
    refreshed = editor.client.post(f"/api/v1/claims/{child}/refresh/", {
        "observed_at": iso(now), "refresh_after": iso(now + timedelta(days=5)), "derived_from": []}, format="json")
    assert refreshed.status_code == 200, refreshed.json()
    assert (refreshed.json()["needs_review"], refreshed.json()["use_as"]) == (False, "fact")


def test_claim_sensitive_hidden_from_viewers(owner, viewer, agent, lone_agent):
    """Sensitive claims are served to owners and the owner's agents, not to a viewer or another agent."""
    claim = propose(owner, scope={"system": "secret"}, sensitivity="sensitive",
                    retention_until=iso(timezone.now() + timedelta(days=30)))
    assert claim["status"] == "active" and claim["owner"] == owner.user.username
    assert [c["key"] for c in listed(owner, system="secret")["results"]] == [claim["key"]]
    assert [c["key"] for c in listed(agent, system="secret")["results"]] == [claim["key"]]
    assert listed(viewer, system="secret")["results"] == []
    assert listed(lone_agent, system="secret")["results"] == []
    assert viewer.client.get(f"/api/v1/claims/{claim['key']}/").status_code == 404


def test_claim_propose_refused_to_viewers_and_editors(viewer, editor):
    """Only agents and owners propose."""
    for actor in (viewer, editor):
        assert actor.client.post("/api/v1/claims/", proposal(), format="json").status_code == 403


def test_claim_api_requires_authentication(api):
    """Anonymous requests get 401/403 with a code."""
    response = api.get("/api/v1/claims/")
    assert response.status_code in (401, 403)
    assert response.json()["code"] in ("not_authenticated", "authentication_failed", "permission_denied")


def test_claim_views_declare_roles_for_every_method():
    """Every knowledge API view has a role rule for each method it serves."""
    def walk(patterns):
        for p in patterns:
            if isinstance(p, URLResolver):
                yield from walk(p.url_patterns)
            elif isinstance(p, URLPattern):
                yield p

    views = [p.callback.view_class for p in walk(get_resolver().url_patterns)
             if getattr(p.callback, "view_class", None) and p.callback.view_class.__module__ == "knowledge.api.claims"]
    assert len(views) == 7
    for view in views:
        served = {m.upper() for m in view.http_method_names if hasattr(view, m) and m not in ("options", "head")}
        assert served and served <= set(view.policy), view


def test_reconcile_refuses_an_over_long_key_without_writing():
    """A malformed snapshot entry is a 422 listing the entry, never a 500."""
    from knowledge.models import ClaimHead
    from tests.factories import client_for

    _, token = make_agent()
    response = client_for(token).post("/api/v1/knowledge/reconcile/",
                                      {"entries": [{"key": "k" * 301, "store_version": 1}]}, format="json")
    assert response.status_code == 422 and response.json()["code"] == "entries_invalid"
    assert response.json()["errors"][0]["code"] == "key_too_long"
    assert not ClaimHead.objects.exists()


def test_claim_propose_with_a_key_too_long_is_rejected_and_logged(agent):
    """A 301-character key is a 422 write-gate rejection (never a 500), and the rejection is recorded."""
    from knowledge.models import GateDecision

    key = "k" * 301
    response = agent.client.post("/api/v1/claims/", proposal(key=key), format="json")
    assert response.status_code == 422, response.content
    assert response.json()["code"] == "write_gate_rejected"
    decision = GateDecision.objects.get(outcome="rejected")
    assert (decision.key, decision.payload["key"]) == (key[:300], key)


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
