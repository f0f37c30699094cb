"""export_ledger / import_ledger round-trip, and refusals."""

import io
import json

import pgtrigger
import pytest
from django.core.management import CommandError, call_command

from ledger.models import Effect, LedgerEvent, Run, Workflow
from ledger.services import chain_verify
from tests.factories import client_for, make_agent, make_workflow
from tests.ledger.helpers import AgentDriver

pytestmark = pytest.mark.django_db


def _history():
    wf = make_workflow(approval_stages=[])
    _, token = make_agent()
    driver = AgentDriver(client_for(token), wf.slug)
    run = driver.trigger(intent="a")
    for stage in wf.stages[:5]:
        driver.pass_stage(run["id"], stage, effect_stage=stage in wf.effect_stages)
    driver.trigger(intent="b")
    return wf


def _export() -> str:
    out = io.StringIO()
    call_command("export_ledger", stdout=out, stderr=io.StringIO())
    return out.getvalue()


def _wipe():
    with pgtrigger.ignore():
        from ledger.models import Approval, AuditEntry, Checkpoint

        for model in (AuditEntry, Approval, Checkpoint, Effect, LedgerEvent, Run, Workflow):
            model.objects.all().delete()


@pytest.mark.postgres  # (tampering goes around PostgreSQL's triggers with pgtrigger.ignore)
def test_export_then_import_into_an_empty_database_round_trips(tmp_path):
    _history()
    exported = _export()
    lines = [json.loads(line) for line in exported.splitlines()]
    assert {line["type"] for line in lines} >= {"workflow", "run", "event", "checkpoint"}
    counts = (Run.objects.count(), LedgerEvent.objects.count(), Effect.objects.count())
    effects = sorted(Effect.objects.values_list("idempotency_key", "status", "reference"))
    _wipe()
    path = tmp_path / "ledger.jsonl"
    path.write_text(exported)
    call_command("import_ledger", str(path), stdout=io.StringIO())
    assert (Run.objects.count(), LedgerEvent.objects.count(), Effect.objects.count()) == counts
    assert sorted(Effect.objects.values_list("idempotency_key", "status", "reference")) == effects
    assert all(chain_verify(run=run)["ok"] for run in Run.objects.all())
    assert _export() == exported


def test_import_refuses_a_non_empty_database(tmp_path):
    _history()
    path = tmp_path / "l.jsonl"
    path.write_text(_export())
    with pytest.raises(CommandError, match="not empty"):
        call_command("import_ledger", str(path), stdout=io.StringIO())


@pytest.mark.postgres  # (tampering goes around PostgreSQL's triggers with pgtrigger.ignore)
@pytest.mark.parametrize("damage,message", [
    (lambda ev: ev.update(actor="agent:forged"), "does not verify"),
    (lambda ev: ev.update(seq=ev["seq"] + 10), "gap"),
])
def test_import_refuses_broken_chains_and_gaps(tmp_path, damage, message):
    _history()
    lines = [json.loads(line) for line in _export().splitlines()]
    events = [line for line in lines if line["type"] == "event"]
    damage(events[3])
    _wipe()
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines))
    with pytest.raises(CommandError, match=message):
        call_command("import_ledger", str(path), stdout=io.StringIO())
    assert not LedgerEvent.objects.exists()


def test_commands_create_identities_and_print_the_token_last():
    out = io.StringIO()
    call_command("create_operator", "ed", role="editor", token=True, stdout=out, stderr=io.StringIO())
    token = out.getvalue().strip().splitlines()[-1]
    assert client_for(token).get("/api/v1/runs/").status_code == 200
    out = io.StringIO()
    call_command("create_agent", "bot", owner="ed", stdout=out, stderr=io.StringIO())
    token = out.getvalue().strip().splitlines()[-1]
    assert client_for(token).get("/api/v1/approvals/").status_code == 200
    with pytest.raises(CommandError):
        call_command("create_agent", "bot2", owner="nobody", stdout=io.StringIO(), stderr=io.StringIO())
