"""An audit entry records every role its actor holds, however many: a superuser is audited like anyone."""

import pytest
from django.contrib.auth.models import Group

from ledger.models import AuditEntry
from stateboard.roles import ALL_ROLES, HUMAN_ROLES
from tests.factories import client_for, make_operator
from tests.ledger.test_approvals import Crew

pytestmark = pytest.mark.django_db
EVERY_ROLE = ",".join(sorted(ALL_ROLES))


def _superuser(*groups):
    """A superuser (every human role), in the groups named too."""
    user, token = make_operator("owner")
    user.is_superuser = user.is_staff = True
    user.save()
    user.groups.add(*(Group.objects.get_or_create(name=role)[0] for role in groups))
    return user, client_for(token)


def test_a_policy_bump_by_a_holder_of_every_role_is_audited():
    crew = Crew()
    _, client = _superuser(*ALL_ROLES)
    response = client.patch(f"/api/v1/workflows/{crew.wf.slug}/", {"policy_version": "2"}, format="json")
    assert response.status_code == 200, response.content
    entry = AuditEntry.objects.get(action="policy_bump", target=crew.wf.slug)
    assert entry.outcome == "done" and entry.role == EVERY_ROLE


def test_a_superuser_decides_an_approval_and_a_refused_decision_is_audited():
    crew = Crew()
    approval = crew.request(crew.to_deploy())
    user, client = _superuser()
    approved = client.post(f"/api/v1/approvals/{approval['id']}/approve/", {}, format="json")
    assert approved.status_code == 200, approved.content
    assert approved.json()["status"] == "approved"
    again = client.post(f"/api/v1/approvals/{approval['id']}/reject/", {"reason": "changed my mind"}, format="json")
    assert again.status_code == 409, again.content  # decided already: refused, and the refusal audited
    entry = AuditEntry.objects.get(actor=f"user:{user.username}", outcome="refused")
    assert entry.role == ",".join(sorted(HUMAN_ROLES)) and entry.code == again.json()["code"]

