"""Issue 28's smaller items, checked where a person reads them: wording, labels, ways back, times."""

import re

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from ledger.models import RunState
from stateboard.roles import only_roles_may
from tests.browser.scenarios import (agent_driver, approval_workflow, awaiting_approval_run, escalated_run,
                                     escalation_workflow)
from tests.factories import OUTSIDE_ASSET, client_for, login, make_operator, texts

pytestmark = pytest.mark.django_db


def test_every_refusal_by_role_reads_the_same_way():
    assert only_roles_may(["editor"], "approve") == "Only an editor may approve."
    assert only_roles_may(["oncall", "owner"], "roll a run back") == "Only on-call or an owner may roll a run back."
    _, viewer_token = make_operator("viewer")
    refused = client_for(viewer_token).post("/api/v1/workflows/", {"slug": "x"}, format="json")
    assert refused.status_code == 403 and refused.json()["detail"] == "Only an owner may create or change workflows."


def test_the_retry_preview_says_what_it_would_do():
    agent = agent_driver(escalation_workflow())
    run = escalated_run(agent, "one")[1]
    oncall, _ = login("oncall")
    html = texts(oncall.get(reverse("ledger:oncall_preview"), {"action": "retry", "run": [run["id"]]}))
    summary = re.search(r"data-preview-summary>(.*?)</p>", html, re.S).group(1)
    assert "Would retry <strong>1</strong> of the 1 selected run." in summary
    assert re.search(r"would verify <strong data-verify-total>\d+</strong> effects? already made and execute "
                     r"<strong data-execute-total>\d+</strong>", summary), summary
    assert "retryed" not in html and "can be" not in summary


def test_run_state_filter_options_are_the_badges_words():
    viewer, _ = login("viewer")
    html = texts(viewer.get(reverse("ledger:run_list")))
    options = re.findall(r'<option value="(\w+)"[^>]*>([^<]+)</option>', html.split('name="state"', 1)[1].split("</select>")[0])
    assert options == [(s, s) for s in RunState.values]


def test_times_follow_the_chosen_mode_on_the_inbox():
    make_operator("editor")
    awaiting_approval_run(agent_driver(approval_workflow()), "timed")
    editor, _ = login("editor")
    html = texts(editor.get(reverse("ledger:approval_list")))
    table = html.split('id="approval-table"', 1)[1].split("</section>")[0]
    assert " ago" not in table and 'data-when="relative"' not in table  # "utc" by default
    assert re.search(r'deadline <time [^>]*data-when="utc">\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC</time>', table)


def test_the_api_docs_lead_back_and_admin_names_read_right(settings):
    docs = Client().get("/api/v1/docs/")
    html = texts(docs)
    assert docs.status_code == 200 and 'href="/" data-back' in html and not OUTSIDE_ASSET.search(html)
    admin = get_user_model().objects.create_superuser("root-admin", password="pw")
    browser = Client()
    browser.force_login(admin)
    index = texts(browser.get("/admin/"))
    assert "Audit entries" in index and "API tokens" in index and "entrys" not in index and "Api tokens" not in index
    assert 'rel="icon"' in index and "favicon.svg" in index
