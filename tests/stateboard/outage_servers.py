"""Servers a test starts for itself, on ports of their own, to take down at will (never the shared ones):
a Redis (``redis-server --port N``) and a PostgreSQL cluster (``initdb`` + ``pg_ctl`` under a temp dir)."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_for_port(port: int, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listens on port {port} after {timeout} s")


class OwnRedis:
    """A throw-away ``redis-server`` on a free port, no persistence; ``stop()`` kills it, ``start()``
    brings it back on the same port."""

    def __init__(self):
        self.port = free_port()
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _wait_for_port(self.port)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        self.process = None


def _pg_bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if not found:
        raise FileNotFoundError(f"no PostgreSQL {name} under /usr/lib/postgresql/*/bin")
    return found[-1]


class OwnPostgres:
    """A PostgreSQL cluster of the test's own (trust auth, user ``postgres``) on a free port, under a temp
    dir; run as the ``postgres`` system user when this process is root (initdb refuses root)."""

    def __init__(self):
        self.port = free_port()
        self.root = tempfile.mkdtemp(prefix="stateboard-pg-")
        self.data = os.path.join(self.root, "data")
        self.user = None
        if os.geteuid() == 0:
            self.user = "postgres"
            entry = pwd.getpwnam(self.user)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        command = ["runuser", "-u", self.user, "--", *args] if self.user else list(args)
        return subprocess.run(command, check=check, capture_output=True, text=True, timeout=60)

    def url(self, dbname: str = "postgres") -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{dbname}"

    def init(self) -> None:
        self._run(_pg_bin("initdb"), "-D", self.data, "-U", "postgres", "--auth=trust", "-E", "UTF8",
                  "--no-sync", "--no-instructions")
        with open(os.path.join(self.data, "postgresql.auto.conf"), "a") as conf:
            conf.write(f"port = {self.port}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{self.root}'\n"
                       "fsync = off\nsynchronous_commit = off\nfull_page_writes = off\nshared_buffers = 16MB\n")

    def start(self) -> None:
        self._run(_pg_bin("pg_ctl"), "-D", self.data, "-l", os.path.join(self.root, "log"), "-w", "-t", "30", "start")

    def stop(self, mode: str = "fast") -> None:
        self._run(_pg_bin("pg_ctl"), "-D", self.data, "-m", mode, "-w", "stop", check=False)

    def restart(self) -> None:
        self._run(_pg_bin("pg_ctl"), "-D", self.data, "-l", os.path.join(self.root, "log"), "-m", "fast", "-w",
                  "restart")

    def destroy(self) -> None:
        self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)
