"""`manage.py demo`: a simulated agent fleet driving the running server over HTTP.

- ``setup``: the demo's identities, workflows and claims, created in-process (idempotent);
- ``agent``: what one agent does with ``stateboard.client`` (no Django: it runs in its own process);
- ``scenarios``: the field's faults, one function each, and the faults each one promises;
- ``fleet``: the agent processes, the rounds, the summary and the end-of-pass check.

This package imports nothing from Django at import time, so agent processes stay plain HTTP clients.
"""

DEMO_PASSWORD = "stateboard-demo"
OPERATORS = ("editor", "owner", "oncall", "viewer")
WORKFLOWS = ("research-publish", "ci-triage", "security-triage")
