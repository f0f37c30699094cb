"""Single sign-on's people (SPEC §17): the person an OpenID Connect sign-in is, matched by (issuer, ``sub``),
created at their first sign-in with their ``preferred_username`` (made unique), and given — at every
sign-in, afresh — the roles ``OIDC_ROLE_MAP`` maps their IdP groups to and those groups as their approver
groups (``ledger.models.ApproverGroup``, never roles). With no mapped role the sign-in is refused and
nothing is written. The ID token was checked before (``ledger/web/sso.py``, by Authlib)."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import IntegrityError, transaction
from django.utils import timezone

from ledger.models import ApproverGroup, SsoIdentity
from stateboard.errors import Refused
from stateboard.roles import AGENT, HUMAN_ROLES

NAME_MAX = 140  # room for the "-N" that makes a name unique, under the user name's 150


def sso_name(claims) -> str:
    """The name a person signs in as: ``preferred_username``, else the ``sub`` (printable, trimmed)."""
    for value in (claims.get("preferred_username"), claims.get("sub")):
        name = "".join(ch for ch in str(value or "") if ch.isprintable() and not ch.isspace())[:NAME_MAX]
        if name:
            return name
    return "sso-user"


def sso_groups(claims) -> list[str]:
    """The IdP's groups in the claim ``OIDC_GROUPS_CLAIM``: a list of names (a lone name is a list of one)."""
    value = claims.get(settings.OIDC_GROUPS_CLAIM)
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)):
        return []
    return sorted({group.strip()[:200] for group in value if isinstance(group, str) and group.strip()})


def sso_roles(groups) -> list[str]:
    """The roles the groups map to through ``OIDC_ROLE_MAP`` (a group the map does not name grants none,
    whatever it is called)."""
    role_map = settings.OIDC_ROLE_MAP
    return sorted({role_map[group] for group in groups if role_map.get(group) in HUMAN_ROLES})


def _unique_username(name: str) -> str:
    User = get_user_model()
    candidate, n = name, 1
    while User.objects.filter(username__iexact=candidate).exists():
        n += 1
        candidate = f"{name}-{n}"
    return candidate


def sso_sign_in(*, issuer: str, claims) -> tuple:
    """The person these verified claims are, their roles and approver groups recomputed; returns
    (user, roles, groups, created). Refused (403 ``sso_no_role``) with nothing written when no group maps to a
    role; ``sso_not_a_person`` for an agent or a deactivated person. The same person's first sign-in twice
    at once: the one that loses the race to create them finds them and signs in as them."""
    try:
        return _sign_in(issuer, claims)
    except IntegrityError:
        return _sign_in(issuer, claims)


def _identity(issuer: str, sub: str) -> SsoIdentity | None:
    return SsoIdentity.objects.select_for_update().select_related("user").filter(issuer=issuer, sub=sub).first()


@transaction.atomic
def _sign_in(issuer: str, claims) -> tuple:
    sub = str(claims.get("sub") or "")
    if not sub:
        raise Refused("sso_no_subject", "The identity provider named no subject.")
    groups = sso_groups(claims)
    roles = sso_roles(groups)
    if not roles:
        raise Refused("sso_no_role", "Your groups at the identity provider give you no role here; ask an "
                                     "administrator to map one of them (OIDC_ROLE_MAP).")
    identity = _identity(issuer, sub)
    created = identity is None
    if created:
        user = get_user_model().objects.create_user(username=_unique_username(sso_name(claims)))
        user.set_unusable_password()
        user.save(update_fields=["password"])
        identity = SsoIdentity.objects.create(user=user, issuer=issuer, sub=sub)
    user = identity.user
    if not user.is_active or user.groups.filter(name=AGENT).exists():
        raise Refused("sso_not_a_person", "This identity is not an active person here.")
    held = set(user.groups.filter(name__in=HUMAN_ROLES).values_list("name", flat=True))
    if lost := held - set(roles):
        user.groups.remove(*Group.objects.filter(name__in=lost))
    for role in set(roles) - held:
        user.groups.add(Group.objects.get_or_create(name=role)[0])
    user.approver_groups.set([ApproverGroup.objects.get_or_create(name=group)[0] for group in groups])
    identity.last_sign_in_at = timezone.now()
    identity.save(update_fields=["last_sign_in_at"])
    email = claims.get("email")
    if created and isinstance(email, str) and len(email) <= 254:
        user.email = email
        user.save(update_fields=["email"])
    return user, roles, groups, created
