"""Who may do what to which ledger object: one function per action, raising ``Refused(code, detail)``.

Endpoints name these in their policy (``stateboard.policy``), templates ask them through
``{% may "<name>" subject as ok %}`` (``BY_NAME``), and a service calls its check again under its lock
and has the last word. The role vocabulary is ``stateboard.roles``.
"""

from ledger.domain.approval_rules import approvers_match, groups_named
from ledger.models import Approval
from stateboard.errors import Invalid, Refused
from stateboard.roles import (
    AGENT,
    EDITOR,
    HUMAN_ROLES,
    ONCALL,
    OWNER,
    has_role,
    only_roles_may,
    require_person,
    require_role,
)

ONCALL_ROLES = (ONCALL,)
TRIGGER_ROLES = (AGENT, EDITOR, OWNER, ONCALL)
GOAL_ROLES = (OWNER, EDITOR, AGENT)


def deciding_roles(approval: Approval) -> tuple[str, ...]:
    """Escalations are decided by on-call, every other request by an editor."""
    return (ONCALL,) if approval.kind == Approval.Kind.ESCALATION else (EDITOR,)


def approver_groups_of(user) -> frozenset[str]:
    """The approver groups (SPEC §17) a person is in, read once per request (kept on the user object)."""
    cached = getattr(user, "_stateboard_approver_groups", None)
    if cached is None:
        cached = frozenset(user.approver_groups.values_list("name", flat=True)) if user.pk else frozenset()
        user._stateboard_approver_groups = cached
    return cached


def may_decide_approval(user, approval: Approval) -> None:
    """Approve or reject: a person in the deciding role who did not make the request and, but for an escalation,
    is among the approvers the request took from its stage's ``approval_rules`` (SPEC §17)."""
    roles = deciding_roles(approval)
    require_person(user, *roles, detail=only_roles_may(
        roles, f"approve or reject {approval.get_kind_display()} requests (agents never decide)"))
    if approval.requested_by_user_id is not None and approval.requested_by_user_id == user.pk:
        raise Refused("requester_cannot_decide", "The requester cannot decide their own request.")
    if approval.kind != Approval.Kind.ESCALATION:
        groups = approver_groups_of(user) if groups_named(approval.approvers) else frozenset()
        if not approvers_match(approval.approvers, username=user.get_username(), groups=groups):
            raise Refused("not_an_approver", "Only the request's approvers may decide it: "
                                             f"{', '.join(approval.approvers)}.")


def may_amend_approval(user, approval: Approval) -> None:
    """Amend a request's action instead of deciding it (SPEC §17): whoever may decide it; an escalation's
    action is on-call's retry, compensate or abandon, never amended."""
    if approval.kind == Approval.Kind.ESCALATION:
        raise Refused("not_amendable", "An escalation is resolved by on-call's retry, compensate or abandon; "
                                       "it has no action to amend.")
    may_decide_approval(user, approval)


def _oncall(user) -> None:
    require_person(user, *ONCALL_ROLES, detail=only_roles_may(ONCALL_ROLES, "retry, compensate or abandon runs"))


def may_retry(user, run) -> None:
    _oncall(user)


def may_compensate(user, run) -> None:
    _oncall(user)


def may_abandon(user, run) -> None:
    _oncall(user)


ROLLBACK_ROLES = (ONCALL, OWNER)


def may_rollback(user, run) -> None:
    """Roll a run back to a stage (SPEC §10.2): a person who is on-call or an owner."""
    require_person(user, *ROLLBACK_ROLES, detail=only_roles_may(ROLLBACK_ROLES, "roll a run back"))


ALERT_SILENCE_ROLES = (ONCALL, OWNER)


def may_handle_alert(user, alert=None) -> None:
    """Acknowledge or resolve an alert (SPEC §14): a person on-call."""
    require_person(user, *ONCALL_ROLES, detail=only_roles_may(ONCALL_ROLES, "acknowledge or resolve alerts"))


def may_silence_alert(user, workflow=None) -> None:
    """Silence a workflow's alert rule for a time, or end the silence: a person on-call or an owner."""
    require_person(user, *ALERT_SILENCE_ROLES, detail=only_roles_may(ALERT_SILENCE_ROLES, "silence alert rules"))


def may_trigger(user, workflow=None) -> None:
    require_role(user, *TRIGGER_ROLES, detail="Viewers may not trigger runs.")


def may_append_event(user, run=None) -> None:
    """Agents post events (the lease rules are the engine's: a conflict, not a refusal)."""
    require_role(user, AGENT, detail=only_roles_may([AGENT], "post ledger events"))


def may_request_approval(user, run=None) -> None:
    require_role(user, AGENT, detail=only_roles_may([AGENT], "request approvals"))


def may_save_checkpoint(user, run=None) -> None:
    require_role(user, AGENT, detail=only_roles_may([AGENT], "save checkpoints"))


def may_edit_workflow(user, workflow=None) -> None:
    require_role(user, OWNER, detail=only_roles_may([OWNER], "create or change workflows"))


def sees_executors(user) -> bool:
    """A workflow's ``executors`` (handler URLs, the names of secret variables) are shown to owners only."""
    return has_role(user, OWNER)


def may_post_goal(user, workflow=None) -> None:
    require_role(user, *GOAL_ROLES, detail=only_roles_may(GOAL_ROLES, "post goals"))


def may_lease(user, subject=None) -> None:
    require_role(user, AGENT, detail=only_roles_may([AGENT], "lease runs"))


def may_save_view(user, subject=None) -> None:
    """A saved view of the runs page is named for the team by a person (agents never)."""
    require_person(user, *HUMAN_ROLES, detail="Agents may not save views; a person does.")


FLEET_ROLES = (OWNER, ONCALL)


def may_see_fleet(user, subject=None) -> None:
    """The fleet (SPEC §15): every agent's requests, runs and token; read by a person who is an owner or on-call."""
    require_person(user, *FLEET_ROLES, detail=only_roles_may(FLEET_ROLES, "see the fleet"))


def may_revoke_agent(user, agent=None) -> None:
    """Revoke an agent's token from the fleet (SPEC §15): a person who is an owner."""
    require_person(user, OWNER, detail=only_roles_may([OWNER], "revoke an agent's token"))


def may_use_approval_link(user, link) -> None:
    """An e-mailed Approve or Reject link (SPEC §17, ``ledger.approval_links``): the person it was mailed
    to, and only while they may decide the request (the inbox's rule, ``may_decide_approval``)."""
    if user.pk != link.user_id:
        raise Refused("not_the_addressee", "This link was mailed to someone else: only they may use it. "
                                           "Decide in the approvals inbox instead.")
    may_decide_approval(user, link.approval)


ONCALL_ACTIONS = {"retry": may_retry, "compensate": may_compensate, "abandon": may_abandon}


def may_act_in_bulk(user, action: str) -> None:
    """On-call's bulk action (``action``, one of ``ONCALL_ACTIONS``; another is 400 ``unknown_action``):
    whoever may take that action on a run."""
    if action not in ONCALL_ACTIONS:
        raise Invalid("unknown_action", f"The bulk action is one of {', '.join(ONCALL_ACTIONS)}.", status_code=400)
    ONCALL_ACTIONS[action](user, None)


# What templates may ask by name (``{% may "retry" run as can_retry %}``), never a role name.
BY_NAME = {
    "decide": may_decide_approval, "amend": may_amend_approval, "retry": may_retry, "compensate": may_compensate,
    "abandon": may_abandon,
    "rollback": may_rollback, "trigger": may_trigger, "edit_workflow": may_edit_workflow, "save_view": may_save_view,
    "handle_alert": may_handle_alert, "silence_alert": may_silence_alert, "see_fleet": may_see_fleet,
    "revoke_agent": may_revoke_agent,
}
