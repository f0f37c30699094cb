"""The web tier's entry point: Django's WSGI app on a thread pool, lease long-polls waited in the
event loop (``stateboard.waits``). ``stateboard.wsgi`` stays the plain WSGI entry (gunicorn)."""

import asyncio
import io
import os
from concurrent.futures import ThreadPoolExecutor

from a2wsgi.wsgi import build_environ

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "stateboard.settings")

from django.conf import settings  # noqa: E402  (after the settings module is named)
from django.core.wsgi import get_wsgi_application  # noqa: E402
from django.db import connection  # noqa: E402

from stateboard.waits import WAITS_OUTSIDE, LeaseWaitingApp, LeaseWaits, body_read, closing  # noqa: E402
from stateboard.webserver import web_threads  # noqa: E402


class WsgiOnThreads:
    """ASGI → WSGI with one hop to a thread per request: the body is read in the event loop (up to the
    body limit and one byte, enough for Django to refuse a larger one; the rest dropped, ``body_read``),
    the app runs on a thread with it, and the whole response is sent from the loop. (a2wsgi's own adapter
    hops for every read and write, which costs ~15 % of an append here; its environ builder is used as is.)"""

    def __init__(self, app, threads: int, body_limit: int):
        self.app, self.body_limit = app, body_limit
        self.pool = ThreadPoolExecutor(threads, thread_name_prefix="web")

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return
        body, unread = await body_read(receive, self.body_limit)
        if unread:  # the connection cannot serve another request
            send = closing(send)
        try:
            environ = build_environ(scope, io.BytesIO(body))
        except UnicodeDecodeError:  # a query string that is not ASCII (clients must percent-encode)
            return await _answer(send, 400, b'{"code": "invalid_filter", "detail": "The query string is not ASCII."}')
        environ[WAITS_OUTSIDE] = True  # lease views answer "may wait" instead of sleeping in a thread
        status, headers, content = await asyncio.get_running_loop().run_in_executor(self.pool, self._respond, environ)
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": content})

    def _respond(self, environ) -> tuple[int, list, bytes]:
        started, written = {}, []

        def start_response(status, headers, exc_info=None):
            started["status"] = int(status.split(" ", 1)[0])
            started["headers"] = [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in headers]
            return written.append

        result = self.app(environ, start_response)
        try:
            written.extend(result)
        finally:
            if hasattr(result, "close"):
                result.close()
        return started["status"], started["headers"], b"".join(written)


async def _answer(send, status: int, body: bytes) -> None:
    await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": body})


application = LeaseWaitingApp(WsgiOnThreads(get_wsgi_application(), web_threads(), settings.API_MAX_BODY_BYTES),
                              LeaseWaits(listen=connection.vendor == "postgresql"), settings.API_MAX_BODY_BYTES)
