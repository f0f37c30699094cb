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


def test_create_operator_group_option_puts_the_person_in_approver_groups_only():
    """API.md (settled 2026-12-07): `--group G`, repeatable, an approver group (SPEC §17), never a role."""
    from django.contrib.auth import get_user_model
    from django.core.management import CommandError

    from ledger.models import ApproverGroup

    call_command("create_operator", "rel-op", "--role", "editor", "--group", "release", "--group", "owner",
                 "--group", "release")
    user = get_user_model().objects.get(username="rel-op")
    assert sorted(user.approver_groups.values_list("name", flat=True)) == ["owner", "release"]
    assert sorted(user.groups.values_list("name", flat=True)) == ["editor"]  # the group named owner is no role
    with pytest.raises(CommandError, match="approver group"):
        call_command("create_operator", "bad-op", "--role", "editor", "--group", " spaced ")
    assert not get_user_model().objects.filter(username="bad-op").exists()
    assert ApproverGroup.objects.count() == 2
