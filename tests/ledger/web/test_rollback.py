"""The run page's goal / staged / rollback panel (a partial of its own) and its rollback form."""

import pytest
from django.urls import reverse

from ledger import services
from ledger.models import AuditEntry, Run
from tests.factories import login, make_operator, make_workflow

pytestmark = pytest.mark.django_db

EVIDENCE = [{"uri": "https://world.test/x", "observed_at": "2026-11-29T12:00:00+00:00"}]


def _completed(workflow, **trigger):
    run, _ = services.run_trigger(workflow_slug=workflow.slug, inputs={"v": 1}, actor="agent:a", **trigger)
    for stage in workflow.stages:
        services.event_append(run_id=run.id, body={"stage": stage, "kind": "started"}, actor="agent:a")
        effect = {"effect": {"system": "k8s", "operation": stage, "reference": f"ref-{stage}"}} \
            if stage in workflow.effect_stages else {}
        services.event_append(run_id=run.id, body={"stage": stage, "kind": "succeeded", **effect},
                              actor="agent:a")
        if stage in workflow.effect_stages and not run.staged:
            services.event_append(run_id=run.id, body={"stage": stage, "kind": "verified", "evidence": EVIDENCE},
                                  actor="agent:a")
    return Run.objects.get(id=run.id)


def test_panel_shows_goal_history_and_a_rollback_preview_to_oncall_only():
    """On-call sees the form and which effects would be isolated; a viewer sees the goal but no form."""
    workflow = make_workflow(stages=["build", "deploy"], effect_stages=["deploy"], approval_stages=[])
    owner, _ = make_operator("owner")
    services.goal_create(workflow_slug=workflow.slug, intent=workflow.slug, objective="ship safely", user=owner)
    run = _completed(workflow)
    url = reverse("ledger:run_goal_rollback", args=[run.id])
    oncall, _ = login("oncall")
    page = oncall.get(url, {"to_stage": "deploy"}).content.decode()
    assert "v1" in page and "ship safely" in page and "ref-deploy" in page and "can be undone" in page
    assert reverse("ledger:run_rollback", args=[run.id]) in page
    viewer, _ = login("viewer")
    page = viewer.get(url).content.decode()
    assert "ship safely" in page and reverse("ledger:run_rollback", args=[run.id]) not in page


def test_rollback_form_acts_for_oncall_and_refuses_a_viewer():
    """The form works without JS (redirect); a viewer's POST is 403 and audited, and changes nothing."""
    workflow = make_workflow(stages=["build", "deploy"], effect_stages=["deploy"], approval_stages=[])
    run = _completed(workflow)
    url = reverse("ledger:run_rollback", args=[run.id])
    viewer, _ = login("viewer")
    assert viewer.post(url, {"to_stage": "deploy", "reason": "x"}).status_code == 403
    assert AuditEntry.objects.filter(action="rollback", outcome="refused", run=run, code="permission_denied").exists()
    assert Run.objects.get(id=run.id).state == "completed"
    oncall, _ = login("oncall")
    response = oncall.post(url, {"to_stage": "deploy", "reason": "bad deploy"})
    assert response.status_code == 302 and response["Location"] == reverse("ledger:run_detail", args=[run.id])
    assert Run.objects.get(id=run.id).state == "resume"


def test_staged_run_panel_shows_badge_and_would_do_effects():
    """A staged run is badged and lists the effects it would have had; it offers no rollback."""
    workflow = make_workflow(stages=["build", "deploy"], effect_stages=["deploy"], approval_stages=["deploy"])
    run = _completed(workflow, staged=True)
    oncall, _ = login("oncall")
    page = oncall.get(reverse("ledger:run_goal_rollback", args=[run.id])).content.decode()
    assert "badge-staged" in page and "ref-deploy" in page and "not performed" in page
    assert reverse("ledger:run_rollback", args=[run.id]) not in page
