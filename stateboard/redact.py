"""Secrets in evidence and data are redacted: the one function pages, the inbox and the admin call
to show them, and the executor calls on the excerpts it records (the ledger keeps those forever).

Patterns (SPEC §6): AWS access keys, PEM private key blocks, bearer tokens, ``password=`` pairs
(and ``secret=``, ``token=``, ``api_key=`` query pairs). What agents wrote is kept as written and
redacted only when shown.
"""

from __future__ import annotations

import json
import re

MASK = "[redacted]"
_PATTERNS = [
    # A private key block, BEGIN to END (or to the end of the text when cut short).
    (re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\Z)", re.S),
     "-----BEGIN PRIVATE KEY----- " + MASK + " -----END PRIVATE KEY-----"),
    (re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), "AKIA" + MASK),
    (re.compile(r"(?i)\b(bearer)\s+[A-Za-z0-9\-._~+/]+=*"), r"\1 " + MASK),
    (re.compile(r"(?i)\b(password|passwd|pwd)(\s*[=:]\s*)(\"[^\"]*\"|'[^']*'|[^\s&;,\"']+)"), r"\1\2" + MASK),
    (re.compile(r"(?i)\b(secret|token|api_key)=[^\s&\"']+"), r"\1=" + MASK),
]


def redact(text) -> str:
    """``text`` with every secret pattern replaced by a mask (None becomes "")."""
    if text is None:
        return ""
    out = str(text)
    for pattern, replacement in _PATTERNS:
        out = pattern.sub(replacement, out)
    return out


def redact_data(value):
    """A JSON value with every string redacted (keys kept), for data shown as structure."""
    if isinstance(value, dict):
        return {k: redact_data(v) for k, v in value.items()}
    if isinstance(value, list):
        return [redact_data(v) for v in value]
    if isinstance(value, str):
        return redact(value)
    return value


def redact_json(value, *, indent: int | None = 2) -> str:
    """Pretty JSON of a value, redacted (a secret split across keys is still caught by the text pass)."""
    return redact(json.dumps(value, indent=indent, sort_keys=True, default=str))
