"""Saved views: named filter sets of the runs page, shared by the team."""

from __future__ import annotations

from ledger import authorizers
from ledger.models import SavedView
from stateboard.roles import actor_for


def saved_view_save(*, name: str, query: str, user) -> SavedView:
    """Save ``query`` under ``name`` (the same name: replaced), by a person (``may_save_view``)."""
    authorizers.may_save_view(user)
    view, _ = SavedView.objects.update_or_create(name=name, defaults={"query": query, "created_by": actor_for(user)})
    return view
