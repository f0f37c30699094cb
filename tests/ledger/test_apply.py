"""Workflows as code (SPEC §12.2): ``manage.py apply`` and ``export_workflows``, the policy-version rule for
apply and PATCH, and what an archived workflow refuses."""

import io
import json
import sys

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django_celery_beat.models import PeriodicTask

from ledger.models import AuditEntry, Run, Workflow
from ledger.schedules import periodic_tasks_ensure
from ledger.tasks import workflow_fire
from tests.factories import client_for, make_agent, make_operator, make_workflow
from tests.ledger.helpers import AgentDriver

pytestmark = pytest.mark.django_db

HELLO = """
workflows:
  - slug: hello
    title: Hello
    stages: [draft, publish, verify]
    effect_stages: [publish]
    approval_stages: [publish]
    policy_version: "1"
    executors:
      publish: {handler: record, config: {timeout_seconds: 2}}
"""


def apply(tmp_path, text: str, *args, name="workflows.yaml"):
    """Run ``manage.py apply`` on ``text`` written to a file: (exit status, stdout, stderr)."""
    path = tmp_path / name
    path.write_text(text)
    return run_command("apply", str(path), *args)


def run_command(*args, stdin: str | None = None):
    out, err = io.StringIO(), io.StringIO()
    if stdin is not None:
        sys.stdin = io.TextIOWrapper(io.BytesIO(stdin.encode()))
    try:
        call_command(*args, stdout=out, stderr=err)
        status = 0
    except CommandError as exc:
        status = exc.returncode
    finally:
        sys.stdin = sys.__stdin__
    return status, out.getvalue(), err.getvalue()


def exported() -> str:
    return run_command("export_workflows")[1]


def test_apply_creates_then_a_second_apply_changes_nothing(tmp_path):
    """A new definition is created with every omitted field at its default; the same file again is unchanged."""
    status, out, _ = apply(tmp_path, HELLO)
    assert (status, out.split()) == (0, ["created", "hello"])
    wf = Workflow.objects.get(slug="hello")
    assert (wf.stages, wf.effect_stages, wf.approval_stages) == (["draft", "publish", "verify"], ["publish"], ["publish"])
    assert (wf.max_retries, wf.lease_seconds, wf.schedule_intent, wf.owner, wf.written_by_apply) == (
        3, 600, "hello", None, True)
    assert wf.executors == {"publish": {"handler": "record", "config": {"timeout_seconds": 2}}}
    status, out, _ = apply(tmp_path, HELLO)
    assert (status, out.split()) == (0, ["unchanged", "hello"])
    entry = AuditEntry.objects.get(action="workflow_apply")
    assert (entry.actor, entry.target, entry.data["result"]) == ("system:apply", "hello", "created")


def test_apply_prints_each_changed_field_old_and_new_and_omitted_fields_return_to_defaults(tmp_path):
    """A definition is whole: a field left out goes back to its default, and the diff says so."""
    apply(tmp_path, HELLO.replace('policy_version: "1"', 'policy_version: "1"\n    max_retries: 7'))
    status, out, _ = apply(tmp_path, HELLO.replace("title: Hello", "title: Hello again"))
    assert status == 0
    assert out.splitlines() == ["changed    hello", '  title: "Hello" → "Hello again"', "  max_retries: 7 → 3"]
    assert Workflow.objects.get(slug="hello").max_retries == 3
    entry = AuditEntry.objects.filter(action="workflow_apply").order_by("-id").first()
    assert entry.data == {"result": "changed", "changes": {"title": {"old": "Hello", "new": "Hello again"},
                                                           "max_retries": {"old": 7, "new": 3}}}


def test_apply_dry_run_prints_the_same_and_writes_nothing(tmp_path):
    status, out, _ = apply(tmp_path, HELLO, "--dry-run")
    assert status == 0 and out.splitlines() == ["created    hello", "dry run: nothing written"]
    assert not Workflow.objects.exists() and not AuditEntry.objects.exists()


@pytest.mark.parametrize("field, value", [
    ("policy_version", "1.10"), ("max_retries", '"3"'), ("max_retries", "true"), ("title", "12"),
    ("stages", "draft"), ("schedule_inputs", "[1]"), ("agents", "bot"), ("lease_seconds", "600.0"),
])
def test_apply_refuses_a_value_of_the_wrong_type_never_converting_it(tmp_path, field, value):
    """YAML's 1.10 is a number, "3" a string, true a boolean: each is refused (exit 1), nothing written."""
    text = f"workflows:\n  - slug: typed\n    {field}: {value}\n"
    status, out, err = apply(tmp_path, text)
    assert status == 1 and out == ""
    assert f"typed.{field}:" in err and "Nothing applied" not in out
    assert not Workflow.objects.exists()


def test_apply_refuses_the_whole_file_for_one_invalid_definition_naming_each_error(tmp_path):
    """All or nothing: two bad definitions are both named with their field; the good one is not created."""
    text = """
workflows:
  - {slug: good}
  - {slug: bad-cron, schedule: "every day"}
  - {slug: bad-stage, stages: [a], effect_stages: [b]}
  - {slug: good, title: twice}
  - {slug: stranger, owner: nobody-here}
  - {slug: extra, colour: red}
"""
    status, out, err = apply(tmp_path, text)
    assert status == 1 and out == "" and not Workflow.objects.exists()
    lines = err.splitlines()
    assert any(line.startswith("refused    bad-cron.schedule: invalid_schedule:") for line in lines), err
    assert any(line.startswith("refused    bad-stage.effect_stages: validation_error:") for line in lines), err
    assert any(line.startswith("refused    good.slug: validation_error:") for line in lines), err
    assert any(line.startswith("refused    stranger.owner: unknown_owner:") for line in lines), err
    assert any(line.startswith("refused    extra.colour: validation_error:") for line in lines), err


def test_apply_reads_json_by_its_extension_and_yaml_from_stdin(tmp_path):
    body = {"workflows": [{"slug": "from-json", "stages": ["a", "b"], "effect_stages": ["b"], "policy_version": "2"}]}
    status, out, _ = apply(tmp_path, json.dumps(body), name="defs.json")
    assert (status, out.split()) == (0, ["created", "from-json"])
    assert Workflow.objects.get(slug="from-json").approval_stages == []  # the defaults among the stages given
    status, out, _ = run_command("apply", "-", stdin="workflows:\n  - slug: from-stdin\n")
    assert (status, out.split()) == (0, ["created", "from-stdin"])
    status, _, err = apply(tmp_path, "{not json", name="bad.json")
    assert status == 1 and "invalid_file" in err


def test_apply_refuses_yaml_dates_duplicate_keys_and_files_without_workflows(tmp_path):
    for text in ("workflows:\n  - {slug: d, schedule_inputs: {day: 2026-12-01}}\n",
                 "workflows:\n  - slug: d\n    slug: e\n",
                 "workflow:\n  - slug: d\n", "- slug: d\n"):
        status, _, err = apply(tmp_path, text)
        assert status == 1 and "invalid_file" in err, (text, err)
    assert not Workflow.objects.exists()


def test_a_stage_or_handler_change_needs_another_policy_version_a_config_change_does_not(tmp_path):
    """policy_version_required for stages and executor handlers, from apply and from PATCH alike."""
    apply(tmp_path, HELLO)
    moved = HELLO.replace("stages: [draft, publish, verify]", "stages: [draft, review, publish, verify]")
    status, _, err = apply(tmp_path, moved)
    assert status == 1 and "hello.policy_version: policy_version_required:" in err
    handler = HELLO.replace("handler: record, config: {timeout_seconds: 2}",
                            'handler: webhook, config: {url: "http://127.0.0.1:9/hook"}')
    assert "policy_version_required" in apply(tmp_path, handler)[2]
    no_executor = HELLO.replace("    executors:\n      publish: {handler: record, config: {timeout_seconds: 2}}\n", "")
    assert "policy_version_required" in apply(tmp_path, no_executor)[2]
    config = HELLO.replace("timeout_seconds: 2", "timeout_seconds: 3")
    status, out, _ = apply(tmp_path, config)
    assert status == 0 and out.splitlines()[0] == "changed    hello"
    status, out, _ = apply(tmp_path, moved.replace('policy_version: "1"', 'policy_version: "2"'))
    assert status == 0 and "  policy_version: \"1\" → \"2\"" in out.splitlines()
    assert AuditEntry.objects.filter(action="policy_bump", target="hello").get().data == {"from": "1", "to": "2"}

    owner = client_for(make_operator("owner")[1])
    refused = owner.patch("/api/v1/workflows/hello/", {"approval_stages": []}, format="json")
    assert refused.status_code == 409 and refused.json()["code"] == "policy_version_required"
    assert Workflow.objects.get(slug="hello").approval_stages == ["publish"]
    done = owner.patch("/api/v1/workflows/hello/", {"approval_stages": [], "policy_version": "3"}, format="json")
    assert done.status_code == 200 and done.json()["approval_stages"] == []
    assert Workflow.objects.get(slug="hello").written_by_apply is False  # the API wrote it last


def test_prune_archives_what_apply_wrote_and_prune_all_everything_not_named_and_naming_it_restores(tmp_path):
    apply(tmp_path, HELLO)
    apply(tmp_path, "workflows:\n  - slug: other\n")
    by_api = make_workflow(slug="by-api")
    status, out, _ = apply(tmp_path, "workflows:\n  - slug: other\n", "--prune")
    assert (status, out.splitlines()) == (0, ["unchanged  other", "archived   hello"])
    assert Workflow.objects.get(slug="hello").archived_at is not None
    assert Workflow.objects.get(slug="by-api").archived_at is None
    status, out, _ = apply(tmp_path, "workflows:\n  - slug: other\n", "--prune-all", "--dry-run")
    assert out.splitlines() == ["unchanged  other", "archived   by-api", "dry run: nothing written"]
    assert Workflow.objects.get(slug="by-api").archived_at is None
    apply(tmp_path, "workflows:\n  - slug: other\n", "--prune-all")
    by_api.refresh_from_db()
    assert by_api.archived_at is not None and Workflow.objects.count() == 3  # nothing deleted
    status, out, _ = apply(tmp_path, HELLO + "  - slug: other\n")
    assert (status, out.splitlines()) == (0, ["restored   hello", "unchanged  other"])
    assert Workflow.objects.get(slug="hello").archived_at is None
    assert "hello" in exported() and "by-api" not in exported()  # the export leaves archived ones out


def test_apply_as_an_owner_is_that_actor_and_as_anyone_else_is_refused(tmp_path):
    owner, _ = make_operator("owner")
    editor, _ = make_operator("editor")
    status, _, err = apply(tmp_path, HELLO, "--as", editor.username)
    assert status == 1 and "permission_denied" in err and not Workflow.objects.exists()
    status, _, _ = apply(tmp_path, HELLO.replace("title: Hello", f"title: Hello\n    owner: {owner.username}"),
                         "--as", owner.username)
    assert status == 0 and Workflow.objects.get(slug="hello").owner == owner
    assert AuditEntry.objects.get(action="workflow_apply").actor == f"user:{owner.username}"


def test_export_prints_quoted_strings_that_apply_takes_back_unchanged(tmp_path):
    owner, _ = make_operator("owner")
    make_workflow(slug="odd", title="yes", policy_version="1.10", schedule="0 3 * * *", owner=owner,
                  schedule_inputs={"on": "null", "n": 1.5, "1": True}, agents=["bot-1"])
    text = exported()
    assert 'policy_version: "1.10"' in text and 'title: "yes"' in text and f'owner: "{owner.username}"' in text
    status, out, _ = apply(tmp_path, text)
    assert (status, out.split()) == (0, ["unchanged", "odd"])


# ---------------------------------------------------------------- an archived workflow

def test_an_archived_workflow_refuses_triggers_but_answers_a_duplicate_trigger_key(tmp_path):
    wf = make_workflow(slug="arch", approval_stages=[])
    driver = AgentDriver(client_for(make_agent()[1]), wf.slug)
    first = driver.trigger(trigger_key="k1")
    apply(tmp_path, "workflows: []\n", "--prune-all")
    refused = driver.client.post("/api/v1/runs/", {"workflow": wf.slug, "inputs": {"v": 2}}, format="json")
    assert refused.status_code == 409 and refused.json()["code"] == "workflow_archived"
    again = driver.client.post("/api/v1/runs/", {"workflow": wf.slug, "inputs": {"v": 1}, "trigger_key": "k1"},
                               format="json")
    assert again.status_code == 200 and again.json()["duplicate"] is True and again.json()["id"] == first["id"]
    # The run that already holds the intent finishes.
    for stage in wf.stages:
        driver.pass_stage(first["id"], stage, effect_stage=stage in wf.effect_stages)
    assert driver.run(first["id"])["state"] == "completed"
    assert Run.objects.filter(workflow=wf).count() == 1


def test_an_archived_workflow_refuses_retries_and_rollbacks(tmp_path):
    wf = make_workflow(slug="arch", stages=["build", "deploy"], effect_stages=["deploy"], approval_stages=[],
                       max_retries=1)
    driver = AgentDriver(client_for(make_agent()[1]), wf.slug)
    escalated = driver.escalated_run(stage="build", inputs={"e": 1})
    done = driver.trigger(inputs={"d": 1}, intent="done")
    driver.pass_stage(done["id"], "build")
    driver.pass_stage(done["id"], "deploy", effect_stage=True)
    apply(tmp_path, "workflows: []\n", "--prune-all")
    oncall = client_for(make_operator("oncall")[1])
    retry = oncall.post(f"/api/v1/runs/{escalated['id']}/retry/", {}, format="json")
    assert retry.status_code == 409 and retry.json()["code"] == "workflow_archived"
    rollback = oncall.post(f"/api/v1/runs/{done['id']}/rollback/", {"to_stage": "deploy", "reason": "r"},
                           format="json")
    assert rollback.status_code == 409 and rollback.json()["code"] == "workflow_archived"
    assert Run.objects.get(id=escalated["id"]).state == "escalated"
    assert Run.objects.get(id=done["id"]).state == "completed"


def test_an_archived_workflows_ticks_stop_and_restoring_starts_them_again(tmp_path):
    """(Beat's entries follow on commit; these tests roll back, so they call what the commit hook calls.)"""
    apply(tmp_path, "workflows:\n  - {slug: nightly, schedule: \"0 3 * * *\"}\n")
    periodic_tasks_ensure()
    assert PeriodicTask.objects.filter(name="workflow: nightly").exists()
    apply(tmp_path, "workflows: []\n", "--prune")
    periodic_tasks_ensure()
    assert not PeriodicTask.objects.filter(name="workflow: nightly").exists()
    assert workflow_fire("nightly", "2026-12-01T03:00:00Z") == ""  # a tick already sent is skipped
    assert not Run.objects.exists()
    apply(tmp_path, "workflows:\n  - {slug: nightly, schedule: \"0 3 * * *\"}\n")
    periodic_tasks_ensure()
    assert PeriodicTask.objects.filter(name="workflow: nightly").exists()
    assert workflow_fire("nightly", "2026-12-01T03:00:00Z") != ""


def test_the_readme_example_applies(tmp_path):
    """The definition the README shows is one apply takes (and a second apply leaves unchanged)."""
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    example = re.search(r"```yaml\n(workflows:\n.*?)```", readme, re.S).group(1)
    make_operator("owner", name="alice")
    status, out, err = apply(tmp_path, example)
    assert status == 0, err
    assert "created    release-notes" in out
    assert Workflow.objects.get(slug="release-notes").executors["publish"]["handler"] == "webhook"
    assert apply(tmp_path, example)[1].startswith("unchanged")
