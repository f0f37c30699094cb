"""Secrets in evidence and data are redacted: the one function pages, the inbox and the admin call
to show them, and the executor calls on the excerpts it records (the ledger keeps those forever).

Patterns (SPEC §6, §11.4), one regular expression each, shaped after detect-secrets' plugins: AWS access
keys and secret keys (named, and a bare 40-character one: mixed case, never a lowercase-hex git SHA), PEM
private key blocks, ``Authorization`` credentials (bearer, token, basic), ``password=`` pairs, JSON values
of secret-looking keys, the values of secret-looking query keys (``token=``, ``secret=``, ``api_key=``,
``sig=``, …), URI userinfo passwords, Slack webhooks, JWTs, GitHub, Slack, Google, Stripe and ``sk-`` API
keys. What agents wrote is kept as written and redacted only when shown.
"""

from __future__ import annotations

import json
import re

MASK = "[redacted]"
_SECRET_WORD = r"(?:secret|token|api_?key|signature|sig|secret_access_key)"
_SECRET_KEY = (r"[a-z0-9_.-]*(?:password|passwd|pwd|secret|token|api_?key|access_?key|private_?key|signature"
               r"|credentials?)")
_AWS_SECRET = re.compile(r"(?<![A-Za-z0-9/+])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])")


def _aws_secret(match: re.Match) -> str:
    """A bare 40-character run is an AWS secret key when it mixes cases and digits, like one (a git SHA is
    lowercase hex; a path of words has many slashes)."""
    text = match.group()
    looks_random = (any(c.islower() for c in text) and any(c.isupper() for c in text)
                    and any(c.isdigit() for c in text) and text.count("/") + text.count("+") <= 4)
    return MASK if looks_random else text


# (words one of which the lowercased text must hold for the pattern to be tried, pattern, replacement):
# a pass is skipped when its words are absent, so ordinary text costs a few substring searches.
_PATTERNS = [
    # A private key block, BEGIN to END (or to the end of the text when cut short).
    (("private key-----",),
     re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\Z)", re.S),
     "-----BEGIN PRIVATE KEY----- " + MASK + " -----END PRIVATE KEY-----"),
    (("akia", "asia"), re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), "AKIA" + MASK),
    # Credentials after a scheme: an Authorization header's (Token, Basic, …), a bearer token anywhere.
    (("authorization",),
     re.compile(r"(?i)\b(authorization[\"']?\s*[:=]\s*[\"']?(?:[a-z-]+\s+)?)(?!\[redacted\])[^\s\"',;]+"),
     r"\1" + MASK),
    (("bearer",), re.compile(r"(?i)\b(bearer)\s+[A-Za-z0-9\-._~+/]+=*"), r"\1 " + MASK),
    (("passw", "pwd"), re.compile(r"(?i)\b(password|passwd|pwd)(\s*[=:]\s*)(\"[^\"]*\"|'[^']*'|[^\s&;,\"']+)"),
     r"\1\2" + MASK),
    # A JSON (or Python) string value of a secret-looking key: "password": "…", "api_token": "…".
    (("pass", "pwd", "secret", "token", "key", "signature", "credential"),
     re.compile(r"(?i)([\"'])(" + _SECRET_KEY + r")\1(\s*:\s*)([\"'])(?:\\.|(?!\4).)+\4"),
     r"\1\2\1\3\4" + MASK + r"\4"),
    (("secret", "token", "key", "sig"), re.compile(r"(?i)\b((?:[a-z0-9]+_)*" + _SECRET_WORD + r")(\s*=\s*)[^\s&\"'#]+"),
     r"\1\2" + MASK),
    # The password of a URI's userinfo (https://user:pw@host, postgres://app:pw@db).
    (("@",), re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^\s/:@\[\]]+:)[^\s/@]+@"), r"\1" + MASK + "@"),
    (("hooks.slack.com",),
     re.compile(r"(?i)\b(https://hooks\.slack\.com/(?:services|workflows|triggers)/)[A-Za-z0-9_/+-]+"), r"\1" + MASK),
    # Tokens with a known shape (SPEC §11.4): GitHub, Slack, Google, Stripe, OpenAI-style API keys, JWTs.
    (("_",), re.compile(r"\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{20,}\b"), "ghp_" + MASK),
    (("github_pat_",), re.compile(r"\bgithub_pat_[A-Za-z0-9_]{20,}\b"), "github_pat_" + MASK),
    (("xox",), re.compile(r"\bxox[abpr]-[A-Za-z0-9-]{10,}"), "xox-" + MASK),
    (("aiza",), re.compile(r"\bAIza[0-9A-Za-z_-]{35}"), "AIza" + MASK),
    (("k_live_", "k_test_"), re.compile(r"\b((?:sk|rk)_(?:live|test)_)[0-9A-Za-z]{10,}"), r"\1" + MASK),
    (("sk-",), re.compile(r"\bsk-[A-Za-z0-9_-]{16,}"), "sk-" + MASK),
    (("eyj",), re.compile(r"\beyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*"), MASK),
    ((), _AWS_SECRET, _aws_secret),
]


def redact(text) -> str:
    """``text`` with every secret pattern replaced by a mask (None becomes "")."""
    if text is None:
        return ""
    out = str(text)
    lowered = out.lower()
    for words, pattern, replacement in _PATTERNS:
        if not words or any(word in lowered for word in words):
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
