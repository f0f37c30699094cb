"""Apply leftovers (issue 39.14): an owner holds the owner role, prune touches only the caller's workflows
(SPEC §12.2), YAML aliases are refused before they expand, and text fields take strings only."""

import time

import pytest

from ledger.models import Workflow
from tests.factories import client_for, make_agent, make_operator, make_workflow
from tests.ledger.test_apply import apply

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("who", ["agent", "viewer", "editor"])
def test_an_owner_named_in_a_definition_must_hold_the_owner_role(tmp_path, who):
    user = make_agent()[0] if who == "agent" else make_operator(who)[0]
    status, _, err = apply(tmp_path, f"workflows:\n  - slug: hello\n    owner: {user.username}\n")
    assert status == 1 and not Workflow.objects.exists()
    assert f"hello.owner: unknown_owner: {user.username!r} does not hold the owner role" in err
    owner = make_operator("owner")[0]
    status, out, _ = apply(tmp_path, f"workflows:\n  - slug: hello\n    owner: {owner.username}\n")
    assert status == 0 and Workflow.objects.get(slug="hello").owner == owner


def test_the_api_refuses_a_viewer_as_owner_too():
    viewer = make_operator("viewer")[0]
    client = client_for(make_operator("owner")[1])
    response = client.post("/api/v1/workflows/apply/", {"workflows": [{"slug": "x", "owner": viewer.username}]},
                           format="json")
    assert response.status_code == 422 and response.json()["code"] == "unknown_owner", response.content
    assert response.json()["errors"][0]["field"] == "owner"


def test_prune_archives_what_the_same_person_applied_and_prune_all_what_the_caller_owns(tmp_path):
    alice, bob = make_operator("owner")[0], make_operator("owner")[0]
    apply(tmp_path, f"workflows:\n  - slug: alices\n    owner: {alice.username}\n  - slug: shared\n",
          "--as", alice.username)
    apply(tmp_path, f"workflows:\n  - slug: bobs\n    owner: {bob.username}\n", "--as", bob.username)
    apply(tmp_path, "workflows:\n  - slug: by-system\n")
    make_workflow(slug="by-api", owner=alice)  # written by the API: never apply's to prune
    status, out, _ = apply(tmp_path, "workflows: []\n", "--prune", "--as", alice.username)
    assert (status, out.splitlines()) == (0, ["archived   alices", "archived   shared"])
    assert set(Workflow.objects.filter(archived_at__isnull=True).values_list("slug", flat=True)) == {
        "bobs", "by-system", "by-api"}
    status, out, _ = apply(tmp_path, "workflows: []\n", "--prune", "--dry-run")  # system:apply's own
    assert out.splitlines() == ["archived   by-system", "dry run: nothing written"]
    status, out, _ = apply(tmp_path, "workflows: []\n", "--prune-all", "--as", alice.username)
    assert out.splitlines() == ["archived   by-api"]  # what alice owns; bob's and the ownerless stay
    status, out, _ = apply(tmp_path, "workflows: []\n", "--prune-all")
    assert out.splitlines() == ["archived   by-system"]  # the system actor owns the ownerless
    assert list(Workflow.objects.filter(archived_at__isnull=True).values_list("slug", flat=True)) == ["bobs"]


def test_a_workflow_someone_else_applied_last_is_theirs_to_prune(tmp_path):
    alice, bob = make_operator("owner")[0], make_operator("owner")[0]
    apply(tmp_path, "workflows:\n  - slug: hello\n", "--as", alice.username)
    apply(tmp_path, "workflows:\n  - slug: hello\n    title: Bob's now\n", "--as", bob.username)
    status, out, _ = apply(tmp_path, "workflows: []\n", "--prune", "--as", alice.username)
    assert (status, out.splitlines()) == (0, [])
    status, out, _ = apply(tmp_path, "workflows: []\n", "--prune", "--as", bob.username)
    assert out.splitlines() == ["archived   hello"]


def _bomb(levels: int) -> str:
    """A few hundred bytes of nested aliases that expand to 9 ** levels strings."""
    names = [chr(97 + n) for n in range(levels)]
    rows = [f"      {names[0]}: &{names[0]} [x, x, x, x, x, x, x, x, x]"]
    rows += [f"      {name}: &{name} [{', '.join([f'*{before}'] * 9)}]" for before, name in zip(names, names[1:])]
    return "workflows:\n  - slug: hello\n    schedule_inputs:\n" + "\n".join(rows) + "\n"


@pytest.mark.parametrize("text", [
    _bomb(7), "workflows:\n  - &w {slug: hello}\n  - *w\n",
    "workflows:\n  - &b {slug: one}\n  - <<: *b\n    slug: hello\n",
])
def test_a_yaml_alias_is_refused_before_it_expands(tmp_path, text):
    started = time.monotonic()
    status, _, err = apply(tmp_path, text, "--dry-run")
    assert time.monotonic() - started < 2
    assert status == 1 and "invalid_file" in err and "the alias *" in err and not Workflow.objects.exists()


def test_the_file_form_never_writes_an_alias(tmp_path):
    shared = ["a", "b"]
    make_workflow(slug="one", stages=shared, effect_stages=[], approval_stages=[], agents=shared)
    from tests.ledger.test_apply import exported

    text = exported()
    assert "&" not in text and "*" not in text
    assert apply(tmp_path, text)[0] == 0


@pytest.mark.parametrize(("method", "url", "body", "field"), [
    ("post", "/api/v1/workflows/", {"slug": 9223372036854775808}, "slug"),
    ("post", "/api/v1/workflows/", {"slug": "ok", "title": 5}, "title"),
    ("post", "/api/v1/workflows/", {"slug": "ok", "stages": ["a", 1]}, "stages[1]"),
    ("post", "/api/v1/workflows/", {"slug": "ok", "agents": [True]}, "agents[0]"),
    ("patch", "/api/v1/workflows/{slug}/", {"policy_version": 2}, "policy_version"),
    ("patch", "/api/v1/workflows/{slug}/", {"reason": 1.5}, "reason"),
    ("post", "/api/v1/runs/", {"workflow": "{slug}", "inputs": {}, "intent": 7}, "intent"),
    ("post", "/api/v1/runs/", {"workflow": 12, "inputs": {}}, "workflow"),
])
def test_a_number_in_a_text_field_is_422_validation_error_never_converted(method, url, body, field):
    wf = make_workflow(slug="existing")
    client = client_for(make_operator("owner")[1])
    before = list(Workflow.objects.values_list("slug", "title", "policy_version"))
    body = {k: v.format(slug=wf.slug) if isinstance(v, str) else v for k, v in body.items()}
    response = getattr(client, method)(url.format(slug=wf.slug), body, format="json")
    assert response.status_code == 422, response.content
    assert response.json()["code"] == "validation_error" and field in response.json()["errors"], response.content
    assert list(Workflow.objects.values_list("slug", "title", "policy_version")) == before
