"""What an agent's event body must be, checked before anything is written."""

from __future__ import annotations

from ledger.domain.kinds import AGENT_KINDS
from ledger.models import EventKind, Run
from stateboard.canonical import canonical_json
from stateboard.errors import Invalid
from stateboard.moments import parse_moment


def validate_evidence(evidence) -> list[dict]:
    if evidence in (None, ""):
        return []
    if not isinstance(evidence, list) or not all(isinstance(item, dict) for item in evidence):
        raise Invalid("invalid_evidence", "evidence must be a list of objects {uri, observed_at, digest?, excerpt?}.")
    for item in evidence:
        unknown = set(item) - {"uri", "observed_at", "digest", "excerpt", "claim"}
        if unknown:
            raise Invalid("invalid_evidence", f"Unknown evidence fields: {', '.join(sorted(unknown))}.")
        if "uri" in item and (not isinstance(item["uri"], str) or not item["uri"]):
            raise Invalid("invalid_evidence", "evidence uri must be a non-empty string.")
        if "observed_at" in item and parse_moment(item["observed_at"]) is None:
            raise Invalid("invalid_evidence", "evidence observed_at must be an ISO 8601 date-time with a timezone.")
        for text_field in ("digest", "excerpt"):
            if text_field in item and not isinstance(item[text_field], str):
                raise Invalid("invalid_evidence", f"evidence {text_field} must be a string.")
    return evidence


EFFECT_LIMITS = {"system": 200, "operation": 200, "reference": 1000}


def validate_effect(effect) -> dict | None:
    if effect is None:
        return None
    if not isinstance(effect, dict) or set(effect) - set(EFFECT_LIMITS) or not all(
            isinstance(v, str) and len(v) <= EFFECT_LIMITS[k] for k, v in effect.items()):
        raise Invalid("invalid_effect", "effect must be an object {system, operation, reference} of strings "
                                        "(at most 200, 200 and 1000 characters).")
    return effect


STAGELESS_KINDS = ("corrected", "attributes_set")  # (attributes_set: on a run whose current stage is "")
STRING_LIMITS = {"reason_code": 100, "client_event_id": 200, "idempotency_key": 200}


def validate_event_body(run: Run, body: dict) -> tuple[str, str]:
    kind, stage = body.get("kind"), body.get("stage") or ""
    if not isinstance(kind, str) or kind not in EVENT_KINDS:
        raise Invalid("unknown_kind", f"Unknown event kind {kind!r}.")
    if kind not in AGENT_KINDS:
        raise Invalid("kind_reserved", f"Kind {kind!r} is written by Stateboard itself, not posted.")
    if not isinstance(stage, str) or (stage not in run.workflow.stages and not (kind in STAGELESS_KINDS and stage == "")):
        raise Invalid("unknown_stage", f"Stage {stage!r} is not a stage of workflow {run.workflow.slug!r}.")
    for name, limit in STRING_LIMITS.items():
        if body.get(name) is not None and (not isinstance(body[name], str) or len(body[name]) > limit):
            raise Invalid("validation_error", f"{name} must be a string of at most {limit} characters.")
    if body.get("data") is not None and not isinstance(body["data"], dict):
        raise Invalid("validation_error", "data must be an object.")
    if len(canonical_json(body.get("data") or {})) > 16 * 1024:
        raise Invalid("data_too_large", "data is for small facts (at most 16 KiB); put artifacts behind evidence uris.")
    return kind, stage


EVENT_KINDS = frozenset(EventKind.values)


def client_event_id_check(client_event_id) -> None:
    if client_event_id is not None and (not isinstance(client_event_id, str) or not client_event_id
                                        or len(client_event_id) > 200):
        raise Invalid("validation_error", "client_event_id must be a non-empty string of at most 200 characters.")
