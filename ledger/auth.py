"""API tokens: ``Authorization: Token <key>``; only the SHA-256 of a key is stored.

On the agent's path (the methods a view lists in ``token_cached``: the append, the trigger) a token read
once is kept in a small per-process cache, and the request's first read confirms it in the same round
trip (``sql.run_lock_read``, ``sql.reads``): a revoked token, a deactivated
user or changed roles are seen there, before anything is written, and the request is authenticated
afresh (401 / 403, or on with the new roles).
"""

import secrets
import threading
import time

from django.utils import timezone
from rest_framework import authentication, exceptions

from ledger import sql, token_sql
from stateboard.canonical import sha256_hex
from stateboard.roles import roles_remember

TOKEN_CACHE_SECONDS = 60.0
TOKEN_CACHE_SIZE = 4096
_cache: dict[str, tuple[float, object, frozenset]] = {}  # key hash -> (cached at, user, group names)
_cache_lock = threading.Lock()


def _cache_get(key_hash: str):
    entry = _cache.get(key_hash)
    if entry is None or time.monotonic() - entry[0] > TOKEN_CACHE_SECONDS:
        return None
    return _model_copy(entry[1]), entry[2]  # each request its own user object


def _model_copy(instance):
    """What ``copy.copy`` gives for a model instance (its ``__getstate__``: the fields and a copy of its
    ``_state``), without the pickling protocol's detour through the app registry and version checks."""
    clone = object.__new__(type(instance))
    state = instance.__getstate__()
    for attr, value in state.pop("_memoryview_attrs", ()):
        state[attr] = memoryview(value)
    clone.__dict__.update(state)
    return clone


def _cache_put(key_hash: str, user, group_names) -> None:
    with _cache_lock:
        if len(_cache) >= TOKEN_CACHE_SIZE:
            _cache.clear()
        _cache[key_hash] = (time.monotonic(), _model_copy(user), frozenset(group_names))


def token_forget(key_hash: str) -> None:
    with _cache_lock:
        _cache.pop(key_hash, None)


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


def token_cached_user(key_hash: str):
    """(user with its roles, the confirmation its request's first locking read owes) for a token in the
    per-process cache, or None."""
    cached = _cache_get(key_hash)
    if cached is None:
        return None
    user, group_names = cached
    roles_remember(user, group_names)
    return user, token_sql.TokenConfirmation(key_hash, group_names)


class HashedTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Token"

    def authenticate(self, request):
        from ledger.models import ApiToken

        key_hash = token_key_hash(authentication.get_authorization_header(request))
        if key_hash is None:
            return None
        view = (getattr(request, "parser_context", None) or {}).get("view")
        cacheable = sql.available() and request.method in getattr(view, "token_cached", ())
        cached = token_cached_user(key_hash) if cacheable else None
        if cached is not None:
            user, request._token_to_confirm = cached
            return user, key_hash
        if sql.available():  # token, user and roles in one statement (every API call)
            found = token_sql.token_user_read(key_hash)
            revoked_at, user, group_names = found if found else (None, None, [])
        else:
            token = ApiToken.objects.select_related("user").filter(key_hash=key_hash).first()
            revoked_at, user = (token.revoked_at, token.user) if token else (None, None)
            group_names = user.groups.values_list("name", flat=True) if user else []
        if user is None or revoked_at is not None or not user.is_active:
            raise exceptions.AuthenticationFailed("Invalid or revoked token.")
        roles_remember(user, group_names)
        if cacheable and not user.is_superuser:  # a superuser's roles do not come from groups alone
            _cache_put(key_hash, user, group_names)
        return user, key_hash

    def authenticate_header(self, request):
        return self.keyword


def token_confirmed(view, request, call):
    """``call()`` with the request's cached token confirmed by its first locking read. If the token
    changed since it was cached, the request is authenticated and permitted afresh and ``call()`` runs
    once more (nothing was written the first time)."""
    pending = getattr(request, "_token_to_confirm", None)
    if pending is None:
        return call()
    request._token_to_confirm = None
    try:
        return confirming(pending, call)
    except token_sql.TokenChanged:
        pass
    token_forget(pending.key_hash)
    request._authenticate()  # afresh: 401 if revoked
    view.check_permissions(request)  # 403 if the role went
    return call()


def confirming(pending: token_sql.TokenConfirmation, call):
    """``call()`` while ``pending`` waits for the locking read that confirms it. A refusal raised before
    any statement confirmed the token is answered only once a read of its own confirmed it; a changed
    token raises TokenChanged, always before anything was written."""
    reset = token_sql.token_to_confirm.set(pending)
    try:
        try:
            result = call()
        except token_sql.TokenChanged:
            raise
        except Exception:  # a refusal (or a body that does not parse) before the lock read
            if not pending.confirmed:
                token_sql.token_confirm(pending, token_sql.token_groups_read(pending.key_hash))
            raise
        if not pending.confirmed:  # every call made here reads first (the run, the trigger key, the workflow)
            raise RuntimeError("a token served from the cache was never confirmed")
        return result
    finally:
        token_sql.token_to_confirm.reset(reset)
