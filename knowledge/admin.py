from django.contrib import admin

from knowledge.models import Claim, ClaimCitation, ClaimHead, GateDecision
from stateboard.admin import ReadOnlyAdmin


@admin.register(Claim)
class ClaimAdmin(ReadOnlyAdmin):
    list_display = ["key", "version", "store_version", "status", "confidence", "refresh_after", "actor", "created_at"]
    list_filter = ["status", "confidence", "source_type", "sensitivity"]
    search_fields = ["key", "statement"]


@admin.register(ClaimHead)
class ClaimHeadAdmin(ReadOnlyAdmin):
    list_display = ["key", "latest_version", "live", "system", "task", "gc_status"]
    search_fields = ["key"]


@admin.register(GateDecision)
class GateDecisionAdmin(ReadOnlyAdmin):
    list_display = ["at", "action", "actor", "key", "outcome", "policy_version"]
    list_filter = ["outcome", "action"]


@admin.register(ClaimCitation)
class ClaimCitationAdmin(ReadOnlyAdmin):
    list_display = ["at", "uri", "actor", "stale", "tombstoned", "superseded"]
