"""API tokens: ``Authorization: Token <key>``; only the SHA-256 of a key is stored."""

import secrets

from django.utils import timezone
from rest_framework import authentication, exceptions

from ledger import sql
from stateboard.canonical import sha256_hex
from stateboard.roles import roles_remember


def token_issue(*, user) -> str:
    """Create a token for ``user`` and return the key; it is shown once and never stored."""
    from ledger.models import ApiToken

    key = secrets.token_urlsafe(32)
    ApiToken.objects.create(user=user, key_hash=sha256_hex(key), prefix=key[:8])
    return key


def token_revoke(*, key: str) -> bool:
    from ledger.models import ApiToken

    return bool(ApiToken.objects.filter(key_hash=sha256_hex(key), revoked_at__isnull=True)
                .update(revoked_at=timezone.now()))


class HashedTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Token"

    def authenticate(self, request):
        from ledger.models import ApiToken

        header = authentication.get_authorization_header(request).split()
        if not header or header[0].lower() not in (b"token", b"bearer"):
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("Malformed Authorization header: use 'Token <key>'.")
        try:
            key = header[1].decode("ascii")
        except UnicodeDecodeError:
            raise exceptions.AuthenticationFailed("Invalid token.")
        key_hash = sha256_hex(key)
        if sql.available():  # token, user and roles in one statement (every API call)
            found = sql.token_user_read(key_hash)
            revoked_at, user, group_names = found if found else (None, None, [])
        else:
            token = ApiToken.objects.select_related("user").filter(key_hash=key_hash).first()
            revoked_at, user = (token.revoked_at, token.user) if token else (None, None)
            group_names = user.groups.values_list("name", flat=True) if user else []
        if user is None or revoked_at is not None or not user.is_active:
            raise exceptions.AuthenticationFailed("Invalid or revoked token.")
        roles_remember(user, group_names)
        return user, key_hash

    def authenticate_header(self, request):
        return self.keyword
