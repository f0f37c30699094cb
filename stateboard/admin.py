"""Admin helpers shared by the apps."""

from django.contrib import admin


class ReadOnlyAdmin(admin.ModelAdmin):
    """Records written through the services only (append-only ledgers and their projections)."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
