"""``record``: performs nothing outside; records the action as done (demos, tests, staging)."""

from ledger.executor import Handler, Outcome


class RecordHandler(Handler):
    default_timeout = 1.0

    def execute(self, action, key, context):
        return Outcome("succeeded", reference=key, detail="recorded, nothing performed")

    def verify(self, action, key, reference):
        return Outcome("verified", reference=reference or key, detail="recorded")
