import pytest
from tests.factories import client_for, make_operator
pytestmark = pytest.mark.django_db

@pytest.mark.parametrize("role", ["editor", "oncall", "viewer"])
@pytest.mark.parametrize("url", ["/api/v1/runs/not-a-uuid/retry/", "/api/v1/approvals/not-a-uuid/approve/",
                                 "/api/v1/runs/00000000-0000-0000-0000-000000000000/abandon/"])
def test_probe(role, url):
    c = client_for(make_operator(role)[1])
    r = c.post(url, {"reason": "x"}, format="json")
    print(role, url, r.status_code, r.content[:200])
    assert r.status_code < 500
