"""SPEC §16's reads: /metrics and /reports/ per workflow (from the days the appends keep), the run page, the resume
packet's earlier attempts, and export / import keeping usage, budgets and the day's escalation."""

import io
import json
import re

import pytest
from django.core.management import call_command
from django.urls import reverse
from django.utils import timezone

from ledger.domain.usage import spend_day
from ledger.models import BudgetEscalation, LedgerEvent, Run, Workflow, WorkflowDaySpend
from ledger.services import chain_verify
from tests.factories import client_for, login, make_agent, make_operator, make_workflow, unique
from tests.ledger.helpers import AgentDriver
from tests.ledger.test_portability import _export as portability_export
from tests.ledger.test_portability import _wipe as portability_wipe

pytestmark = pytest.mark.django_db


def _spent(**budget):
    """A workflow whose one run spent 100 + 20 tokens and $0.30 in three events."""
    workflow = make_workflow(stages=["work", "ship"], effect_stages=[], approval_stages=[], budget=budget)
    driver = AgentDriver(client_for(make_agent()[1]), workflow.slug)
    run = driver.trigger(intent=unique("spender"))
    driver.event(run["id"], "work", "started", usage={"input_tokens": 100, "cost_usd": 0.1})
    driver.event(run["id"], "work", "succeeded", usage={"output_tokens": 20, "cost_usd": "0.1", "model": "m-1"})
    driver.event(run["id"], "ship", "started", usage={"cost_usd": 0.1})
    return workflow, driver, run


def test_metrics_show_tokens_by_direction_and_cost_per_workflow(client):
    workflow, _, _ = _spent()
    other = make_workflow()
    text = client.get("/metrics").content.decode()
    assert "# TYPE stateboard_tokens_total counter" in text and "# TYPE stateboard_cost_usd_total counter" in text
    assert f'stateboard_tokens_total{{workflow="{workflow.slug}",direction="input"}} 100\n' in text
    assert f'stateboard_tokens_total{{workflow="{workflow.slug}",direction="output"}} 20\n' in text
    assert f'stateboard_cost_usd_total{{workflow="{workflow.slug}"}} 0.3\n' in text  # the decimal, not 0.30000000000000004
    assert f'workflow="{other.slug}"' not in text  # a workflow that spent nothing has no sample


def test_reports_and_the_run_page_show_what_was_spent():
    workflow, _, run = _spent(cost_usd_per_run="5")
    page, _ = login("viewer")
    html = page.get("/reports/?window=24h").content.decode()
    assert "<strong>100</strong> input and <strong>20</strong> output tokens, <strong>$0.300000</strong>" in html
    detail = page.get(reverse("ledger:run_detail", args=[run["id"]])).content.decode()
    assert "100 input, 20 output tokens · $0.3" in detail and "$5 per run" in detail


def test_reports_draw_the_cost_per_day_with_the_day_budget_as_a_line():
    workflow, _, _ = _spent(cost_usd_per_day="2")
    unbudgeted, _, _ = _spent()
    html = login("viewer")[0].get("/reports/?window=7d").content.decode()
    section = html[html.index(f'data-workflow="{workflow.slug}"'):]
    section = section[:section.index("</section>")]
    assert "Cost per UTC day ($)" in section and "day budget $2" in section
    assert f"{spend_day(timezone.now())} UTC: 0.3 $" in section  # today's bar says what it stands for
    chart = section[section.index("Cost per UTC day ($)"):]
    line = re.search(r'<line class="budget" x1="[\d.]+" y1="([\d.]+)"', chart)
    bar = re.search(r'<rect class="bar" x="[\d.]+" y="([\d.]+)"', chart)
    assert line and bar and float(line.group(1)) < float(bar.group(1))  # $2 stands above today's $0.30
    other = html[html.index(f'data-workflow="{unbudgeted.slug}"'):]
    other = other[:other.index("</section>")]
    assert "Cost per UTC day ($)" in other and "no day budget" in other and "data-budget-line" not in other


def test_the_resume_packet_says_what_the_intents_earlier_attempts_spent():
    workflow, driver, run = _spent()
    driver.event(run["id"], "ship", "failed", reason_code="broke")  # the attempt ends
    again = driver.trigger(intent=Run.objects.get(id=run["id"]).intent, inputs={"v": 1})
    packet = driver.client.get(f"/api/v1/runs/{again['id']}/resume-packet/").json()
    assert packet["earlier_attempts_spent"] == {"runs": 1, "input_tokens": 100, "output_tokens": 20,
                                                "cost_usd": "0.3"}
    first = driver.client.get(f"/api/v1/runs/{run['id']}/resume-packet/").json()
    assert first["earlier_attempts_spent"] == {"runs": 0, "input_tokens": 0, "output_tokens": 0, "cost_usd": "0"}


@pytest.fixture
def export_key(monkeypatch):
    monkeypatch.setenv("STATEBOARD_EXPORT_KEY", "test-usage-export-key")


# Export and wipe as the portability tests do (one way to take a system apart and put it back).
_export, _wipe = portability_export, portability_wipe


@pytest.mark.postgres  # (the wipe goes around PostgreSQL's triggers with pgtrigger.ignore)
def test_export_and_import_keep_usage_budgets_and_the_days_escalation(tmp_path, export_key):
    workflow, driver, _ = _spent(cost_usd_per_day="0.25", tokens_per_run=1000)
    escalated = driver.trigger(intent=unique("late"))
    assert escalated["decision"]["reason_code"] == "budget_exhausted"
    days = list(WorkflowDaySpend.objects.values_list("workflow_id", "day", "input_tokens", "output_tokens",
                                                     "cost_micro_usd"))
    claims = list(BudgetEscalation.objects.values_list("workflow_id", "day", "run_id"))
    usages = dict(Run.objects.values_list("id", "usage"))
    exported = _export()
    _wipe()
    path = tmp_path / "ledger.jsonl"
    path.write_bytes(exported)
    call_command("import_ledger", str(path), stdout=io.StringIO())
    assert Workflow.objects.get(slug=workflow.slug).budget == {"cost_usd_per_day": "0.25", "tokens_per_run": 1000}
    assert dict(Run.objects.values_list("id", "usage")) == usages
    assert list(WorkflowDaySpend.objects.values_list("workflow_id", "day", "input_tokens", "output_tokens",
                                                     "cost_micro_usd")) == days
    assert list(BudgetEscalation.objects.values_list("workflow_id", "day", "run_id")) == claims
    assert all(chain_verify(run=run)["ok"] for run in Run.objects.all())
    assert _export() == exported
    assert driver.trigger(intent=unique("after"))["state"] == "noop"  # the day's escalation still stands

    lines = [json.loads(line) for line in exported.decode().splitlines()[:-1]]
    for line in lines:  # an event's usage changed in a file signed again: the chain refuses it
        if line["type"] == "event" and line.get("usage"):
            line["usage"]["cost_usd"] = "0.01"
            break
    from ledger.portability import signing

    body = b"".join(json.dumps(line).encode() + b"\n" for line in lines)
    mac = signing.signature(b"test-usage-export-key", body)
    _wipe()
    path.write_bytes(body + json.dumps({"type": "signature", "alg": "HMAC-SHA256", "hmac": mac}).encode() + b"\n")
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="hash"):
        call_command("import_ledger", str(path), stdout=io.StringIO())
    assert not LedgerEvent.objects.exists() and spend_day(timezone.now())
    assert make_operator("viewer")  # (the database is usable after the refusal)


def test_export_workflows_and_apply_keep_a_budget_and_change_it_without_a_policy_bump(tmp_path):
    from tests.ledger.test_apply import apply, exported

    owner, _ = make_operator("owner")
    make_workflow(slug="spendy", policy_version="1", owner=owner,
                  budget={"tokens_per_run": 5000, "cost_usd_per_run": "0.50", "cost_usd_per_day": 20})
    text = exported()
    budget = text.split("  budget:\n", 1)[1]  # (its keys in the database's order: jsonb sorts them)
    assert sorted(budget.splitlines()[:3]) == ['    cost_usd_per_day: 20', '    cost_usd_per_run: "0.50"',
                                               '    tokens_per_run: 5000'], text
    status, out, _ = apply(tmp_path, text)
    assert (status, out.split()) == (0, ["unchanged", "spendy"])
    status, out, _ = apply(tmp_path, text.replace('"0.50"', '"0.75"'))
    assert (status, out.split()[:2]) == (0, ["changed", "spendy"]), out  # the same policy_version
    assert Workflow.objects.get(slug="spendy").budget["cost_usd_per_run"] == "0.75"
    status, _, err = apply(tmp_path, text.replace('"0.50"', '"0.1234567"'))
    assert status != 0 and "invalid_budget" in err


@pytest.mark.postgres  # (the wipe goes around PostgreSQL's triggers with pgtrigger.ignore)
@pytest.mark.parametrize("usage, budget, refusal", [
    ({"input_tokens": "12"}, None, "usage is {'input_tokens': '12'} in the file, the ledger says 'a usage object"),
    ({"cost_usd": 0.5}, None, "usage is {'cost_usd': 0.5} in the file, the ledger says {'cost_usd': '0.5'}"),
    (None, {"tokens_per_run": "10"}, "budget is {'tokens_per_run': '10'} in the file, the ledger says 'a budget"),
])
def test_an_import_refuses_usage_or_a_budget_the_server_would_not_have_recorded(tmp_path, export_key, usage, budget,
                                                                                refusal):
    """Even with every hash recomputed and the file signed again (someone holding the key), a usage or a
    budget the API would refuse (or record otherwise) is refused by the import, naming its line."""
    from django.core.management.base import CommandError

    from ledger.portability import signing
    from ledger.portability.rows import row_from_line
    from ledger.services import GENESIS_HASH, event_compute_hash

    _spent()
    lines = [json.loads(line) for line in _export().decode().splitlines()[:-1]]
    target = next(line for line in lines if line["type"] == "event" and line.get("usage"))
    if usage is not None:
        target["usage"] = usage
        chain = sorted((line for line in lines if line["type"] == "event" and line["run_id"] == target["run_id"]),
                       key=lambda line: line["seq"])
        prev = GENESIS_HASH
        for line in chain:  # the run's chain recomputed from the edited event on
            line["prev_hash"] = prev
            line["hash"] = prev = event_compute_hash(row_from_line("event", {k: v for k, v in line.items()
                                                                             if k != "type"}))
        next(line for line in lines if line["type"] == "run" and line["id"] == target["run_id"])["last_hash"] = prev
    if budget is not None:
        next(line for line in lines if line["type"] == "workflow")["budget"] = budget
    body = b"".join(json.dumps(line).encode() + b"\n" for line in lines)
    mac = signing.signature(b"test-usage-export-key", body)
    _wipe()
    path = tmp_path / "ledger.jsonl"
    path.write_bytes(body + json.dumps({"type": "signature", "alg": "HMAC-SHA256", "hmac": mac}).encode() + b"\n")
    with pytest.raises(CommandError, match=re.escape(refusal)):
        call_command("import_ledger", str(path), stdout=io.StringIO())
    assert not Workflow.objects.exists()
