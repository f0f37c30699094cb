"""HTML pages of the knowledge store: the review queues and a claim's history.

Reads go through ``selectors``, writes through ``services`` (which hold the acceptance and
ownership rules, through ``knowledge/authorizers.py``). Every action is a real POST that works
without JavaScript (redirect + message); with htmx it answers the re-rendered review sections, or
the refusal as plain text with its status code (``app.js`` shows it). The same actions are offered
on the review page, the claims page and a claim's history: each form names the page it came from
(``next``, checked) and the action answers that page: a redirect back, or with htmx its fragment (the
review sections, the claim's row, the history's versions). A page offers the buttons the authorizers
and ``knowledge.domain.actions`` allow (``claim_actions``); each action's policy names its authorizer,
the service asks it again and has the last word, and ``@page`` (``stateboard.policy``) records a refusal.
"""

from datetime import timedelta
from urllib.parse import urlsplit

from django.contrib import messages
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.urls import Resolver404, resolve, reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import trigger_client_event

from knowledge import authorizers, selectors, services
from knowledge.domain import actions
from knowledge.models import ClaimReview
from knowledge.web.forms import AcceptForm, RefreshForm, TombstoneForm
from stateboard.errors import Invalid
from stateboard.policy import ANY, NOTIFICATIONS_CHANGED, Policy, page, safe_next
from stateboard.roles import allowed

ROWS_PER_SECTION = 200
REFRESH_AFTER_DEFAULT = timedelta(days=30)

TOMBSTONE_ACTIONS = ("refresh", "invalidate", "revoke")


def claim_actions(user, head) -> dict:
    """What ``user`` may do to the claim ``head`` now: the action's authorizer (as its POST asks it)
    and the claim's state (``knowledge.domain.actions``, as its service decides). No query for a head
    with a current value (its owner is on the head)."""
    current = head.current if head.current_id else None
    status = current.status if current is not None else None
    acts = {action: actions.state_allows(action, status, removed=bool(head.gc_status) and current is None)
            and allowed(authorizers.BY_NAME[action], user, head) for action in TOMBSTONE_ACTIONS}
    acts["any"] = any(acts.values())
    return acts


def refresh_defaults(now) -> dict:
    """The refresh form's defaults: observed now, to be checked again in 30 days (datetime-local, UTC)."""
    return {"observed_at": now.strftime("%Y-%m-%dT%H:%M"),
            "refresh_after": (now + REFRESH_AFTER_DEFAULT).strftime("%Y-%m-%dT%H:%M")}


def back_to(request) -> str:
    """The page an action was taken on (its ``next``, when it is one of this site's), else the review page."""
    return safe_next(request, reverse("knowledge:claim_review"))


def _form_checked(form):
    if not form.is_valid():
        raise Invalid("invalid_input", " ".join(str(e) for errors in form.errors.values() for e in errors))
    return form


# ---------------------------------------------------------------- pages

def _review_context(request) -> dict:
    """The three review queues; the page and its htmx fragment share this."""
    user, now = request.user, timezone.now()
    pending = list(selectors.claims_pending(user=user).select_related("owner")[:ROWS_PER_SECTION])
    stale = list(selectors.claims_stale(user=user, now=now)[:ROWS_PER_SECTION])
    flagged = list(selectors.claims_flagged(user=user)[:ROWS_PER_SECTION])
    # Why each flagged claim needs review: its open flags, in one query for the whole section.
    if flagged:
        current_sv = {head.key: head.current.store_version for head in flagged}
        for head in flagged:
            head.open_reviews = []
        by_key = {head.key: head for head in flagged}
        for review in ClaimReview.objects.filter(key__in=list(by_key)).order_by("-source_store_version"):
            if review.source_store_version > current_sv[review.key]:
                by_key[review.key].open_reviews.append(review)
    for head in (*stale, *flagged):  # revoking is decided by the claim's ownership
        head.actions = claim_actions(user, head)
    return {
        "pending": pending, "stale": stale, "flagged": flagged, "now": now, "refresh_defaults": refresh_defaults(now),
        "back": reverse("knowledge:claim_review"), "target": "#claim-review",
        "may": {"accept": allowed(authorizers.may_accept, user, None)},
    }


@require_GET
@page(Policy(roles=ANY))
def claim_review(request):
    """Pending versions, stale claims and claims flagged for review; htmx gets only the sections."""
    template = "knowledge/claim_review.html#claim-review" if request.htmx else "knowledge/claim_review.html"
    return render(request, template, _review_context(request))


@require_GET
@page(Policy(roles=ANY))
def claim_list(request):
    """All current claims with search and scope filters, fact/lead badges and the runs citing them."""
    q = (request.GET.get("q") or "").strip()[:200]
    system, task = (request.GET.get("system") or "")[:200], (request.GET.get("task") or "")[:200]
    now = timezone.now()
    heads = list(selectors.claims_current(user=request.user, q=q, system=system, task=task, now=now)[:ROWS_PER_SECTION])
    context = {"heads": _list_rows(request.user, heads, now), "q": q, "system": system, "task": task,
               **_list_context(request, now), "scopes": selectors.claim_scopes(user=request.user)}
    template = "knowledge/claim_list.html#claim-table" if request.htmx else "knowledge/claim_list.html"
    return render(request, template, context)


def _list_rows(user, heads: list, now) -> list:
    """The claims page's rows: how each may be used, its status now, the runs citing it (one read for
    all), and the actions ``user`` may take on it."""
    citing = selectors.claim_citing_runs(keys=[h.key for h in heads])
    for head in heads:
        head.use_as = selectors.claim_use_as(head.current, now=now, needs_review=head.needs_review)
        head.shown_status = selectors.claim_status(head.current, now=now)
        head.citing = citing.get(head.key, {"count": 0, "runs": []})
        head.actions = claim_actions(user, head)
    return heads


def _list_context(request, now) -> dict:
    """What the row partial needs beside its ``head``: the page to come back to, the refresh defaults."""
    return {"now": now, "back": request.get_full_path() if request.method == "GET" else back_to(request),
            "target": "closest tr", "refresh_defaults": refresh_defaults(now)}


@require_GET
@page(Policy(roles=ANY))
def claim_history(request, key):
    """Every visible version of a claim, with who changed it, its gate rejections and open review flags."""
    template = "knowledge/claim_history.html#claim-versions" if request.htmx else "knowledge/claim_history.html"
    return render(request, template, _history_context(request, key))


PROVENANCE_LABELS = {
    "action": "How", "of_version": "From version", "of_store_version": "From store version",
    "cleared": "Review cleared", "proposed_by": "Proposed by", "checkpoint": "Checkpoint",
    "snapshot_store_version": "Snapshot store version", "version_boundary": "Version boundary",
}
ACTION_WORDS = {
    "propose": "proposed", "refresh": "refreshed with new evidence", "accept": "accepted after review",
    "invalidate": "invalidated", "revoke": "revoked by its owner", "restore": "restored from a checkpoint",
    "retention_expired": "invalidated: its retention expired",
}


def provenance_fields(provenance) -> list[tuple[str, str]]:
    """A version's ``provenance`` as (label, words) pairs; a field this page does not know keeps its name."""
    if not isinstance(provenance, dict):
        return [("Provenance", str(provenance))] if provenance else []
    fields = []
    for name, value in provenance.items():
        if name == "action" and isinstance(value, str):
            value = ACTION_WORDS.get(value, value)
        elif isinstance(value, (list, tuple)):
            value = ", ".join(str(v) for v in value) or "—"
        fields.append((PROVENANCE_LABELS.get(name, name.replace("_", " ").capitalize()), str(value)))
    return fields


def _history_context(request, key: str) -> dict:
    """The history page: the versions with their status now and provenance, the current version's
    true status (``selectors.claim_status``: stale past refresh_after) and the actions on it."""
    detail = selectors.claim_detail(user=request.user, key=key)
    if detail is None:
        raise Http404("No such claim.")
    now = timezone.now()
    for version in detail["versions"]:
        version.shown_status = selectors.claim_status(version, now=now)
        version.provenance_fields = provenance_fields(version.provenance)
    current, head = detail["current"], detail["head"]
    if head is not None:
        head.actions = claim_actions(request.user, head)
    served = {"served_in": selectors.claim_served_in(key=key), "cited_by": selectors.claim_cited_by(key=key)}
    return {**detail, **served, "now": now, "refresh_defaults": refresh_defaults(now),
            "current_status": selectors.claim_status(current, now=now) if current is not None else None,
            "current_use_as": selectors.claim_use_as(current, now=now, needs_review=bool(detail.get("reviews")))
            if current is not None else None,
            "back": reverse("knowledge:claim_history", args=[key]), "target": "#claim-versions"}


# ---------------------------------------------------------------- actions

def _key_of_form(request, kwargs) -> str:
    return (request.POST.get("key") or "")[:300]


def _pending_of_form(request, kwargs):
    """The pending version the form names (None when it names one that is not pending), else its key."""
    version = request.POST.get("version") or ""
    if not (version.isascii() and version.isdigit() and len(version) < 10):
        return _key_of_form(request, kwargs)
    return selectors.claim_pending(key=_key_of_form(request, kwargs), version=int(version))


def _on_claim(action: str, authorizer, subject=_key_of_form) -> Policy:
    return Policy(roles=ANY, authorizer=authorizer, subject=subject, audit=f"claim_{action}", audit_all=True)


def _claim_action(request, action: str, form_class, call):
    """Validate, call one service; answer like the ledger pages do."""
    claim = call(_form_checked(form_class(request.POST)))
    summary = f"{action.title()}: {claim.key} is now version {claim.version} ({claim.status})."
    back = back_to(request)
    if not request.htmx:
        messages.success(request, summary)
        return redirect(back)
    response = _fragment_of(request, back, claim.key, summary)
    trigger_client_event(response, "claim-changed", {"key": claim.key, "action": action,
                                                     "status": claim.status, "version": claim.version})
    return trigger_client_event(response, NOTIFICATIONS_CHANGED)  # a stale notice may be done now


def _fragment_of(request, back: str, key: str, summary: str):
    """With htmx, the part of the page the action came from that it changed: the claim's row of the
    claims page, the versions of its history, else the review sections."""
    try:
        name = resolve(urlsplit(back).path).view_name
    except Resolver404:
        name = ""
    if name == "knowledge:claim_list":
        head = selectors.claim_head(user=request.user, key=key)
        if head is None:  # sensitive, and no longer readable by this user: the row goes
            return HttpResponse("")
        context = {**_list_context(request, timezone.now()), "changed": summary}
        return render(request, "knowledge/claim_list.html#claim-row",
                      {**context, "head": _list_rows(request.user, [head], context["now"])[0]})
    if name == "knowledge:claim_history":
        return render(request, "knowledge/claim_history.html#claim-versions",
                      {**_history_context(request, key), "changed": summary})
    return render(request, "knowledge/claim_review.html#claim-review", {**_review_context(request), "changed": summary})


@require_POST
@page(_on_claim("accept", authorizers.may_accept, _pending_of_form), back=back_to)
def claim_accept(request):
    return _claim_action(request, "accept", AcceptForm, lambda form: services.claim_accept(
        user=request.user, key=form.cleaned_data["key"], version=form.cleaned_data.get("version")))


@require_POST
@page(_on_claim("refresh", authorizers.may_refresh), back=back_to)
def claim_refresh(request):
    return _claim_action(request, "refresh", RefreshForm, lambda form: services.claim_refresh(
        user=request.user, key=form.cleaned_data["key"], data=form.refresh_data()))


def _tombstone_view(action: str, authorizer, service):
    """Invalidate and revoke: the same form (a key and a required reason), each its own authorizer and service."""

    @require_POST
    @page(_on_claim(action, authorizer), back=back_to)
    def view(request):
        return _claim_action(request, action, TombstoneForm, lambda form: service(
            user=request.user, key=form.cleaned_data["key"], reason=form.cleaned_data["reason"]))

    view.__name__ = view.__qualname__ = f"claim_{action}"
    return view


claim_invalidate = _tombstone_view("invalidate", authorizers.may_invalidate, services.claim_invalidate)
claim_revoke = _tombstone_view("revoke", authorizers.may_revoke, services.claim_revoke)
