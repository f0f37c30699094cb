"""export_ledger / import_ledger round-trip, and refusals."""

import io
import json

import pgtrigger
import pytest
from django.core.management import CommandError, call_command
from django.db import transaction

from ledger.models import Effect, EffectKey, LedgerEvent, Run, SsoIdentity, Workflow
from ledger.services import chain_verify
from tests.factories import client_for, make_agent, make_operator, make_workflow
from tests.ledger.helpers import AgentDriver

pytestmark = pytest.mark.django_db


KEY = "test-export-key"


@pytest.fixture(autouse=True)
def export_key(monkeypatch):
    monkeypatch.setenv("STATEBOARD_EXPORT_KEY", KEY)


TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def _history():
    """A history with what the ledger keeps: effects, a staged run, a queued run, a goal, an executor, claims."""
    wf = make_workflow(approval_stages=[])
    _, token = make_agent()
    driver = AgentDriver(client_for(token), wf.slug)
    run = driver.trigger(intent="a", attributes={"team": "infra", "tier": 2})  # SPEC §15: kept by the ledger
    driver.event(run["id"], run["current_stage"], "attributes_set", data={"attributes": {"tier": 3, "team": None}})
    for stage in wf.stages[:5]:
        driver.pass_stage(run["id"], stage, effect_stage=stage in wf.effect_stages)
    traced = driver.client.post("/api/v1/runs/", {"workflow": wf.slug, "intent": "b", "inputs": {"v": 1}},
                                format="json", headers={"traceparent": TRACEPARENT})  # SPEC §16: kept with the run
    assert Run.objects.get(id=traced.json()["id"]).traceparent == TRACEPARENT
    driver.trigger(intent="staged", staged=True)
    person, key = make_operator("editor")
    SsoIdentity.objects.create(user=person, issuer="https://idp.example", sub="s-1")  # SPEC §17: kept as identities
    editor = client_for(key)
    AgentDriver(editor, wf.slug).trigger(intent="queued")
    assert editor.post(f"/api/v1/workflows/{wf.slug}/goals/", {"intent": "c", "objective": "o"},
                       format="json").status_code == 201
    return wf


def _export() -> bytes:
    out = io.StringIO()
    call_command("export_ledger", stdout=out, stderr=io.StringIO())
    return out.getvalue().encode("utf-8")


def _wipe():
    from django.contrib.auth import get_user_model

    from ledger.portability.rows import IDENTITY_TYPES, SYSTEM_TYPES

    with pgtrigger.ignore():
        for _, model in reversed(IDENTITY_TYPES + SYSTEM_TYPES):
            model.objects.all().delete()
        get_user_model().objects.all().delete()
        EffectKey.objects.all().delete()


def _signed(lines: list[dict]) -> bytes:
    """A file of ``lines`` signed with the test key (what someone holding the key could write)."""
    from ledger.portability import signing

    body = b"".join(json.dumps(line).encode() + b"\n" for line in lines)
    mac = signing.signature(KEY.encode(), body)
    return body + json.dumps({"type": "signature", "alg": "HMAC-SHA256", "hmac": mac}).encode() + b"\n"


def _lines(data: bytes) -> list[dict]:
    return [json.loads(line) for line in data.decode().splitlines()]


def _import(tmp_path, data: bytes, *args):
    path = tmp_path / "ledger.jsonl"
    path.write_bytes(data)
    call_command("import_ledger", str(path), *args, stdout=io.StringIO())


@pytest.mark.postgres  # (the wipe goes around PostgreSQL's triggers with pgtrigger.ignore)
def test_export_then_import_is_the_same_system_and_decides_the_same(tmp_path):
    """Every row comes back with its id, agents and people carry on (tokens, roles), and every intent's
    next trigger gets the decision it would have got in the exported database."""
    from django.contrib.auth import get_user_model

    from ledger import services

    wf = _history()
    exported = _export()
    types = {line["type"] for line in _lines(exported)}
    assert types >= {"export", "user", "agent", "token", "workflow", "goal", "run", "event", "effect", "checkpoint",
                     "sso_identity", "signature"}
    counts = (Run.objects.count(), LedgerEvent.objects.count(), Effect.objects.count(),
              get_user_model().objects.count())
    intents = sorted(set(Run.objects.filter(staged=False).values_list("intent", flat=True)) | {"c"})

    def decisions():
        with transaction.atomic():
            found = {}
            for intent in intents:
                inputs = {"n": 1}
                run, _ = services.run_trigger(workflow_slug=wf.slug, intent=intent, inputs=inputs, actor="system")
                found[intent] = (run.decision["outcome"], run.decision["reason_code"])
            transaction.set_rollback(True)
        return found

    before = decisions()
    _wipe()
    _import(tmp_path, exported)
    assert (Run.objects.count(), LedgerEvent.objects.count(), Effect.objects.count(),
            get_user_model().objects.count()) == counts
    assert all(chain_verify(run=run)["ok"] for run in Run.objects.all())
    assert decisions() == before
    again = _export()
    assert [r for r in again.splitlines() if r not in exported.splitlines()][:2] == []
    assert again == exported  # nothing lost, nothing added: the same file, signature included
    assert Run.objects.filter(intent="b").values_list("traceparent", flat=True).get() == TRACEPARENT
    assert Workflow.objects.create(slug="after").id > wf.id  # sequences continued past the imported ids


def test_import_refuses_a_non_empty_database(tmp_path):
    _history()
    with pytest.raises(CommandError, match="not empty"):
        _import(tmp_path, _export())


@pytest.mark.postgres
@pytest.mark.parametrize(("damage", "message"), [
    (lambda lines: next(r for r in lines if r["type"] == "event" and r["seq"] == 3).update(actor="agent:forged"),
     "hash"),
    (lambda lines: next(r for r in lines if r["type"] == "event" and r["seq"] == 3).update(seq=13), "seq"),
    (lambda lines: next(r for r in lines if r["type"] == "run" and r["intent"] == "a").update(state="abandoned"),
     "state is 'abandoned' in the file"),
    (lambda lines: next(r for r in lines if r["type"] == "effect").update(status="verified", reference="forged"),
     "effect"),
    (lambda lines: next(r for r in lines if r["type"] == "run" and r["intent"] == "a").update(attributes={"tier": 4}),
     "attributes is {'tier': 4} in the file, the ledger says {'tier': 3}"),
])
def test_a_file_signed_after_tampering_is_refused_by_what_the_ledger_determines(tmp_path, damage, message):
    """Even with the key (a re-signed file), what the events determine must equal the file: nothing written."""
    _history()
    lines = _lines(_export())[:-1]
    damage(lines)
    _wipe()
    with pytest.raises(CommandError, match=message):
        _import(tmp_path, _signed(lines))
    assert not LedgerEvent.objects.exists() and not Run.objects.exists()


@pytest.mark.postgres
def test_an_edited_file_fails_its_signature_and_an_unsigned_one_needs_trust(tmp_path):
    _history()
    exported = _export()
    edited = exported.replace(b'"intent":"a"', b'"intent":"z"', 1)
    assert edited != exported
    _wipe()
    with pytest.raises(CommandError, match="export_signature_invalid"):
        _import(tmp_path, edited)
    unsigned = b"".join(line + b"\n" for line in exported.splitlines()[:-1])
    with pytest.raises(CommandError, match="export_unsigned"):
        _import(tmp_path, unsigned)
    _import(tmp_path, unsigned, "--trust-unsigned")
    from django.contrib.auth import get_user_model

    from ledger.models import AuditEntry

    assert Run.objects.exists() and not get_user_model().objects.exists()  # never identities
    assert AuditEntry.objects.filter(action="import_unsigned").count() == 1


@pytest.mark.postgres
def test_an_approval_forged_to_approved_is_refused(tmp_path):
    """An approval edited from pending to approved with no `approved` event in the ledger never imports."""
    from ledger.models import Approval

    wf = make_workflow(stages=["build", "publish"], effect_stages=["publish"], approval_stages=["publish"])
    driver = AgentDriver(client_for(make_agent()[1]), wf.slug)
    run = driver.trigger()
    driver.pass_stage(run["id"], "build")
    action = {"system": "cms", "operation": "publish", "target": "t", "summary": "s"}
    assert driver.client.post(f"/api/v1/runs/{run['id']}/approvals/", {"kind": "high_impact", "stage": "publish",
                                                                       "action": action}, format="json").status_code == 201
    assert Approval.objects.get().status == "pending"
    lines = _lines(_export())[:-1]
    forged = next(line for line in lines if line["type"] == "approval")
    forged.update(status="approved", decided_by="user:nobody")
    _wipe()
    with pytest.raises(CommandError, match="approval"):
        _import(tmp_path, _signed(lines))


@pytest.mark.parametrize(("line", "reason"), [
    (b"[1, 2]", "not a JSON object"), (b"{not json", "not JSON"), (b'{"no": "type"}', "no type"),
    (b'{"type": "nothing"}', "unknown type"), (b"\xff\xfe", "not UTF-8"),
    (b'{"type": "event", "seq": "1"}', "event"),
])
def test_a_malformed_line_is_refused_by_its_number_and_reason(tmp_path, line, reason):
    data = b'{"type": "export", "format": 2}\n' + line + b"\n"
    with pytest.raises(CommandError, match=f"line 2.*{reason}|{reason}"):
        _import(tmp_path, data, "--trust-unsigned")
    assert not Run.objects.exists()


def test_an_inspection_file_is_refused(tmp_path):
    _history()
    out = io.StringIO()
    call_command("export_ledger", "--since", "2000-01-01", stdout=out, stderr=io.StringIO())
    assert _lines(out.getvalue().encode())[0] == {"type": "export", "format": "partial"}
    with pytest.raises(CommandError, match="export_partial"):
        _import(tmp_path, out.getvalue().encode())


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


@pytest.mark.postgres
@pytest.mark.parametrize("edit", [{"status": "approved", "decided_by": "user:nobody"}, {"status": "void"}])
def test_an_escalation_edited_without_its_event_is_refused(tmp_path, edit):
    """An escalation's status changes are ledger events (raised, closed): one edited in the file is refused."""
    from ledger.models import Approval

    wf = make_workflow(stages=["build", "push"], effect_stages=["push"], approval_stages=[], max_retries=1)
    AgentDriver(client_for(make_agent()[1]), wf.slug).escalated_run()
    assert Approval.objects.filter(kind="escalation", status="pending").exists()
    lines = _lines(_export())[:-1]
    next(line for line in lines if line["type"] == "approval" and line["kind"] == "escalation").update(edit)
    _wipe()
    with pytest.raises(CommandError, match="approval"):
        _import(tmp_path, _signed(lines))
    assert not Run.objects.exists()
