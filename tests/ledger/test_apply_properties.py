"""Properties of workflows as code (SPEC §12.2): ``export_workflows | apply`` changes nothing for any set of
valid workflows, and a definition change without another policy version is always refused."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger.models import Workflow
from ledger.services import file_form, file_parse, workflows_apply
from stateboard.errors import DomainError

pytestmark = pytest.mark.django_db

NAMES = st.text(alphabet="abcdefghij_", min_size=1, max_size=8).filter(lambda s: s[0] != "_")
# values YAML would take for another type were they not quoted: a number, a boolean, null, a date
TRICKY = st.sampled_from(["1.10", "yes", "no", "null", "2026-12-05", "0x1F", "~", "on", "007", " spaced "])


@st.composite
def definitions(draw):
    count = draw(st.integers(1, 3))
    slugs = draw(st.lists(st.text(alphabet="abcdefgh", min_size=2, max_size=6), min_size=count, max_size=count,
                          unique=True))
    result = []
    for slug in slugs:
        stages = draw(st.lists(NAMES, min_size=1, max_size=4, unique=True))
        effect = draw(st.lists(st.sampled_from(stages), unique=True))
        approval = draw(st.lists(st.sampled_from(stages), unique=True))
        executors = {stage: {"handler": "record", "config": {"note": draw(TRICKY)}}
                     for stage in draw(st.lists(st.sampled_from(effect), unique=True))} if effect else {}
        result.append({"slug": f"p-{slug}", "title": draw(st.one_of(TRICKY, NAMES)), "stages": stages,
                       "effect_stages": effect, "approval_stages": approval, "executors": executors,
                       "policy_version": draw(TRICKY), "max_retries": draw(st.integers(1, 5))})
    return result


def _round_trip() -> list:
    text = file_form(Workflow.objects.order_by("slug"))
    return workflows_apply(definitions=file_parse(text.encode(), json_format=False))


@pytest.mark.slow  # a property: 25 generated sets of definitions through the database (the full suite runs it)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(definitions())
def test_export_then_apply_changes_nothing(defs):
    Workflow.objects.filter(slug__startswith="p-").delete()
    applied = workflows_apply(definitions=defs)
    assert all(o.result == "created" for o in applied), [(o.workflow, o.result) for o in applied]
    again = _round_trip()
    assert {o.result for o in again} == {"unchanged"}, [(o.workflow, o.result, o.changes) for o in again]


CHANGES = st.sampled_from(["add_stage", "drop_effect", "add_approval", "handler"])


@pytest.mark.slow  # a property: 25 generated sets of definitions and changes through the database (the full suite runs it)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(definitions(), CHANGES)
def test_a_definition_change_without_another_policy_version_is_refused(defs, change):
    from tests.factories import client_for, make_operator

    Workflow.objects.filter(slug__startswith="p-").delete()
    workflows_apply(definitions=defs)
    changed = dict(defs[0])
    if change == "add_stage" or (change == "drop_effect" and not changed["effect_stages"]):
        changed["stages"] = changed["stages"] + ["zz_added"]
    elif change == "drop_effect" and changed["effect_stages"]:
        changed["effect_stages"] = changed["effect_stages"][1:]
        changed["executors"] = {k: v for k, v in changed["executors"].items() if k in changed["effect_stages"]}
    elif change == "add_approval":
        changed["approval_stages"] = sorted(set(changed["approval_stages"]) ^ {changed["stages"][0]})
    else:
        changed["stages"] = changed["stages"] + ["zz_exec"]
        changed["effect_stages"] = changed["effect_stages"] + ["zz_exec"]
        changed["executors"] = {**changed["executors"], "zz_exec": {"handler": "record", "config": {}}}
    with pytest.raises(DomainError) as refused:
        workflows_apply(definitions=[changed, *defs[1:]])
    assert refused.value.code == "policy_version_required", refused.value
    assert Workflow.objects.get(slug=changed["slug"]).stages == defs[0]["stages"]  # nothing applied

    _, owner = make_operator("owner")
    patch = {k: changed[k] for k in ("stages", "effect_stages", "approval_stages", "executors")}
    response = client_for(owner).patch(f"/api/v1/workflows/{changed['slug']}/", patch, format="json")
    assert (response.status_code, response.json().get("code")) == (409, "policy_version_required"), response.json()
