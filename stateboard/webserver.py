"""The web tier's command line, one home for ``manage.py up`` and ``bench ledger``.

granian (a Rust HTTP server) serving the WSGI app: one worker process per core, ``WEB_THREADS`` (4)
Python threads each, HTTP/1.1 keep-alive so an agent's client reuses its connection between calls, a
worker that dies respawned. A thread waiting on PostgreSQL or on a long-poll lease leaves the other
threads serving. ``WEB_SERVER=gunicorn`` serves the same app with gunicorn's threaded workers
(``gthread``) instead: ``bench ledger`` measures both in one run, and granian's per-request overhead
is the smaller (README, "The agent's path: batches, lock order, web tier").
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

SERVERS = ("granian", "gunicorn")
STOP_SECONDS = 10  # on SIGTERM, a worker still busy (a lease long-poll waits up to 30 s) is killed after this


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def server_name() -> str:
    name = os.environ.get("WEB_SERVER") or SERVERS[0]
    if name not in SERVERS:
        raise ValueError(f"WEB_SERVER must be one of {', '.join(SERVERS)}, not {name!r}.")
    return name


def _size(name: str, default: int) -> int:
    value = os.environ.get(name) or str(default)
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"{name} must be a whole number of at least 1, not {value!r}.")
    return int(value)


def web_command(python: str, bind: str, server: str | None = None) -> list[str]:
    """The command serving stateboard.wsgi on ``bind`` (``host:port``) with ``server`` (default
    ``WEB_SERVER``, else granian); ``WEB_WORKERS`` / ``WEB_THREADS`` override the sizes."""
    server = server or server_name()
    workers, threads = str(_size("WEB_WORKERS", cores())), str(_size("WEB_THREADS", 4))
    if server == "gunicorn":  # no control socket: gunicorn >= 25 opens one in the working directory
        return [python, "-m", "gunicorn", "stateboard.wsgi", "--bind", bind, "--workers", workers,
                "--worker-class", "gthread", "--threads", threads, "--keep-alive", "5",
                "--access-logfile", "-", "--no-control-socket"]
    host, _, port = bind.rpartition(":")
    return [python, "-m", "granian", "--interface", "wsgi", "--host", host.strip("[]") or "127.0.0.1",
            "--port", port, "--workers", workers, "--blocking-threads", threads, "--no-ws",
            "--respawn-failed-workers", "--workers-kill-timeout", str(STOP_SECONDS), "--access-log",
            "stateboard.wsgi:application"]


def processes_stop(processes, *, wait: float) -> None:
    """Stop processes started with ``start_new_session=True``: SIGTERM to each, then, for any still running
    ``wait`` seconds later (one deadline for all of them), SIGKILL to its whole process group (granian's
    workers, unlike gunicorn's, do not exit when their parent is killed)."""
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + wait
    for process in processes:
        try:
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:  # gone meanwhile
                pass
            process.wait(timeout=10)
