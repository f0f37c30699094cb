"""mcp_config: print the JSON block that registers ``python -m stateboard.mcp`` with an MCP client.

    python -m stateboard.examples.mcp_config > .mcp.json    # Claude Code, in your project

Claude Desktop: merge the block into claude_desktop_config.json. Filled from STATEBOARD_URL and
STATEBOARD_TOKEN (an agent token), with this Python, so the client starts the server as you would.
"""

import json
import os
import sys

from stateboard.examples.common import URL


def config() -> dict:
    token = os.environ.get("STATEBOARD_TOKEN") or "<an agent token: manage.py create_agent NAME | tail -n1>"
    return {"mcpServers": {"stateboard": {"command": sys.executable, "args": ["-m", "stateboard.mcp"],
                                          "env": {"STATEBOARD_URL": URL, "STATEBOARD_TOKEN": token}}}}


if __name__ == "__main__":
    print(json.dumps(config(), indent=2))
