"""The eight tools' work (SPEC §12.1), over ``stateboard.client`` only; no MCP types here.

Each method answers the API's JSON body, or raises ``StateboardError`` (a refusal, or no answer at all)
or ``AnswerLost`` (no answer to a write the caller can resend, naming what to send again).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from stateboard.client import Client, Run, StateboardUnavailable


def _present(fields: Mapping[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in fields.items() if value is not None}


class AnswerLost(Exception):
    """A write whose answer never came; sent again with ``resend`` (e.g. its client_event_id) it is recorded once."""

    def __init__(self, unavailable: StateboardUnavailable, **resend: str):
        super().__init__(unavailable.detail)
        self.detail, self.resend = unavailable.detail, resend


class Tools:
    """One agent's tools; remembers the lease id of each run it triggered or leased."""

    def __init__(self, client: Client):
        self.client = client
        self._held: dict[str, Run] = {}

    def _remember(self, run: Run) -> dict:
        self._held[run.id] = run
        return run.raw

    def _run(self, run_id: str) -> Run:
        """The run as this process holds it (with its lease id), else a bare handle on the id."""
        return self._held.get(run_id) or Run.from_body(self.client, {"id": run_id})

    # ------------------------------------------------------------ runs

    def trigger(self, workflow: str, inputs: dict, intent: str | None = None,
                trigger_key: str | None = None, attributes: dict | None = None) -> dict:
        key = trigger_key or f"mcp:{uuid.uuid4()}"
        try:
            return self._remember(self.client.trigger(workflow, inputs, intent=intent, trigger_key=key,
                                                      attributes=attributes))
        except StateboardUnavailable as exc:
            raise AnswerLost(exc, trigger_key=key) from exc

    def lease(self, workflows: list[str] | None = None, wait_seconds: int = 0) -> dict:
        run = self.client.lease(workflows, wait_seconds=wait_seconds)
        return {"run": None} if run is None else self._remember(run)

    def run(self, run_id: str) -> dict:
        return self.client.run(run_id).raw

    def resume_packet(self, run_id: str, budget_tokens: int = 2000) -> dict:
        return self._run(run_id).resume_packet(budget_tokens=budget_tokens)

    def event(self, run_id: str, stage: str, kind: str, client_event_id: str | None = None,
              **fields: Any) -> dict:
        event_id = client_event_id or str(uuid.uuid4())
        try:
            return self._run(run_id).event(stage, kind, client_event_id=event_id, **_present(fields))
        except StateboardUnavailable as exc:
            raise AnswerLost(exc, client_event_id=event_id) from exc

    def request_approval(self, run_id: str, stage: str, action: dict, kind: str = "high_impact") -> dict:
        return self._run(run_id).request_approval(stage, action, kind=kind)

    def checkpoint(self, run_id: str, **payload: Any) -> dict:
        return self._run(run_id).checkpoint(**_present(payload))

    # ------------------------------------------------------------ knowledge

    def propose_claim(self, **fields: Any) -> dict:
        return self.client.propose_claim(**_present(fields))
