"""Secrets in evidence and data are redacted: the one function pages, the inbox and the admin call
to show them, and the executor calls on the excerpts it records (the ledger keeps those forever).

Patterns (SPEC §6, §11.4): AWS access keys, PEM private key blocks, bearer tokens, ``password=`` pairs,
the values of secret-looking query keys (``token=``, ``secret=``, ``api_key=``, ``sig=``, …), GitHub,
Slack and ``sk-`` API keys. What agents wrote is kept as written and
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
    (re.compile(r"(?i)\b((?:[a-z0-9]+_)*(?:secret|token|api_?key|signature|sig))=[^\s&\"'#]+"), r"\1=" + MASK),
    # Tokens with a known shape (SPEC §11.4): GitHub, Slack, OpenAI-style API keys.
    (re.compile(r"\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{20,}\b"), "ghp_" + MASK),
    (re.compile(r"\bgithub_pat_[A-Za-z0-9_]{20,}\b"), "github_pat_" + MASK),
    (re.compile(r"\bxox[abpr]-[A-Za-z0-9-]{10,}"), "xox-" + MASK),
    (re.compile(r"\bsk-[A-Za-z0-9_-]{16,}"), "sk-" + MASK),
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
