"""W3C Trace Context (https://www.w3.org/TR/trace-context/): the ``traceparent`` a trigger may carry, and the
ids of a run's trace when it carried none. Pure: no database, no SDK."""

from __future__ import annotations

import hashlib
import re
import uuid

_TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$")


def traceparent_checked(value) -> str:
    """``value`` as the run keeps it (version 00's four fields), or "" when it is no valid traceparent: a
    receiver of a malformed one starts a trace of its own (the recommendation's rule), so the trigger is never
    refused for it."""
    if not isinstance(value, str):
        return ""
    match = _TRACEPARENT.match(value.strip().lower())
    if match is None:
        return ""
    version, trace_id, span_id, flags, rest = match.groups()
    if version == "ff" or (version == "00" and rest) or set(trace_id) == {"0"} or set(span_id) == {"0"}:
        return ""
    return f"00-{trace_id}-{span_id}-{flags}"


def trace_ids(run_id, traceparent: str = "") -> tuple[int, int | None]:
    """(the trace id, the caller's span id or None): the traceparent's, else the run id's 128 bits (a run's
    trace is found by its id, with or without dashes)."""
    checked = traceparent_checked(traceparent)
    if checked:
        _, trace_id, span_id, _ = checked.split("-")
        return int(trace_id, 16), int(span_id, 16)
    return uuid.UUID(str(run_id)).int or 1, None


def trace_url(run, template: str) -> str:
    """The run's trace in the tracing UI ``template`` names (``{trace_id}``: 32 hex digits); "" without one."""
    if not template:
        return ""
    trace_id, _ = trace_ids(run.id, run.traceparent)
    return template.replace("{trace_id}", f"{trace_id:032x}")


def span_id(run_id, *parts) -> int:
    """A span id derived from the run and what the span stands for (an event's seq): the same spans, with the
    same ids, whenever the run's trace is exported again."""
    digest = hashlib.sha256(":".join(str(p) for p in (run_id, *parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big") or 1
