"""Who may do what to which claim: one function per action, raising ``Refused(code, detail)``.

``claim_or_key`` is a ``ClaimHead``, a ``Claim`` or a key; a key nobody knows is not refused here
(the service answers 404). Pages, the API and ``knowledge/services.py`` call these (SPEC §4).
"""

from knowledge.domain import gate
from knowledge.models import Claim, ClaimHead
from stateboard.errors import Refused
from stateboard.roles import AGENT, EDITOR, OWNER, has_role, is_agent, only_roles_may, require_person, require_role

REVIEWER_ROLES = (OWNER, EDITOR)


def _head(claim_or_key) -> ClaimHead | None:
    if isinstance(claim_or_key, ClaimHead):
        return claim_or_key
    key = claim_or_key.key if isinstance(claim_or_key, Claim) else claim_or_key
    if not isinstance(key, str):
        return None
    return ClaimHead.objects.filter(key=key).first()


def claim_owner_id(head: ClaimHead) -> int | None:
    """The claim's owner: of its current value, else of its latest version."""
    if head.current_id is not None or head.gc_status:
        return head.owner_id
    latest = Claim.objects.filter(key=head.key).order_by("-version").only("owner_id").first()
    return latest.owner_id if latest else None


def acts_as_claim_owner(user, owner_id: int | None) -> bool:
    """The claim's owner alone (any person with the owner role when it has none); never an agent."""
    if user is None or is_agent(user):
        return False
    if owner_id is not None:
        return user.pk == owner_id
    return has_role(user, OWNER)


def may_propose(user, claim_or_key=None) -> None:
    require_role(user, AGENT, OWNER, detail=only_roles_may([AGENT, OWNER], "propose claims"))


def may_reconcile(user, subject=None) -> None:
    """Merge a checkpoint's memory snapshot into the live store: an agent, or an owner."""
    require_role(user, AGENT, OWNER, detail=only_roles_may([AGENT, OWNER], "reconcile knowledge"))


def may_refresh(user, claim_or_key=None) -> None:
    require_person(user, *REVIEWER_ROLES, detail=only_roles_may(REVIEWER_ROLES, "refresh claims"))


def may_invalidate(user, claim_or_key=None) -> None:
    require_person(user, *REVIEWER_ROLES, detail=only_roles_may(REVIEWER_ROLES, "invalidate claims"))


def may_revoke(user, claim_or_key) -> None:
    """Decided by ownership: the claim's owner (any owner-role person for an unowned claim)."""
    if is_agent(user):
        raise Refused("permission_denied", "Agents never revoke claims; the claim's owner does.")
    head = _head(claim_or_key)
    if head is None or (head.latest_version == 0 and not head.gc_status):
        return
    if not acts_as_claim_owner(user, claim_owner_id(head)):
        raise Refused("not_claim_owner", "Only the claim's owner may revoke it "
                                         "(any user with the owner role when it has no owner).")


def _pending_version(claim_or_key, version: int | None) -> Claim | None:
    if isinstance(claim_or_key, Claim):
        return claim_or_key
    head = _head(claim_or_key)
    if head is None:
        return None
    versions = Claim.objects.filter(key=head.key, status="pending")
    if version is not None:
        return versions.filter(version=version).first()
    return versions.order_by("-version").first()


def may_accept(user, claim_or_key, version: int | None = None) -> None:
    """Owners and editors (API.md); then by why the version waits: an inference owner/editor, a
    sensitive claim owner, a revoked key the claim's owner (any owner when it has none)."""
    require_person(user, *REVIEWER_ROLES, detail=only_roles_may(REVIEWER_ROLES, "accept claims"))
    chosen = _pending_version(claim_or_key, version)
    if chosen is None:
        return
    head = _head(chosen.key)
    owner_id = claim_owner_id(head) if head and (head.current_id or head.gc_status) else chosen.owner_id
    refused = [reason for reason in chosen.pending_reasons if not _may_clear(user, reason, owner_id)]
    if refused:
        raise Refused("not_allowed_to_accept", f"You may not accept this version: {', '.join(refused)}.",
                      pending_reasons=chosen.pending_reasons, refused=refused)


def _may_clear(user, reason: str, owner_id: int | None) -> bool:
    reviewers = gate.reviewers_for(reason)
    if reviewers is None:  # a revoked key: the claim's owner
        return acts_as_claim_owner(user, owner_id)
    return has_role(user, *reviewers)


# Each claim action's authorizer by name, for showing only the buttons a user may use (``allowed``).
BY_NAME = {"accept": may_accept, "refresh": may_refresh, "invalidate": may_invalidate, "revoke": may_revoke}
