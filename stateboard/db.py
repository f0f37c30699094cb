"""Database helpers shared by the apps."""

import pgtrigger


def append_only_triggers(*, what: str = "it is append-only"):
    """No UPDATE, DELETE or TRUNCATE, for every connection, superusers too."""
    return [
        pgtrigger.Protect(name="append_only", operation=pgtrigger.Update | pgtrigger.Delete),
        pgtrigger.Trigger(
            name="no_truncate",
            operation=pgtrigger.Truncate,
            level=pgtrigger.Statement,
            when=pgtrigger.Before,
            func=f"RAISE EXCEPTION 'pgtrigger: Cannot truncate % table: {what}', TG_TABLE_NAME;",
        ),
    ]
