"""Runnable examples, each ``python -m stateboard.examples.NAME`` against a running server (``manage.py up``).

Configured by ``STATEBOARD_URL`` (default ``http://127.0.0.1:8000``) and ``STATEBOARD_TOKEN`` (an agent token,
``manage.py create_agent NAME``). The first run of an example creates its workflow when
``STATEBOARD_OWNER_TOKEN`` holds an owner's token (``manage.py create_operator NAME --role owner --token``).

- ``hello``: trigger, stages, an effect, verify; run it again and the decision is ``noop``.
- ``scheduled``: an agent that long-polls ``lease`` for its workflow's scheduled runs and serves them.
- ``approval``: a deploy that needs an editor's approval and is performed by Stateboard's executor.
- ``mcp_config``: the JSON block that registers ``python -m stateboard.mcp`` with an MCP client.
"""
