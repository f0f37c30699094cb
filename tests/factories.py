"""Small builders for tests: users in roles, agents with tokens, workflows, API clients."""

import itertools

from rest_framework.test import APIClient

from ledger.identities import agent_create, operator_create
from ledger.models import Workflow

_counter = itertools.count(1)


def unique(prefix: str) -> str:
    return f"{prefix}-{next(_counter)}"


def make_workflow(**fields) -> Workflow:
    fields.setdefault("slug", unique("wf"))
    fields.setdefault("title", fields["slug"].title())
    return Workflow.objects.create(**fields)


def make_agent(name: str | None = None, owner=None):
    """Returns (agent_user, token)."""
    agent, token = agent_create(name=name or unique("agent"), owner=owner)
    return agent.user, token


def make_operator(role: str, name: str | None = None):
    """Returns (user, token)."""
    return operator_create(name=name or unique(role), role=role, with_token=True)


def client_for(token: str | None) -> APIClient:
    client = APIClient()
    if token:
        client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return client
