"""The web tier's entry point: Django's WSGI app in a thread pool, lease long-polls waited in the
event loop (``stateboard.waits``). ``stateboard.wsgi`` stays the plain WSGI entry (gunicorn)."""

import os

from a2wsgi import WSGIMiddleware

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "stateboard.settings")

from django.core.wsgi import get_wsgi_application  # noqa: E402  (after the settings module is named)
from django.db import connection  # noqa: E402

from stateboard.waits import WAITS_OUTSIDE, LeaseWaitingApp, LeaseWaits  # noqa: E402
from stateboard.webserver import web_threads  # noqa: E402

django_wsgi = get_wsgi_application()


def marked_wsgi(environ, start_response):
    environ[WAITS_OUTSIDE] = True  # lease views answer "may wait" instead of sleeping in this thread
    return django_wsgi(environ, start_response)


application = LeaseWaitingApp(WSGIMiddleware(marked_wsgi, workers=web_threads()),
                              LeaseWaits(listen=connection.vendor == "postgresql"))
