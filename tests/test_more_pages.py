"""Compare, search and saved views, reports, workflows, claims, time display, error pages, small things."""

from datetime import datetime, timedelta, timezone

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from knowledge import services as knowledge_services
from ledger import services
from ledger.models import AuditEntry, SavedView, Workflow
from ledger.web.workflows import next_ticks
from tests.browser.scenarios import agent_driver, escalated_run, escalation_workflow
from tests.factories import HX, assert_queries_flat, login, make_operator, make_workflow, page_queries, texts
from tests.knowledge.conftest import proposal
from tests.ledger.web.test_run_page import long_run
from tests.factories import OUTSIDE_ASSET

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("name,args", [
    ("ledger:run_compare", []), ("ledger:reports", []), ("ledger:workflow_list", []),
    ("ledger:workflow_detail", ["x"]), ("knowledge:claim_list", []), ("ledger:oncall_preview", []),
])
def test_new_pages_require_login(client, name, args):
    response = client.get(reverse(name, args=args))
    assert response.status_code == 302 and response["Location"].startswith(reverse("login"))
    response = client.get(reverse(name, args=args), **HX)
    assert response.status_code == 401 and response["HX-Redirect"].startswith(reverse("login"))


# ---------------------------------------------------------------- compare

def test_compare_two_attempts_side_by_side():
    failed, escalated = escalated_run(agent_driver(escalation_workflow()), "cmp")
    viewer, _ = login("viewer")
    url = f"{reverse('ledger:run_compare')}?a={failed['id']}&b={escalated['id']}"
    for extra in ({}, HX):
        html = texts(viewer.get(url, **extra))
        for section in ("compare-inputs", "compare-decisions", "compare-stages", "compare-effects",
                        "compare-checkpoints"):
            assert f'id="{section}"' in html
        assert "retry_budget_exhausted" in html and "no_checkpoint" in html
        assert 'class="differs"' in html and "Same inputs." in html
    assert "<html" not in texts(viewer.get(url, **HX))


def test_compare_shows_input_changes_and_effect_keys():
    wf = make_workflow(stages=["push"], effect_stages=["push"], approval_stages=[])
    agent = agent_driver(wf)
    a = agent.trigger(intent="i", inputs={"v": 1, "keep": True})
    agent.pass_stage(a["id"], "push", effect_stage=True)
    b = agent.trigger(intent="i", inputs={"v": 2, "new": "x"})
    viewer, _ = login("viewer")
    html = texts(viewer.get(reverse("ledger:run_compare"), {"a": a["id"], "b": b["id"]}))
    assert 'data-change="changed"' in html and 'data-change="added"' in html and 'data-change="removed"' in html
    assert "ref-push-" in html


def test_compare_without_ids_is_an_empty_form_and_takes_unique_prefixes():
    """No ids: the form (200); unknown or ambiguous ids: a form error, never a 4xx/5xx page; prefixes work."""
    viewer, _ = login("viewer")
    empty = viewer.get(reverse("ledger:run_compare"))
    assert empty.status_code == 200 and 'name="a"' in texts(empty) and 'data-error="a"' not in texts(empty)
    response = viewer.get(reverse("ledger:run_compare"), {"a": "00000000-0000-0000-0000-000000000000",
                                                          "b": "zz<>!"})
    assert response.status_code == 200 and 'data-error="a"' in texts(response) and 'data-error="b"' in texts(response)
    failed, escalated = escalated_run(agent_driver(escalation_workflow()), "pfx")
    ok = viewer.get(reverse("ledger:run_compare"), {"a": failed["id"][:8], "b": escalated["id"][:10]})
    assert ok.status_code == 200 and 'id="compare-body"' in texts(ok)


def test_compare_query_count_is_constant_in_events():
    viewer, _ = login("viewer")
    _, a1 = long_run(2, "c-small")
    _, b1 = long_run(2, "c-small2")
    _, a2 = long_run(12, "c-big")
    _, b2 = long_run(12, "c-big2")
    url = reverse("ledger:run_compare")
    assert (page_queries(viewer, url, {"a": a1["id"], "b": b1["id"]})
            == page_queries(viewer, url, {"a": a2["id"], "b": b2["id"]}))


# ---------------------------------------------------------------- search, prefix, unknown filters, saved views

def test_run_search_by_id_prefix_and_intent():
    wf = make_workflow()
    one, _ = services.run_trigger(workflow_slug=wf.slug, inputs={}, intent="alpha-job")
    services.run_trigger(workflow_slug=wf.slug, inputs={}, intent="beta-job")
    viewer, _ = login("viewer")
    by_id = texts(viewer.get(reverse("ledger:run_list"), {"q": str(one.id)}, **HX))
    assert "alpha-job" in by_id and "beta-job" not in by_id
    by_prefix = texts(viewer.get(reverse("ledger:run_list"), {"q": str(one.id)[:6]}, **HX))
    assert "alpha-job" in by_prefix
    by_intent = texts(viewer.get(reverse("ledger:run_list"), {"q": "beta"}))
    assert "beta-job" in by_intent and "alpha-job" not in by_intent


def test_run_prefix_url_redirects_when_unique():
    wf = make_workflow()
    run, _ = services.run_trigger(workflow_slug=wf.slug, inputs={}, intent="p")
    viewer, _ = login("viewer")
    response = viewer.get(f"/runs/{str(run.id)[:8]}/")
    assert response.status_code == 302 and response["Location"] == reverse("ledger:run_detail", args=[run.id])
    assert viewer.get("/runs/ffff0000ffff/").status_code in (302, 404)
    assert viewer.get("/runs/zz/").status_code == 404


def test_unknown_filter_values_are_said_on_the_page():
    viewer, _ = login("viewer")
    for extra in ({}, HX):
        html = texts(viewer.get(reverse("ledger:run_list"), {"workflow": "nope", "state": "bogus"}, **extra))
        assert "There is no workflow “nope”" in html and "There is no state “bogus”" in html


def test_saved_views_are_stored_and_shared():
    wf = make_workflow()
    editor, _ = login("editor")
    response = editor.post(reverse("ledger:saved_view_create"),
                           {"name": "escalated", "query": f"state=escalated&workflow={wf.slug}&evil=1"})
    view = SavedView.objects.get(name="escalated")
    assert "evil" not in view.query and response["Location"] == view.url()
    viewer, _ = login("viewer")
    assert f'href="{view.url().replace("&", "&amp;")}"' in texts(viewer.get(reverse("ledger:run_list")))


def test_saved_view_with_a_blank_name_is_refused_with_a_message():
    """A name of spaces saves nothing and says that a name is required."""
    editor, _ = login("editor")
    response = editor.post(reverse("ledger:saved_view_create"), {"name": "   ", "query": "state=failed"}, follow=True)
    assert "A name is required." in texts(response) and not SavedView.objects.exists()


def test_run_list_query_count_is_constant_with_search_and_saved_views():
    wf = make_workflow()
    viewer, _ = login("viewer")
    for n in range(2):
        services.run_trigger(workflow_slug=wf.slug, inputs={}, intent=f"s-{n}")
        SavedView.objects.create(name=f"v{n}", query="state=failed", created_by="x")
    few = page_queries(viewer, reverse("ledger:run_list"), {"q": "s-"})
    for n in range(2, 10):
        services.run_trigger(workflow_slug=wf.slug, inputs={}, intent=f"s-{n}")
        SavedView.objects.create(name=f"v{n}", query="state=failed", created_by="x")
    assert page_queries(viewer, reverse("ledger:run_list"), {"q": "s-"}) == few


# ---------------------------------------------------------------- reports

def test_reports_page_draws_charts_per_workflow_with_a_window():
    _, run = long_run(2, "r")
    viewer, _ = login("viewer")
    for window in ("24h", "7d", "30d"):
        for extra in ({}, HX):
            html = texts(viewer.get(reverse("ledger:reports"), {"window": window}, **extra))
            assert f'data-window="{window}"' in html and 'class="bar"' in html and "<svg" in html
            assert "P95 trigger → decision" in html and "Duplicate side-effect rate" in html
    html = texts(viewer.get(reverse("ledger:reports")))
    assert 'href="/metrics"' in html and 'href="/api/v1/metrics/"' in html
    assert not OUTSIDE_ASSET.search(html) and "<script>" not in html


def test_reports_query_count_is_constant_in_runs():
    viewer, _ = login("viewer")
    wf = make_workflow()
    for n in range(2):
        services.run_trigger(workflow_slug=wf.slug, inputs={}, intent=f"m-{n}")
    few = page_queries(viewer, reverse("ledger:reports"))
    for n in range(2, 10):
        services.run_trigger(workflow_slug=wf.slug, inputs={}, intent=f"m-{n}")
    assert page_queries(viewer, reverse("ledger:reports")) == few


def test_reports_query_count_is_constant_in_workflows():
    viewer, _ = login("viewer")

    def add_workflow(n):
        wf = make_workflow()
        services.run_trigger(workflow_slug=wf.slug, inputs={}, intent=f"w-{n}")

    assert_queries_flat(viewer, reverse("ledger:reports"), add_workflow, rows=6)


# ---------------------------------------------------------------- workflows

def test_next_ticks_are_utc_and_follow_the_cron_line():
    now = datetime(2026, 12, 1, 10, 7, tzinfo=timezone.utc)  # a Tuesday
    assert next_ticks("*/15 * * * *", now=now)[:2] == [now.replace(minute=15), now.replace(minute=30)]
    daily = next_ticks("0 3 * * *", now=now)
    assert len(daily) == 5 and daily[0] == datetime(2026, 12, 2, 3, 0, tzinfo=timezone.utc)
    assert next_ticks("30 9 * * 1", now=now)[0] == datetime(2026, 12, 7, 9, 30, tzinfo=timezone.utc)  # Monday
    assert next_ticks("not a cron", now=now) == []


def test_workflow_pages_show_definition_schedule_policy_history_and_runs():
    wf = make_workflow(schedule="0 3 * * *")
    services.run_trigger(workflow_slug=wf.slug, inputs={}, intent="w")
    owner, user = login("owner")
    services.audit_record(user=user, action="policy_bump", outcome="done", target=wf.slug, reason="new gate",
                          data={"from": "1", "to": "2"})
    for extra in ({}, HX):
        listing = texts(owner.get(reverse("ledger:workflow_list"), **extra))
        assert f'data-workflow="{wf.slug}"' in listing
        html = texts(owner.get(reverse("ledger:workflow_detail", args=[wf.slug]), **extra))
        assert html.count("data-tick") == 5 and " UTC" in html
        assert "1 → 2" in html and "new gate" in html and ">w<" in html
    assert owner.get(reverse("ledger:workflow_detail", args=["missing"])).status_code == 404


def test_workflow_list_query_count_is_constant_in_runs():
    viewer, _ = login("viewer")
    wf = make_workflow()
    for n in range(2):
        services.run_trigger(workflow_slug=wf.slug, inputs={}, intent=f"wq-{n}")
    few = [page_queries(viewer, reverse(n, args=a)) for n, a in (("ledger:workflow_list", []),
                                                            ("ledger:workflow_detail", [wf.slug]))]
    for n in range(2, 10):
        services.run_trigger(workflow_slug=wf.slug, inputs={}, intent=f"wq-{n}")
        AuditEntry.objects.create(at=wf.created_at, actor="x", role="owner", action="policy_bump", outcome="done",
                                  target=wf.slug, data={"from": str(n), "to": str(n + 1)})
    assert [page_queries(viewer, reverse(n, args=a)) for n, a in (("ledger:workflow_list", []),
                                                             ("ledger:workflow_detail", [wf.slug]))] == few


# ---------------------------------------------------------------- claims

def test_claims_page_lists_current_claims_with_badges_search_and_scope():
    owner, user = login("owner")
    fact = knowledge_services.claim_propose(user=user, data=proposal(statement="Billing times out at 30 s."))
    other = knowledge_services.claim_propose(user=user, data=proposal(
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
        knowledge_services.claim_propose(user=user, data=proposal())
    few = page_queries(owner, reverse("knowledge:claim_list"))
    for _ in range(8):
        knowledge_services.claim_propose(user=user, data=proposal())
    assert page_queries(owner, reverse("knowledge:claim_list")) == few


def test_claims_page_hides_sensitive_claims_from_viewers():
    owner, user = login("owner")
    secret = knowledge_services.claim_propose(user=user, data=proposal(
        sensitivity="sensitive", retention_until=(datetime.now(timezone.utc) + timedelta(days=60)).isoformat()))
    viewer, _ = login("viewer")
    assert secret.key in texts(owner.get(reverse("knowledge:claim_list")))
    assert secret.key not in texts(viewer.get(reverse("knowledge:claim_list")))


def test_claim_refresh_form_has_sensible_defaults():
    owner, user = login("owner")
    knowledge_services.claim_propose(user=user, now=datetime.now(timezone.utc) - timedelta(days=30), data=proposal(
        observed_at=(datetime.now(timezone.utc) - timedelta(days=31)).isoformat(),
        refresh_after=(datetime.now(timezone.utc) - timedelta(days=1)).isoformat()))
    html = texts(owner.get(reverse("knowledge:claim_review")))
    today = datetime.now(timezone.utc)
    assert f'name="observed_at" value="{today:%Y-%m-%d}' in html
    assert f'name="refresh_after" value="{today + timedelta(days=30):%Y-%m-%d}' in html


# ---------------------------------------------------------------- time, errors, favicon, create_operator

def test_time_component_utc_by_default_relative_on_choice():
    _, run = long_run(1, "t")
    viewer, _ = login("viewer")
    url = reverse("ledger:run_detail", args=[run["id"]])
    html = texts(viewer.get(url))
    assert 'data-when="utc"' in html and " UTC</time>" in html and 'title="20' in html
    assert viewer.post(reverse("time_mode"), {"mode": "relative", "next": url})["Location"] == url
    assert 'data-when="relative"' in texts(viewer.get(url)) and "just now</time>" in texts(viewer.get(url))
    viewer.post(reverse("time_mode"), {"mode": "local", "next": "https://evil.example/"})
    assert 'data-when="local"' in texts(viewer.get(url))


def test_error_pages_keep_the_menu_and_the_api_keeps_json():
    viewer, _ = login("viewer")
    page = viewer.get("/no/such/page/")
    assert page.status_code == 404 and 'class="nav"' in texts(page) and "Not found" in texts(page)
    api = viewer.get("/api/v1/no-such-thing/")
    assert api.status_code == 404 and api.json()["code"] == "not_found"
    from stateboard.errors import handler403, handler500
    from django.test import RequestFactory

    request = RequestFactory().get("/runs/")
    request.user = make_operator("viewer")[0]
    assert handler403(request).status_code == 403 and b"Not allowed" in handler403(request).content
    assert handler500(request).status_code == 500
    api_request = RequestFactory().get("/api/v1/runs/")
    assert handler500(api_request)["Content-Type"] == "application/json"


def test_favicon_is_served_locally():
    viewer, _ = login("viewer")
    html = texts(viewer.get(reverse("dashboard")))
    assert 'rel="icon" type="image/svg+xml" href="/static/stateboard/favicon.svg"' in html
    from django.contrib.staticfiles import finders

    assert finders.find("stateboard/favicon.svg")


def test_create_operator_superuser_option():
    call_command("create_operator", "root-op", "--role", "owner", "--superuser")
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.get(username="root-op")
    assert user.is_superuser and user.is_staff and user.groups.filter(name="owner").exists()
    call_command("create_operator", "plain-op", "--role", "viewer")
    assert not get_user_model().objects.get(username="plain-op").is_superuser


def test_dashboard_refreshes_while_something_is_pending():
    viewer, _ = login("viewer")
    assert "every 5s" not in texts(viewer.get(reverse("dashboard")))
    escalated_run(agent_driver(escalation_workflow()), "d")
    html = texts(viewer.get(reverse("dashboard")))
    assert "every 5s" in html
    assert texts(viewer.get(reverse("dashboard"), **HX)).strip().startswith('<div id="dashboard-body"')
    assert Client().get(reverse("dashboard")).status_code == 302
