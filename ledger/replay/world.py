"""What the episodes act on: the product's HTTP API (in-process) and a simulated outside world."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime

from django.conf import settings
from django.utils.dateparse import parse_datetime
from rest_framework.test import APIClient

from ledger.identities import agent_create, operator_create


class EpisodeError(Exception):
    """The product answered something a correct product never answers (the episode stops)."""


def _allowed_host() -> str:
    """A Host header the product accepts (the command runs with the product's settings, not the tests')."""
    for host in settings.ALLOWED_HOSTS:
        if host == "*":
            return "localhost"
        if "*" not in host:
            return host.lstrip(".")
    return "localhost"


class Api:
    """The REST API in-process (Django's test client against the real database), one client per identity."""

    def __init__(self, *, prefix: str):
        host = _allowed_host()
        agent, agent_token = agent_create(name=f"{prefix}-agent")
        self.owner_user, owner_token = operator_create(name=f"{prefix}-owner", role="owner", with_token=True)
        _, oncall_token = operator_create(name=f"{prefix}-oncall", role="oncall", with_token=True)
        self.clients = {}
        for who, token in (("agent", agent_token), ("owner", owner_token), ("oncall", oncall_token)):
            client = APIClient(HTTP_HOST=host)
            client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
            self.clients[who] = client
        self.requests = 0

    def call(self, who: str, method: str, path: str, body=None, *, expect=(200, 201)) -> tuple[int, dict]:
        self.requests += 1
        client = self.clients[who]
        if method == "GET":
            response = client.get(path, body or {})
        else:
            response = getattr(client, method.lower())(path, body, format="json")
        payload = response.json() if response.content else {}
        if response.status_code not in expect:
            raise EpisodeError(f"{method} {path} answered {response.status_code} {payload} (expected {expect})")
        return response.status_code, payload


def moment(text: str) -> datetime:
    value = parse_datetime(text.replace("Z", "+00:00"))
    if value is None:
        raise EpisodeError(f"not a date-time: {text!r}")
    return value


@dataclass
class World:
    """The systems the agents change. An effect either lands or not; verification tells the truth."""

    performed: Counter = field(default_factory=Counter)  # idempotency key -> times an agent performed it
    landed: Counter = field(default_factory=Counter)  # idempotency key -> times it happened in the world

    def perform(self, key: str, *, lands: bool = True) -> None:
        """Called only after the product granted the claim (a `started` answered 201)."""
        self.performed[key] += 1
        if lands:
            self.landed[key] += 1

    def holds(self, key: str) -> bool:
        return self.landed[key] > 0

    def duplicates(self) -> list[str]:
        """Keys whose effect happened more than once: the side effects that ran twice."""
        return sorted(key for key, n in self.landed.items() if n > 1)
