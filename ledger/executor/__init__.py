"""Handlers that perform an effect stage for Stateboard (SPEC §5.2); they never see the database.

A handler is a small class built from the stage's ``config``: ``execute(action, key, context)`` and
``verify(action, key, reference)`` return an ``Outcome``. Handlers are registered by name in the
``STATEBOARD_EXECUTORS`` setting (name → dotted path).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from datetime import datetime

from django.conf import settings
from django.utils import timezone
from django.utils.module_loading import import_string

from stateboard.redact import redact


class HandlerConfigError(ValueError):
    """The stage's executor configuration cannot work (unknown handler, bad config)."""


@dataclass
class Outcome:
    """``status``: execute → succeeded | failed | unknown; verify → verified | absent | unknown."""

    status: str
    reference: str = ""
    detail: str = ""
    observed_at: datetime = field(default_factory=timezone.now)
    body_digest: str = ""
    excerpt: str = ""

    @classmethod
    def from_answer(cls, status: str, body: bytes, *, reference: str = "", detail: str = "") -> Outcome:
        text = body.decode("utf-8", "replace")
        return cls(status, reference=reference, detail=detail, body_digest="sha256:" + hashlib.sha256(body).hexdigest(),
                   excerpt=redact(text[:200]))


class Handler:
    """Base class: config parsing, the timeout and the secret named by ``config.secret_env``."""

    default_timeout = 10.0

    def __init__(self, config: dict):
        self.config = config
        timeout = config.get("timeout_seconds", self.default_timeout)
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= 3600:
            raise HandlerConfigError("timeout_seconds must be a positive number of seconds.")
        self.timeout_seconds = float(timeout)
        secret_env = config.get("secret_env")
        if secret_env is not None and (not isinstance(secret_env, str) or not secret_env):
            raise HandlerConfigError("secret_env must name an environment variable.")
        self.secret_env = secret_env

    def missing_secrets(self) -> list[str]:
        """Environment variables the config names that are not set (checked before any call)."""
        return [self.secret_env] if self.secret_env and not os.environ.get(self.secret_env) else []

    def secret(self) -> bytes | None:
        return os.environ[self.secret_env].encode() if self.secret_env else None

    def execute(self, action: dict, key: str, context: dict) -> Outcome:
        raise NotImplementedError

    def verify(self, action: dict, key: str, reference: str) -> Outcome:
        raise NotImplementedError


def registry() -> dict[str, str]:
    return dict(getattr(settings, "STATEBOARD_EXECUTORS", {}))


def handler_for(name: str, config: dict) -> Handler:
    path = registry().get(name)
    if path is None:
        raise HandlerConfigError(f"no executor handler named {name!r} (STATEBOARD_EXECUTORS).")
    try:
        cls = import_string(path)
    except ImportError as exc:
        raise HandlerConfigError(f"handler {name!r} cannot be loaded: {exc}")
    return cls(config)
