"""``python -m stateboard.mcp``: the MCP server over stdio, from STATEBOARD_URL and STATEBOARD_TOKEN."""

import os
import sys

from stateboard.client import Client
from stateboard.mcp.server import build_server


def main() -> None:
    token = os.environ.get("STATEBOARD_TOKEN", "")
    if not token:
        sys.exit("stateboard.mcp: set STATEBOARD_TOKEN to an agent token (manage.py create_agent NAME)")
    with Client(os.environ.get("STATEBOARD_URL") or "http://127.0.0.1:8000", token) as client:
        build_server(client).run("stdio")


if __name__ == "__main__":
    main()
