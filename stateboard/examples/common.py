"""What every example needs: a client from the environment, its workflow, evidence of an observation."""

from __future__ import annotations

import os
import sys
from datetime import datetime, timezone

from stateboard.client import Client, StateboardError

URL = os.environ.get("STATEBOARD_URL") or "http://127.0.0.1:8000"


def connect() -> Client:
    """The agent's client, from STATEBOARD_URL and STATEBOARD_TOKEN."""
    token = os.environ.get("STATEBOARD_TOKEN")
    if not token:
        sys.exit("Set STATEBOARD_TOKEN to an agent token: manage.py create_agent my-agent | tail -n1")
    return Client(URL, token)


def ensure_workflow(sb: Client, definition: dict) -> None:
    """Create the example's workflow on its first run, with the owner token in STATEBOARD_OWNER_TOKEN."""
    try:
        sb.workflow(definition["slug"])
        return
    except StateboardError as exc:
        if exc.status != 404:
            raise
    owner_token = os.environ.get("STATEBOARD_OWNER_TOKEN")
    if not owner_token:
        sys.exit(f"The workflow {definition['slug']!r} does not exist yet. Set STATEBOARD_OWNER_TOKEN to an owner's "
                 f"token (manage.py create_operator alice --role owner --token | tail -n1) and it is created.")
    with Client(URL, owner_token) as owner:
        owner.post("/workflows/", definition)
    print(f"created workflow {definition['slug']!r}: {URL}/workflows/{definition['slug']}/")


def evidence(uri: str) -> list[dict]:
    """What an agent saw when it looked at the world: where, and when."""
    return [{"uri": uri, "observed_at": datetime.now(timezone.utc).isoformat()}]
