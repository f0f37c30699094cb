"""Small builders for tests: users in roles, agents with tokens, workflows, API and page clients."""

import itertools
import re

from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
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


HX = {"HTTP_HX_REQUEST": "true"}  # a page request as htmx sends it

# An asset a page would load from a CDN (a URL naming one), not the letters "cdn" inside a random token.
OUTSIDE_ASSET = re.compile(r"(?:https?:)?//[^\s\"'<>]*(?:cdn|unpkg|jsdelivr|googleapis)", re.IGNORECASE)


def page_client(user) -> Client:
    """A client of the server-rendered pages, logged in as ``user``."""
    client = Client()
    client.force_login(user)
    return client


def login(role: str) -> tuple[Client, object]:
    """A new operator in ``role`` and a page client logged in as them: (client, user)."""
    user, _ = make_operator(role)
    return page_client(user), user


def texts(response) -> str:
    return response.content.decode()


def page_queries(client, url, data=None, **extra) -> int:
    """How many queries one GET of the page at ``url`` runs (it must answer 200)."""
    with CaptureQueriesContext(connection) as ctx:
        assert client.get(url, data, **extra).status_code == 200
    return len(ctx.captured_queries)


def assert_queries_flat(client, url, add_row, rows: int) -> int:
    """The page runs as many queries with one row as with ``rows`` (``add_row(n)`` adds row n);
    returns that count."""
    add_row(0)
    few = page_queries(client, url)
    for n in range(1, rows):
        add_row(n)
    assert page_queries(client, url) == few
    return few
