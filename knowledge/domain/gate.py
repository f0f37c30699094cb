"""The write gate: a deterministic validator of claim proposals against the YAML policy.

``evaluate`` is a function of the proposal, the policy and a small ``GateContext`` (the time,
the proposer's roles and read-only look-ups), so it is testable without a database. It returns
every reason at once, in a fixed order (the policy's field order), never only the first.
"""

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml
from django.utils.dateparse import parse_datetime

POLICY_PATH = Path(__file__).resolve().parent.parent / "policy" / "write_gate.yaml"


@lru_cache(maxsize=4)
def load_policy(path: str | None = None) -> dict:
    with open(path or POLICY_PATH, encoding="utf-8") as fh:
        policy = yaml.safe_load(fh)
    policy["version"] = str(policy["version"])
    return policy


@dataclass(frozen=True)
class GateContext:
    now: datetime
    actor_roles: frozenset[str] = frozenset()
    # id -> is it a `verified` ledger event?
    ledger_event_verified: Callable[[int], bool] = lambda event_id: False
    # username -> "human" | "agent" | None (no such user)
    user_kind: Callable[[str], str | None] = lambda username: None
    # key -> "live" | "tombstoned" | "missing" (for derived_from)
    key_state: Callable[[str], str] = lambda key: "missing"
    # key -> None when the key is not revoked, else whether the proposer may accept it (its owner)
    revoked_key_authority: Callable[[str], bool | None] = lambda key: None


@dataclass
class GateResult:
    outcome: str  # "active" | "pending" | "rejected"
    reasons: list[dict] = field(default_factory=list)
    pending_reasons: list[str] = field(default_factory=list)
    cleaned: dict[str, Any] = field(default_factory=dict)
    policy_version: str = ""

    @property
    def rejected(self) -> bool:
        return self.outcome == "rejected"

    @property
    def codes(self) -> list[str]:
        return [r["code"] for r in self.reasons]


class _Reasons(list):
    def add(self, code: str, field_name: str, detail: str) -> None:
        self.append({"code": code, "field": field_name, "detail": detail})


def _present(value) -> bool:
    return value is not None and value != "" and value != [] and value != {}


def _parse_time(value, name: str, reasons: _Reasons) -> datetime | None:
    if isinstance(value, datetime):
        parsed = value
    elif isinstance(value, str):
        try:
            parsed = parse_datetime(value.strip())
        except ValueError:
            parsed = None
    else:
        parsed = None
    if parsed is None:
        reasons.add(f"{name}_invalid", name, f"{name} must be an ISO 8601 date-time with a timezone.")
        return None
    if parsed.tzinfo is None or parsed.utcoffset() is None:
        reasons.add(f"{name}_invalid", name, f"{name} needs a timezone (e.g. 2025-01-31T12:00:00Z).")
        return None
    try:
        return parsed.astimezone(dt_timezone.utc)  # stored in UTC (PostgreSQL refuses offsets past ±15:59)
    except OverflowError:
        reasons.add(f"{name}_invalid", name, f"{name} is out of range once converted to UTC.")
        return None


def _check_key(key, policy: dict, reasons: _Reasons, name: str = "key") -> str | None:
    rules = policy["key"]
    if not _present(key):
        reasons.add(f"{name}_missing", name, "A claim needs a stable subject key.")
        return None
    if not isinstance(key, str) or not re.match(rules["pattern"], key) or key.endswith("/") or "//" in key:
        reasons.add(f"{name}_invalid", name,
                    "Keys use letters, digits and . _ : / + - (no '@', no empty path segment).")
        return None
    if len(key) > rules["max_length"]:
        reasons.add(f"{name}_too_long", name, f"Keys are at most {rules['max_length']} characters.")
        return None
    if key.rsplit("/", 1)[-1] in rules["reserved_last_segments"]:
        reasons.add(f"{name}_reserved", name, "The last path segment of a key may not be an action name.")
        return None
    return key


def _check_choice(proposal: Mapping[str, Any], name: str, choices: Mapping, reasons: _Reasons) -> str | None:
    """A field that names one of the policy's ``choices``: the name, or None (and the reason) when
    it is missing or unknown."""
    value = proposal.get(name)
    if not _present(value):
        reasons.add(f"{name}_missing", name, f"{name} is one of {', '.join(choices)}.")
    elif not isinstance(value, str) or value not in choices:
        reasons.add(f"{name}_unknown", name, f"Unknown {name}; use one of {', '.join(choices)}.")
    else:
        return value
    return None


def evaluate(proposal: Mapping[str, Any], ctx: GateContext, policy: dict | None = None,
             *, allowed_fields: list[str] | None = None) -> GateResult:
    """Judge one proposal: every reason at once, the outcome, and the cleaned values."""
    policy = policy or load_policy()
    reasons = _Reasons()
    cleaned: dict[str, Any] = {}
    if not isinstance(proposal, Mapping):
        reasons.add("proposal_invalid", "", "A claim proposal is a JSON object.")
        return GateResult("rejected", list(reasons), [], {}, policy["version"])

    allowed = allowed_fields or policy["fields"]
    for name in sorted(set(proposal) - set(allowed)):
        reasons.add("unknown_field", name, f"Unknown field {name!r}; allowed: {', '.join(allowed)}.")

    # key
    cleaned["key"] = _check_key(proposal.get("key"), policy, reasons)

    # statement
    statement = proposal.get("statement")
    if not _present(statement) or (isinstance(statement, str) and not statement.strip()):
        reasons.add("statement_missing", "statement", "A claim needs a statement.")
    elif not isinstance(statement, str):
        reasons.add("statement_invalid", "statement", "The statement is a string.")
    elif len(statement) > policy["statement"]["max_length"]:
        reasons.add("statement_too_long", "statement",
                    f"Statements are at most {policy['statement']['max_length']} characters.")
    else:
        cleaned["statement"] = statement

    # source_type (before sources: the allowed schemes depend on it)
    source_type = _check_choice(proposal, "source_type", policy["source_types"], reasons)
    type_rules = None
    if source_type is not None:
        type_rules = policy["source_types"][source_type]
        cleaned["source_type"] = source_type

    # source_refs
    refs = proposal.get("source_refs")
    ref_rules = policy["source_refs"]
    if not _present(refs):
        reasons.add("sources_missing", "source_refs", "A claim needs at least one source URI.")
    elif not isinstance(refs, list):
        reasons.add("sources_invalid", "source_refs", "source_refs is a list of URIs.")
    elif len(refs) > ref_rules["max"]:
        reasons.add("too_many_sources", "source_refs", f"At most {ref_rules['max']} sources.")
    else:
        ok = True
        for i, ref in enumerate(refs):
            scheme = ref.split(":", 1)[0].lower() if isinstance(ref, str) and ":" in ref else ""
            if (not isinstance(ref, str) or not ref.strip() or len(ref) > ref_rules["max_length"]
                    or not re.match(r"^[a-z][a-z0-9+.-]*$", scheme) or not ref.split(":", 1)[1]):
                reasons.add("source_ref_invalid", f"source_refs[{i}]", "A source is a URI with a scheme.")
                ok = False
            elif type_rules is not None and scheme not in type_rules["schemes"]:
                reasons.add("source_ref_scheme_not_allowed", f"source_refs[{i}]",
                            f"{source_type} sources use {', '.join(type_rules['schemes'])}.")
                ok = False
        if ok:
            cleaned["source_refs"] = list(refs)

    # scope
    scope = proposal.get("scope")
    scope_rules = policy["scope"]
    if not _present(scope):
        reasons.add("scope_missing", "scope", "A claim needs a scope {system, version, task}.")
    elif not isinstance(scope, Mapping):
        reasons.add("scope_invalid", "scope", "scope is an object {system, version, task}.")
    else:
        ok = True
        for name in sorted(set(scope) - set(scope_rules["allowed"])):
            reasons.add("scope_field_unknown", f"scope.{name}",
                        f"scope fields are {', '.join(scope_rules['allowed'])}.")
            ok = False
        for name in scope_rules["required"]:
            if not _present(scope.get(name)):
                reasons.add(f"scope_{name}_missing", f"scope.{name}", f"scope.{name} is required.")
                ok = False
        for name in scope_rules["allowed"]:
            value = scope.get(name)
            if value is not None and (not isinstance(value, str) or len(value) > scope_rules["max_length"]):
                reasons.add("scope_value_invalid", f"scope.{name}",
                            f"scope values are strings of at most {scope_rules['max_length']} characters.")
                ok = False
        if ok:
            cleaned["scope"] = {name: scope.get(name) or "" for name in scope_rules["allowed"]}

    # observed_at
    observed_at = None
    if not _present(proposal.get("observed_at")):
        reasons.add("observed_at_missing", "observed_at", "When was this observed? observed_at is required.")
    else:
        observed_at = _parse_time(proposal["observed_at"], "observed_at", reasons)
        skew = timedelta(seconds=policy["observed_at"]["max_future_skew_seconds"])
        if observed_at is not None and observed_at > ctx.now + skew:
            reasons.add("observed_at_in_future", "observed_at", "observed_at is in the future.")
            observed_at = None
        cleaned["observed_at"] = observed_at

    # confidence
    confidence = _check_choice(proposal, "confidence", policy["confidence"], reasons)
    conf_rules = None
    if confidence is not None:
        conf_rules = policy["confidence"][confidence] or {}
        cleaned["confidence"] = confidence

    # refresh_after (the refresh policy), bounded by the source type and the confidence
    if not _present(proposal.get("refresh_after")):
        reasons.add("refresh_after_missing", "refresh_after",
                    "A claim needs a refresh policy: refresh_after, when it stops being a fact.")
    else:
        refresh_after = _parse_time(proposal["refresh_after"], "refresh_after", reasons)
        if refresh_after is not None and observed_at is not None:
            limits = [r["max_refresh_days"] for r in (type_rules, conf_rules) if r and "max_refresh_days" in r]
            if refresh_after <= observed_at:
                reasons.add("refresh_after_not_after_observed_at", "refresh_after",
                            "refresh_after must be later than observed_at.")
            elif limits and refresh_after - observed_at > timedelta(days=min(limits)):
                reasons.add("refresh_window_too_long", "refresh_after",
                            f"For this source type and confidence a claim is refreshed within {min(limits)} days "
                            "of its observation.")
        cleaned["refresh_after"] = refresh_after

    # ledger_event (required for verified)
    event = proposal.get("ledger_event")
    required = set((conf_rules or {}).get("requires", []))
    if event is None:
        if "ledger_event" in required:
            reasons.add("ledger_event_missing", "ledger_event",
                        "A verified claim names the verified ledger event it rests on.")
        cleaned["ledger_event"] = None
    elif isinstance(event, bool) or not isinstance(event, int) or event < 1:
        reasons.add("ledger_event_invalid", "ledger_event", "ledger_event is a ledger event id.")
    elif not ctx.ledger_event_verified(event):
        reasons.add("ledger_event_not_verified", "ledger_event",
                    "ledger_event must be an existing ledger event of kind `verified`.")
    else:
        cleaned["ledger_event"] = event

    # sensitivity and retention
    sens_rules = policy["sensitivity"]
    sensitivity = proposal.get("sensitivity")
    if sensitivity is None:
        sensitivity = sens_rules["default"]
    level = None
    if not isinstance(sensitivity, str) or sensitivity not in sens_rules["levels"]:
        reasons.add("sensitivity_unknown", "sensitivity",
                    f"sensitivity is one of {', '.join(sens_rules['levels'])}.")
    else:
        level = sens_rules["levels"][sensitivity] or {}
        cleaned["sensitivity"] = sensitivity
    retention = proposal.get("retention_until")
    cleaned["retention_until"] = None
    if retention is None:
        if level and "retention_until" in level.get("requires", []):
            reasons.add("retention_until_missing", "retention_until",
                        "A sensitive claim says how long it may be kept: retention_until.")
    else:
        parsed = _parse_time(retention, "retention_until", reasons)
        if parsed is not None and parsed <= ctx.now:
            reasons.add("retention_until_in_past", "retention_until", "retention_until has passed.")
        elif parsed is not None:
            cleaned["retention_until"] = parsed

    # owner (optional: named, else resolved by the service)
    owner = proposal.get("owner")
    cleaned["owner"] = None
    if owner is not None:
        kind = ctx.user_kind(owner) if isinstance(owner, str) and owner else None
        if not isinstance(owner, str) or not owner:
            reasons.add("owner_invalid", "owner", "owner is a username.")
        elif kind is None:
            reasons.add("owner_unknown", "owner", f"No user named {owner!r}.")
        elif kind != "human":
            reasons.add("owner_invalid", "owner", "A claim's owner is a person, not an agent.")
        else:
            cleaned["owner"] = owner

    # derived_from
    derived = proposal.get("derived_from")
    cleaned["derived_from"] = []
    if derived is not None:
        if not isinstance(derived, list) or not all(isinstance(k, str) for k in derived):
            reasons.add("derived_from_invalid", "derived_from", "derived_from is a list of claim keys.")
        elif len(derived) > policy["derived_from"]["max"]:
            reasons.add("too_many_derived", "derived_from", f"At most {policy['derived_from']['max']} keys.")
        else:
            ok = True
            for i, source in enumerate(dict.fromkeys(derived)):
                if source == proposal.get("key"):
                    reasons.add("derived_from_self", f"derived_from[{i}]", "A claim cannot derive from itself.")
                    ok = False
                    continue
                state = ctx.key_state(source)
                if state == "missing":
                    reasons.add("derived_from_unknown", f"derived_from[{i}]", f"No claim with key {source!r}.")
                    ok = False
                elif state == "tombstoned":
                    reasons.add("derived_from_tombstoned", f"derived_from[{i}]",
                                f"{source!r} was invalidated or revoked; it cannot support a claim.")
                    ok = False
            if ok:
                cleaned["derived_from"] = list(dict.fromkeys(derived))

    if reasons:
        return GateResult("rejected", list(reasons), [], cleaned, policy["version"])

    pending: list[str] = []
    for rules in (conf_rules, level):  # a proposal from a `self_review` role is its own review
        if rules and rules.get("review") and not ctx.actor_roles & set(rules.get("self_review", [])):
            pending.append(rules["review"])
    if ctx.revoked_key_authority(cleaned["key"]) is False:
        pending.append(policy["revoked_key"]["review"])
    return GateResult("pending" if pending else "active", [], pending, cleaned, policy["version"])


# Who may accept a pending version, by pending reason (the claim owner rule is in the service).
def reviewers_for(reason: str, policy: dict | None = None) -> frozenset[str] | None:
    """Roles that may clear ``reason``; None when only the claim's owner may (revoked keys)."""
    policy = policy or load_policy()
    for rules in list(policy["confidence"].values()) + list(policy["sensitivity"]["levels"].values()):
        if rules and rules.get("review") == reason:
            return frozenset(rules.get("reviewers", []))
    return None
