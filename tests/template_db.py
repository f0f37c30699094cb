"""A migrated PostgreSQL database that the suite copies instead of migrating each time.

Migrating an empty database takes ~8 s (the ledger's partitions, guards and triggers); ``CREATE DATABASE …
TEMPLATE`` copies a migrated one in a fraction of a second. The suite migrates one template per state of the
migrations (its name carries their hash), once per machine, and every test database, bench scratch database
and ``replay_eval`` database is copied from it (``STATEBOARD_SCRATCH_TEMPLATE``). What is copied is migrated
again, so a template behind the code still ends up current: only the time is saved.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import psycopg
from psycopg import sql

ROOT = Path(__file__).resolve().parents[1]
DONE = "stateboard test template: migrated"
KEPT = 3  # the newest templates kept (other checkouts' migrations may be running beside this one)


def template_name() -> str:
    """``stateboard_template_<hash>``: the hash of every migration file of the project and the versions of
    the libraries whose migrations it applies."""
    from importlib.metadata import version

    digest = hashlib.sha256()
    for path in sorted(ROOT.glob("*/migrations/*.py")):
        digest.update(path.relative_to(ROOT).as_posix().encode() + path.read_bytes())
    for package in ("django", "django-celery-beat", "django-pgtrigger"):
        digest.update(version(package).encode())
    return f"stateboard_template_{digest.hexdigest()[:12]}"


def ensure_template(server: dict) -> str | None:
    """The template's name on ``server`` (psycopg keywords without dbname), migrated by this call if no other
    run did it first; None when it cannot be made (then everything migrates as before)."""
    name = template_name()
    try:
        with psycopg.connect(dbname="postgres", autocommit=True, **server) as admin:
            # One run builds it; the others (xdist workers, other checkouts) wait on the lock, then copy it.
            admin.execute("SELECT pg_advisory_lock(hashtext(%s))", [name])
            comment = admin.execute("SELECT shobj_description(oid, 'pg_database') FROM pg_database "
                                    "WHERE datname = %s", [name]).fetchone()
            if comment and comment[0] == DONE:
                return name
            if comment:  # a build that was killed half-way
                admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            url = f"postgres://{server.get('user', '')}@{server.get('host', '127.0.0.1')}:{server.get('port', 5432)}/{name}"
            env = {**os.environ, "DATABASE_URL": url, "SECRET_KEY": "template", "DB_POOL": "0",
                   "DJANGO_SETTINGS_MODULE": "stateboard.settings"}
            migrated = subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env,
                                      capture_output=True, text=True, timeout=600)
            if migrated.returncode != 0:
                admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))
                return None
            admin.execute(sql.SQL("COMMENT ON DATABASE {} IS {}").format(sql.Identifier(name), sql.Literal(DONE)))
            _older_dropped(admin)
            return name
    except psycopg.Error:
        return None


def _older_dropped(admin) -> None:
    """Templates of earlier migrations, but the newest ``KEPT``: dropped unless in use."""
    older = admin.execute("SELECT datname FROM pg_database WHERE datname LIKE 'stateboard\\_template\\_%%' "
                          "ORDER BY oid DESC OFFSET %s", [KEPT]).fetchall()
    for (name,) in older:
        try:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))
        except psycopg.Error:
            pass  # in use: a later run drops it
