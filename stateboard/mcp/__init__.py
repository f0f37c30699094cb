"""``python -m stateboard.mcp``: Stateboard's agent tools over the Model Context Protocol (SPEC §12.1)."""
