"""Django's PostgreSQL backend with the pool's check of a connection made without a round trip."""
