"""The on-call preview (ledger/web/preview.py): what a bulk action would do, in words."""

import re

import pytest
from django.urls import reverse

from tests.browser.scenarios import agent_driver, escalated_run, escalation_workflow
from tests.factories import login, texts

pytestmark = pytest.mark.django_db


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
