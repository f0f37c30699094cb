"""A body that does not parse is refused by the pipeline (400 with the parser's code) before anything reads
it, on every JSON endpoint: nothing runs as an empty body, nothing is written. The lease body alone
refuses fields it does not know (a misspelled ``workflows`` would lease any workflow's run)."""


import pytest
from django.conf import settings

from knowledge.models import Claim
from ledger.models import AuditEntry, Checkpoint, Goal, LedgerEvent, Run, Workflow
from tests.factories import client_for, make_agent, make_operator, make_workflow
from tests.ledger.helpers import AgentDriver
from tests.ledger.test_approvals import Crew

pytestmark = pytest.mark.django_db

DEEP = settings.API_MAX_DEPTH + 1
BODIES = {  # raw body: the stable code of its 400
    "unclosed": (b"{", "malformed_json"),
    "nan": (b'{"wait_seconds": NaN}', "malformed_json"),
    "infinity": (b'{"wait_seconds": Infinity}', "malformed_json"),
    "bom": (b'\xef\xbb\xbf{"wait_seconds": 0}', "malformed_json"),
    "nul byte": (b'{"wait_seconds": 0}\x00', "nul_byte"),
    "escaped nul": (b'{"reason": "a\\u0000b"}', "nul_byte"),
    "bad utf-8": (b'{"reason": "\xff\xfe"}', "malformed_json"),
    "65 deep": (b'{"a": ' * DEEP + b"1" + b"}" * DEEP, "too_deep"),
}


@pytest.fixture
def world():
    """A queued run (a human triggered it) that any agent could lease, a run an agent holds, and callers."""
    workflow = make_workflow(approval_stages=[], stages=["build"])
    owner, oncall, editor = (client_for(make_operator(role)[1]) for role in ("owner", "oncall", "editor"))
    queued = owner.post("/api/v1/runs/", {"workflow": workflow.slug, "inputs": {"v": 1}}, format="json").json()
    assert queued["queued"], queued
    _, agent_token = make_agent()
    agent = AgentDriver(client_for(agent_token), workflow.slug)
    held = agent.trigger(intent="held")
    crew = Crew()  # a pending approval: who may decide it is known from the path before the body is read
    approval = crew.request(crew.to_deploy())["id"]
    return {"owner": owner, "oncall": oncall, "editor": editor, "agent": agent.client, "slug": workflow.slug, "queued": queued["id"],
            "held": held["id"], "approval": approval}


# Every endpoint that takes a JSON body, with a caller that may use it.
ENDPOINTS = [
    ("agent", "POST", "/api/v1/runs/lease/"),
    ("agent", "POST", "/api/v1/runs/"),
    ("agent", "POST", "/api/v1/runs/{held}/events/"),
    ("agent", "POST", "/api/v1/runs/{held}/checkpoints/"),
    ("agent", "POST", "/api/v1/runs/{held}/approvals/"),
    ("agent", "POST", "/api/v1/workflows/{slug}/goals/"),
    ("agent", "POST", "/api/v1/claims/"),
    ("agent", "POST", "/api/v1/knowledge/reconcile/"),
    ("owner", "POST", "/api/v1/workflows/"),
    ("owner", "PATCH", "/api/v1/workflows/{slug}/"),
    ("owner", "POST", "/api/v1/workflows/apply/"),
    ("oncall", "POST", "/api/v1/runs/{queued}/retry/"),
    ("oncall", "POST", "/api/v1/runs/{queued}/compensate/"),
    ("oncall", "POST", "/api/v1/runs/{queued}/abandon/"),
    ("owner", "POST", "/api/v1/runs/{queued}/rollback/"),
    ("editor", "POST", "/api/v1/approvals/{approval}/approve/"),
    ("editor", "POST", "/api/v1/approvals/{approval}/reject/"),
    ("owner", "POST", "/api/v1/claims/some.key/refresh/"),
    ("owner", "POST", "/api/v1/claims/some.key/accept/"),
    ("owner", "POST", "/api/v1/claims/some.key/invalidate/"),
    ("owner", "POST", "/api/v1/claims/some.key/revoke/"),
    ("owner", "POST", "/api/v1/notifications/{approval}/read/"),
]


def _written():
    return [model.objects.count() for model in (LedgerEvent, Run, Checkpoint, Goal, Workflow, AuditEntry, Claim)]


@pytest.mark.parametrize("caller, method, path", ENDPOINTS, ids=[f"{m} {p}" for _, m, p in ENDPOINTS])
def test_a_body_that_does_not_parse_is_400_before_anything_reads_it(world, caller, method, path):
    url = path.format(**world)
    before = _written()
    for name, (raw, code) in BODIES.items():
        response = world[caller].generic(method, url, raw, content_type="application/json")
        assert response.status_code == 400, (name, response.status_code, response.content)
        assert response.json()["code"] == code, (name, response.content)
    assert _written() == before
    assert Run.objects.get(id=world["queued"]).lease_owner == ""  # still queued: nobody leased it


def test_a_body_of_another_media_type_is_415_and_leases_nothing(world):
    response = world["agent"].generic("POST", "/api/v1/runs/lease/", b"workflows=x", content_type="text/plain")
    assert (response.status_code, response.json()["code"]) == (415, "unsupported_media_type"), response.content
    assert Run.objects.get(id=world["queued"]).lease_owner == ""


def test_the_lease_body_refuses_an_unknown_field(world):
    """``workflow`` for ``workflows``: 422 ``unknown_field`` naming it, and the queued run stays queued."""
    response = world["agent"].post("/api/v1/runs/lease/", {"workflow": "x", "wait_seconds": 0}, format="json")
    assert response.status_code == 422, response.content
    body = response.json()
    assert body["code"] == "unknown_field" and body["errors"] == {"workflow": ["Unknown field."]}, body
    assert Run.objects.get(id=world["queued"]).lease_owner == ""
    leased = world["agent"].post("/api/v1/runs/lease/", {"workflows": [world["slug"]]}, format="json")
    assert leased.status_code == 200 and leased.json()["id"] == world["queued"]


def test_other_bodies_keep_ignoring_unknown_fields(world):
    response = world["owner"].post("/api/v1/runs/", {"workflow": world["slug"], "inputs": {"v": 2},
                                                     "intent": "extra", "colour": "blue"}, format="json")
    assert response.status_code == 201, response.content
