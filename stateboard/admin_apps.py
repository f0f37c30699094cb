from django.contrib.admin.apps import AdminConfig


class StateboardAdminConfig(AdminConfig):
    """Django's admin, served by ``stateboard.admin.StateboardAdminSite`` (its pages pass the policy pipeline)."""

    default_site = "stateboard.admin.StateboardAdminSite"
