"""Claim pages: review queues and history, plain and with ``HX-Request``; role-gated actions; no N+1."""

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from knowledge import services
from knowledge.models import Claim, ClaimHead
from ledger.models import AuditEntry
from tests.factories import HX, assert_queries_flat, login, make_agent, make_operator, page_client, page_queries, texts
from tests.knowledge.conftest import iso, proposal

pytestmark = pytest.mark.django_db

REVIEW = "knowledge:claim_review"


def pending_inference(owner_user) -> Claim:
    """An agent's engineering-inference proposal: it lands pending, for an owner or editor."""
    agent, _ = make_agent(owner=owner_user)
    claim = services.claim_propose(user=agent, data=proposal(confidence="engineering-inference"))
    assert claim.status == "pending"
    return claim


def stale_claim(user) -> Claim:
    """An active claim whose refresh_after has passed (proposed a month ago)."""
    then = timezone.now() - timedelta(days=30)
    return services.claim_propose(user=user, now=then, data=proposal(
        observed_at=iso(then - timedelta(hours=1)), refresh_after=iso(then + timedelta(days=5))))


def flagged_claim(user) -> tuple[Claim, Claim]:
    """(source, derived): the source was invalidated, so the derived claim is flagged for review."""
    source = services.claim_propose(user=user, data=proposal())
    derived = services.claim_propose(user=user, data=proposal(derived_from=[source.key]))
    services.claim_invalidate(user=user, key=source.key, reason="source withdrawn")
    return source, derived


@pytest.fixture
def queues():
    """One claim in each review queue, owned by an owner: (owner, pending, stale, (source, derived))."""
    owner, _ = make_operator("owner")
    return owner, pending_inference(owner), stale_claim(owner), flagged_claim(owner)


def current(key: str) -> Claim:
    return ClaimHead.objects.select_related("current").get(key=key).current


# ---------------------------------------------------------------- login and layout

@pytest.mark.parametrize("name,args", [(REVIEW, []), ("knowledge:claim_history", ["billing.api/timeout-1"])])
def test_claim_pages_require_login(client, name, args):
    url = reverse(name, args=args)
    response = client.get(url)
    assert response.status_code == 302 and response["Location"].startswith(reverse("login"))
    assert client.get(url, **HX)["HX-Redirect"].startswith(reverse("login"))  # (401: the whole page goes)


@pytest.mark.parametrize("name", ["knowledge:claim_accept", "knowledge:claim_refresh", "knowledge:claim_invalidate",
                                  "knowledge:claim_revoke"])
def test_claim_actions_require_login_and_post(client, name):
    url = reverse(name)
    assert client.post(url, {"key": "x", "reason": "r"})["Location"].startswith(reverse("login"))
    viewer, _ = login("viewer")
    assert viewer.get(url).status_code == 405


def test_history_url_does_not_clash_with_the_api():
    url = reverse("knowledge:claim_history", args=["billing.api/timeout-1"])
    assert url == "/claims/billing.api/timeout-1/history/" and not url.startswith("/api/")


def test_nav_links_to_the_claims_page():
    viewer, _ = login("viewer")
    assert f'href="{reverse(REVIEW)}"' in texts(viewer.get(reverse("dashboard")))


# ---------------------------------------------------------------- review page

def test_review_page_shows_the_three_queues_with_buttons_for_owners(queues):
    owner, pending, stale, (source, derived) = queues
    client = page_client(owner)
    html = texts(client.get(reverse(REVIEW)))
    for section in ("claims-pending", "claims-stale", "claims-flagged"):
        assert f'id="{section}"' in html
    assert pending.key in html and stale.key in html and derived.key in html
    assert "engineering_inference_review" in html and "derived_from_invalidated" in html
    assert reverse("knowledge:claim_history", args=[stale.key]) in html
    for action in ("accept", "refresh", "invalidate", "revoke"):
        assert f'data-action="{action}"' in html
    assert 'hx-confirm="Invalidate' in html and 'hx-confirm="Revoke' in html
    assert 'method="post"' in html and f'hx-post="{reverse("knowledge:claim_accept")}"' in html


def test_review_page_htmx_returns_only_the_sections(queues):
    owner, pending, *_ = queues
    client = page_client(owner)
    html = texts(client.get(reverse(REVIEW), **HX)).strip()
    assert html.startswith('<div id="claim-review"') and "<html" not in html and pending.key in html
    assert 'data-action="invalidate"' in html and 'data-action="accept"' in html


def test_editor_sees_accept_and_invalidate_but_not_revoke(queues):
    editor, _ = login("editor")
    html = texts(editor.get(reverse(REVIEW)))
    assert 'data-action="accept"' in html and 'data-action="invalidate"' in html
    assert 'data-action="revoke"' not in html


def test_viewer_sees_the_queues_without_buttons(queues):
    _, pending, stale, _ = queues
    viewer, _ = login("viewer")
    html = texts(viewer.get(reverse(REVIEW)))
    assert pending.key in html and stale.key in html
    assert "data-action=" not in html and "hx-post" not in html


@pytest.mark.parametrize("name,data", [
    ("knowledge:claim_accept", {}), ("knowledge:claim_invalidate", {"reason": "wrong"}),
    ("knowledge:claim_revoke", {"reason": "wrong"}),
    ("knowledge:claim_refresh", {"observed_at": "2026-01-01T00:00", "refresh_after": "2026-01-05T00:00"}),
])
def test_viewer_post_is_refused_server_side_and_audited(queues, name, data):
    _, pending, stale, _ = queues
    key = pending.key if name == "knowledge:claim_accept" else stale.key
    before = current(key)
    viewer, _ = login("viewer")
    plain = viewer.post(reverse(name), {"key": key, **data})
    assert plain.status_code == 403 and "may" in texts(plain)
    htmx = viewer.post(reverse(name), {"key": key, **data}, **HX)
    assert htmx.status_code == 403 and htmx["Content-Type"].startswith("text/plain")
    assert current(key) == before and Claim.objects.filter(key=key).count() == 1
    # Revoking is decided by the claim's ownership (SPEC §4): a viewer who does not own it is not its owner.
    code = "not_claim_owner" if name == "knowledge:claim_revoke" else "permission_denied"
    assert AuditEntry.objects.filter(target=key, outcome="refused", code=code).count() == 2


def test_owner_accepts_a_pending_inference_through_the_page(queues):
    owner, pending, *_ = queues
    client = page_client(owner)
    response = client.post(reverse("knowledge:claim_accept"), {"key": pending.key, "version": pending.version})
    assert response.status_code == 302 and response["Location"] == reverse(REVIEW)
    accepted = current(pending.key)
    assert accepted.status == "active" and accepted.version == pending.version + 1
    assert accepted.store_version > pending.store_version and accepted.actor == f"user:{owner.username}"
    page = texts(client.get(response["Location"]))
    assert "is now version 2 (active)" in page and f'id="pending-{pending.store_version}"' not in page


def test_accept_with_htmx_returns_the_sections_and_triggers_an_event(queues):
    _, pending, *_ = queues
    editor, _ = login("editor")
    response = editor.post(reverse("knowledge:claim_accept"), {"key": pending.key}, **HX)
    assert response.status_code == 200 and "claim-changed" in response["HX-Trigger"]
    html = texts(response).strip()
    assert html.startswith('<div id="claim-review"') and f'id="pending-{pending.store_version}"' not in html
    assert current(pending.key).status == "active"


def test_a_refused_accept_shows_the_service_message(queues):
    """Accepting twice: the service refuses (the pending version is older than the value), as text with htmx and a message without."""
    owner, pending, *_ = queues
    client = page_client(owner)
    client.post(reverse("knowledge:claim_accept"), {"key": pending.key})
    htmx = client.post(reverse("knowledge:claim_accept"), {"key": pending.key}, **HX)
    assert htmx.status_code == 409 and "Propose it again." in texts(htmx)
    plain = client.post(reverse("knowledge:claim_accept"), {"key": pending.key}, follow=True)
    assert "Propose it again." in texts(plain)


def test_invalidate_requires_a_reason(queues):
    _, _, stale, _ = queues
    editor, _ = login("editor")
    url = reverse("knowledge:claim_invalidate")
    htmx = editor.post(url, {"key": stale.key, "reason": "   "}, **HX)
    assert htmx.status_code == 422 and "reason is required" in texts(htmx)
    plain = editor.post(url, {"key": stale.key}, follow=True)
    assert plain.redirect_chain[-1][0] == reverse(REVIEW) and "reason is required" in texts(plain)
    assert current(stale.key).status == "active"


def test_invalidate_with_a_reason_tombstones_the_claim(queues):
    _, _, stale, _ = queues
    editor, user = login("editor")
    response = editor.post(reverse("knowledge:claim_invalidate"), {"key": stale.key, "reason": "out of date"}, **HX)
    assert response.status_code == 200 and f'id="stale-{stale.store_version}"' not in texts(response)
    tombstone = current(stale.key)
    assert tombstone.status == "invalidated" and tombstone.reason == "out of date"
    assert tombstone.actor == f"user:{user.username}"


def test_revoke_by_an_owner_who_does_not_own_the_claim_shows_the_refusal(queues):
    _, _, stale, _ = queues
    other, _ = login("owner")
    response = other.post(reverse("knowledge:claim_revoke"), {"key": stale.key, "reason": "mine now"}, **HX)
    assert response.status_code == 403 and "Only the claim's owner" in texts(response)
    assert current(stale.key).status == "active"


def test_the_claims_owner_revokes_it(queues):
    owner, _, stale, _ = queues
    client = page_client(owner)
    response = client.post(reverse("knowledge:claim_revoke"), {"key": stale.key, "reason": "leaked"})
    assert response.status_code == 302 and current(stale.key).status == "revoked"


def _refresh(client, key, *, days, **fields):
    """POST the refresh form with htmx: observed an hour ago, to be refreshed in ``days`` days."""
    now = timezone.now()
    return client.post(reverse("knowledge:claim_refresh"), {
        "key": key, "observed_at": (now - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M"),
        "refresh_after": (now + timedelta(days=days)).strftime("%Y-%m-%dT%H:%M"), **fields}, **HX)


def test_refresh_makes_a_stale_claim_fresh_with_new_sources(queues):
    owner, _, stale, _ = queues
    client = page_client(owner)
    now = timezone.now()
    response = _refresh(client, stale.key, days=10,
                        source_refs="https://docs.example.com/a\n\nhttps://docs.example.com/b\n")
    assert response.status_code == 200 and f'id="stale-{stale.store_version}"' not in texts(response)
    fresh = current(stale.key)
    assert fresh.version == 2 and fresh.refresh_after > now
    assert fresh.source_refs == ["https://docs.example.com/a", "https://docs.example.com/b"]


def test_refresh_refused_by_the_write_gate_shows_its_reasons(queues):
    owner, _, stale, _ = queues
    client = page_client(owner)
    response = _refresh(client, stale.key, days=1000)
    assert response.status_code == 422 and "write gate" in texts(response)
    assert current(stale.key).version == 1


def test_review_page_query_count_does_not_grow_with_rows(django_assert_max_num_queries):
    owner, _ = make_operator("owner")
    client = page_client(owner)
    assert_queries_flat(client, reverse(REVIEW),
                        lambda n: (pending_inference(owner), stale_claim(owner), flagged_claim(owner)), rows=9)
    with django_assert_max_num_queries(8):
        client.get(reverse(REVIEW))


# ---------------------------------------------------------------- history

def test_history_shows_every_version_who_changed_it_rejections_and_flags(queues):
    owner, pending, _, (source, derived) = queues
    services.claim_accept(user=owner, key=pending.key)
    services.claim_invalidate(user=owner, key=pending.key, reason="disproved by a test run")
    with pytest.raises(services.WriteGateRejected):
        services.claim_propose(user=owner, data=proposal(key=pending.key, source_refs=[]))
    client, _ = login("viewer")
    html = texts(client.get(reverse("knowledge:claim_history", args=[pending.key])))
    for v in (1, 2, 3):
        assert f'id="version-{v}"' in html
    assert 'data-status="pending"' in html and 'data-status="active"' in html and 'data-status="invalidated"' in html
    assert pending.actor in html and f"user:{owner.username}" in html and "disproved by a test run" in html
    assert "<dt>How</dt><dd>accepted after review</dd>" in html and "action: accept" not in html
    assert f"store version {pending.store_version}" in html
    assert 'id="claim-rejections"' in html and "write gate rejections" in html.lower() and "source_refs" in html
    flagged = texts(client.get(reverse("knowledge:claim_history", args=[derived.key])))
    assert 'id="claim-reviews"' in flagged and "derived_from_invalidated" in flagged and source.key in flagged


def test_history_htmx_returns_the_versions_partial_and_unknown_key_is_404(queues):
    _, _, stale, _ = queues
    client, _ = login("viewer")
    html = texts(client.get(reverse("knowledge:claim_history", args=[stale.key]), **HX)).strip()
    assert html.startswith('<div id="claim-versions"') and "<html" not in html
    assert client.get(reverse("knowledge:claim_history", args=["no/such-key"])).status_code == 404


def test_claims_page_lists_current_claims_with_badges_search_and_scope():
    owner, user = login("owner")
    fact = services.claim_propose(user=user, data=proposal(statement="Billing times out at 30 s."))
    other = services.claim_propose(user=user, data=proposal(
        statement="Search is slow.", scope={"system": "search", "version": "1", "task": "perf"}))
    for extra in ({}, HX):
        html = texts(owner.get(reverse("knowledge:claim_list"), **extra))
        assert f'data-claim="{fact.key}"' in html and f'data-claim="{other.key}"' in html
        assert 'data-use-as="fact"' in html and reverse("knowledge:claim_history", args=[fact.key]) in html
    assert "<html" not in texts(owner.get(reverse("knowledge:claim_list"), **HX))
    by_scope = texts(owner.get(reverse("knowledge:claim_list"), {"system": "search"}, **HX))
    assert other.key in by_scope and fact.key not in by_scope
    by_text = texts(owner.get(reverse("knowledge:claim_list"), {"q": "times out"}, **HX))
    assert fact.key in by_text and other.key not in by_text
    menu = texts(owner.get(reverse("dashboard")))
    assert f'href="{reverse("knowledge:claim_list")}"' in menu and f'href="{reverse("knowledge:claim_review")}"' in menu


def test_claims_page_query_count_is_constant_in_claims():
    owner, user = login("owner")
    for _ in range(2):
        services.claim_propose(user=user, data=proposal())
    few = page_queries(owner, reverse("knowledge:claim_list"))
    for _ in range(8):
        services.claim_propose(user=user, data=proposal())
    assert page_queries(owner, reverse("knowledge:claim_list")) == few


def test_claims_page_hides_sensitive_claims_from_viewers():
    owner, user = login("owner")
    secret = services.claim_propose(user=user, data=proposal(
        sensitivity="sensitive", retention_until=(timezone.now() + timedelta(days=60)).isoformat()))
    viewer, _ = login("viewer")
    assert secret.key in texts(owner.get(reverse("knowledge:claim_list")))
    assert secret.key not in texts(viewer.get(reverse("knowledge:claim_list")))


def test_claim_refresh_form_has_sensible_defaults():
    owner, user = login("owner")
    services.claim_propose(user=user, now=timezone.now() - timedelta(days=30), data=proposal(
        observed_at=(timezone.now() - timedelta(days=31)).isoformat(),
        refresh_after=(timezone.now() - timedelta(days=1)).isoformat()))
    html = texts(owner.get(reverse("knowledge:claim_review")))
    today = timezone.now()
    assert f'name="observed_at" value="{today:%Y-%m-%d}' in html
    assert f'name="refresh_after" value="{today + timedelta(days=30):%Y-%m-%d}' in html
