"""Admin helpers shared by the apps, and the admin site: its pages pass the policy pipeline (the rate
limit) before Django's own superuser check, and its sign-in is the product's (``stateboard.signin``)."""

from django.contrib import admin

from stateboard.policy import PUBLIC, Policy, page
from stateboard.signin import SIGN_IN

# Who may see what is Django's admin check (superusers; the others are sent to its sign-in) after this.
ADMIN_PAGES = Policy(roles=PUBLIC)


class StateboardAdminSite(admin.AdminSite):
    policy = ADMIN_PAGES

    def admin_view(self, view, cacheable=False):
        return page(ADMIN_PAGES)(super().admin_view(view, cacheable))

    def login(self, request, extra_context=None):
        return page(SIGN_IN)(super().login)(request, extra_context=extra_context)

    login.policy = SIGN_IN


class ReadOnlyAdmin(admin.ModelAdmin):
    """Records written through the services only (append-only ledgers and their projections)."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
