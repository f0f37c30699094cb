"""A database of its own for support code (``manage.py bench``, ``replay_eval``), beside the configured one.

What it drops it created itself in this run, under a name carrying its marker (``stateboard_bench``): a
database that already exists is refused, never overwritten, and the configured database is never used.
"""

from __future__ import annotations

import contextlib
import copy
import os
import re
import secrets
import tempfile
from pathlib import Path

import psycopg
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connections
from psycopg import sql

NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
# A migrated database to copy instead of creating an empty one (the suite sets it: tests/template_db.py);
# what is copied is migrated all the same.
TEMPLATE_ENV = "STATEBOARD_SCRATCH_TEMPLATE"


class ScratchRefused(CommandError):
    """A scratch database that would not be this run's own."""


def connect_kwargs(dbname: str | None = None) -> dict:
    """psycopg's keywords for database ``dbname`` (by default the configured one) on the configured server."""
    s = connections["default"].settings_dict
    kwargs = {"dbname": dbname or s["NAME"], "user": s.get("USER"), "password": s.get("PASSWORD"),
              "host": s.get("HOST"), "port": s.get("PORT")}
    return {k: str(v) for k, v in kwargs.items() if v not in (None, "")}


def _admin_connect():
    """An autocommit connection to a maintenance database of the configured server."""
    last = None
    for name in ("postgres", "template1", connections["default"].settings_dict["NAME"]):
        try:
            return psycopg.connect(autocommit=True, **connect_kwargs(name))
        except psycopg.OperationalError as exc:
            last = exc
    raise ScratchRefused(f"Cannot reach the PostgreSQL server of DATABASE_URL: {last}")


def _create(admin, name: str) -> None:
    template = os.environ.get(TEMPLATE_ENV)
    if template:
        try:
            admin.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(sql.Identifier(name),
                                                                          sql.Identifier(template)))
            return
        except (psycopg.errors.InvalidCatalogName, psycopg.errors.ObjectInUse):
            pass  # gone, or in use: an empty one, migrated from the start
    admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


@contextlib.contextmanager
def server_database(name: str, *, marker: str, say, keep: bool = False):
    """``CREATE DATABASE name`` on the configured PostgreSQL server, ``DROP`` it after (unless ``keep``).
    Refused when ``name`` lacks ``marker`` as a word, is the configured database, or exists already."""
    if not NAME.fullmatch(name) or marker not in name.split("_"):
        raise ScratchRefused(f"{name!r}: a scratch database's name is lower-case letters, digits and underscores "
                             f"with {marker!r} as a word (e.g. stateboard_{marker}), since it is dropped at the end.")
    if name == connections["default"].settings_dict["NAME"]:
        raise ScratchRefused(f"The scratch database must not be the configured one ({name!r}).")
    with _admin_connect() as admin:
        try:
            _create(admin, name)
        except psycopg.errors.DuplicateDatabase:
            raise ScratchRefused(f"Database {name!r} already exists on the server; a scratch database is one this "
                                 f"run creates, since it is dropped at the end. Pick another name, or drop it "
                                 f"yourself if it is a scratch database left behind: DROP DATABASE {name};") from None
    try:
        yield
    finally:
        if keep:
            say(f"scratch database {name!r} kept; drop it with: DROP DATABASE {name};")
        else:
            with _admin_connect() as admin:
                admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))
            say(f"scratch database {name!r} dropped")


@contextlib.contextmanager
def scratch_connection(marker: str, *, say):
    """Django's default connection, in this thread, on a new migrated database of its own (PostgreSQL: on
    the configured server; SQLite: a file in a temporary folder); dropped after. The configured connection
    is set aside untouched (an open transaction included) and given back."""
    from django.contrib.contenttypes.models import ContentType  # (d) bench's `-m` children import this pre-setup

    original = connections["default"]
    settings = copy.deepcopy(original.settings_dict)
    settings["OPTIONS"].pop("pool", None)  # Django keeps pools per alias: the configured database's
    settings["CONN_MAX_AGE"] = 0
    with contextlib.ExitStack() as stack:
        if original.vendor == "postgresql":
            settings["NAME"] = f"stateboard_{marker}_{secrets.token_hex(4)}"
            stack.enter_context(server_database(settings["NAME"], marker=marker, say=say))
            say(f"scratch database {settings['NAME']!r} created on the server")
        else:
            folder = stack.enter_context(tempfile.TemporaryDirectory(prefix=f"stateboard-{marker}-"))
            settings["NAME"] = str(Path(folder) / f"{marker}.sqlite3")
            say(f"scratch database {settings['NAME']} (removed at the end)")
        scratch = type(original)(settings, original.alias)
        connections["default"] = scratch
        ContentType.objects.clear_cache()  # ids of the other database
        try:
            if scratch.vendor == "postgresql":
                with scratch.cursor() as cursor:
                    cursor.execute("SELECT current_database()")
                    if cursor.fetchone()[0] != settings["NAME"]:
                        raise ScratchRefused("The scratch connection does not reach the scratch database.")
            call_command("migrate", verbosity=0, interactive=False)
            yield settings["NAME"]
        finally:
            scratch.close()
            connections["default"] = original
            ContentType.objects.clear_cache()
