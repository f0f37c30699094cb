"""Approver groups shown (SPEC §17): on the person's own page (linked from their name in the menu) and in the
admin, beside the single sign-on identities; read-only there, as every ledger model is."""

import pytest
from django.contrib import admin

from ledger.identities import operator_create
from ledger.models import ApproverGroup, SsoIdentity
from tests.factories import HX, make_operator, page_client, texts, unique

pytestmark = pytest.mark.django_db


def _grouped(role="editor", groups=("release-approvers", "dba")):
    return operator_create(name=unique("grouped"), role=role, groups=list(groups))[0]


def test_a_person_s_page_shows_their_roles_and_approver_groups(django_assert_max_num_queries):
    person = _grouped()
    client = page_client(person)
    with django_assert_max_num_queries(8):
        page = client.get("/account/")
    assert page.status_code == 200
    text = texts(page)
    groups = text.split("data-approver-groups>", 1)[1].split("</dd>", 1)[0]
    assert "release-approvers" in groups and "dba" in groups
    assert "editor" in text.split("data-roles>", 1)[1].split("</dd>", 1)[0]
    assert "with a password" in text
    assert 'href="/account/"' in texts(client.get("/runs/"))  # the menu's name leads there
    assert client.get("/account/", **HX).status_code == 200


def test_a_person_without_groups_and_with_sso_is_told_so():
    person, _ = make_operator("viewer")
    SsoIdentity.objects.create(user=person, issuer="https://idp.example", sub=unique("sub"))
    text = texts(page_client(person).get("/account/"))
    groups = text.split("data-approver-groups>", 1)[1].split("</dd>", 1)[0]
    assert "none" in groups and "single sign-on (https://idp.example)" in text


def test_the_admin_shows_approver_groups_and_sso_identities_read_only():
    boss, _ = make_operator("owner")
    boss.is_staff = boss.is_superuser = True
    boss.save(update_fields=["is_staff", "is_superuser"])
    person = _grouped()
    identity = SsoIdentity.objects.create(user=person, issuer="https://idp.example", sub=unique("sub"))
    client = page_client(boss)
    groups = client.get("/admin/ledger/approvergroup/")
    assert groups.status_code == 200 and "release-approvers" in texts(groups) and person.username in texts(groups)
    group = ApproverGroup.objects.get(name="dba")
    assert person.username in texts(client.get(f"/admin/ledger/approvergroup/{group.pk}/change/"))
    users = texts(client.get("/admin/auth/user/"))
    assert "dba, release-approvers" in users
    change = client.get(f"/admin/auth/user/{person.pk}/change/")
    assert change.status_code == 200 and "Approver groups" in texts(change) and "dba, release-approvers" in texts(change)
    sso = client.get("/admin/ledger/ssoidentity/")
    assert sso.status_code == 200 and identity.sub in texts(sso)
    for model in (ApproverGroup, SsoIdentity):
        model_admin = admin.site._registry[model]
        assert not any(getattr(model_admin, f"has_{verb}_permission")(None) for verb in ("add", "change", "delete"))
