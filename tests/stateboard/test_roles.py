"""stateboard.roles: a refusal by role reads the same way on every door."""

import pytest

from stateboard.roles import only_roles_may
from tests.factories import client_for, make_operator

pytestmark = pytest.mark.django_db


def test_every_refusal_by_role_reads_the_same_way():
    assert only_roles_may(["editor"], "approve") == "Only an editor may approve."
    assert only_roles_may(["oncall", "owner"], "roll a run back") == "Only on-call or an owner may roll a run back."
    _, viewer_token = make_operator("viewer")
    refused = client_for(viewer_token).post("/api/v1/workflows/", {"slug": "x"}, format="json")
    assert refused.status_code == 403 and refused.json()["detail"] == "Only an owner may create or change workflows."
