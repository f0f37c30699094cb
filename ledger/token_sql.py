"""The API token's statements on the append path (``ledger.auth``): the cached token confirmed in the
run's locking read (``ledger.sql.run_lock_read``), or read on its own."""

from __future__ import annotations

import contextvars
import functools
from dataclasses import dataclass

from django.db import connection

from ledger import rows
from ledger.sql import _cursor, _execute, _quote


@dataclass
class TokenConfirmation:
    """An API token served from the per-process cache (``ledger.auth``), still to be confirmed by the
    request's locking read: its roles (group names) when cached, and whether a statement confirmed it."""

    key_hash: str
    group_names: frozenset
    confirmed: bool = False


class TokenChanged(Exception):
    """The cached token was revoked, its user deactivated or its roles changed since it was cached."""


token_to_confirm: contextvars.ContextVar[TokenConfirmation | None] = contextvars.ContextVar(
    "token_to_confirm", default=None)


def _user_groups_array(User) -> str:
    """The group names of user ``u`` as an array expression (the roles, ``stateboard.roles``)."""
    groups = _quote(User.groups.through._meta.db_table)
    return f"ARRAY(SELECT g.name FROM {groups} ug JOIN auth_group g ON g.id = ug.group_id WHERE ug.user_id = u.id)"


def token_groups_column() -> str:
    """The token's current group names, NULL when it is revoked, unknown or its user inactive."""
    from django.contrib.auth import get_user_model

    User = get_user_model()
    return (f"(SELECT {_user_groups_array(User)} FROM ledger_apitoken t JOIN {_quote(User._meta.db_table)} u "
            f"ON u.id = t.user_id WHERE t.key_hash = %s AND t.revoked_at IS NULL AND u.is_active)")


def token_confirm(pending: TokenConfirmation, group_names) -> None:
    """Compare what a statement read of the token with what was cached; raise TokenChanged if it differs."""
    if group_names is None or frozenset(group_names) != pending.group_names:
        raise TokenChanged()
    pending.confirmed = True


def token_groups_statement(pending: TokenConfirmation) -> tuple[str, list]:
    """The statement reading the token's current group names: sent with a request's first read."""
    return _token_groups_select(connection.vendor), [pending.key_hash]


@functools.cache
def _token_groups_select(vendor: str) -> str:
    return f"SELECT {token_groups_column()}"


def token_groups_read(key_hash: str):
    """The token's current group names (None if revoked), on its own (a refusal raised before any lock)."""
    with _cursor(write_path=False) as cursor:
        cursor.execute(_token_groups_select(connection.vendor), [key_hash])
        return cursor.fetchone()[0]


@functools.cache
def _token_statement(vendor: str):
    from django.contrib.auth import get_user_model

    User = get_user_model()
    user_fields = list(User._meta.concrete_fields)
    sql = (f"SELECT t.revoked_at, {', '.join('u.' + _quote(f.column) for f in user_fields)}, "
           f"{_user_groups_array(User)} "
           f"FROM ledger_apitoken t JOIN {_quote(User._meta.db_table)} u ON u.id = t.user_id WHERE t.key_hash = %s")
    return sql, User, rows.Columns(User, user_fields)


def token_user_read(key_hash: str):
    """(revoked_at, user, group names) for a token hash in one statement (PostgreSQL), or None."""
    sql, User, user_columns = _token_statement(connection.vendor)
    with _cursor(write_path=False) as cursor:
        _execute(cursor, sql, [key_hash])
        row = cursor.fetchone()
    if row is None:
        return None
    return row[0], rows.from_row(User, user_columns, row[1:-1]), row[-1]
