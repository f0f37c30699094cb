from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin
from django.utils.html import format_html

from ledger.auth import token_revoke
from ledger.models import (
    Agent,
    ApiToken,
    Approval,
    ApproverGroup,
    AuditEntry,
    Checkpoint,
    Effect,
    LedgerEvent,
    Run,
    SsoIdentity,
    Workflow,
)
from stateboard.admin import ReadOnlyAdmin
from stateboard.redact import redact, redact_json


def redacted(*fields: str):
    """Admin mixin pieces: show the JSON/text ``fields`` redacted (the raw values are not rendered)."""
    def make(field):
        def shown(self, obj):
            value = getattr(obj, field)
            text = redact(value) if isinstance(value, str) else redact_json(value)
            return format_html("<pre>{}</pre>", text)
        shown.short_description = field
        shown.__name__ = f"{field}_redacted"
        return shown
    return {f"{field}_redacted": make(field) for field in fields}


class RedactedAdmin(ReadOnlyAdmin):
    """Read-only admin whose ``redacted_fields`` are displayed through ``stateboard.redact``."""

    redacted_fields: tuple[str, ...] = ()

    def get_exclude(self, request, obj=None):
        return [*(super().get_exclude(request, obj) or ()), *self.redacted_fields]

    def get_readonly_fields(self, request, obj=None):
        return [*super().get_readonly_fields(request, obj), *(f"{f}_redacted" for f in self.redacted_fields)]


@admin.register(Workflow)
class WorkflowAdmin(ReadOnlyAdmin):
    """Workflows change through the API or apply (validated, audited, synced to beat), never here."""

    list_display = ["slug", "title", "policy_version", "max_retries", "lease_seconds", "schedule", "owner"]
    search_fields = ["slug", "title"]


@admin.register(Run)
class RunAdmin(RedactedAdmin):
    redacted_fields = ("inputs",)
    locals().update(redacted(*redacted_fields))
    list_display = ["id", "workflow", "intent", "state", "current_stage", "created_at"]
    list_filter = ["state", "workflow"]
    search_fields = ["intent", "trigger_key"]
    list_select_related = ["workflow"]


@admin.register(LedgerEvent)
class LedgerEventAdmin(RedactedAdmin):
    redacted_fields = ("evidence", "data", "effect")
    locals().update(redacted(*redacted_fields))
    list_display = ["run", "seq", "at", "stage", "kind", "actor", "reason_code"]
    list_filter = ["kind"]
    search_fields = ["idempotency_key", "client_event_id"]


@admin.register(Effect)
class EffectAdmin(ReadOnlyAdmin):
    list_display = ["idempotency_key", "workflow", "intent", "stage", "status", "reference", "attempts"]
    list_filter = ["status", "stage"]


@admin.register(Checkpoint)
class CheckpointAdmin(RedactedAdmin):
    redacted_fields = ("payload",)
    locals().update(redacted(*redacted_fields))
    list_display = ["id", "workflow", "intent", "source", "created_at", "expires_at"]


@admin.register(Approval)
class ApprovalAdmin(RedactedAdmin):
    redacted_fields = ("action", "reason")
    locals().update(redacted(*redacted_fields))
    list_display = ["id", "kind", "run", "stage", "status", "requested_by", "decided_by", "deadline"]
    list_filter = ["status", "kind"]


@admin.register(AuditEntry)
class AuditEntryAdmin(RedactedAdmin):
    redacted_fields = ("reason", "data")
    locals().update(redacted(*redacted_fields))
    list_display = ["at", "actor", "role", "action", "outcome", "code", "target"]
    list_filter = ["outcome", "action"]


@admin.register(Agent)
class AgentAdmin(ReadOnlyAdmin):
    """Agents are created by the commands (``create_agent``)."""

    list_display = ["user", "owner", "created_at"]


@admin.register(ApiToken)
class ApiTokenAdmin(ReadOnlyAdmin):
    """Tokens are created by the commands (the key is shown once); here they can only be revoked, through
    ``ledger.auth.token_revoke`` (audited)."""

    list_display = ["prefix", "user", "created_at", "revoked_at"]
    list_filter = ["revoked_at"]
    actions = ["revoke"]

    @admin.action(description="Revoke the selected tokens")
    def revoke(self, request, queryset):
        hashes = queryset.filter(revoked_at__isnull=True).values_list("key_hash", flat=True)
        count = sum(token_revoke(key_hash=key_hash, user=request.user) for key_hash in hashes)
        self.message_user(request, f"Revoked {count} token(s).", messages.SUCCESS)


def _names(people_or_groups) -> str:
    return ", ".join(sorted(str(item) for item in people_or_groups)) or "—"


@admin.register(ApproverGroup)
class ApproverGroupAdmin(ReadOnlyAdmin):
    """Approver groups (SPEC §17: ``group:<name>`` in a stage's approvers; no role): set by single sign-on at
    each sign-in, or by ``create_operator --group``."""

    list_display = ["name", "member_names"]
    search_fields = ["name", "members__username"]
    fields = ["name", "member_names"]
    readonly_fields = ["member_names"]

    def get_queryset(self, request):
        return super().get_queryset(request).prefetch_related("members")

    @admin.display(description="members")
    def member_names(self, group):
        return _names(member.get_username() for member in group.members.all())


@admin.register(SsoIdentity)
class SsoIdentityAdmin(ReadOnlyAdmin):
    """Single sign-on identities (SPEC §17), made at a person's first sign-in."""

    list_display = ["user", "issuer", "sub", "created_at", "last_sign_in_at"]
    search_fields = ["user__username", "sub"]
    list_select_related = ["user"]


class PersonAdmin(UserAdmin):
    """Django's user admin, with the person's approver groups shown (read-only: sign-in and the command set them)."""

    readonly_fields = [*UserAdmin.readonly_fields, "approver_group_names"]
    fieldsets = [*UserAdmin.fieldsets, ("Approver groups", {"fields": ["approver_group_names"]})]
    list_display = [*UserAdmin.list_display, "approver_group_names"]

    def get_queryset(self, request):
        return super().get_queryset(request).prefetch_related("approver_groups")

    @admin.display(description="approver groups")
    def approver_group_names(self, user):
        return _names(group.name for group in user.approver_groups.all())


admin.site.unregister(get_user_model())
admin.site.register(get_user_model(), PersonAdmin)
