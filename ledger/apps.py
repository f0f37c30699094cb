from django.apps import AppConfig


class LedgerConfig(AppConfig):
    name = "ledger"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from ledger import schema  # noqa: F401  (registers the OpenAPI auth extension)
