"""The role vocabulary: who holds which role, and the checks the authorizers are built from.

Humans hold roles as Django groups; agents are users in the ``agent`` group with an
``ledger.Agent`` profile. Endpoints name the roles that may call them in their ``stateboard.policy.Policy``;
an action an authorizer decides (``ledger/authorizers.py``, ``knowledge/authorizers.py``) is declared
``ANY`` with that authorizer, which refuses.
"""

from django.contrib.auth import get_user_model
from django.db.models import Q

from stateboard.errors import Refused

AGENT, EDITOR, OWNER, ONCALL, VIEWER = "agent", "editor", "owner", "oncall", "viewer"
HUMAN_ROLES = (EDITOR, OWNER, ONCALL, VIEWER)
ALL_ROLES = (AGENT, *HUMAN_ROLES)
ANY = frozenset(ALL_ROLES)  # any authenticated identity
PUBLIC = "public"


def user_roles(user) -> frozenset[str]:
    if user is None or not user.is_authenticated:
        return frozenset()
    cached = getattr(user, "_stateboard_roles", None)
    if cached is None:
        cached = roles_remember(user, user.groups.values_list("name", flat=True))
    return cached


def roles_remember(user, group_names) -> frozenset[str]:
    """The roles a user holds, from their group names (kept on the user object for this request)."""
    roles = frozenset(name for name in group_names if name in ALL_ROLES)
    if user.is_superuser:
        roles = roles | frozenset(HUMAN_ROLES)
    user._stateboard_roles = roles
    return roles


def has_role(user, *roles: str) -> bool:
    return bool(user_roles(user) & set(roles))


def is_agent(user) -> bool:
    return AGENT in user_roles(user)


def users_in_role(role: str):
    """Active people holding ``role`` (superusers hold every human role); never agents."""
    return (get_user_model().objects.filter(is_active=True).filter(Q(groups__name=role) | Q(is_superuser=True))
            .exclude(groups__name=AGENT).distinct().order_by("id"))


class Actor(str):
    """A ledger actor string (``agent:<name>``, ``user:<name>``) that also knows who it is: ``user_id``,
    the identity leases are held by (a renamed agent keeps its runs; a new agent given a freed name does
    not get them). Everywhere else it is the plain string, the name at the time of the write."""

    user_id: int | None

    def __new__(cls, text: str, user_id: int | None = None):
        actor = super().__new__(cls, text)
        actor.user_id = user_id
        return actor


def actor_for(user) -> str:
    """Ledger actor: ``agent:<name>`` or ``user:<name>`` (an ``Actor``, with the user's id)."""
    if user is None:
        return "system"
    return Actor(f"{'agent' if is_agent(user) else 'user'}:{user.get_username()}", user.pk)


ROLE_WORDS = {AGENT: "an agent", EDITOR: "an editor", OWNER: "an owner", ONCALL: "on-call", VIEWER: "a viewer"}


def only_roles_may(roles, what: str = "do this") -> str:
    """Every refusal by role in one wording: "Only an editor may …", "Only on-call or an owner may …"."""
    return f"Only {' or '.join(ROLE_WORDS.get(r, r) for r in roles)} may {what}."


def require_role(user, *roles: str, detail: str = "") -> None:
    """Refuse (403 ``permission_denied``) unless ``user`` holds one of ``roles``."""
    if not has_role(user, *roles):
        raise Refused("permission_denied", detail or only_roles_may(roles))


def require_person(user, *roles: str, detail: str = "") -> None:
    """Like ``require_role``, for decisions people make: an agent identity is refused even when it
    also holds a human role (agents propose, people decide)."""
    if is_agent(user):
        raise Refused("permission_denied", detail or "Agents may not do this; a person decides.")
    require_role(user, *roles, detail=detail)


def allowed(check, *args) -> bool:
    """Whether an authorizer lets this through (for showing only the buttons a user may use)."""
    try:
        check(*args)
    except Refused:
        return False
    return True


def acting_role(user, allowed: set[str] | frozenset[str]) -> str:
    """The role a user acted in for an audited action (the first they hold among ``allowed``)."""
    for role in (AGENT, EDITOR, OWNER, ONCALL, VIEWER):
        if role in allowed and role in user_roles(user):
            return role
    return "none"


def roles_context(request):
    """Template context: the signed-in user's roles, for showing only the buttons they may use."""
    return {"user_roles": user_roles(getattr(request, "user", None))}
