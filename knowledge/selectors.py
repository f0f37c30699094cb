def store_version() -> int:
    """The store-wide monotonic version of the knowledge store (0 while empty)."""
    return 0


def knowledge_metrics(*, since=None) -> dict:
    return {"write_gate_rejection_rate": 0.0, "stale_claim_as_fact_rate": 0.0}
