"""Creating agents and operators (used by the commands, the demo seed and the tests)."""

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import transaction

from ledger.auth import token_issue
from ledger.models import Agent
from stateboard.roles import AGENT, HUMAN_ROLES


@transaction.atomic
def agent_create(*, name: str, owner=None) -> tuple[Agent, str]:
    """A new agent identity and its first API token (returned once)."""
    User = get_user_model()
    if User.objects.filter(username=name).exists():
        raise ValueError(f"A user or agent named {name!r} already exists.")
    user = User.objects.create_user(username=name)
    user.set_unusable_password()
    user.save(update_fields=["password"])
    user.groups.add(Group.objects.get_or_create(name=AGENT)[0])
    agent = Agent.objects.create(user=user, owner=owner)
    return agent, token_issue(user=user)


@transaction.atomic
def operator_create(*, name: str, role: str, password: str | None = None, with_token: bool = False):
    """A human user in one role; returns (user, token or None). An existing user gains the role."""
    if role not in HUMAN_ROLES:
        raise ValueError(f"Unknown role {role!r}; choose one of {', '.join(HUMAN_ROLES)}.")
    User = get_user_model()
    user, created = User.objects.get_or_create(username=name)
    if password:
        user.set_password(password)
        user.save(update_fields=["password"])
    elif created:
        user.set_unusable_password()
        user.save(update_fields=["password"])
    user.groups.add(Group.objects.get_or_create(name=role)[0])
    return user, (token_issue(user=user) if with_token else None)
