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
