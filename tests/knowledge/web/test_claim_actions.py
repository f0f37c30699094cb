"""Acting on any current claim from /claims/ and from its history (issue 28.5): the buttons each role and
the claim's state allow, the same POST views as the review page answering the page they came from, and a
history that says which version is current, its true status and its provenance as labelled fields."""

import re
from datetime import timedelta
from datetime import timezone as dt_timezone

import pytest
from django.urls import reverse
from django.utils import timezone

from knowledge import services
from knowledge.models import Claim, ClaimHead
from ledger.models import AuditEntry
from tests.factories import HX, assert_queries_flat, login, make_agent, make_operator, page_client, texts
from tests.knowledge.conftest import iso, proposal

pytestmark = pytest.mark.django_db

LIST = reverse("knowledge:claim_list")
ACTIONS = ("refresh", "invalidate", "revoke")


def history(key: str) -> str:
    return reverse("knowledge:claim_history", args=[key])


def versions(key: str) -> int:
    return Claim.objects.filter(key=key).count()


def current(key: str) -> Claim:
    return ClaimHead.objects.select_related("current").get(key=key).current


def shown_actions(html: str) -> set[str]:
    return set(re.findall(r'data-action="(\w+)"', html))


def row_of(html: str, key: str) -> str:
    match = re.search(rf'<tr data-claim="{re.escape(key)}".*?</tr>', html, re.S)
    assert match, f"no row for {key}"
    return match.group()


def section(html: str, element_id: str) -> str:
    match = re.search(rf'<section id="{element_id}".*?</section>', html, re.S)
    assert match, f"no #{element_id}"
    return match.group()


@pytest.fixture
def owned():
    """An active claim and the owner who owns it (proposed by them)."""
    owner, _ = make_operator("owner")
    return owner, services.claim_propose(user=owner, data=proposal())


def stale_v1(owner) -> Claim:
    then = timezone.now() - timedelta(days=30)
    return services.claim_propose(user=owner, now=then, data=proposal(
        observed_at=iso(then - timedelta(hours=1)), refresh_after=iso(then + timedelta(days=5))))


# ---------------------------------------------------------------- who sees which buttons

@pytest.mark.parametrize("who,expected", [
    ("claim_owner", {"refresh", "invalidate", "revoke"}),
    ("other_owner", {"refresh", "invalidate"}),
    ("editor", {"refresh", "invalidate"}),
    ("viewer", set()),
    ("oncall", set()),
    ("agent", set()),
])
def test_buttons_on_the_claims_page_and_the_history_follow_the_authorizers(owned, who, expected):
    owner, claim = owned
    if who == "claim_owner":
        client = page_client(owner)
    elif who == "agent":
        client = page_client(make_agent(owner=owner)[0])
    else:
        client, _ = login("owner" if who == "other_owner" else who)
    row = row_of(texts(client.get(LIST)), claim.key)
    assert shown_actions(row) == expected
    page = texts(client.get(history(claim.key)))
    assert shown_actions(section(page, "claim-current")) == expected
    if expected:  # real POSTs that come back to the page they were taken on
        assert 'method="post"' in row and f'name="next" value="{LIST}"' in row and 'hx-target="closest tr"' in row
        assert f'name="next" value="{history(claim.key)}"' in page and 'hx-target="#claim-versions"' in page
    else:
        assert "<form" not in row and "hx-post" not in section(page, "claim-current")


def test_buttons_follow_the_claims_state(owned):
    """Invalidated: only its owner's revoke is left; revoked: nothing (a repeat would change nothing)."""
    owner, claim = owned
    client = page_client(owner)
    services.claim_invalidate(user=owner, key=claim.key, reason="superseded by the 2.2 docs")
    assert shown_actions(section(texts(client.get(history(claim.key))), "claim-current")) == {"revoke"}
    services.claim_revoke(user=owner, key=claim.key, reason="leaked a customer id")
    page = texts(client.get(history(claim.key)))
    assert shown_actions(section(page, "claim-current")) == set()
    assert claim.key not in texts(client.get(LIST))  # the list holds current live claims only


# ---------------------------------------------------------------- acting from /claims/

def test_owner_revokes_from_the_claims_page_without_javascript(owned):
    owner, claim = owned
    client = page_client(owner)
    response = client.post(reverse("knowledge:claim_revoke"), {"key": claim.key, "reason": "leaked", "next": LIST})
    assert response.status_code == 302 and response["Location"] == LIST
    tombstone = current(claim.key)
    assert (tombstone.version, tombstone.status, tombstone.reason) == (2, "revoked", "leaked")
    page = texts(client.get(LIST))
    assert f"Revoke: {claim.key} is now version 2 (revoked)." in page and f'data-claim="{claim.key}"' not in page


def test_owner_revokes_from_the_claims_page_with_htmx_and_gets_the_row(owned):
    owner, claim = owned
    response = page_client(owner).post(reverse("knowledge:claim_revoke"),
                                       {"key": claim.key, "reason": "leaked", "next": LIST}, **HX)
    assert response.status_code == 200 and "claim-changed" in response["HX-Trigger"]
    html = texts(response).strip()
    assert html.startswith(f'<tr data-claim="{claim.key}" data-status="revoked" data-version="2"')
    assert "“leaked”" in html and "is now version 2 (revoked)" in html and 'data-use-as="none"' in html
    assert shown_actions(html) == set() and "<html" not in html
    assert current(claim.key).status == "revoked" and versions(claim.key) == 2


def test_editor_invalidates_from_the_claims_page_with_htmx(owned):
    _, claim = owned
    editor, user = login("editor")
    response = editor.post(reverse("knowledge:claim_invalidate"),
                           {"key": claim.key, "reason": "docs changed", "next": f"{LIST}?q=billing"}, **HX)
    html = texts(response).strip()
    assert response.status_code == 200 and 'data-status="invalidated"' in html and html.startswith("<tr")
    assert 'name="next" value="/claims/?q=billing"' not in html  # an editor may not revoke: no form is left
    assert current(claim.key).actor == f"user:{user.username}" and current(claim.key).status == "invalidated"


# ---------------------------------------------------------------- acting from the history

def test_editor_invalidates_from_the_history_and_the_page_shows_the_new_version(owned):
    _, claim = owned
    editor, _ = login("editor")
    url = history(claim.key)
    response = editor.post(reverse("knowledge:claim_invalidate"), {"key": claim.key, "reason": "disproved", "next": url})
    assert response.status_code == 302 and response["Location"] == url
    page = texts(editor.get(url))
    now = section(page, "claim-current")
    assert 'data-version="2" data-status="invalidated"' in now and "<strong>Version 2</strong> is current" in now
    assert "“disproved”" in now and shown_actions(now) == set()
    assert 'id="version-2" data-status="invalidated" class="current"' in page
    v1 = re.search(r'<tr id="version-1".*?</tr>', page, re.S).group()
    assert "superseded by v2" in v1 and "data-superseded" not in section(page, "claim-current")


def test_owner_revokes_from_the_history_with_htmx_and_gets_the_versions(owned):
    owner, claim = owned
    response = page_client(owner).post(reverse("knowledge:claim_revoke"),
                                       {"key": claim.key, "reason": "wrong system", "next": history(claim.key)}, **HX)
    html = texts(response).strip()
    assert response.status_code == 200 and html.startswith('<div id="claim-versions"')
    assert "is now version 2 (revoked)" in html and 'data-status="revoked"' in section(html, "claim-current")
    assert versions(claim.key) == 2


# ---------------------------------------------------------------- refusals write nothing

@pytest.mark.parametrize("action", ["invalidate", "revoke"])
@pytest.mark.parametrize("page", ["list", "history"])
def test_a_viewer_is_refused_on_either_page_and_nothing_is_written(owned, action, page):
    _, claim = owned
    viewer, _ = login("viewer")
    back = LIST if page == "list" else history(claim.key)
    data = {"key": claim.key, "reason": "no", "next": back}
    plain = viewer.post(reverse(f"knowledge:claim_{action}"), data)
    assert plain.status_code == 403 and "Refused" in texts(plain) and f'href="{back}"' in texts(plain)
    htmx = viewer.post(reverse(f"knowledge:claim_{action}"), data, **HX)
    assert htmx.status_code == 403 and htmx["Content-Type"].startswith("text/plain") and "may" in texts(htmx)
    assert versions(claim.key) == 1 and current(claim.key).status == "active"
    assert AuditEntry.objects.filter(target=claim.key, outcome="refused", action=f"claim_{action}").count() == 2


def test_an_editor_may_not_revoke_someone_elses_claim(owned):
    _, claim = owned
    editor, _ = login("editor")
    response = editor.post(reverse("knowledge:claim_revoke"), {"key": claim.key, "reason": "x", "next": LIST}, **HX)
    assert response.status_code == 403 and "Only the claim's owner" in texts(response)
    assert versions(claim.key) == 1


def test_refreshing_a_revoked_claim_is_a_conflict_that_writes_nothing(owned):
    """The wrong state: the page no longer offers it, and a stale form's POST is answered 409."""
    owner, claim = owned
    services.claim_revoke(user=owner, key=claim.key, reason="leaked")
    client = page_client(owner)
    now, url = timezone.now(), history(claim.key)
    data = {"key": claim.key, "next": url, "observed_at": now.strftime("%Y-%m-%dT%H:%M"),
            "refresh_after": (now + timedelta(days=5)).strftime("%Y-%m-%dT%H:%M")}
    htmx = client.post(reverse("knowledge:claim_refresh"), data, **HX)
    assert htmx.status_code == 409 and "Only a live claim can be refreshed" in texts(htmx)
    plain = client.post(reverse("knowledge:claim_refresh"), data, follow=True)
    assert plain.redirect_chain == [(url, 302)] and "Only a live claim can be refreshed" in texts(plain)
    assert versions(claim.key) == 2 and current(claim.key).status == "revoked"


def test_a_reason_is_required_and_the_refusal_returns_to_the_page(owned):
    _, claim = owned
    editor, _ = login("editor")
    plain = editor.post(reverse("knowledge:claim_invalidate"), {"key": claim.key, "reason": " ", "next": LIST},
                        follow=True)
    assert plain.redirect_chain == [(LIST, 302)] and "reason is required" in texts(plain)
    assert versions(claim.key) == 1


def test_next_must_be_this_site(owned):
    owner, claim = owned
    response = page_client(owner).post(reverse("knowledge:claim_revoke"),
                                       {"key": claim.key, "reason": "x", "next": "https://evil.example/claims/"})
    assert response.status_code == 302 and response["Location"] == reverse("knowledge:claim_review")


# ---------------------------------------------------------------- the history tells the truth

def test_history_of_a_stale_v1_says_it_is_current_and_stale(owned):
    owner, _ = owned
    claim = stale_v1(owner)
    viewer, _ = login("viewer")
    now = section(texts(viewer.get(history(claim.key))), "claim-current")
    assert 'data-version="1" data-status="stale"' in now and "<strong>Version 1</strong> is current" in now
    assert ">stale</span>" in now and ">active</span>" not in now and "lead, not as a fact" in now


def test_history_of_an_active_claim_with_a_pending_proposal_names_both(owned):
    owner, claim = owned
    agent, _ = make_agent(owner=owner)
    services.claim_propose(user=agent, data=proposal(key=claim.key, confidence="engineering-inference"))
    now = section(texts(page_client(owner).get(history(claim.key))), "claim-current")
    assert "<strong>Version 1</strong> is current" in now and 'data-status="active"' in now
    assert 'href="#version-2">v2</a>' in now and "Served to agents as a fact" in now


def test_history_shows_provenance_as_labelled_fields_with_times(owned):
    owner, source = owned
    derived = services.claim_propose(user=owner, data=proposal(derived_from=[source.key]))
    observed = timezone.now() - timedelta(hours=2)
    services.claim_refresh(user=owner, key=derived.key, data={
        "observed_at": iso(observed), "refresh_after": iso(observed + timedelta(days=9)),
        "source_refs": ["https://docs.example.com/billing-v2"], "reason": "re-read the docs"})
    client = page_client(owner)
    session = client.session
    session["time_mode"] = "local"
    session.save()
    page = texts(client.get(history(derived.key)))
    v2 = re.search(r'<tr id="version-2".*?</tr>', page, re.S).group()
    fields = dict(re.findall(r"<dt>(.*?)</dt><dd[^>]*>(.*?)</dd>", v2, re.S))
    assert fields["How"] == "refreshed with new evidence" and fields["From version"] == "1"
    assert fields["Actor"] == f"user:{owner.username}" and fields["Reason"] == "“re-read the docs”"
    assert "https://docs.example.com/billing-v2" in fields["Sources"]
    assert href_in(fields["Derived from"], history(source.key)) and fields["Source type"] == "official-doc"
    assert f'datetime="{observed.astimezone(dt_timezone.utc).isoformat()}"' in fields["Observed"]
    assert 'data-when="local"' in fields["Observed"] and 'data-when="local"' in fields["Refresh after"]
    assert "<dl class=\"facts\" data-provenance>" in v2 and "of_version" not in v2 and "action:" not in v2


def href_in(html: str, url: str) -> bool:
    return f'href="{url}"' in html


# ---------------------------------------------------------------- no N+1

def test_claims_page_query_count_is_flat_with_actions(django_assert_max_num_queries):
    owner, _ = make_operator("owner")
    other, _ = make_operator("owner")
    client = page_client(owner)

    def add(n):  # some the viewer owns (revoke shown), some another owner's; one stale of each
        who = owner if n % 2 else other
        services.claim_propose(user=who, data=proposal())
        if n % 3 == 0:
            stale_v1(who)

    few = assert_queries_flat(client, LIST, add, rows=12)
    html = texts(client.get(LIST))
    assert html.count('data-action="revoke"') >= 6 and html.count('data-action="invalidate"') >= 12
    with django_assert_max_num_queries(few):
        client.get(LIST)
    with django_assert_max_num_queries(10):
        client.get(LIST)
