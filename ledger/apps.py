from django.apps import AppConfig
from django.db.models.signals import post_migrate


class LedgerConfig(AppConfig):
    name = "ledger"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from ledger import (
            services,  # (b) the app registry is not ready when apps.py loads
            tasks,  # noqa: F401  (registers the tasks in every process: the outbox sends them by name)
        )
        from ledger.api import openapi  # noqa: F401  (registers the OpenAPI auth extension)
        from ledger.api.common import refusal_record  # (b)
        from ledger.models.keys import sqlite_run_key_triggers_install  # (b)
        from stateboard import policy, waits  # (b)
        from stateboard.db import partition_guards_install, sqlite_guards_install  # (b)

        post_migrate.connect(sqlite_guards_install, dispatch_uid="stateboard.sqlite_guards")
        post_migrate.connect(sqlite_run_key_triggers_install, dispatch_uid="ledger.sqlite_run_keys")
        post_migrate.connect(partition_guards_install, dispatch_uid="stateboard.partition_guards")
        policy.refusal_recorder = refusal_record
        waits.lease_releaser = services.lease_release_undelivered
        waits.queued_left = services.queued_left
        self.knowledge_ports_wire()

    @staticmethod
    def knowledge_ports_wire():
        """The ledger's side of ``knowledge.ports``: knowledge imports nothing from the ledger."""
        from knowledge import ports  # (b) called from ready(): no models while apps.py loads
        from ledger import selectors, services  # (b)

        def notifications_send_many(notices, *, now=None):
            return services.notifications_send_many([services.NotificationItem(
                n.user_id, n.kind, n.subject, n.url, n.dedupe_key, claim_key=n.claim_key) for n in notices], now=now)

        ports.wire(event_is_verified=selectors.event_is_verified,
                   oldest_live_version_boundary=selectors.oldest_live_version_boundary,
                   notifications_send_many=notifications_send_many,
                   notifications_settle=services.notifications_settle,
                   audit_record=services.audit_record,
                   chat_claims_stale=services.chat_claims_stale_post)
