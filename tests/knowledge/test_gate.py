"""The write gate: a deterministic validator of the YAML policy, every reason at once."""

import copy
from datetime import timedelta

import pytest
from django.utils import timezone

from knowledge.domain import gate
from knowledge.models import GateDecision
from tests.knowledge.conftest import iso, make_ledger_event, proposal

NOW = timezone.now()
H, D = timedelta(hours=1), timedelta(days=1)
AGENT_ROLES = frozenset({"agent"})
OWNER_ROLES = frozenset({"owner"})


def ctx(roles=AGENT_ROLES, **lookups):
    defaults = {
        "ledger_event_verified": lambda event_id: event_id == 7,
        "user_kind": lambda name: {"alice": "human", "bot": "agent"}.get(name),
        "key_state": lambda key: {"base.live": "live", "base.dead": "tombstoned"}.get(key, "missing"),
        "revoked_key_authority": lambda key: None,
    }
    defaults.update(lookups)
    return gate.GateContext(now=NOW, actor_roles=roles, **defaults)


def good(**overrides):
    data = proposal(key="billing.api/timeout", observed_at=iso(NOW - H), refresh_after=iso(NOW + 20 * D))
    data.update(overrides)
    return {k: v for k, v in data.items() if v is not ...}


# (case id, proposal, context, expected outcome, expected reason codes in order, pending reasons)
CASES = [
    ("good_official_doc", good(), ctx(), "active", [], []),
    ("empty_proposal", {}, ctx(), "rejected",
     ["key_missing", "statement_missing", "source_type_missing", "sources_missing", "scope_missing",
      "observed_at_missing", "confidence_missing", "refresh_after_missing"], []),
    ("no_sources_no_scope", good(source_refs=[], scope=...), ctx(), "rejected",
     ["sources_missing", "scope_missing"], []),
    ("no_refresh_policy", good(refresh_after=...), ctx(), "rejected", ["refresh_after_missing"], []),
    ("typo_field_drops_refresh_policy", {**good(refresh_after=...), "refresh_afer": iso(NOW + D)}, ctx(),
     "rejected", ["unknown_field", "refresh_after_missing"], []),
    ("verified_without_event", good(confidence="verified"), ctx(), "rejected", ["ledger_event_missing"], []),
    ("verified_unverified_event", good(confidence="verified", ledger_event=8), ctx(), "rejected",
     ["ledger_event_not_verified"], []),
    ("verified_event_not_an_id", good(confidence="verified", ledger_event="7"), ctx(), "rejected",
     ["ledger_event_invalid"], []),
    ("verified_with_event", good(confidence="verified", ledger_event=7), ctx(), "active", [], []),
    ("sensitive_without_retention", good(sensitivity="sensitive"), ctx(), "rejected",
     ["retention_until_missing"], []),
    ("sensitive_retention_past", good(sensitivity="sensitive", retention_until=iso(NOW - D)), ctx(),
     "rejected", ["retention_until_in_past"], []),
    ("sensitive_from_agent_waits", good(sensitivity="sensitive", retention_until=iso(NOW + 90 * D)), ctx(),
     "pending", [], ["sensitive_needs_owner"]),
    ("sensitive_from_owner_active", good(sensitivity="sensitive", retention_until=iso(NOW + 90 * D)),
     ctx(OWNER_ROLES), "active", [], []),
    ("inference_from_agent_waits", good(confidence="engineering-inference"), ctx(), "pending", [],
     ["engineering_inference_review"]),
    ("inference_from_owner_still_waits", good(confidence="engineering-inference"), ctx(OWNER_ROLES), "pending", [],
     ["engineering_inference_review"]),
    ("inference_and_sensitive_wait_for_both",
     good(confidence="engineering-inference", sensitivity="sensitive", retention_until=iso(NOW + 9 * D)),
     ctx(), "pending", [], ["engineering_inference_review", "sensitive_needs_owner"]),
    ("inference_refresh_window_capped", good(confidence="engineering-inference", refresh_after=iso(NOW + 60 * D)),
     ctx(), "rejected", ["refresh_window_too_long"], []),
    ("repo_refresh_window_capped", good(source_type="repo", source_refs=["https://github.com/x/y"],
                                        refresh_after=iso(NOW + 45 * D)), ctx(), "rejected",
     ["refresh_window_too_long"], []),
    ("refresh_before_observation", good(refresh_after=iso(NOW - 2 * H)), ctx(), "rejected",
     ["refresh_after_not_after_observed_at"], []),
    ("naive_observed_at", good(observed_at="2025-01-01T10:00:00"), ctx(), "rejected", ["observed_at_invalid"], []),
    ("observed_in_future", good(observed_at=iso(NOW + D), refresh_after=iso(NOW + 2 * D)), ctx(), "rejected",
     ["observed_at_in_future"], []),
    ("unknown_source_type_and_confidence", good(source_type="blog", confidence="sure"), ctx(), "rejected",
     ["source_type_unknown", "confidence_unknown"], []),
    ("scheme_not_allowed_for_type", good(source_type="repo", source_refs=["https://github.com/x", "doi:10.1/2"]),
     ctx(), "rejected", ["source_ref_scheme_not_allowed"], []),
    ("source_without_scheme", good(source_refs=["docs/billing.md"]), ctx(), "rejected", ["source_ref_invalid"], []),
    ("scope_without_system", good(scope={"task": "triage", "team": "x"}), ctx(), "rejected",
     ["scope_field_unknown", "scope_system_missing"], []),
    ("key_with_at_sign", good(key="billing@2"), ctx(), "rejected", ["key_invalid"], []),
    ("key_shadowing_an_action", good(key="billing/api/revoke"), ctx(), "rejected", ["key_reserved"], []),
    ("key_with_dots_and_slashes", good(key="svc.billing/api/v2:timeout"), ctx(), "active", [], []),
    ("owner_is_an_agent", good(owner="bot"), ctx(), "rejected", ["owner_invalid"], []),
    ("owner_unknown", good(owner="mallory"), ctx(), "rejected", ["owner_unknown"], []),
    ("owner_named", good(owner="alice"), ctx(), "active", [], []),
    ("derived_from_dead_unknown_self", good(derived_from=["base.dead", "nope", "billing.api/timeout"]), ctx(),
     "rejected", ["derived_from_tombstoned", "derived_from_unknown", "derived_from_self"], []),
    ("derived_from_live", good(derived_from=["base.live"]), ctx(), "active", [], []),
    ("revoked_key_from_agent_waits", good(), ctx(revoked_key_authority=lambda key: False), "pending", [],
     ["revoked_key_needs_owner"]),
    ("revoked_key_from_its_owner", good(), ctx(OWNER_ROLES, revoked_key_authority=lambda key: True), "active", [], []),
    ("every_reason_at_once",
     good(key="", statement="", source_type="paper", source_refs=["ftp://x"], scope={}, confidence="verified",
          observed_at="yesterday", refresh_after=..., sensitivity="sensitive"),
     ctx(), "rejected",
     ["key_missing", "statement_missing", "source_ref_scheme_not_allowed", "scope_missing", "observed_at_invalid",
      "refresh_after_missing", "ledger_event_missing", "retention_until_missing"], []),
]


@pytest.mark.parametrize("data,context,outcome,codes,pending", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_gate_table_gives_exact_reasons(data, context, outcome, codes, pending):
    """Each claim in the table gets exactly the outcome and reasons (in policy order) expected."""
    result = gate.evaluate(data, context)
    assert (result.outcome, result.codes, result.pending_reasons) == (outcome, codes, pending)
    assert all(set(r) == {"code", "field", "detail"} and r["detail"] for r in result.reasons)


def test_gate_is_deterministic_whatever_the_key_order():
    """The same proposal with its fields in another order gives the identical result."""
    data = good(key="", source_refs=[], confidence="verified", extra_a=1, extra_b=2)
    reordered = dict(reversed(list(data.items())))
    first, second = gate.evaluate(data, ctx()), gate.evaluate(reordered, ctx())
    assert first.reasons == second.reasons
    assert [r["field"] for r in first.reasons if r["code"] == "unknown_field"] == ["extra_a", "extra_b"]


def test_gate_follows_the_policy_file():
    """The policy is data: a tighter refresh window in the policy rejects what the shipped one accepts."""
    policy = copy.deepcopy(gate.load_policy())
    policy["source_types"]["official-doc"]["max_refresh_days"] = 7
    assert gate.evaluate(good(), ctx()).codes == []
    assert gate.evaluate(good(), ctx(), policy).codes == ["refresh_window_too_long"]


def test_gate_policy_is_versioned():
    """Every decision names the policy version it used."""
    assert gate.evaluate(good(), ctx()).policy_version == gate.load_policy()["version"] != ""


@pytest.mark.django_db
def test_gate_rejection_is_recorded_and_answered_422(agent):
    """A refused proposal answers 422 write_gate_rejected with every reason and leaves a record."""
    response = agent.client.post("/api/v1/claims/", proposal(source_refs=[], observed_at=...), format="json")
    assert response.status_code == 422
    body = response.json()
    assert body["code"] == "write_gate_rejected"
    assert [r["code"] for r in body["reasons"]] == ["sources_missing", "observed_at_missing"]
    decision = GateDecision.objects.get()
    assert decision.outcome == "rejected"
    assert [r["code"] for r in decision.reasons] == ["sources_missing", "observed_at_missing"]
    assert decision.payload["statement"]


@pytest.mark.django_db
def test_gate_verified_claim_needs_a_verified_ledger_event(agent):
    """`verified` is accepted on a verified ledger event and refused on any other kind."""
    verified, started = make_ledger_event("verified"), make_ledger_event("started")
    refused = agent.client.post("/api/v1/claims/", proposal(confidence="verified", ledger_event=started), format="json")
    accepted = agent.client.post("/api/v1/claims/", proposal(confidence="verified", ledger_event=verified),
                                 format="json")
    assert refused.status_code == 422
    assert [r["code"] for r in refused.json()["reasons"]] == ["ledger_event_not_verified"]
    assert accepted.status_code == 201
    assert (accepted.json()["status"], accepted.json()["ledger_event"]) == ("active", verified)
