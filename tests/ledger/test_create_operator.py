"""`manage.py create_operator`."""

import pytest
from django.core.management import call_command

pytestmark = pytest.mark.django_db


def test_create_operator_superuser_option():
    call_command("create_operator", "root-op", "--role", "owner", "--superuser")
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.get(username="root-op")
    assert user.is_superuser and user.is_staff and user.groups.filter(name="owner").exists()
    call_command("create_operator", "plain-op", "--role", "viewer")
    assert not get_user_model().objects.get(username="plain-op").is_superuser


def test_create_operator_group_puts_the_person_in_approver_groups_never_roles():
    """``--group G`` (repeatable) joins approver groups (SPEC §17), created when new; a group named like a role
    grants no role; running it again adds groups beside the ones held."""
    from django.contrib.auth import get_user_model

    from ledger.models import ApproverGroup
    from stateboard.roles import user_roles

    call_command("create_operator", "grouped-op", "--role", "editor", "--group", "release-approvers",
                 "--group", "owner", "--group", " release-approvers ")
    user = get_user_model().objects.get(username="grouped-op")
    assert set(user.approver_groups.values_list("name", flat=True)) == {"release-approvers", "owner"}
    assert user_roles(user) == {"editor"}  # the approver group `owner` is no role
    call_command("create_operator", "grouped-op", "--role", "editor", "--group", "dba")
    assert set(user.approver_groups.values_list("name", flat=True)) == {"release-approvers", "owner", "dba"}
    assert ApproverGroup.objects.get(name="dba").members.get() == user


@pytest.mark.parametrize("bad", ["", "   ", "x" * 201, "tab\there"])
def test_create_operator_refuses_a_bad_group_name_and_creates_nothing(bad):
    from django.contrib.auth import get_user_model
    from django.core.management import CommandError

    from ledger.models import ApproverGroup

    with pytest.raises(CommandError, match="approver group"):
        call_command("create_operator", "badly-grouped", "--role", "viewer", "--group", "fine", "--group", bad)
    assert not get_user_model().objects.filter(username="badly-grouped").exists()
    assert not ApproverGroup.objects.exists()
