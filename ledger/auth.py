"""API tokens: ``Authorization: Token <key>`` (or ``Bearer``); only the SHA-256 of a key is stored.

Every request reads its token, user and groups afresh (``store().token_read``), so a revoked token, a
deactivated user or a changed role is seen by the next request. The same read carries when the token was
last used; it is written again only when older than ``LAST_USED_PRECISION`` (at most one small UPDATE per
token a minute, none on the other requests: the fleet's "last request", SPEC §15).
"""

import datetime
import secrets

from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from rest_framework import authentication, exceptions

from ledger.models import ApiToken
from ledger.services import audit_record
from ledger.store import store
from stateboard.canonical import sha256_hex
from stateboard.roles import roles_remember


def token_issue(*, user) -> str:
    """Create a token for ``user`` and return the key; it is shown once and never stored."""
    key = secrets.token_urlsafe(32)
    ApiToken.objects.create(user=user, key_hash=sha256_hex(key), prefix=key[:8])
    return key


LAST_USED_PRECISION = datetime.timedelta(seconds=60)


def token_revoke(*, key_hash: str, user=None, reason: str = "") -> bool:
    """Revoke the active token whose key hashes to ``key_hash``; audited (``token_revoke``, with ``reason``) as
    done by ``user`` (None: the system, e.g. the ``revoke_token`` command). False: no such active token."""
    with transaction.atomic():
        token = ApiToken.objects.filter(key_hash=key_hash, revoked_at__isnull=True).select_related("user").first()
        if token is None or not ApiToken.objects.filter(id=token.id, revoked_at__isnull=True).update(
                revoked_at=timezone.now()):
            return False
        audit_record(user=user, action="token_revoke", outcome="done",
                     target=f"{token.user.get_username()}:{token.prefix}"[:200], reason=reason[:1000])
    return True


def token_used(token: ApiToken, now: datetime.datetime | None = None) -> None:
    """Record that ``token`` authenticated a request now, when what the token's read carried is older than
    ``LAST_USED_PRECISION`` (else nothing is sent). The UPDATE is guarded by the same age, so agents' requests
    racing past a stale value write it once."""
    now = now or timezone.now()
    if token.last_used_at is not None and now - token.last_used_at < LAST_USED_PRECISION:
        return
    stale = now - LAST_USED_PRECISION
    ApiToken.objects.filter(Q(last_used_at__isnull=True) | Q(last_used_at__lte=stale), id=token.id).update(
        last_used_at=now)
    token.last_used_at = now


def token_key_hash(header: bytes) -> str | None:
    """The key hash of an ``Authorization: Token <key>`` (or ``Bearer``) header; None for another scheme.
    A malformed token header raises AuthenticationFailed."""
    header = header.split()
    if not header or header[0].lower() not in (b"token", b"bearer"):
        return None
    if len(header) != 2:
        raise exceptions.AuthenticationFailed("Malformed Authorization header: use 'Token <key>'.")
    try:
        key = header[1].decode("ascii")
    except UnicodeDecodeError:
        raise exceptions.AuthenticationFailed("Invalid token.")
    return sha256_hex(key)


class HashedTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Token"

    def authenticate(self, request):
        key_hash = token_key_hash(authentication.get_authorization_header(request))
        if key_hash is None:
            return None
        token, group_names = store().token_read(key_hash)
        user = token.user if token else None
        if user is None or token.revoked_at is not None or not user.is_active:
            raise exceptions.AuthenticationFailed("Invalid or revoked token.")
        token_used(token)
        roles_remember(user, group_names)
        return user, key_hash

    def authenticate_header(self, request):
        return self.keyword
