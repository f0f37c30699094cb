"""``replay_eval``: fault-injected episodes through the API, each decision checked against a reference model.

``reference`` is the model (written from SPEC §3, independent of ``ledger.domain.recovery``), ``world`` the
simulated outside world and agent bookkeeping, ``episodes`` the driver; the command
(``ledger/management/commands/replay_eval.py``) prints the summary.
"""
