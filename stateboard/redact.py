"""Secrets in text that the ledger keeps forever (evidence excerpts) are redacted before storage (SPEC §6)."""

import re

_PATTERNS = [
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(-----END [A-Z ]*PRIVATE KEY-----|$)", re.S),
    re.compile(r"\b(AKIA|ASIA)[0-9A-Z]{16}\b"),
    re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._~+/=-]{8,}"),
    re.compile(r"(?i)\b(password|passwd|secret|token|api_key)=[^\s&\"']+"),
]


def redact(text: str) -> str:
    for pattern in _PATTERNS:
        text = pattern.sub("[redacted]", text)
    return text
