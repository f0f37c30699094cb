"""Django's PostgreSQL backend; a connection from the pool is checked by ``stateboard.pool.connection_alive``
(no round trip unless the connection has something to read) instead of psycopg_pool's empty query."""

from django.db.backends.postgresql import base

from stateboard.pool import connection_alive


class DatabaseWrapper(base.DatabaseWrapper):
    def get_new_connection(self, conn_params):
        connection = super().get_new_connection(conn_params)
        for _ in range(self.pool.max_size if self.pool else 0):  # each dead one is dropped: the pool makes anew
            if connection_alive(connection):
                break
            self.pool.putconn(connection)
            connection = super().get_new_connection(conn_params)
        return connection
