"""Helpers of the ledger pages: the subjects their policies' authorizers decide on, checked forms,
input diffs, evidence views."""

import re

from django.core.paginator import Paginator
from django.http import Http404
from django.urls import reverse
from django.utils.functional import cached_property

from ledger import selectors
from ledger.models import Approval, Run
from stateboard.errors import Invalid
from stateboard.redact import redact

IMAGE_EXT = re.compile(r"\.(png|jpe?g|gif|webp|svg)(\?.*)?$", re.I)


class CappedPaginator(Paginator):
    """Counts at most ``cap`` rows (``COUNT`` over a ``LIMIT``): a list of a million runs says "10,000+"
    instead of counting them all on every page view and poll."""

    cap = 10_000

    @cached_property
    def count(self) -> int:
        # Unordered: any cap + 1 rows count (in the list's order, a rare filter walked the whole order's index).
        return self.object_list.order_by()[: self.cap + 1].count()

    @property
    def capped(self) -> bool:
        return self.count > self.cap


def run_or_404(run_id) -> Run:
    try:
        return selectors.run_by_id(run_id)
    except Run.DoesNotExist:
        raise Http404("No such run.")


def run_of_page(request, kwargs) -> Run:
    """The run of a page's ``<uuid:run_id>`` path (a 404 page when there is none)."""
    return run_or_404(kwargs["run_id"])


def approval_of_page(request, kwargs) -> Approval:
    try:
        return selectors.approval_get(approval_id=kwargs["approval_id"])
    except Approval.DoesNotExist:
        raise Http404("No such approval request.")


def form_error_text(form) -> str:
    return " ".join(str(e) for errors in form.errors.values() for e in errors)


def form_checked(form):
    """The bound form, valid, or the refusal (422) ``@page`` records and shows."""
    if not form.is_valid():
        raise Invalid("invalid_input", form_error_text(form))
    return form


def _flatten(value, prefix: str = "") -> dict:
    if isinstance(value, dict) and value:
        out = {}
        for key in sorted(value):
            out.update(_flatten(value[key], f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix or "(value)": value}


def inputs_diff(before, after) -> list[dict]:
    """What changed between two inputs, by dotted path: added, removed, changed (values redacted)."""
    a, b = _flatten(before or {}), _flatten(after or {})
    rows = []
    for path in sorted(set(a) | set(b)):
        if path not in a:
            rows.append({"path": path, "change": "added", "before": "", "after": redact(b[path])})
        elif path not in b:
            rows.append({"path": path, "change": "removed", "before": redact(a[path]), "after": ""})
        elif a[path] != b[path]:
            rows.append({"path": path, "change": "changed", "before": redact(a[path]), "after": redact(b[path])})
    return rows


def evidence_view(ev) -> dict:
    """One evidence item as the pages show it: a link (claim history, http) or a local image, redacted excerpt."""
    if not isinstance(ev, dict):
        return {"uri": redact(ev), "kind": "text"}
    uri = str(ev.get("uri") or "")
    view = {"uri": redact(uri), "digest": ev.get("digest") or "", "observed_at": ev.get("observed_at") or "",
            "excerpt": redact(ev.get("excerpt") or ""), "kind": "text", "href": ""}
    lower = uri.lower()
    if lower.startswith("claim:"):
        key, at, tail = uri[len("claim:"):].rpartition("@")
        key = key if at and tail.isdigit() else uri[len("claim:"):]  # claim:<key>[@<version>]
        view.update(kind="claim", key=key, href=reverse("knowledge:claim_history", args=[key]) if key else "")
    elif lower.startswith("data:image/") or (uri.startswith("/") and not uri.startswith("//") and IMAGE_EXT.search(uri)):
        view.update(kind="image", href=uri)  # served by this server (or inline): safe to load
    elif lower.startswith(("https://", "http://")):
        # Pages load nothing from outside the server: an external image is a link, never an <img>.
        view.update(kind="external_image" if IMAGE_EXT.search(uri) else "link", href=redact(uri))  # linked redacted
    return view


def attribute_filters(run_filter, query) -> list[dict]:
    """The run filter's ``attr.<key>=<value>`` (SPEC §15) as the pages show them: hidden inputs that keep them
    in the filter form (and the bulk form, the saved view), and each one's link to the page without it."""
    found = []
    for name, value in run_filter.attribute_params:
        rest = query.copy()
        rest.setlist(name, [v for v in query.getlist(name) if v != value])
        rest.pop("page", None)
        found.append({"name": name, "key": name.partition(".")[2], "value": value, "without": rest.urlencode()})
    return found
