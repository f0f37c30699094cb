def store_version() -> int:
    """The store-wide monotonic version of the knowledge store (0 while empty)."""
    return 0
