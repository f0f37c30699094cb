"""The web tier's command line, one home for ``manage.py up`` and ``bench ledger``.

granian (a Rust HTTP server) serving ``stateboard.asgi``: one worker process per core, each running
Django's WSGI app on ``WEB_THREADS`` (4) threads, HTTP/1.1 keep-alive so an agent's client reuses its
connection between calls, a worker that dies respawned. A thread waiting on PostgreSQL leaves the other
threads serving; a lease long-poll waits in the event loop and holds no thread (``stateboard.waits``).
``WEB_SERVER=gunicorn`` serves the plain WSGI app with gunicorn's threaded workers (``gthread``)
instead, where a long-poll does hold its thread: ``bench ledger`` measures both in one run.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import subprocess
import time

SERVERS = ("granian", "gunicorn")
LISTEN_BACKLOG = 4096  # connections the kernel queues before granian accepts them
REQUESTS_PER_WORKER = 4096  # requests a granian worker serves at once, long-polls included
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


def web_threads() -> int:
    """The web tier's threads per worker process (``WEB_THREADS``, default 4)."""
    return _size("WEB_THREADS", 4)


def access_log() -> str:
    """Where the web server logs each request (``WEB_ACCESS_LOG``): "" (unset, or ``off``) not at all, the
    default (the demo fleet alone made ~170 lines a minute, scrolling `up`'s own lines away), ``-`` on
    standard output, else the path of a file it appends to."""
    value = (os.environ.get("WEB_ACCESS_LOG") or "").strip()
    return "" if value.lower() in ("", "off", "0", "false", "no") else value


def _granian_access_log(path: str) -> list[str]:
    """granian's options for its access log: on standard output as it is, or into ``path`` through a logging
    configuration written beside it (granian's own, its access handler a file)."""
    if path == "-":
        return ["--access-log"]
    path = os.path.abspath(path)
    config = {"version": 1, "disable_existing_loggers": False,
              "formatters": {"generic": {"()": "logging.Formatter", "fmt": "[%(levelname)s] %(message)s"},
                             "access": {"()": "logging.Formatter", "fmt": "%(message)s"}},
              "handlers": {"console": {"formatter": "generic", "class": "logging.StreamHandler",
                                       "stream": "ext://sys.stdout"},
                           "access": {"formatter": "access", "class": "logging.FileHandler", "filename": path}},
              "loggers": {"_granian": {"handlers": ["console"], "level": "INFO", "propagate": False},
                          "granian.access": {"handlers": ["access"], "level": "INFO", "propagate": False}}}
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(f"{path}.logging.json", "w") as out:
        json.dump(config, out)
    return ["--access-log", "--log-config", f"{path}.logging.json"]


def web_command(python: str, bind: str, server: str | None = None) -> list[str]:
    """The command serving stateboard.wsgi on ``bind`` (``host:port``) with ``server`` (default
    ``WEB_SERVER``, else granian); ``WEB_WORKERS`` / ``WEB_THREADS`` override the sizes, ``WEB_ACCESS_LOG``
    turns the access log on (``access_log``)."""
    server = server or server_name()
    workers, threads = str(_size("WEB_WORKERS", cores())), str(web_threads())
    log = access_log()
    if server == "gunicorn":  # no control socket: gunicorn >= 25 opens one in the working directory
        return [python, "-m", "gunicorn", "stateboard.wsgi", "--bind", bind, "--workers", workers,
                "--worker-class", "gthread", "--threads", threads, "--keep-alive", "5",
                *(["--access-logfile", os.path.abspath(log) if log != "-" else "-"] if log else []),
                "--no-control-socket"]
    host, _, port = bind.rpartition(":")
    # A waiting long-poll holds a request slot but no thread: granian's default of 512 requests per worker
    # (its backlog over its workers) queued everything else behind a thousand waiting agents.
    return [python, "-m", "granian", "--interface", "asgi", "--host", host.strip("[]") or "127.0.0.1",
            "--port", port, "--workers", workers, "--no-ws", "--respawn-failed-workers",
            "--backlog", str(LISTEN_BACKLOG), "--backpressure", str(REQUESTS_PER_WORKER),
            "--workers-kill-timeout", str(STOP_SECONDS), *(_granian_access_log(log) if log else []),
            "stateboard.asgi:application"]


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


def port_served(host: str, port: int) -> bool:
    """Whether something listens on ``host:port`` already: a bind without ``SO_REUSEPORT`` fails beside any
    listener (granian's, which shares its port with another granian, included)."""
    host = host.strip("[]") or "0.0.0.0"
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    except socket.gaierror:
        return False  # the server will say why
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            return exc.errno == errno.EADDRINUSE
    return False
