"""Import leftovers (issue 39.14): text no column keeps is refused by its line, a staged run stays staged,
roles are a list, and Slack identities and saved views survive a restore."""

import json

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError

from ledger.models import LedgerEvent, Run, SavedView, SlackIdentity
from tests.factories import make_operator
from tests.ledger.test_portability import _export, _history, _import, _lines, _signed, _wipe, export_key  # noqa: F401

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]


def _number_of(lines: list[dict], line: dict) -> int:
    return lines.index(line) + 1


def _refused(tmp_path, data: bytes, *args) -> str:
    with pytest.raises(CommandError) as refused:
        _import(tmp_path, data, *args)
    assert not Run.objects.exists() and not LedgerEvent.objects.exists()
    return str(refused.value)


@pytest.mark.parametrize(("pick", "field", "value", "why"), [
    (lambda r: r["type"] == "event" and r["seq"] == 2, "data", {"note": "a\u0000b"}, "NUL"),
    (lambda r: r["type"] == "event" and r["seq"] == 2, "data", {"a\u0000": 1}, "NUL"),
    (lambda r: r["type"] == "run", "intent", "half \ud800 pair", "surrogate"),
    (lambda r: r["type"] == "workflow", "title", "\udfff", "surrogate"),
    (lambda r: r["type"] == "user", "username", "x\u0000", "NUL"),
    (lambda r: r["type"] == "run", "intent", "i" * 600, "at most 500"),
    (lambda r: r["type"] == "workflow", "max_retries", 2 ** 40, "less than or equal"),
])
def test_text_or_a_number_no_column_keeps_is_refused_by_its_line_number(tmp_path, pick, field, value, why):
    """A NUL, half a surrogate pair, an over-long string or an out-of-range number, even in a re-signed
    file, is refused naming the line and the field: no traceback, nothing written."""
    _history()
    lines = _lines(_export())[:-1]
    line = next(r for r in lines if pick(r))
    line[field] = value
    _wipe()
    message = _refused(tmp_path, _signed(lines))
    assert f"line {_number_of(lines, line)} " in message and repr(field) in message and why in message, message


@pytest.mark.parametrize("trust", [False, True])
def test_a_staged_run_flipped_to_real_is_refused(tmp_path, trust):
    """The run's first decision says it is staged: a file (re-signed, or unsigned and trusted) saying
    otherwise is refused; so is a real run made staged."""
    _history()
    lines = _lines(_export())[:-1]
    staged = next(r for r in lines if r["type"] == "run" and r["staged"])
    for line in lines:
        if line.get("run_id") == staged["id"] and line["type"] == "checkpoint" or line is staged:
            line["staged"] = False
    _wipe()
    data = _signed(lines) if not trust else b"".join(json.dumps(r).encode() + b"\n" for r in lines)
    message = _refused(tmp_path, data, *(["--trust-unsigned"] if trust else []))
    assert f"line {_number_of(lines, staged)} (run): staged is False in the file, the ledger says True" in message


def test_a_real_run_made_staged_is_refused(tmp_path):
    _history()
    lines = _lines(_export())[:-1]
    real = next(r for r in lines if r["type"] == "run" and not r["staged"])
    real["staged"] = True
    for line in lines:
        if line["type"] == "checkpoint" and line["run_id"] == real["id"]:
            line["staged"] = True
    _wipe()
    assert "staged is True in the file, the ledger says False" in _refused(tmp_path, _signed(lines))


@pytest.mark.parametrize("roles", ["owner", [1], {"owner": True}, [""]])
def test_roles_that_are_not_a_list_of_names_are_refused(tmp_path, roles):
    """``"roles": "owner"`` once gave the groups o, w, n, e, r."""
    make_operator("owner")
    _history()
    lines = _lines(_export())[:-1]
    user = next(r for r in lines if r["type"] == "user" and r["roles"] == ["owner"])
    user["roles"] = roles
    _wipe()
    message = _refused(tmp_path, _signed(lines))
    assert f"line {_number_of(lines, user)} (user): field 'roles' must be a list of role names" in message
    assert not get_user_model().objects.exists()


def test_slack_identities_and_saved_views_come_back_with_the_restore(tmp_path):
    """Chat approvals keep working after a restore: who an operator is in Slack is exported (an identity:
    not imported unsigned), and so are the team's saved views."""
    editor, _ = make_operator("editor")
    SlackIdentity.objects.create(user=editor, team_id="T1", slack_user_id="U1")
    SavedView.objects.create(name="failed deploys", query="state=failed&workflow=deploy", created_by="user:x")
    _history()
    exported = _export()
    assert {"slack_identity", "saved_view"} <= {line["type"] for line in _lines(exported)}
    _wipe()
    _import(tmp_path, exported)
    assert list(SlackIdentity.objects.values_list("team_id", "slack_user_id", "user__username")) == [
        ("T1", "U1", editor.username)]
    assert list(SavedView.objects.values_list("name", "query")) == [("failed deploys", "state=failed&workflow=deploy")]
    assert _export() == exported
    _wipe()
    unsigned = b"".join(line + b"\n" for line in exported.splitlines()[:-1])
    _import(tmp_path, unsigned, "--trust-unsigned")
    assert not SlackIdentity.objects.exists() and SavedView.objects.count() == 1
