"""Canonical JSON and digests: sorted keys, no spaces, UTF-8, everywhere."""

import decimal
import hashlib
import json
import math
from typing import Any


def canonical_json(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str).encode("utf-8")


def sha256_hex(data: bytes | str) -> str:
    if isinstance(data, str):
        data = data.encode("utf-8")
    return hashlib.sha256(data).hexdigest()


def digest(value: Any) -> str:
    """Hex SHA-256 of the canonical JSON of ``value``."""
    return sha256_hex(canonical_json(value))


def jsonb_float(value: float) -> float | int:
    """A number as PostgreSQL's jsonb gives it back, so what is hashed is what is stored.

    jsonb keeps the decimal digits of a number, not a float: ``1e16`` comes back as the integer
    10000000000000000 and ``-0.0`` as ``0.0``. Non-finite numbers have no JSON form and raise ValueError.
    Request bodies are decoded with it as the JSON parser's ``parse_float`` (``stateboard.errors``)."""
    if not math.isfinite(value):
        raise ValueError("NaN and Infinity are not JSON numbers")
    if value == 0:
        return 0.0
    text = repr(value)
    if ("e" in text or "E" in text) and value.is_integer():
        return int(decimal.Decimal(text))
    return value
