"""The export's key and signature: HMAC-SHA256 over the exact bytes of every line before the last."""

from __future__ import annotations

import hashlib
import hmac
import os

from django.conf import settings

EMBEDDED_SECRET_KEY = "django-insecure-stateboard-embedded-demo-key"  # stateboard/settings.py's default
DERIVATION_MESSAGE = b"stateboard/export/v1"


def _derived(secret: str) -> bytes:
    return hmac.new(secret.encode("utf-8"), DERIVATION_MESSAGE, hashlib.sha256).digest()


def signing_key() -> bytes | None:
    """``STATEBOARD_EXPORT_KEY``, else a key derived from ``SECRET_KEY``; None with the embedded default key."""
    explicit = os.environ.get("STATEBOARD_EXPORT_KEY")
    if explicit:
        return explicit.encode("utf-8")
    if settings.SECRET_KEY == EMBEDDED_SECRET_KEY:
        return None
    return _derived(settings.SECRET_KEY)


def verifying_keys() -> list[bytes]:
    """Every key a signature may have been made with: the signing key and those of ``SECRET_KEY_FALLBACKS``."""
    keys = [key for key in (signing_key(),) if key is not None]
    keys += [_derived(secret) for secret in getattr(settings, "SECRET_KEY_FALLBACKS", [])]
    return keys


def hmac_new(key: bytes):
    return hmac.new(key, b"", hashlib.sha256)


def signature(key: bytes, body: bytes) -> str:
    return hmac.new(key, body, hashlib.sha256).hexdigest()


def verifies(body: bytes, claimed: str) -> bool:
    return any(hmac.compare_digest(signature(key, body), claimed) for key in verifying_keys())
