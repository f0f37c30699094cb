"""Server-rendered pages: each plain and with ``HX-Request``, role-gated actions, no N+1 on lists."""

import uuid

import pytest
from django.contrib.staticfiles import finders
from django.urls import reverse

from ledger import services
from ledger.models import Approval, AuditEntry, Run
from tests.browser.scenarios import (
    agent_driver,
    approval_workflow,
    awaiting_approval_run,
    completed_run,
    escalated_run,
    escalation_workflow,
)
from tests.factories import (
    HX,
    OUTSIDE_ASSET,
    assert_queries_flat,
    login,
    make_operator,
    make_workflow,
    page_queries,
    texts,
)

pytestmark = pytest.mark.django_db



@pytest.fixture
def awaiting():
    """Two runs awaiting approval of their deploy: (workflow, [(run, approval), ...])."""
    wf = approval_workflow()
    agent = agent_driver(wf)
    return wf, [awaiting_approval_run(agent, "post-a"), awaiting_approval_run(agent, "post-b")]


@pytest.fixture
def escalated():
    """(failed run, escalated run) of one intent."""
    wf = escalation_workflow()
    return escalated_run(agent_driver(wf), "nightly")


# ---------------------------------------------------------------- login and layout

@pytest.mark.parametrize("name,args", [
    ("dashboard", []), ("ledger:run_list", []), ("ledger:approval_list", []), ("ledger:oncall", []),
    ("ledger:run_detail", [uuid.uuid4()]),
])
def test_pages_require_login(client, name, args):
    """Anonymous visitors are sent to the login page; an htmx request (a poll after the session ended)
    gets 401 with HX-Redirect, so the whole page goes there instead of the login form swapped into a part."""
    url = reverse(name, args=args)
    response = client.get(url)
    assert response.status_code == 302 and response["Location"].startswith(reverse("login"))
    response = client.get(url, **HX)
    assert response.status_code == 401 and response["HX-Redirect"].startswith(reverse("login"))


@pytest.mark.parametrize("name", ["ledger:approval_approve", "ledger:approval_reject", "ledger:run_retry",
                                  "ledger:run_compensate", "ledger:run_abandon"])
def test_actions_require_login_and_post(client, name):
    url = reverse(name, args=[uuid.uuid4()])
    assert client.post(url)["Location"].startswith(reverse("login"))
    viewer, _ = login("viewer")
    assert viewer.get(url).status_code == 405


def test_login_page_logs_in_and_lands_on_dashboard(client):
    user, _ = make_operator("viewer", name="vera")
    user.set_password("correct horse battery")
    user.save()
    page = client.get(reverse("login"))
    assert page.status_code == 200 and 'name="password"' in texts(page)
    response = client.post(reverse("login"), {"username": "vera", "password": "correct horse battery"})
    assert response.status_code == 302 and response["Location"] == reverse("dashboard")
    assert client.get(reverse("dashboard")).status_code == 200


def test_base_layout_serves_htmx_locally_with_csrf_header_and_nav():
    """htmx comes from django-htmx's static files; the CSRF token rides in hx-headers; logout is a POST."""
    viewer, _ = login("viewer")
    html = texts(viewer.get(reverse("dashboard")))
    assert "/static/django_htmx/htmx-2.min.js" in html
    assert "unpkg.com" not in html and not OUTSIDE_ASSET.search(html)
    assert "/static/stateboard/app.js" in html and "/static/stateboard/app.css" in html
    assert 'hx-headers=\'{"X-CSRFToken": "' in html
    assert 'id="htmx-error"' in html
    for url in (reverse("ledger:run_list"), reverse("ledger:approval_list"), reverse("ledger:oncall"),
                "/api/v1/docs/"):
        assert f'href="{url}"' in html
    assert f'action="{reverse("logout")}"' in html and 'method="post"' in html
    assert "<script>" not in html  # no inline scripts
    assert finders.find("stateboard/app.js") and finders.find("stateboard/app.css")


def test_logout_is_a_post(client):
    viewer, _ = login("viewer")
    response = viewer.post(reverse("logout"))
    assert response.status_code == 302
    assert viewer.get(reverse("dashboard")).status_code == 302


# ---------------------------------------------------------------- dashboard

def test_dashboard_shows_counts_pending_approvals_and_recent_runs(awaiting, escalated):
    viewer, _ = login("viewer")
    for extra in ({}, HX):
        response = viewer.get(reverse("dashboard"), **extra)
        assert response.status_code == 200
        html = texts(response)
        assert "Runs by state" in html and "Pending approvals (3)" in html  # 2 high-impact + 1 escalation
        assert "post-a" in html and "nightly" in html
        assert f"{reverse('ledger:run_list')}?state=awaiting_approval" in html


# ---------------------------------------------------------------- runs list

def test_run_list_plain_has_filters_and_polling_table(awaiting):
    viewer, _ = login("viewer")
    html = texts(viewer.get(reverse("ledger:run_list")))
    assert "<html" in html and 'id="run-filter"' in html
    assert 'id="run-table"' in html and 'hx-trigger="every 5s"' in html
    assert "post-a" in html and "post-b" in html


def test_run_list_htmx_returns_only_the_table_partial(awaiting):
    viewer, _ = login("viewer")
    html = texts(viewer.get(reverse("ledger:run_list"), {"intent": "post-a"}, **HX))
    assert "<html" not in html and 'id="run-filter"' not in html
    assert html.strip().startswith('<section id="run-table"')
    assert "post-a" in html and "post-b" not in html
    assert "intent=post-a" in html  # the poll keeps the filters


def test_run_list_filters_by_workflow_state_and_intent(awaiting, escalated):
    wf, _ = awaiting
    viewer, _ = login("viewer")
    by_workflow = texts(viewer.get(reverse("ledger:run_list"), {"workflow": wf.slug}, **HX))
    assert "post-a" in by_workflow and "nightly" not in by_workflow
    by_state = texts(viewer.get(reverse("ledger:run_list"), {"state": "escalated"}, **HX))
    assert "nightly" in by_state and "post-a" not in by_state
    by_intent = texts(viewer.get(reverse("ledger:run_list"), {"intent": "post-b"}, **HX))
    assert "post-b" in by_intent and "post-a" not in by_intent
    assert "0 runs" in texts(viewer.get(reverse("ledger:run_list"), {"intent": "POST-B"}, **HX))  # exact
    by_search = texts(viewer.get(reverse("ledger:run_list"), {"q": "ST-B"}, **HX))  # q: intent substring
    assert "post-b" in by_search and "post-a" not in by_search
    ignored = viewer.get(reverse("ledger:run_list"), {"state": "bogus"})
    assert ignored.status_code == 200 and "post-a" in texts(ignored)


def test_run_list_pages_keep_the_filters_in_their_links():
    """Past one page of runs, the newer / older links carry the filters along with the page number."""
    wf = make_workflow()
    for n in range(51):
        services.run_trigger(workflow_slug=wf.slug, inputs={}, intent=f"p-{n}")
    viewer, _ = login("viewer")
    first = texts(viewer.get(reverse("ledger:run_list"), {"workflow": wf.slug}))
    assert f'href="?workflow={wf.slug}&amp;page=2">Older →' in first and "← Newer" not in first
    assert "page 1 of 2" in first
    second = texts(viewer.get(reverse("ledger:run_list"), {"workflow": wf.slug, "page": 2}))
    assert f'href="?workflow={wf.slug}&amp;page=1">← Newer' in second and "Older →" not in second


def test_run_list_query_count_does_not_grow_with_rows(django_assert_max_num_queries):
    """One query for the rows (workflow joined), whatever their number."""
    wf = make_workflow()
    viewer, _ = login("viewer")
    few = assert_queries_flat(viewer, reverse("ledger:run_list"), lambda n: services.run_trigger(
        workflow_slug=make_workflow().slug if n and n % 5 == 0 else wf.slug, inputs={}, intent=f"i-{n}"), rows=40)
    assert page_queries(viewer, reverse("ledger:run_list"), **HX) <= few
    with django_assert_max_num_queries(9):  # + the page's current stages' times, one grouped read (SPEC §15)
        viewer.get(reverse("ledger:run_list"))


# ---------------------------------------------------------------- run detail

def test_run_detail_shows_machine_decision_timeline_events_and_checkpoint(awaiting):
    _, [(run, approval), _] = awaiting
    viewer, _ = login("viewer")
    response = viewer.get(reverse("ledger:run_detail", args=[run["id"]]))
    assert response.status_code == 200
    html = texts(response)
    assert "<svg" in html and 'data-state="awaiting_approval"' in html
    assert 'class="step current" data-state="awaiting_approval"' in html  # where the run is
    assert "in order: captured, restore, fresh, execute, checkpointed, awaiting_approval" in html
    assert "no_checkpoint" in html  # the decision's reason
    assert '<tr data-stage="build" data-status="succeeded"' in html and '<tr data-stage="deploy"' in html
    assert 'id="run-live"' in html and 'hx-trigger="every 3s"' in html
    assert "approval_requested" in html
    assert "Latest checkpoint of this intent" in html and "No checkpoint for this intent" not in html
    assert "Roll out web v42 to prod" in html  # the approval's proposed action


def test_run_detail_htmx_returns_every_panel_in_one_partial(awaiting):
    """The poll re-renders the whole live region (badge, drawing, panels, events), not the layout."""
    _, [(run, _), _] = awaiting
    viewer, _ = login("viewer")
    html = texts(viewer.get(reverse("ledger:run_detail", args=[run["id"]]), **HX))
    assert html.strip().startswith('<div id="run-live" data-state="awaiting_approval"')
    assert "<html" not in html and 'id="run-badge"' in html and "<svg" in html
    for panel in ("decision-panel", "stages-panel", "effects-panel", "approvals-panel", "checkpoint-panel",
                  "lease-panel", "event-list"):
        assert f'id="{panel}"' in html
    assert 'hx-trigger="every 3s"' in html


def test_run_detail_of_a_terminal_run_does_not_poll():
    wf = make_workflow(stages=["build", "push"], effect_stages=["push"], approval_stages=[])
    run = completed_run(agent_driver(wf), wf, "done")
    assert run["state"] == "completed"
    viewer, _ = login("viewer")
    for extra in ({}, HX):
        html = texts(viewer.get(reverse("ledger:run_detail", args=[run["id"]]), **extra))
        assert 'id="event-list"' in html and "hx-trigger" not in html.split('id="run-live"')[1].split(">")[0]
        assert "every 3s" not in html
    html = texts(viewer.get(reverse("ledger:run_detail", args=[run["id"]])))
    assert "https://example.test/check" in html and "sha256:1" in html  # evidence
    assert "verified" in html and "ref-push-" in html  # the effect and its reference


def test_run_detail_shows_failed_stage_evidence_excerpt_and_refused_attempts(escalated):
    failed, run = escalated
    viewer, _ = login("viewer")
    html = texts(viewer.get(reverse("ledger:run_detail", args=[failed["id"]])))
    assert "tests_red" in html and "3 tests failed" in html
    viewer.post(reverse("ledger:run_retry", args=[run["id"]]), {"reason": "let me"})
    html = texts(viewer.get(reverse("ledger:run_detail", args=[run["id"]])))
    assert "retry_budget_exhausted" in html and "permission_denied" in html and "refused" in html


def test_run_detail_unknown_run_is_404():
    viewer, _ = login("viewer")
    assert viewer.get(reverse("ledger:run_detail", args=[uuid.uuid4()])).status_code == 404


# ---------------------------------------------------------------- approvals inbox

def test_approval_inbox_shows_buttons_to_editors_only(awaiting):
    editor, _ = login("editor")
    viewer, _ = login("viewer")
    for extra in ({}, HX):
        editor_html = texts(editor.get(reverse("ledger:approval_list"), **extra))
        viewer_html = texts(viewer.get(reverse("ledger:approval_list"), **extra))
        assert editor_html.count('data-action="approve"') == 2 and editor_html.count('data-action="reject"') == 2
        assert 'method="post"' in editor_html and "hx-post=" in editor_html
        assert "post-a" in viewer_html and 'data-action="approve"' not in viewer_html
        assert "hx-post" not in viewer_html
    assert "<html" not in texts(editor.get(reverse("ledger:approval_list"), **HX))


def test_escalation_requests_are_decided_by_oncall_not_editors(escalated):
    editor, _ = login("editor")
    oncall, _ = login("oncall")
    assert 'data-action="approve"' not in texts(editor.get(reverse("ledger:approval_list")))
    assert 'data-action="approve"' in texts(oncall.get(reverse("ledger:approval_list")))
    approval = Approval.objects.get(kind="escalation")
    refused = editor.post(reverse("ledger:approval_approve", args=[approval.id]), **HX)
    assert refused.status_code == 403
    approval.refresh_from_db()
    assert approval.status == "pending"


def test_inbox_rows_say_oncalls_words_for_an_escalation_and_mark_only_what_the_user_may_decide(escalated, awaiting):
    """One escalation, one vocabulary: the inbox offers on-call's Retry / Abandon (as /oncall/ does), and
    only the rows the user may decide are marked for j/k (an editor skips escalations)."""
    escalation = Approval.objects.get(kind="escalation")
    _, [(_, high_impact), _] = awaiting

    def row(html, approval_id):
        return html.split(f'id="approval-{approval_id}"')[1].split("</tr>")[0]

    editor_html = texts(login("editor")[0].get(reverse("ledger:approval_list")))
    assert "data-actionable" not in row(editor_html, escalation.id).split(">")[0]
    assert "data-actionable" in row(editor_html, high_impact["id"]).split(">")[0]
    oncall_html = texts(login("oncall")[0].get(reverse("ledger:approval_list")))
    mine = row(oncall_html, escalation.id)
    assert "data-actionable" in mine.split(">")[0]
    assert ">Retry</button>" in mine and ">Abandon</button>" in mine
    assert "Approve" not in mine and ">Reject</button>" not in mine
    oncall_page = texts(login("oncall")[0].get(reverse("ledger:oncall")))
    assert ">Retry</button>" in oncall_page and ">Abandon</button>" in oncall_page


def test_oncall_approving_an_escalation_in_the_inbox_retries_the_run(escalated):
    _, run = escalated
    oncall, _ = login("oncall")
    approval = Approval.objects.get(kind="escalation", run_id=run["id"])
    response = oncall.post(reverse("ledger:approval_approve", args=[approval.id]), {"reason": "runner fixed"}, **HX)
    assert response.status_code == 200 and 'data-status="approved"' in texts(response)
    assert Run.objects.get(id=run["id"]).state not in ("escalated", "failed")


def test_viewer_post_is_refused_server_side_and_audited(awaiting):
    _, [(run, approval), _] = awaiting
    viewer, _ = login("viewer")
    url = reverse("ledger:approval_approve", args=[approval["id"]])
    plain = viewer.post(url)
    assert plain.status_code == 403 and "Only an editor may approve" in texts(plain)
    htmx = viewer.post(url, **HX)
    assert htmx.status_code == 403 and htmx["Content-Type"].startswith("text/plain")
    assert Approval.objects.get(id=approval["id"]).status == "pending"
    assert AuditEntry.objects.filter(run_id=run["id"], outcome="refused", code="permission_denied").count() == 2


def test_approve_plain_post_redirects_to_the_inbox_with_a_message(awaiting):
    _, [(run, approval), _] = awaiting
    editor, _ = login("editor")
    response = editor.post(reverse("ledger:approval_approve", args=[approval["id"]]))
    assert response.status_code == 302 and response["Location"] == reverse("ledger:approval_list")
    assert Approval.objects.get(id=approval["id"]).status == "approved"
    page = texts(editor.get(response["Location"]))
    assert "is approved" in page
    assert f'id="approval-{approval["id"]}"' not in page  # no longer pending


def test_approve_with_htmx_returns_the_changed_row_and_triggers_an_event(awaiting):
    _, [(run, approval), _] = awaiting
    editor, _ = login("editor")
    response = editor.post(reverse("ledger:approval_approve", args=[approval["id"]]), **HX)
    assert response.status_code == 200
    html = texts(response)
    assert html.strip().startswith(f'<tr id="approval-{approval["id"]}" data-status="approved"')
    assert 'data-action="approve"' not in html and "user:" in html
    assert "approval-changed" in response["HX-Trigger"]


def test_reject_needs_a_reason(awaiting):
    _, [(run, approval), _] = awaiting
    editor, _ = login("editor")
    url = reverse("ledger:approval_reject", args=[approval["id"]])
    htmx = editor.post(url, {"reason": "  "}, **HX)
    assert htmx.status_code == 422 and "reason is required" in texts(htmx)
    plain = editor.post(url, {}, follow=True)
    assert plain.redirect_chain[-1][0] == reverse("ledger:approval_list")
    assert "reason is required" in texts(plain)
    assert Approval.objects.get(id=approval["id"]).status == "pending"


def test_reject_with_a_reason_abandons_the_run(awaiting):
    _, [(run, approval), _] = awaiting
    editor, _ = login("editor")
    response = editor.post(reverse("ledger:approval_reject", args=[approval["id"]]),
                           {"reason": "not during the freeze"}, **HX)
    assert response.status_code == 200 and "not during the freeze" in texts(response)
    assert Approval.objects.get(id=approval["id"]).status == "rejected"
    assert Run.objects.get(id=run["id"]).state == "abandoned"


def test_a_refused_decision_shows_the_service_message(awaiting):
    """Approving a rejected request is a 409 from the service: text with htmx, a message without."""
    _, [(run, approval), _] = awaiting
    editor, _ = login("editor")
    editor.post(reverse("ledger:approval_reject", args=[approval["id"]]), {"reason": "no"})
    url = reverse("ledger:approval_approve", args=[approval["id"]])
    htmx = editor.post(url, **HX)
    assert htmx.status_code == 409 and texts(htmx) == "This request is already rejected."
    plain = editor.post(url, follow=True)
    assert "This request is already rejected." in texts(plain)
    assert AuditEntry.objects.filter(run_id=run["id"], code="approval_decided").count() == 2


def test_approval_inbox_query_count_does_not_grow_with_rows(django_assert_max_num_queries):
    wf = approval_workflow()
    agent = agent_driver(wf)
    editor, _ = login("editor")
    assert_queries_flat(editor, reverse("ledger:approval_list"), lambda n: awaiting_approval_run(agent, f"p-{n}"),
                        rows=15)
    with django_assert_max_num_queries(10):  # pending + evidence packs (3) + decided history + filters
        editor.get(reverse("ledger:approval_list"))


# ---------------------------------------------------------------- on-call

def test_oncall_page_lists_failed_and_escalated_runs_with_buttons_for_oncall(escalated, awaiting):
    failed, run = escalated
    oncall, _ = login("oncall")
    viewer, _ = login("viewer")
    for extra in ({}, HX):
        html = texts(oncall.get(reverse("ledger:oncall"), **extra))
        assert f'id="oncall-{run["id"]}"' in html and f'id="oncall-{failed["id"]}"' in html
        assert "post-a" not in html  # awaiting approval is not on-call business
        assert 'data-action="retry"' in html and 'data-action="abandon"' in html
        assert "hx-confirm=" in html
        viewer_html = texts(viewer.get(reverse("ledger:oncall"), **extra))
        assert f'id="oncall-{run["id"]}"' in viewer_html
        assert 'data-action="retry"' not in viewer_html and 'id="bulk-form"' not in viewer_html
    assert "<html" not in texts(oncall.get(reverse("ledger:oncall"), **HX))
    assert "tests_red" in html and "retry_budget_exhausted" in html  # why each run is where it is
    filtered = texts(oncall.get(reverse("ledger:oncall"), {"state": "failed"}, **HX))
    assert f'id="oncall-{failed["id"]}"' in filtered and f'id="oncall-{run["id"]}"' not in filtered


@pytest.mark.parametrize("role", ["viewer", "editor"])
def test_oncall_actions_are_refused_for_other_roles(escalated, role):
    _, run = escalated
    client, _ = login(role)
    for name in ("ledger:run_retry", "ledger:run_compensate", "ledger:run_abandon"):
        assert client.post(reverse(name, args=[run["id"]]), {"reason": "x"}).status_code == 403
        assert client.post(reverse(name, args=[run["id"]]), {"reason": "x"}, **HX).status_code == 403
    bulk = client.post(reverse("ledger:oncall_bulk"), {"action": "abandon", "run": [run["id"]], "reason": "x"})
    assert bulk.status_code == 403
    assert Run.objects.get(id=run["id"]).state == "escalated"


def test_oncall_retry_plain_redirects_and_htmx_returns_the_row(escalated):
    _, run = escalated
    oncall, _ = login("oncall")
    response = oncall.post(reverse("ledger:run_retry", args=[run["id"]]),
                           {"reason": "flaky runner", "next": reverse("ledger:oncall") + "?state=escalated"})
    assert response.status_code == 302 and response["Location"] == reverse("ledger:oncall") + "?state=escalated"
    assert Run.objects.get(id=run["id"]).state != "escalated"
    assert "Retry:" in texts(oncall.get(response["Location"]))


def test_oncall_abandon_with_htmx_needs_a_reason_then_returns_the_row(escalated):
    _, run = escalated
    oncall, _ = login("oncall")
    url = reverse("ledger:run_abandon", args=[run["id"]])
    refused = oncall.post(url, {"reason": ""}, **HX)
    assert refused.status_code == 422 and "reason is required" in texts(refused)
    response = oncall.post(url, {"reason": "obsolete"}, **HX)
    assert response.status_code == 200
    assert texts(response).strip().startswith(f'<tr id="oncall-{run["id"]}" data-state="abandoned"')
    assert "run-changed" in response["HX-Trigger"]
    assert Run.objects.get(id=run["id"]).state == "abandoned"


def test_oncall_refused_service_action_shows_its_message(escalated):
    """Retrying a failed (terminal) run is refused by the service with 409."""
    failed, _ = escalated
    oncall, _ = login("oncall")
    htmx = oncall.post(reverse("ledger:run_retry", args=[failed["id"]]), **HX)
    assert htmx.status_code == 409 and "Only an escalated run can be retried" in texts(htmx)
    plain = oncall.post(reverse("ledger:run_retry", args=[failed["id"]]), follow=True)
    assert "Only an escalated run can be retried" in texts(plain)


def test_oncall_bulk_abandons_the_selected_runs():
    wf = escalation_workflow()
    agent = agent_driver(wf)
    runs = [escalated_run(agent, f"job-{n}")[1] for n in range(3)]
    oncall, _ = login("oncall")
    chosen = [runs[0]["id"], runs[1]["id"]]
    no_reason = oncall.post(reverse("ledger:oncall_bulk"), {"action": "abandon", "run": chosen}, **HX)
    assert no_reason.status_code == 422 and "needs a reason" in texts(no_reason)
    response = oncall.post(reverse("ledger:oncall_bulk"),
                           {"action": "abandon", "run": chosen, "reason": "superseded", "workflow": wf.slug}, **HX)
    assert response.status_code == 200
    html = texts(response)
    assert html.strip().startswith('<section id="oncall-table"') and "Abandon: 2 done, 0 refused." in html
    assert "run-changed" in response["HX-Trigger"]
    states = {str(r.id): r.state for r in Run.objects.filter(id__in=[r["id"] for r in runs])}
    assert states == {runs[0]["id"]: "abandoned", runs[1]["id"]: "abandoned", runs[2]["id"]: "escalated"}


def test_oncall_bulk_plain_post_reports_refusals_and_redirects():
    wf = escalation_workflow()
    agent = agent_driver(wf)
    failed, run = escalated_run(agent, "job")
    oncall, _ = login("oncall")
    response = oncall.post(reverse("ledger:oncall_bulk"),
                           {"action": "retry", "run": [run["id"], failed["id"]],
                            "next": reverse("ledger:oncall") + "?workflow=" + wf.slug}, follow=True)
    assert response.redirect_chain[-1][0] == reverse("ledger:oncall") + "?workflow=" + wf.slug
    html = texts(response)
    assert "Retry: 1 done, 1 refused." in html and "Only an escalated run can be retried" in html


@pytest.mark.parametrize("action", ["x" * 40, "delete_everything", ""])
@pytest.mark.parametrize("role", ["oncall", "viewer"])
def test_oncall_bulk_refuses_an_unknown_action_with_a_400_and_names_no_audit_after_it(escalated, role, action):
    """The bulk's policy is declared once: an action it does not know (40 characters, a caller's invention,
    none) is 400 ``unknown_action`` for htmx and plain posts alike, never a 500; nothing is done, and the
    refusal is audited under the bulk's own name, never one the caller chose."""
    _, run = escalated
    client, _ = login(role)
    form = {"action": action, "run": [run["id"]], "reason": "x"}
    htmx = client.post(reverse("ledger:oncall_bulk"), form, **HX)
    assert htmx.status_code == 400 and "bulk action is one of retry, compensate, abandon" in texts(htmx)
    assert client.post(reverse("ledger:oncall_bulk"), form).status_code == 400
    assert Run.objects.get(id=run["id"]).state == "escalated"
    entries = AuditEntry.objects.all()
    assert {(e.action, e.code) for e in entries} == {("oncall_bulk", "unknown_action")}
    assert not [e for e in entries if action and action in e.action]


def test_oncall_page_query_count_does_not_grow_with_rows(django_assert_max_num_queries):
    wf = escalation_workflow()
    agent = agent_driver(wf)
    oncall, _ = login("oncall")
    assert_queries_flat(oncall, reverse("ledger:oncall"), lambda n: escalated_run(agent, f"q-{n}"), rows=8)
    assert Run.objects.filter(state__in=("failed", "escalated")).count() == 16
    # session and user, the two sections, the needs-a-human counts (runs 2, approvals 1, claim queues 3),
    # the rows' current stages' durations and the failures that escalated them (one read each for all rows)
    with django_assert_max_num_queries(14):
        oncall.get(reverse("ledger:oncall"))
