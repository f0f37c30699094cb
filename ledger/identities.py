"""Creating agents and operators (used by the commands, the demo seed and the tests); revoking an agent's
token from the fleet (SPEC §15), through ``ledger.auth.token_revoke``."""

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import transaction

from ledger import authorizers
from ledger.auth import token_issue, token_revoke
from ledger.models import Agent, ApiToken, ApproverGroup, SlackIdentity
from stateboard.errors import Conflict, NotFound
from stateboard.roles import AGENT, HUMAN_ROLES

# How the demo's own operators (demo-editor, demo-oncall) begin the reason when they settle the demo's older
# requests and escalations to keep its backlog bounded: the pages mark such decisions as the demo's, not a
# person's (``board.demo_tidying``).
DEMO_TIDYING = "Demo tidying:"


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
def operator_create(*, name: str, role: str, password: str | None = None, with_token: bool = False,
                    slack_id: str | None = None, groups=()):
    """A human user in one role; returns (user, token or None); no password under ``OIDC_ONLY`` (SPEC §17).
    An existing user gains the role, and with ``slack_id`` (``TEAM:USER``) decides from Slack's buttons as that Slack user;
    ``groups``: approver groups they join (``group:<name>`` in a stage's approvers; no role)."""
    if role not in HUMAN_ROLES:
        raise ValueError(f"Unknown role {role!r}; choose one of {', '.join(HUMAN_ROLES)}.")
    if any(not isinstance(g, str) or not g.strip() or g != g.strip() or len(g) > 200 for g in groups):
        raise ValueError("An approver group is a name of 1 to 200 characters without surrounding spaces.")
    if password and settings.OIDC_ONLY:
        raise ValueError("OIDC_ONLY is set: people sign in with single sign-on only, so no password is set.")
    User = get_user_model()
    user, created = User.objects.get_or_create(username=name)
    if password:
        user.set_password(password)
        user.save(update_fields=["password"])
    elif created:
        user.set_unusable_password()
        user.save(update_fields=["password"])
    user.groups.add(Group.objects.get_or_create(name=role)[0])
    if slack_id:
        slack_identity_set(user=user, slack_id=slack_id)
    for group in dict.fromkeys(groups):
        ApproverGroup.objects.get_or_create(name=group)[0].members.add(user)
    return user, (token_issue(user=user) if with_token else None)


def slack_identity_set(*, user, slack_id: str) -> SlackIdentity:
    """Map the Slack user ``TEAM:USER`` (team id, user id) to ``user``; one Slack user is one operator."""
    team_id, _, slack_user_id = slack_id.strip().partition(":")
    if not team_id or not slack_user_id or ":" in slack_user_id:
        raise ValueError(f"--slack-id is TEAM:USER (Slack's team id and user id, e.g. T0123:U0456), not {slack_id!r}.")
    identity, _ = SlackIdentity.objects.get_or_create(team_id=team_id, slack_user_id=slack_user_id,
                                                      defaults={"user": user})
    if identity.user_id != user.pk:
        raise ValueError(f"Slack user {slack_id} is already mapped to {identity.user.get_username()!r}.")
    return identity


def agent_revoke(*, name: str, user, reason: str) -> Agent:
    """Revoke every active token of the agent ``name`` (``may_revoke_agent``): each through
    ``token_revoke``, audited (``token_revoke``, with ``reason``) as done by ``user``; the agent's next call
    is 401 ``authentication_failed``. 404 ``agent_not_found``; 409 ``token_revoked`` when none is active."""
    authorizers.may_revoke_agent(user)
    agent = Agent.objects.select_related("user").filter(user__username=name).first()
    if agent is None:
        raise NotFound("agent_not_found", f"No agent {name!r}.")
    with transaction.atomic():
        hashes = list(ApiToken.objects.filter(user=agent.user, revoked_at__isnull=True)
                      .select_for_update().values_list("key_hash", flat=True))
        if not sum(token_revoke(key_hash=key_hash, user=user, reason=reason) for key_hash in hashes):
            raise Conflict("token_revoked", f"{name}'s token is revoked already.")
    return agent
