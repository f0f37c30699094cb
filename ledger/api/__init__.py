"""The agent-facing REST API (docs/api.md), one module per resource. Every view is a ``PolicyApi``
(``stateboard.policy``): it declares its policy once and the one pipeline enforces it. Views are thin:
validate, call one service, render the one output shape (``ledger.api.shapes``)."""
