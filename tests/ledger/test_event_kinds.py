"""Every event kind, declared once (``ledger.domain.kinds.KINDS``), has all it needs (zulip's
``test_events`` idea): a handler if agents post it, the transitions it causes, its schema entry, and
the client's support; a kind Stateboard writes is refused when posted; a move to ``escalated``, whatever
causes it, opens on-call's escalation request."""

import inspect
from pathlib import Path

import pytest
from django.utils import timezone

from ledger import services
from ledger.api.components import AGENT_EVENT_KINDS
from ledger.domain import machine
from ledger.domain.kinds import AGENT_KINDS, KINDS, EventKind
from ledger.models import Approval, LedgerEvent, Run
from ledger.services import event_kinds
from ledger.services.writer import RunWriter, run_lock
from stateboard import client
from stateboard.mcp import kinds as mcp_kinds
from stateboard.mcp import server as mcp_server
from tests.factories import client_for, make_agent, make_workflow, unique
from tests.ledger.helpers import AgentDriver

TRANSITION_CAUSES = {cause for _, cause, _ in machine.TRANSITIONS}
ESCALATING = sorted({(a, cause) for a, cause, b in machine.TRANSITIONS if b == "escalated"})


def test_every_kind_is_declared_once():
    assert set(KINDS) == set(EventKind.values)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_each_kind_has_its_handler_causes_and_schema(kind):
    spec = KINDS[kind]
    assert set(spec.causes) <= TRANSITION_CAUSES, f"{kind}: a cause the state machine does not know"
    if spec.agent_postable:
        assert kind in event_kinds.HANDLERS, f"{kind}: agents post it, but no handler applies it"
        assert kind in AGENT_EVENT_KINDS, f"{kind}: missing from the OpenAPI schema's event kinds"
    else:
        assert kind not in AGENT_EVENT_KINDS


def test_every_transition_cause_that_names_a_kind_is_declared_by_it():
    for cause in TRANSITION_CAUSES & set(KINDS):
        assert cause in KINDS[cause].causes, f"{cause}: TRANSITIONS use it, KINDS[{cause!r}] does not declare it"


def test_the_handlers_are_exactly_the_agent_kinds():
    assert set(event_kinds.HANDLERS) == AGENT_KINDS


POSTED = [(str(kind), spec.summary) for kind, spec in KINDS.items() if spec.agent_postable]
DECISIONS = Path(__file__).resolve().parents[2] / "docs" / "decisions.md"


def test_the_docs_table_of_what_agents_may_post_is_kinds():
    table = "\n".join(["| kind | what it says |", "|---|---|", *(f"| `{k}` | {summary} |" for k, summary in POSTED)])
    written = DECISIONS.read_text().partition("<!-- agent kinds -->\n")[2].partition("\n<!-- /agent kinds -->")[0]
    assert written == table, f"docs/decisions.md's table of agent kinds is not KINDS'; paste:\n{table}"


def test_the_mcp_event_tool_names_what_agents_may_post():
    assert list(mcp_kinds.AGENT_KINDS) == POSTED, f"stateboard/mcp/kinds.py is not KINDS'; paste:\n{POSTED!r}"
    assert all(f"{kind} ({summary})" in mcp_server.EVENT_KINDS for kind, summary in POSTED)


def test_the_client_posts_every_agent_kind():
    """``Run.event(stage, kind)`` is the client's one way to post; the stage helper covers the outcomes."""
    assert "kind" in inspect.signature(client.Run.event).parameters
    helper = inspect.getsource(client.StageHandle)
    for kind in ("failed", "skipped", "unknown", "succeeded"):
        assert f'"{kind}"' in helper, kind


@pytest.mark.django_db
@pytest.mark.parametrize("kind", sorted(set(KINDS) - AGENT_KINDS))
def test_a_kind_stateboard_writes_is_refused_when_an_agent_posts_it(kind):
    wf = make_workflow(stages=["build"], effect_stages=[], approval_stages=[])
    driver = AgentDriver(client_for(make_agent()[1]), wf.slug)
    run = driver.trigger()
    refused = driver.event(run["id"], "build", kind, expect=422)
    assert refused["code"] == "kind_reserved"


def test_every_kind_that_escalates_is_among_the_moves_checked_below():
    escalating_kinds = {kind for kind, spec in KINDS.items() if {c for _, c in ESCALATING} & set(spec.causes)}
    assert escalating_kinds == {"decided", "expired", "rejected"}  # and the executor's and on-call's causes


@pytest.mark.django_db
@pytest.mark.parametrize(("from_state", "cause"), ESCALATING, ids=[f"{a}-{c}" for a, c in ESCALATING])
def test_every_move_to_escalated_opens_one_escalation_request(from_state, cause):
    """The writer opens it: no verb that escalates a run can forget it (nor open a second)."""
    wf = make_workflow(stages=["build"], effect_stages=[], approval_stages=[])
    run, _ = services.run_trigger(workflow_slug=wf.slug, inputs={}, intent=unique("esc"))
    Run.objects.filter(id=run.id).update(state=from_state)
    writer = RunWriter(run_lock(run.id), "system", timezone.now())
    writer.transition("escalated", "why_not", cause=cause)
    writer.flush()
    RunWriter(run_lock(run.id), "system", timezone.now()).flush()  # a later write of the escalated run
    requests = Approval.objects.filter(run_id=run.id, kind=Approval.Kind.ESCALATION)
    assert list(requests.values_list("status", flat=True)) == ["pending"]
    kinds = list(LedgerEvent.objects.filter(run_id=run.id).order_by("seq").values_list("kind", flat=True))
    assert kinds[-2:] == ["transition", "escalation_raised"] and kinds.count("escalation_raised") == 1
