"""The web tier's command line, one home for ``manage.py up`` and ``bench ledger``.

gunicorn with threaded workers (``gthread``): one worker process per core, ``WEB_THREADS`` (4)
threads each, and HTTP keep-alive so an agent's client reuses its connection between calls.
A thread waiting on PostgreSQL or on a long-poll lease leaves the other threads serving.
"""

from __future__ import annotations

import os


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def gunicorn_command(python: str, bind: str) -> list[str]:
    """``python -m gunicorn`` serving stateboard.wsgi on ``bind`` (``WEB_WORKERS`` / ``WEB_THREADS`` override
    the sizes). No control socket (gunicorn >= 25 opens one in the working directory by default)."""
    workers = int(os.environ.get("WEB_WORKERS") or cores())
    threads = int(os.environ.get("WEB_THREADS") or 4)
    return [python, "-m", "gunicorn", "stateboard.wsgi", "--bind", bind, "--workers", str(workers),
            "--worker-class", "gthread", "--threads", str(threads), "--keep-alive", "5",
            "--access-logfile", "-", "--no-control-socket"]
