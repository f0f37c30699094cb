"""The Python client for Stateboard's agent API (SPEC §9.3, API.md "Python client").

    from stateboard.client import Client
    sb = Client("http://127.0.0.1:8000", token)
    run = sb.trigger("research-publish", {"source": "v3"})
    with run.stage("draft") as st:
        st.data = {"words": 800}

Retries: a request whose answer was lost (connection error, timeout, 5xx) is sent again with the
same body, so an event keeps its ``client_event_id`` and is recorded once (a trigger keeps its
``trigger_key``). Requests that are not idempotent (claims, goals, rollbacks) are resent only when
the connection was never made. A 4xx is never retried: it raises ``StateboardError``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any
from urllib.parse import quote

import httpx

__all__ = ["Client", "Run", "StageHandle", "StateboardError", "StateboardInvalid", "StateboardUnavailable"]

API = "/api/v1"
RETRY_STATUSES = frozenset({500, 502, 503, 504})
# Codes the server gives for a body it cannot take at all (an old server refusing a JSON array);
# a batch's own refusals carry an ``index`` and are raised, never retried one by one.
BODY_SHAPE_CODES = frozenset({"validation_error", "malformed_json", "bad_request", "invalid_body"})


class StateboardError(Exception):
    """An API error: HTTP ``status``, stable ``code``, human ``detail`` and the decoded ``body``."""

    def __init__(self, status: int, code: str, detail: str = "", body: Any = None):
        super().__init__(f"{status} {code}: {detail}" if detail else f"{status} {code}")
        self.status, self.code, self.detail, self.body = status, code, detail, body


class StateboardUnavailable(StateboardError):
    """No answer after every retry (status 0, code ``unreachable``); the cause is chained."""


class StateboardInvalid(StateboardError, ValueError):
    """An argument refused before anything is sent (status 0), e.g. ``invalid_run_id``."""


def api_path(*segments: Any) -> str:
    """An API path from its segments, each quoted whole: a segment never adds a path, a query or a fragment."""
    return "".join(f"/{quote(str(segment), safe='')}" for segment in segments) + "/"


def run_id_of(value: Any) -> str:
    """A run id as the API writes it, or ``StateboardInvalid`` (``invalid_run_id``) when it is no UUID."""
    try:
        return str(uuid.UUID(str(value)))
    except ValueError:
        raise StateboardInvalid(0, "invalid_run_id", f"A run id is a UUID, not {str(value)[:80]!r}.") from None


def current_traceparent() -> str | None:
    """The W3C ``traceparent`` of the caller's current OpenTelemetry span, or None (no valid current span, or
    no ``opentelemetry-api``: the client never needs it)."""
    try:
        from opentelemetry import trace
    except ImportError:
        return None
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


class Client:
    """One keep-alive HTTP connection pool to a Stateboard server."""

    def __init__(self, base_url: str, token: str, *, timeout: float = 10.0, retries: int = 3,
                 backoff: float = 0.2, transport: httpx.BaseTransport | None = None):
        self.base_url = base_url.rstrip("/")
        self.timeout, self.retries, self.backoff = timeout, retries, backoff
        self.http = httpx.Client(base_url=self.base_url, timeout=timeout, transport=transport,
                                 headers={"Authorization": f"Token {token}", "Accept": "application/json"})
        self._workflows: dict[str, dict] = {}

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.http.close()

    # ------------------------------------------------------------ transport

    def request(self, method: str, path: str, *, json: Any = None, params: Mapping[str, Any] | None = None,
                idempotent: bool = True, timeout: float | None = None,
                headers: Mapping[str, str] | None = None) -> httpx.Response:
        """Send one request with retries; answers a 2xx response or raises ``StateboardError``."""
        url = path if path.startswith("http") else f"{API}{path}"
        last: Exception | None = None
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(min(self.backoff * 2 ** (attempt - 1), 5.0))
            try:
                response = self.http.request(method, url, json=json, params=params, headers=headers,
                                             timeout=timeout or self.timeout)
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                last = exc  # never reached the server: safe to resend anything
                continue
            except httpx.TransportError as exc:
                last = exc  # the answer was lost; the request may have been applied
                if idempotent:
                    continue
                break
            if response.status_code in RETRY_STATUSES and idempotent and attempt < self.retries:
                continue
            if response.status_code >= 400:
                raise _error(response)
            return response
        raise StateboardUnavailable(0, "unreachable", f"{method} {url}: {last!r}") from last

    def get(self, path: str, **params: Any) -> Any:
        """GET a JSON body (``None`` values are left out of the query)."""
        return self.request("GET", path, params={k: v for k, v in params.items() if v is not None}).json()

    def post(self, path: str, body: Any = None, *, idempotent: bool = True, timeout: float | None = None) -> Any:
        response = self.request("POST", path, json=body if body is not None else {}, idempotent=idempotent,
                                timeout=timeout)
        return response.json() if response.content else None

    def get_all(self, path: str, **params: Any) -> list[dict]:
        """Every item of a paginated list (``{results, next}``), following ``next``."""
        page = self.get(path, **params)
        items = list(page.get("results", []))
        while page.get("next"):
            page = self.request("GET", page["next"]).json()
            items.extend(page.get("results", []))
        return items

    # ------------------------------------------------------------ runs

    def trigger(self, workflow: str, inputs: Mapping[str, Any], intent: str | None = None,
                trigger_key: str | None = None, env_fingerprint: str | None = None, staged: bool = False,
                attributes: Mapping[str, Any] | None = None, traceparent: str | None = None) -> Run:
        """Trigger a run (201 new; 200 ``run.duplicate`` for a trigger key seen before); ``attributes`` label
        it (SPEC §15).

        Without a ``trigger_key`` the client makes one, so a retried trigger is still one run. The run's trace
        (SPEC §16) continues ``traceparent`` (a W3C header value) when given, else the caller's current
        OpenTelemetry span when there is one (and ``opentelemetry-api`` is installed).
        """
        own_key = trigger_key is None
        body: dict[str, Any] = {"workflow": workflow, "inputs": dict(inputs),
                                "trigger_key": trigger_key or f"api:{uuid.uuid4()}"}
        if intent is not None:
            body["intent"] = intent
        if env_fingerprint is not None:
            body["env_fingerprint"] = env_fingerprint
        if staged:
            body["staged"] = True
        if attributes:
            body["attributes"] = dict(attributes)
        traceparent = traceparent or current_traceparent()
        response = self.request("POST", "/runs/", json=body,
                                headers={"traceparent": traceparent} if traceparent else None)
        run = Run.from_body(self, response.json())
        # A duplicate of our own generated key is our retried request, not somebody else's run.
        run.duplicate = response.status_code == 200 and not own_key
        return run

    def lease(self, workflows: Iterable[str] | None = None, wait_seconds: int = 0) -> Run | None:
        """Lease the earliest queued run (SPEC §9.1); ``None`` when none came within ``wait_seconds``."""
        body: dict[str, Any] = {"wait_seconds": wait_seconds}
        if workflows is not None:
            body["workflows"] = list(workflows)
        # Resent after a lost answer: the run it may have leased meanwhile only waits for its lease to run out.
        response = self.request("POST", "/runs/lease/", json=body,
                                timeout=self.timeout + wait_seconds)
        if response.status_code == 204 or not response.content:
            return None
        return Run.from_body(self, response.json())

    def run(self, id: str) -> Run:
        return Run.from_body(self, self.get(api_path("runs", run_id_of(id))))

    def runs(self, **filters: Any) -> list[dict]:
        return self.get_all("/runs/", **filters)

    def workflow(self, slug: str, *, fresh: bool = False) -> dict:
        """The workflow definition, fetched once and cached."""
        if fresh or slug not in self._workflows:
            self._workflows[slug] = self.get(api_path("workflows", slug))
        return self._workflows[slug]

    def effects(self, **filters: Any) -> list[dict]:
        return self.get_all("/effects/", **filters)

    # ------------------------------------------------------------ knowledge, goals, notifications

    def propose_claim(self, **fields: Any) -> dict:
        """Propose a claim through the write gate (201 ``active`` or ``pending``; 422 with ``reasons``)."""
        return self.post("/claims/", fields, idempotent=False)

    def claims(self, **filters: Any) -> list[dict]:
        """Current claims (``system``, ``task``, ``key``, ``use_as``): facts and leads."""
        return self.get_all("/claims/", **filters)

    def goal(self, workflow: str, intent: str, objective: str | None = None, constraints: Iterable[str] = (),
             acceptance: Iterable[str] = (), change: str = "amend") -> dict:
        """A new goal version for an intent (SPEC §10.1)."""
        body: dict[str, Any] = {"intent": intent, "constraints": list(constraints),
                                "acceptance": list(acceptance), "change": change}
        if objective is not None:
            body["objective"] = objective
        return self.post(api_path("workflows", workflow, "goals"), body, idempotent=False)

    def notifications(self, unread: bool = False) -> list[dict]:
        """The caller's notifications, newest first."""
        return self.get_all("/notifications/", unread=1 if unread else None)


def _error(response: httpx.Response) -> StateboardError:
    try:
        body = response.json()
    except ValueError:
        body = response.text
    if isinstance(body, dict):
        return StateboardError(response.status_code, str(body.get("code") or "error"),
                               str(body.get("detail") or ""), body)
    return StateboardError(response.status_code, f"http_{response.status_code}", str(body)[:200], body)


def _new_event_id() -> str:
    return str(uuid.uuid4())


@dataclass
class Run:
    """A run as the server last described it; ``raw`` is that whole body."""

    client: Client = field(repr=False)
    id: str
    state: str
    decision: dict
    staged: bool
    workflow: str
    intent: str
    current_stage: str
    lease: dict | None
    raw: dict = field(repr=False)
    duplicate: bool = False

    @classmethod
    def from_body(cls, client: Client, body: dict) -> Run:
        run = cls(client=client, id=run_id_of(body["id"]), state="", decision={}, staged=False, workflow="",
                  intent="", current_stage="", lease=None, raw={})
        run._load(body)
        return run

    def _load(self, body: dict) -> None:
        self.raw = body
        self.state = body.get("state", "")
        self.decision = body.get("decision") or {}
        self.staged = bool(body.get("staged", False))
        self.workflow = body.get("workflow", "")
        self.intent = body.get("intent", "")
        self.current_stage = body.get("current_stage") or ""
        self.lease = body.get("lease")

    @property
    def usage(self) -> dict:
        """The run's totals as last read (SPEC §16): ``{input_tokens, output_tokens, cost_usd}``, the cost a Decimal."""
        usage = dict(self.raw.get("usage") or {"input_tokens": 0, "output_tokens": 0, "cost_usd": "0"})
        return {**usage, "cost_usd": Decimal(str(usage.get("cost_usd", "0")))}

    @property
    def outcome(self) -> str:
        """The decision's outcome: fresh, resume, verify_only, noop or escalated."""
        return self.decision.get("outcome", "")

    @property
    def stages(self) -> list[str]:
        return list(self.client.workflow(self.workflow)["stages"])

    def is_effect_stage(self, stage: str) -> bool:
        return stage in self.client.workflow(self.workflow).get("effect_stages", ())

    def stages_from(self, stage: str | None = None) -> list[str]:
        """The workflow's stages from ``stage`` (default ``decision["resume_from"]``) on; none without one."""
        start = stage or self.decision.get("resume_from")
        stages = self.stages
        return stages[stages.index(start):] if start else []

    def refresh(self) -> Run:
        self._load(self.client.get(api_path("runs", self.id)))
        return self

    # ------------------------------------------------------------ events

    def _lease_fields(self) -> dict:
        lease_id = (self.lease or {}).get("id")
        return {"lease_id": lease_id} if lease_id else {}

    def _event_body(self, stage: str, kind: str, fields: Mapping[str, Any]) -> dict:
        body = {"client_event_id": _new_event_id(), **self._lease_fields(), "stage": stage, "kind": kind}
        body.update({k: v for k, v in fields.items() if v is not None})
        if isinstance(body.get("usage"), Mapping):  # SPEC §16: a Decimal cost goes as its decimal string
            body["usage"] = {k: str(v) if isinstance(v, Decimal) else v for k, v in body["usage"].items()}
        return body

    def event(self, stage: str, kind: str, **fields: Any) -> dict:
        """Append one event (its own ``client_event_id``; a resend after a lost answer reuses it)."""
        return self.client.post(api_path("runs", self.id, "events"), self._event_body(stage, kind, fields))

    def events(self, items: Iterable[Mapping[str, Any]]) -> list[dict]:
        """Append events in order, as one batch when the server takes arrays, else one by one."""
        bodies = []
        for item in items:
            fields = dict(item)
            bodies.append(self._event_body(fields.pop("stage"), fields.pop("kind"), fields))
        if not bodies:
            return []
        try:
            return self.client.post(api_path("runs", self.id, "events"), bodies)
        except StateboardError as exc:
            shape = (exc.status in (400, 422) and exc.code in BODY_SHAPE_CODES
                     and not (isinstance(exc.body, dict) and "index" in exc.body))
            if not shape:
                raise
        return [self.client.post(api_path("runs", self.id, "events"), body) for body in bodies]

    def stage(self, name: str, **started_fields: Any) -> StageHandle:
        """Context manager: ``started``, then ``succeeded``; ``failed``/``unknown`` on an exception."""
        return StageHandle(self, name, started_fields)

    def verify(self, stage: str, evidence: list[dict], effect: dict | None = None, **fields: Any) -> dict:
        """Post ``verified`` with evidence (each item needs ``uri`` and ``observed_at``)."""
        return self.event(stage, "verified", evidence=evidence, effect=effect, **fields)

    def effects_to_verify(self) -> list[dict]:
        """The effects ``decision["verify_effects"]`` lists, each with its ``stage``."""
        found = []
        for item in self.decision.get("verify_effects") or ():
            if isinstance(item, dict):
                found.append(item)
                continue
            effects = self.client.effects(idempotency_key=item)
            found.append(effects[0] if effects else {"idempotency_key": item, "stage": None})
        return found

    # ------------------------------------------------------------ other run actions

    def resume_packet(self, budget_tokens: int = 2000) -> dict:
        return self.client.get(api_path("runs", self.id, "resume-packet"), budget_tokens=budget_tokens)

    def checkpoint(self, **payload: Any) -> dict:
        """Save a richer checkpoint (whitelisted payload, at most 64 KiB)."""
        return self.client.post(api_path("runs", self.id, "checkpoints"), payload)  # saved twice is harmless

    def request_approval(self, stage: str, action: Mapping[str, Any], kind: str = "high_impact") -> dict:
        """Ask an editor for a permit; the run waits in ``awaiting_approval``."""
        return self.client.post(api_path("runs", self.id, "approvals"),
                                {"kind": kind, "stage": stage, "action": dict(action)})

    def rollback(self, to_stage: str, reason: str, compensate: bool = False) -> Run:
        """Roll the run back to ``to_stage`` (on-call, owner); the run is decided again."""
        self._load(self.client.post(api_path("runs", self.id, "rollback"),
                                    {"to_stage": to_stage, "reason": reason, "compensate": compensate},
                                    idempotent=False))
        return self

    def wait(self, states: str | Iterable[str], timeout: float, interval: float = 0.5) -> Run:
        """Poll until the run's state is one of ``states``; ``TimeoutError`` after ``timeout`` seconds."""
        wanted = {states} if isinstance(states, str) else set(states)
        deadline = time.monotonic() + timeout
        while self.refresh().state not in wanted:
            if time.monotonic() >= deadline:
                raise TimeoutError(f"run {self.id} is {self.state!r}, not {sorted(wanted)} after {timeout}s")
            time.sleep(interval)
        return self


class StageHandle:
    """What ``run.stage(name)`` yields: set ``effect``, ``evidence``, ``data`` and ``usage`` (what the stage spent,
    SPEC §16: ``{input_tokens?, output_tokens?, cost_usd?, model?}``) before it exits."""

    def __init__(self, run: Run, name: str, started_fields: Mapping[str, Any]):
        self.run, self.name = run, name
        self.started_fields = dict(started_fields)
        self.effect: dict | None = None
        self.evidence: list[dict] | None = None
        self.data: dict | None = None
        self.usage: dict | None = None  # sent with the closing event
        self.started: dict | None = None  # the ``started`` event
        self.outcome: dict | None = None  # the closing event
        self.effect_stage = run.is_effect_stage(name) and not run.staged

    def __enter__(self) -> StageHandle:
        self.started = self.run.event(self.name, "started", **self.started_fields)
        return self

    def _close(self, kind: str, **fields: Any) -> dict:
        if self.outcome is not None:
            raise RuntimeError(f"stage {self.name!r} was already reported ({self.outcome.get('kind')})")
        self.outcome = self.run.event(self.name, kind, data=self.data, usage=self.usage, **fields)
        return self.outcome

    def failed(self, reason_code: str, **fields: Any) -> dict:
        """A definite failure (on an effect stage: it did not happen); no ``succeeded`` follows."""
        return self._close("failed", reason_code=reason_code, effect=self.effect, **fields)

    def skip(self, reason_code: str | None = None) -> dict:
        """Post ``skipped`` instead of ``succeeded``."""
        return self._close("skipped", reason_code=reason_code)

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> bool:
        if self.outcome is not None:
            return False
        if exc is None:
            self._close("succeeded", effect=self.effect, evidence=self.evidence)
            return False
        if isinstance(exc, GeneratorExit):
            return False
        # An exception does not prove the effect did not happen: on an effect stage it is ``unknown``.
        kind = "unknown" if self.effect_stage else "failed"
        self.data = {**(self.data or {}), "exception": type(exc).__name__}
        try:
            self._close(kind, reason_code="exception" if kind == "failed" else "outcome_not_observed",
                        effect=self.effect, evidence=self.evidence)
        except (StateboardError, httpx.HTTPError) as report_error:
            exc.add_note(f"stateboard: reporting {kind!r} on {self.name!r} failed: {report_error}")
        return False

