"""HTML pages of the knowledge store: the review queues and a claim's history.

Reads go through ``selectors``, writes through ``services`` (which hold the acceptance and
ownership rules, through ``knowledge/authorizers.py``). Every action is a real POST that works
without JavaScript (redirect + message); with htmx it answers the re-rendered review sections, or
the refusal as plain text with its status code (``app.js`` shows it). The page offers the buttons
the authorizers allow; the view asks them again and the service has the last word;
``stateboard.refusals`` records a refusal.
"""

from datetime import timedelta

from django.contrib import messages
from django.http import Http404
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import trigger_client_event

from knowledge import authorizers, selectors, services
from knowledge.web.forms import AcceptForm, RefreshForm, TombstoneForm
from knowledge.models import ClaimReview
from stateboard.errors import Invalid
from stateboard.roles import allowed
from stateboard.policy import ANY, Policy, page

ROWS_PER_SECTION = 200
REFRESH_AFTER_DEFAULT = timedelta(days=30)

# Each action's authorizer (SPEC §4); the service calls it again under its lock.
AUTHORIZERS = {
    "accept": authorizers.may_accept,
    "refresh": authorizers.may_refresh,
    "invalidate": authorizers.may_invalidate,
    "revoke": authorizers.may_revoke,
}


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
        head.may_revoke = allowed(authorizers.may_revoke, user, head)
    # The refresh form's defaults: observed now, to be checked again in 30 days (datetime-local, UTC).
    refresh_defaults = {"observed_at": now.strftime("%Y-%m-%dT%H:%M"),
                        "refresh_after": (now + REFRESH_AFTER_DEFAULT).strftime("%Y-%m-%dT%H:%M")}
    return {
        "pending": pending, "stale": stale, "flagged": flagged, "now": now, "refresh_defaults": refresh_defaults,
        "may": {"accept": allowed(authorizers.may_accept, user, None),
                "refresh": allowed(authorizers.may_refresh, user, None),
                "invalidate": allowed(authorizers.may_invalidate, user, None),
                "revoke": any(head.may_revoke for head in (*stale, *flagged))},
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
    citing = selectors.claim_citing_runs(keys=[h.key for h in heads])
    for head in heads:
        head.use_as = selectors.claim_use_as(head.current, now=now, needs_review=head.needs_review)
        head.shown_status = selectors.claim_status(head.current, now=now)
        head.citing = citing.get(head.key, {"count": 0, "runs": []})
    context = {"heads": heads, "q": q, "system": system, "task": task, "now": now,
               "scopes": selectors.claim_scopes(user=request.user)}
    template = "knowledge/claim_list.html#claim-table" if request.htmx else "knowledge/claim_list.html"
    return render(request, template, context)


@require_GET
@page(Policy(roles=ANY))
def claim_history(request, key):
    """Every visible version of a claim, with who changed it, its gate rejections and open review flags."""
    detail = selectors.claim_detail(user=request.user, key=key)
    if detail is None:
        raise Http404("No such claim.")
    now = timezone.now()
    for version in detail["versions"]:
        version.shown_status = selectors.claim_status(version, now=now)
    template = "knowledge/claim_history.html#claim-versions" if request.htmx else "knowledge/claim_history.html"
    served = {"served_in": selectors.claim_served_in(key=key), "cited_by": selectors.claim_cited_by(key=key)}
    return render(request, template, {**detail, **served, "now": now})


# ---------------------------------------------------------------- actions

def _claim_action(request, action: str, form_class, call):
    """Check who may act, validate, call one service; answer like the ledger pages do."""
    key, version = (request.POST.get("key") or "")[:300], request.POST.get("version") or ""
    if action == "accept":
        authorizers.may_accept(request.user, key, int(version) if version.isdigit() and len(version) < 10 else None)
    else:
        AUTHORIZERS[action](request.user, key)
    claim = call(_form_checked(form_class(request.POST)))
    summary = f"{action.title()}: {claim.key} is now version {claim.version} ({claim.status})."
    if not request.htmx:
        messages.success(request, summary)
        return redirect("knowledge:claim_review")
    context = {**_review_context(request), "changed": summary}
    response = render(request, "knowledge/claim_review.html#claim-review", context)
    return trigger_client_event(response, "claim-changed", {"key": claim.key, "action": action,
                                                            "status": claim.status, "version": claim.version})


@require_POST
@page(Policy(roles=ANY, audit="claim_accept", audit_all=True), back="knowledge:claim_review")
def claim_accept(request):
    return _claim_action(request, "accept", AcceptForm, lambda form: services.claim_accept(
        user=request.user, key=form.cleaned_data["key"], version=form.cleaned_data.get("version")))


@require_POST
@page(Policy(roles=ANY, audit="claim_refresh", audit_all=True), back="knowledge:claim_review")
def claim_refresh(request):
    return _claim_action(request, "refresh", RefreshForm, lambda form: services.claim_refresh(
        user=request.user, key=form.cleaned_data["key"], data=form.refresh_data()))


def _tombstone_view(action: str, service):
    """Invalidate and revoke: the same form (a key and a required reason), each its own service."""

    @require_POST
    @page(Policy(roles=ANY, audit=f"claim_{action}", audit_all=True), back="knowledge:claim_review")
    def view(request):
        return _claim_action(request, action, TombstoneForm, lambda form: service(
            user=request.user, key=form.cleaned_data["key"], reason=form.cleaned_data["reason"]))

    view.__name__ = view.__qualname__ = f"claim_{action}"
    return view


claim_invalidate = _tombstone_view("invalidate", services.claim_invalidate)
claim_revoke = _tombstone_view("revoke", services.claim_revoke)
