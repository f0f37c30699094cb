"""Approvals inbox as a decision desk, the on-call preview, and redaction on inbox and admin."""

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from ledger import services
from ledger.domain import machine
from ledger.models import Approval, LedgerEvent, Run
from ledger.web import preview
from stateboard.errors import Conflict
from tests.browser.scenarios import (
    EVIDENCE,
    agent_driver,
    approval_workflow,
    awaiting_approval_run,
    escalated_run,
    escalation_workflow,
)
from tests.factories import HX, login, make_operator, make_workflow, page_client, page_queries, texts

pytestmark = pytest.mark.django_db

SECRET_ACTION = {"system": "k8s", "operation": "deploy", "target": "web@prod",
                 "summary": "Roll out with password=hunter2 and AKIAIOSFODNN7EXAMPLE"}
SECRETS = ("hunter2", "AKIAIOSFODNN7EXAMPLE", "MIIEowIBAAKCAQEA7", "eyJtoken.secret")
PEM = "-----BEGIN PRIVATE KEY-----\nMIIEowIBAAKCAQEA7\n-----END PRIVATE KEY-----"


def secret_run():
    """An awaiting-approval run whose inputs, evidence and action carry each kind of secret."""
    wf = approval_workflow()
    agent = agent_driver(wf)
    run = agent.trigger(intent="s", inputs={"auth": "Bearer eyJtoken.secret", "key": PEM})
    agent.event(run["id"], "build", "started")
    agent.event(run["id"], "build", "succeeded",
                evidence=[{**EVIDENCE[0], "excerpt": f"log: {PEM} password=hunter2"}])
    response = agent.client.post(f"/api/v1/runs/{run['id']}/approvals/",
                                 {"kind": "high_impact", "stage": "deploy", "action": SECRET_ACTION}, format="json")
    assert response.status_code == 201
    return run, response.json()


# ---------------------------------------------------------------- redaction everywhere

def test_redaction_on_the_run_page_inbox_and_admin():
    run, approval = secret_run()
    viewer, _ = login("viewer")
    pages = [texts(viewer.get(reverse("ledger:run_detail", args=[run["id"]]))),
             texts(viewer.get(reverse("ledger:approval_list")))]
    admin_user, _ = make_operator("owner")
    admin_user.is_staff = admin_user.is_superuser = True
    admin_user.save()
    admin = page_client(admin_user)
    event = LedgerEvent.objects.filter(run_id=run["id"], kind="succeeded").first()
    for url in (f"/admin/ledger/ledgerevent/{event.id}/change/", f"/admin/ledger/run/{run['id']}/change/",
                f"/admin/ledger/approval/{approval['id']}/change/"):
        response = admin.get(url)
        assert response.status_code == 200, url
        pages.append(texts(response))
    for html in pages:
        assert "[redacted]" in html
        for secret in SECRETS:
            assert secret not in html, secret
    assert "log: -----BEGIN PRIVATE KEY----- [redacted]" in pages[2]  # the evidence, in the admin


# ---------------------------------------------------------------- inbox

def test_inbox_shows_the_evidence_pack_digest_requester_and_deadline():
    wf = approval_workflow()
    agent = agent_driver(wf)
    done = agent.trigger(intent="post", inputs={"intent": "post", "v": 1})
    agent.pass_stage(done["id"], "build")
    Run.objects.filter(id=done["id"]).update(state="completed")  # the last verified run of the intent
    run = agent.trigger(intent="post", inputs={"intent": "post", "v": 2})
    agent.event(run["id"], "build", "started")
    agent.event(run["id"], "build", "succeeded")
    response = agent.client.post(f"/api/v1/runs/{run['id']}/approvals/",
                                 {"kind": "high_impact", "stage": "deploy", "action": SECRET_ACTION}, format="json")
    approval = Approval.objects.get(id=response.json()["id"])
    editor, _ = login("editor")
    for extra in ({}, HX):
        html = texts(editor.get(reverse("ledger:approval_list"), **extra))
        assert approval.action_digest[:12] in html and approval.requested_by in html
        assert "deadline <time" in html and "since the last verified run" in html
        assert "<code>v</code> changed" in html  # what changed since the last verified run
        assert f"?a={done['id']}&amp;b={run['id']}" in html
        assert 'hx-confirm="Approve' in html and 'name="reason"' in html and "placeholder=\"note (optional)\"" in html
        assert "every 5s" in html  # pending: the table refreshes itself
    assert "<kbd>j</kbd>" in texts(editor.get(reverse("ledger:approval_list")))


def test_inbox_stops_refreshing_when_nothing_is_pending():
    editor, _ = login("editor")
    html = texts(editor.get(reverse("ledger:approval_list")))
    assert "No pending requests" in html and "every 5s" not in html


def test_inbox_decided_history_with_filters():
    wf = approval_workflow()
    agent = agent_driver(wf)
    (_, a), (_, b) = awaiting_approval_run(agent, "h-a"), awaiting_approval_run(agent, "h-b")
    editor, user = login("editor")
    services.approval_decide(approval_id=a["id"], user=user, approve=True, reason="fine")
    services.approval_decide(approval_id=b["id"], user=user, approve=False, reason="freeze")
    html = texts(editor.get(reverse("ledger:approval_list")))
    assert f'id="decided-{a["id"]}"' in html and f'id="decided-{b["id"]}"' in html
    rejected = texts(editor.get(reverse("ledger:approval_list"), {"section": "history", "status": "rejected"}, **HX))
    assert rejected.strip().startswith('<section id="approval-history"')
    assert f'id="decided-{b["id"]}"' in rejected and f'id="decided-{a["id"]}"' not in rejected
    other = texts(editor.get(reverse("ledger:approval_list"), {"workflow": make_workflow().slug}))
    assert "No decided requests match" in other
    assert f'id="decided-{a["id"]}"' in texts(editor.get(reverse("ledger:approval_list"), {"kind": "high_impact"}))


def test_approve_with_a_note_records_it():
    wf = approval_workflow()
    _, approval = awaiting_approval_run(agent_driver(wf), "n")
    editor, _ = login("editor")
    response = editor.post(reverse("ledger:approval_approve", args=[approval["id"]]), {"reason": "looks right"}, **HX)
    assert response.status_code == 200 and "looks right" in texts(response)
    assert Approval.objects.get(id=approval["id"]).reason == "looks right"


def test_inbox_query_count_is_constant_in_requests():
    wf = approval_workflow()
    agent = agent_driver(wf)
    editor, user = login("editor")
    for n in range(2):
        awaiting_approval_run(agent, f"q-{n}")
    inbox = reverse("ledger:approval_list")
    few, few_hx = page_queries(editor, inbox), page_queries(editor, inbox, **HX)
    for n in range(2, 10):
        _, approval = awaiting_approval_run(agent, f"q-{n}")
        if n % 2:
            services.approval_decide(approval_id=approval["id"], user=user, approve=True)
    assert page_queries(editor, inbox) == few
    assert page_queries(editor, inbox, **HX) == few_hx


# ---------------------------------------------------------------- on-call preview

def test_oncall_preview_shows_the_retry_decision_and_effect_counts():
    wf = escalation_workflow()
    agent = agent_driver(wf)
    escalated = [escalated_run(agent, f"job-{n}")[1] for n in range(2)]
    oncall, _ = login("oncall")
    params = {"action": "retry", "run": [r["id"] for r in escalated]}
    for extra in ({}, HX):
        response = oncall.get(reverse("ledger:oncall_preview"), params, **extra)
        assert response.status_code == 200
        html = texts(response)
        assert html.count("data-outcome") == 2 and "decide" in html
        assert "data-verify-total" in html and "data-execute-total" in html
        assert 'data-confirm' in html and 'hx-confirm="Retry 2 runs?"' in html
    assert texts(oncall.get(reverse("ledger:oncall_preview"), params, **HX)).strip().startswith(
        '<section id="oncall-preview"')
    assert all(Run.objects.get(id=r["id"]).state == "escalated" for r in escalated)  # nothing was done


def test_oncall_preview_decision_matches_the_real_retry():
    """The preview is the same pure decision the retry then records."""
    wf = make_workflow(stages=["build", "push", "deploy"], effect_stages=["push", "deploy"], approval_stages=[],
                       max_retries=1)
    agent = agent_driver(wf)
    run = agent.trigger(intent="x", inputs={"intent": "x"})
    agent.pass_stage(run["id"], "build")
    agent.pass_stage(run["id"], "push", effect_stage=True)
    agent.event(run["id"], "deploy", "started")
    agent.event(run["id"], "deploy", "failed", reason_code="red")
    escalated = agent.trigger(intent="x", inputs={"intent": "x"})
    assert escalated["state"] == "escalated"
    seen = preview.retry_preview(Run.objects.select_related("workflow").get(id=escalated["id"]))
    _, user = login("oncall")
    retried = services.run_retry(run_id=escalated["id"], user=user)
    assert seen["decision"]["outcome"] == retried.decision["outcome"]
    assert seen["decision"]["reason_code"] == retried.decision["reason_code"]
    assert seen["decision"]["resume_from"] == retried.decision["resume_from"]
    assert "deploy" in seen["execute"]


def _goal_changed_since(agent, run: dict) -> None:
    owner, _ = make_operator("owner")
    services.goal_create(workflow_slug=agent.workflow, intent=run["intent"], objective="a new goal", user=owner)


def _lease_lapsed_beside(agent, run: dict) -> None:
    other = agent.trigger(intent=run["intent"], inputs={"intent": run["intent"], "other": True})
    assert other["state"] == "fresh"
    Run.objects.filter(id=other["id"]).update(lease_expires_at=timezone.now() - timedelta(hours=1))


@pytest.mark.parametrize("meanwhile", [_goal_changed_since, _lease_lapsed_beside])
def test_the_retry_preview_decides_on_what_the_retry_would(meanwhile):
    """A newer goal is adopted, a run whose lease lapsed is failed: the preview decides on the retry's own
    input (``services.retry_input``), not on a gathering of its own."""
    agent = agent_driver(escalation_workflow())
    _, escalated = escalated_run(agent, "again")
    meanwhile(agent, escalated)
    seen = preview.retry_preview(Run.objects.select_related("workflow").get(id=escalated["id"]))
    _, user = login("oncall")
    retried = services.run_retry(run_id=escalated["id"], user=user)
    assert seen["decision"] == {field: retried.decision[field] for field in seen["decision"]}


def test_oncall_preview_cost_per_run_is_fixed():
    """Each selected run costs the same fixed number of reads (the gather of its decision)."""
    wf = escalation_workflow()
    agent = agent_driver(wf)
    runs = [escalated_run(agent, f"c-{n}")[1]["id"] for n in range(3)]
    oncall, _ = login("oncall")
    counts = [page_queries(oncall, reverse("ledger:oncall_preview"), {"action": "retry", "run": runs[:n]})
              for n in (1, 2, 3)]
    assert counts[1] - counts[0] == counts[2] - counts[1]


def test_no_compensate_button_when_there_is_nothing_to_compensate():
    """The on-call row offers Compensate exactly when services.compensation_plan(run) is not None."""
    failed, escalated = escalated_run(agent_driver(escalation_workflow()), "nothing")
    oncall, _ = login("oncall")
    html = texts(oncall.get(reverse("ledger:oncall")))
    assert 'data-action="compensate"' not in html and "nothing to compensate" in html
    from ledger import selectors

    for row in selectors.oncall_runs().qs:
        assert (row.has_undoable and not row.has_unreferenced) == (services.compensation_plan(row) is not None)
    wf = make_workflow(stages=["push", "deploy"], effect_stages=["push", "deploy"], approval_stages=[], max_retries=1)
    agent = agent_driver(wf)
    run = agent.trigger(intent="undo", inputs={})
    agent.pass_stage(run["id"], "push", effect_stage=True)
    agent.event(run["id"], "deploy", "started")
    agent.event(run["id"], "deploy", "failed", reason_code="red")
    agent.trigger(intent="undo", inputs={})
    for row in selectors.oncall_runs().qs:
        assert (row.has_undoable and not row.has_unreferenced) == (services.compensation_plan(row) is not None)
    assert 'data-action="compensate"' in texts(oncall.get(reverse("ledger:oncall")))


def compensable_escalated_run() -> dict:
    """An escalated run whose pushed effect a compensation could undo: every on-call action applies."""
    wf = make_workflow(stages=["push", "deploy"], effect_stages=["push", "deploy"], approval_stages=[], max_retries=1)
    agent = agent_driver(wf)
    run = agent.trigger(intent="undo", inputs={})
    agent.pass_stage(run["id"], "push", effect_stage=True)
    agent.event(run["id"], "deploy", "started")
    agent.event(run["id"], "deploy", "failed", reason_code="red")
    escalated = agent.trigger(intent="undo", inputs={})
    assert escalated["state"] == "escalated"
    return escalated


ONCALL_VERBS = {"retry": services.run_retry, "compensate": services.run_compensate, "abandon": services.run_abandon}


@pytest.mark.parametrize("action", sorted(ONCALL_VERBS))
def test_where_an_oncall_action_applies_is_decided_once(monkeypatch, action):
    """The preview, the page and the action itself ask ``machine.ONCALL_ACTIONS``: where it says the
    action does not apply, none of them offers or does it."""
    escalated = compensable_escalated_run()
    oncall, user = login("oncall")

    def offered() -> tuple[bool, bool]:
        run = Run.objects.select_related("workflow").get(id=escalated["id"])
        page = texts(oncall.get(reverse("ledger:oncall")))
        return preview.action_preview(run, action)["applies"], f'data-action="{action}"' in page

    assert offered() == (True, True)
    monkeypatch.setitem(machine.ONCALL_ACTIONS, action, frozenset())
    assert offered() == (False, False)
    with pytest.raises(Conflict) as refused:
        ONCALL_VERBS[action](run_id=escalated["id"], user=user, reason="not here")
    assert refused.value.code == "illegal_transition"
    assert Run.objects.get(id=escalated["id"]).state == "escalated"


def test_retry_message_says_the_run_waits_for_an_agent():
    _, run = escalated_run(agent_driver(escalation_workflow()), "wait")
    oncall, _ = login("oncall")
    response = oncall.post(reverse("ledger:run_retry", args=[run["id"]]), {"reason": "flaky"}, follow=True)
    assert "waits for an agent" in texts(response)


def test_oncall_page_refreshes_while_runs_wait_and_not_otherwise():
    oncall, _ = login("oncall")
    assert "every 5s" not in texts(oncall.get(reverse("ledger:oncall")))
    escalated_run(agent_driver(escalation_workflow()), "poll")
    assert "every 5s" in texts(oncall.get(reverse("ledger:oncall")))
