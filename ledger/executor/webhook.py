"""``webhook``: POST the action to ``config.url``; verify with GET ``config.verify_url?idempotency_key=``."""

from __future__ import annotations

import hashlib
import hmac
import json

import httpx

from ledger.executor import Handler, HandlerConfigError, Outcome


class WebhookHandler(Handler):
    def __init__(self, config: dict):
        super().__init__(config)
        for name in ("url", "verify_url"):
            value = config.get(name)
            if (name == "url" or value is not None) and not (
                    isinstance(value, str) and value.startswith(("http://", "https://"))):
                raise HandlerConfigError(f"{name} must be an http(s) URL.")
        self.url = config["url"]
        self.verify_url = config.get("verify_url") or self.url

    def execute(self, action, key, context):
        body = json.dumps({"idempotency_key": key, **context, "action": action},
                          sort_keys=True, separators=(",", ":")).encode()
        headers = {"Content-Type": "application/json", "Idempotency-Key": key}
        secret = self.secret()
        if secret is not None:
            headers["X-Stateboard-Signature"] = "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()
        try:
            response = httpx.post(self.url, content=body, headers=headers, timeout=self.timeout_seconds)
        except httpx.HTTPError as exc:  # timeout, connection lost: the outcome was not observed
            return Outcome("unknown", detail=f"{type(exc).__name__}: {exc}"[:200])
        code = response.status_code
        if 200 <= code < 300:
            return Outcome.from_answer("succeeded", response.content, reference=_reference(response) or key,
                                       detail=f"HTTP {code}")
        if 400 <= code < 500 and code not in (408, 429):
            return Outcome.from_answer("failed", response.content, detail=f"HTTP {code}")
        return Outcome.from_answer("unknown", response.content, detail=f"HTTP {code}")

    def verify(self, action, key, reference):
        try:
            response = httpx.get(self.verify_url, params={"idempotency_key": key}, timeout=self.timeout_seconds)
        except httpx.HTTPError as exc:
            return Outcome("unknown", detail=f"{type(exc).__name__}: {exc}"[:200])
        status = _json(response).get("status")
        if response.status_code == 200 and status == "done":
            return Outcome.from_answer("verified", response.content,
                                       reference=_reference(response) or reference or key, detail="HTTP 200 done")
        if response.status_code == 404 or status == "absent":
            return Outcome.from_answer("absent", response.content, detail=f"HTTP {response.status_code} absent")
        return Outcome.from_answer("unknown", response.content, detail=f"HTTP {response.status_code}")


def _json(response) -> dict:
    try:
        value = response.json()
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _reference(response) -> str:
    ref = _json(response).get("reference")
    return ref[:1000] if isinstance(ref, str) else ""
