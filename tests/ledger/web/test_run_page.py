"""The live run page: one context, every panel in one htmx partial, paginated events, previews, attempts."""

import pytest
from django.urls import reverse

from ledger.models import Run
from tests.browser.scenarios import (
    EVIDENCE,
    agent_driver,
    approval_workflow,
    awaiting_approval_run,
    escalated_run,
    escalation_workflow,
)
from tests.factories import HX, login, make_workflow, page_queries, texts

pytestmark = pytest.mark.django_db

AWS = "AKIAIOSFODNN7EXAMPLE"


def long_run(stages: int, intent: str = "long"):
    """A run through ``stages`` plain stages (three events each, plus the decision's)."""
    wf = make_workflow(stages=[f"s{i}" for i in range(stages)], effect_stages=[], approval_stages=[])
    agent = agent_driver(wf)
    run = agent.trigger(intent=intent, inputs={"intent": intent})
    for i in range(stages):
        agent.pass_stage(run["id"], f"s{i}")
    return agent, run


def test_run_page_query_count_is_constant_in_events_and_attempts():
    """2 stages vs 30 stages (6 vs ~60 events), 1 vs 4 attempts: the same number of queries."""
    viewer, _ = login("viewer")
    _, small = long_run(2, "small")
    _, big = long_run(30, "big")
    url = lambda run: reverse("ledger:run_detail", args=[run["id"]])  # noqa: E731
    assert page_queries(viewer, url(small)) == page_queries(viewer, url(big))
    assert page_queries(viewer, url(small), **HX) == page_queries(viewer, url(big), **HX)
    wf = escalation_workflow(max_retries=5)
    agent = agent_driver(wf)

    def attempt():
        run = agent.trigger(intent="again", inputs={"intent": "again"})
        agent.event(run["id"], run["current_stage"], "started")
        agent.event(run["id"], run["current_stage"], "failed", reason_code="red")
        return run

    first = attempt()
    one = page_queries(viewer, reverse("ledger:run_detail", args=[first["id"]]))
    for _ in range(3):
        last = attempt()
    assert page_queries(viewer, reverse("ledger:run_detail", args=[last["id"]])) == one


def test_run_page_events_are_paginated_newest_first_with_load_older():
    viewer, _ = login("viewer")
    _, run = long_run(14)
    url = reverse("ledger:run_detail", args=[run["id"]])
    total = Run.objects.get(id=run["id"]).event_count
    assert 50 < total <= 100
    html = texts(viewer.get(url))
    assert html.count('<tr id="seq-') == 50
    assert f'id="seq-{total}"' in html and f'id="seq-{total - 49}"' in html and 'id="seq-1"' not in html
    assert html.index(f'id="seq-{total}"') < html.index(f'id="seq-{total - 1}"')  # newest first
    older = f"?before={total - 49}"
    assert f'href="{url}{older}"' in html and f'hx-get="{url}{older}"' in html  # plain link and htmx
    fragment = texts(viewer.get(url + older, **HX))
    assert fragment.strip().startswith('<div class="older-page">') and "<html" not in fragment
    assert f'id="seq-{total - 50}"' in fragment and 'id="seq-1"' in fragment
    assert "Load older" not in fragment  # nothing older than seq 1
    plain = texts(viewer.get(url + older))
    assert "<html" in plain and 'id="seq-1"' in plain and "back to the newest" in plain


def test_run_page_has_permalinks_durations_and_seq_numbers_on_the_path():
    viewer, _ = login("viewer")
    _, run = long_run(2)
    html = texts(viewer.get(reverse("ledger:run_detail", args=[run["id"]])))
    assert 'href="#seq-1"' in html
    assert html.count("data-duration") == 2 and "Stages over time" in html and "<svg class=\"bar\"" in html
    from ledger.models import LedgerEvent

    seqs = list(LedgerEvent.objects.filter(run_id=run["id"], kind="transition").values_list("seq", flat=True))
    for seq in seqs:
        assert f"#{seq}" in html  # the drawing labels taken edges with the transition's seq
    assert "STATE_EDGES" not in open("ledger/web/runs.py").read()


def test_run_page_evidence_previews_claim_links_images_and_redaction():
    wf = make_workflow(stages=["check"], effect_stages=[], approval_stages=[])
    agent = agent_driver(wf)
    run = agent.trigger(intent="ev", inputs={"token": "Bearer abc.def-ghi"})
    agent.event(run["id"], "check", "started")
    agent.event(run["id"], "check", "succeeded", evidence=[
        {"uri": "claim:repo/default-branch@1", "observed_at": "2026-11-29T12:00:00+00:00", "digest": "sha256:c1"},
        {"uri": "/static/stateboard/favicon.svg", "observed_at": "2026-11-29T12:00:00+00:00", "digest": "sha256:i1"},
        {"uri": "https://ci.example.test/shot.png", "observed_at": "2026-11-29T12:00:00+00:00"},
        {**EVIDENCE[0], "excerpt": f"leaked {AWS} and password=hunter2 in the log"},
    ])
    viewer, _ = login("viewer")
    html = texts(viewer.get(reverse("ledger:run_detail", args=[run["id"]])))
    assert 'href="/claims/repo/default-branch/history/"' in html
    assert '<img class="thumb" src="/static/stateboard/favicon.svg"' in html
    assert 'src="https://ci.example.test/shot.png"' not in html and "not loaded" in html
    assert "sha256:c1" in html and "sha256:i1" in html  # digests shown
    assert AWS not in html and "hunter2" not in html and "abc.def-ghi" not in html
    assert "[redacted]" in html and "leaked AKIA[redacted]" in html


def test_run_page_attempts_timeline_and_compare_link():
    failed, escalated = escalated_run(agent_driver(escalation_workflow()), "nightly")
    viewer, _ = login("viewer")
    html = texts(viewer.get(reverse("ledger:run_detail", args=[escalated["id"]])))
    assert "Attempts of this intent (2)" in html
    assert f"{reverse('ledger:run_compare')}?a={failed['id']}&amp;b={escalated['id']}" in html
    first = texts(viewer.get(reverse("ledger:run_detail", args=[failed["id"]])))
    assert "Compare with previous attempt" not in first


def test_run_page_live_partial_keeps_the_anchor_and_stops_when_terminal():
    agent, run = long_run(1)
    viewer, _ = login("viewer")
    html = texts(viewer.get(reverse("ledger:run_detail", args=[run["id"]])))
    assert "every 3s" not in html  # a one-stage run is completed
    wf = approval_workflow()
    pending, _ = awaiting_approval_run(agent_driver(wf), "p")
    url = reverse("ledger:run_detail", args=[pending["id"]])
    live = texts(viewer.get(url + "?from=1", **HX))
    assert f'hx-get="{url}?from=1"' in live and 'id="seq-1"' in live


def test_a_run_nobody_leased_says_why_it_ended_and_its_path_says_not_leased():
    """A queued run no agent leased in time: the decision card says why it ended, in words, and the path's
    last arrow is labelled not_leased (not lease_expired)."""
    from datetime import timedelta

    from django.utils import timezone

    from ledger import services
    from ledger.models import Run
    from tests.factories import login, make_operator, make_workflow

    workflow = make_workflow(stages=["only"], effect_stages=[], approval_stages=[])
    owner, _ = make_operator("owner")
    run, _ = services.run_trigger(workflow_slug=workflow.slug, intent="by-hand", inputs={}, trigger="human",
                                  actor=f"user:{owner.username}")
    Run.objects.filter(id=run.id).update(queued_until=timezone.now() - timedelta(seconds=1))
    assert services.runs_expire_leases() == 1
    page, _ = login("viewer")
    html = page.get(f"/runs/{run.id}/").content.decode()
    assert 'data-ended="not_leased"' in html and "nobody leased it in time" in html
    assert '<span class="cause">not_leased</span>' in html


def test_effects_to_verify_are_named_by_stage_system_and_operation():
    """A deploy that may have happened: the next run's decision lists it as ``deploy (k8s/deploy)``, the
    key kept in its title, never a bare key hash."""
    from datetime import timedelta

    from django.utils import timezone

    wf = make_workflow(stages=["build", "deploy"], effect_stages=["deploy"], approval_stages=[])
    agent = agent_driver(wf)
    run = agent.trigger(intent="ship", inputs={"v": 1})
    agent.pass_stage(run["id"], "build")
    agent.event(run["id"], "deploy", "started")
    agent.event(run["id"], "deploy", "succeeded", effect={"system": "k8s", "operation": "deploy", "reference": "d-1"})
    Run.objects.filter(id=run["id"]).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    again = agent.trigger(intent="ship", inputs={"v": 1})
    assert again["decision"]["outcome"] == "verify_only"
    key = again["decision"]["verify_effects"][0]
    viewer, _ = login("viewer")
    html = texts(viewer.get(reverse("ledger:run_detail", args=[again["id"]])))
    panel = html.split('id="decision-panel"')[1].split("</section>")[0]
    listed = panel.split("Effects to verify")[1].split("</dd>")[0]
    assert "deploy" in listed and "(k8s/deploy)" in listed and f'title="{key}"' in listed
    assert key[:16] not in listed.replace(f'title="{key}"', "")


def test_the_run_page_links_its_trace_when_a_tracing_ui_is_configured(settings):
    _, run = long_run(1, intent="traced")
    client, _ = login("viewer")
    url = reverse("ledger:run_detail", args=[run["id"]])
    assert "data-trace" not in texts(client.get(url))  # no STATEBOARD_TRACE_URL: nothing to link to
    settings.STATEBOARD_TRACE_URL = "http://127.0.0.1:16686/trace/{trace_id}"
    html = texts(client.get(url))
    assert f'href="http://127.0.0.1:16686/trace/{run["id"].replace("-", "")}"' in html  # the run id's 128 bits
    Run.objects.filter(id=run["id"]).update(traceparent="00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
    assert 'href="http://127.0.0.1:16686/trace/4bf92f3577b34da6a3ce929d0e0e4736"' in texts(client.get(url))
