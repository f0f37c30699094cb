"""The ledger app's models, one package by concern; import them from here (Django finds them here).

- ``runs``: agents and tokens, workflows, runs, the append-only events, effects, checkpoints,
  approvals and the audit trail (SPEC §1);
- ``goals``: an intent's goal versions and the stage generations of rollbacks (SPEC §10);
- ``ops``: the product's own bookkeeping: notifications, the outbox, replay results, saved views;
- ``chat``: Slack identities of operators and the request signatures seen (SPEC §12.3).
- ``rollups``: the reports' hourly rollups;
- ``alerts``: alerts of workflows' rules, their append-only history and silences (SPEC §14);
- ``identities``: single sign-on identities and the identity provider's approver groups (SPEC §17);
- ``mail``: the e-mailed approval links used, once each (SPEC §17);
- ``usage``: what a workflow spent each UTC day, and a spent day budget's one escalation (SPEC §16);
- ``keys``: what spans intents (run ids and trigger keys, effect keys), apart from the partitioned tables.

Submodules import each other directly (``ledger.models.runs``), never this package. The state groups
and event kinds are the domain's (``ledger.domain``); they are named here too, for the models' users.
"""

from ledger.domain.kinds import STAGE_OUTCOME_KINDS, EventKind
from ledger.domain.machine import HOLDING_STATES, LEASED_STATES, TERMINAL_STATES, RunState
from ledger.models.alerts import Alert, AlertChange, AlertSilence
from ledger.models.chat import SlackIdentity, SlackSignature
from ledger.models.goals import Goal, StageGeneration
from ledger.models.identities import ApproverGroup, SsoIdentity
from ledger.models.keys import EffectKey, RunKey
from ledger.models.mail import ApprovalLinkUse
from ledger.models.ops import Notification, Outbox, ReplayEval, SavedView, TraceMark
from ledger.models.rollups import ReportRollup
from ledger.models.runs import (
    DEFAULT_APPROVAL_STAGES,
    DEFAULT_EFFECT_STAGES,
    DEFAULT_STAGES,
    Agent,
    ApiToken,
    Approval,
    AuditEntry,
    Checkpoint,
    Effect,
    EffectStatus,
    LedgerEvent,
    Run,
    Trigger,
    Workflow,
    append_only_triggers,
    default_approval_stages,
    default_effect_stages,
    default_stages,
)
from ledger.models.usage import BudgetEscalation, WorkflowDaySpend

GOAL_MODELS = (Goal, StageGeneration)
OPS_MODELS = (Notification, Outbox, ReplayEval, SavedView, ReportRollup, TraceMark)

__all__ = [
    "DEFAULT_APPROVAL_STAGES", "DEFAULT_EFFECT_STAGES", "DEFAULT_STAGES", "GOAL_MODELS", "HOLDING_STATES",
    "LEASED_STATES", "OPS_MODELS", "STAGE_OUTCOME_KINDS", "TERMINAL_STATES",
    "Agent", "Alert", "AlertChange", "AlertSilence", "ApiToken", "Approval", "ApprovalLinkUse", "ApproverGroup", "AuditEntry",
    "BudgetEscalation", "Checkpoint", "Effect", "EffectKey", "EffectStatus", "EventKind", "Goal",
    "LedgerEvent", "Notification", "Outbox", "ReplayEval", "ReportRollup", "Run", "RunKey", "RunState", "SavedView",
    "SlackIdentity", "SlackSignature", "SsoIdentity", "StageGeneration", "TraceMark", "Trigger", "Workflow",
    "WorkflowDaySpend", "append_only_triggers",
    "default_approval_stages", "default_effect_stages", "default_stages",
]
