from django.apps import AppConfig


class LedgerConfig(AppConfig):
    name = "ledger"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from django.db.models.signals import post_migrate

        from ledger.api import openapi  # noqa: F401  (registers the OpenAPI auth extension)
        from ledger.api.common import refusal_record
        from stateboard import policy
        from stateboard.db import sqlite_guards_install

        post_migrate.connect(sqlite_guards_install, dispatch_uid="stateboard.sqlite_guards")
        policy.refusal_recorder = refusal_record
