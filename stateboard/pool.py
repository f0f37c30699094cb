"""The check of a pooled connection before a request uses it, without a round trip when the connection
has nothing to say.

psycopg_pool's own check (``ConnectionPool.check_connection``) sends an empty query at every checkout,
so every request began with a round trip. A connection the server ended (a restart, a terminated
backend) has something to read: PostgreSQL's FATAL message, then the end of the stream. So only a
connection with something to read, or not idle, is checked the pool's way.
"""

from __future__ import annotations

import select

from psycopg import pq
from psycopg_pool import ConnectionPool


def connection_alive(conn) -> bool:
    """False (the connection closed) when it is not; True when it looks alive."""
    try:
        if conn.closed or conn.info.transaction_status != pq.TransactionStatus.IDLE or _readable(conn):
            ConnectionPool.check_connection(conn)
    except Exception:  # whatever a dead connection raises: the pool replaces it
        conn.close()
        return False
    return True


def _readable(conn) -> bool:
    readable, _, _ = select.select([conn.fileno()], [], [], 0)
    return bool(readable)
