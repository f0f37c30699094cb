"""`manage.py up` on the embedded defaults: a newcomer with no servers gets a working product."""

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow  # `manage.py up` with its web server, worker and beat processes


def embedded_env(var_dir: Path) -> dict:
    """The environment of a newcomer's `up`: no DATABASE_URL nor broker (SQLite and the file broker in ``var_dir``)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL", "DJANGO_SETTINGS_MODULE")}
    env["STATEBOARD_VAR_DIR"] = str(var_dir)
    return env


def migrated_database_in(var_dir: Path) -> Path:
    """``var_dir`` holding a copy of an embedded database `migrate` has brought up to date, so an `up` started on
    it has nothing to migrate: the tests of what `up` does once it serves skip the migrations (the first test
    here migrates a new one, as a newcomer's `up` does). Made once per machine and state of the migrations
    (tests/template_db.py's name for it), under a lock: every test process copies the same file."""
    import fcntl
    import shutil
    import sqlite3
    import tempfile
    from contextlib import closing

    from tests.template_db import template_name

    template = Path(tempfile.gettempdir()) / f"{template_name()}.sqlite3"
    with open(f"{template}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another test process making it: wait, then copy
        if not template.exists():
            build = Path(tempfile.mkdtemp(prefix="stateboard-sqlite-template-"))
            made = subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=embedded_env(build),
                                  capture_output=True, text=True, timeout=300)
            assert made.returncode == 0, made.stdout + made.stderr
            with closing(sqlite3.connect(build / "stateboard.sqlite3")) as db:
                db.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # everything in the file itself, none in its WAL
            shutil.move(build / "stateboard.sqlite3", f"{template}.new")
            os.replace(f"{template}.new", template)
            shutil.rmtree(build, ignore_errors=True)
    var_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(template, var_dir / "stateboard.sqlite3")
    return var_dir


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_up_migrates_seeds_and_serves_on_sqlite(tmp_path):
    """With no DATABASE_URL/broker configured: SQLite + file broker, web/worker/beat, /healthz 200, a demo pass."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL", "DJANGO_SETTINGS_MODULE")}
    env["STATEBOARD_VAR_DIR"] = str(tmp_path)
    result = subprocess.run([sys.executable, "manage.py", "up", "--check", "--port", str(_free_port())],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "/healthz answered 200" in output
    assert "password 'stateboard-demo'" in output and "demo check: every promised fault produced" in output
    assert (tmp_path / "stateboard.sqlite3").exists()
    # The embedded database guards every guarded model too: SQLite triggers generated from the same
    # pgtrigger declarations as PostgreSQL's, checked for each (model, operation), and tried on rows.
    probe = ("from django.db import connection\n"
             "from stateboard.db import guarded_operations, sqlite_trigger_name\n"
             "names = {r[0] for r in connection.cursor().execute(\"SELECT name FROM sqlite_master WHERE type='trigger'\")}\n"
             "for uri, table, op in guarded_operations():\n"
             "    print('GUARDED' if sqlite_trigger_name(uri, op) in names else 'MISSING', uri, op)\n"
             "for sql in ('UPDATE ledger_ledgerevent SET actor = 1', 'DELETE FROM ledger_ledgerevent',\n"
             "            'UPDATE knowledge_claim SET statement = 1', 'DELETE FROM knowledge_claim'):\n"
             "    try:\n"
             "        connection.cursor().execute(sql)\n"
             "        print('ALLOWED', sql)\n"
             "    except Exception as exc:\n"
             "        print('REFUSED', exc)\n")
    guarded = subprocess.run([sys.executable, "manage.py", "shell", "-c", probe], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=120)
    out = guarded.stdout + guarded.stderr
    assert guarded.stdout.count("REFUSED") == 4 and "ALLOWED" not in out, out
    assert "MISSING" not in out and out.count("GUARDED") >= 12, out


def _stat(entry: Path) -> list[str]:
    """The fields of /proc/<pid>/stat after the command name: state, parent pid, ..."""
    return (entry / "stat").read_text().rsplit(")", 1)[1].split()


def _running(pid: int) -> bool:
    """Whether ``pid`` is a live process (not gone, not a zombie)."""
    try:
        return _stat(Path(f"/proc/{pid}"))[0] != "Z"
    except OSError:
        return False


def _children(pid: int) -> dict[int, str]:
    """The live child processes of ``pid``: {pid: command line}."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = _stat(entry)
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            found[int(entry.name)] = cmdline
    return found


def _wait_for(predicate, what: str, timeout: float = 90):
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def test_up_restarts_a_worker_killed_under_it(tmp_path):
    """SIGKILL the Celery worker `up` started: `up` says so, starts a new one and keeps serving."""
    import signal

    env = embedded_env(migrated_database_in(tmp_path))
    log = tmp_path / "up.log"
    with open(log, "wb") as out:
        up = subprocess.Popen([sys.executable, "manage.py", "up", "--no-demo", "--port", str(_free_port())],
                              cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        _wait_for(lambda: "Stateboard is up" in log.read_text(errors="replace"), "up to serve", 180)

        def worker():
            return next((pid for pid, cmd in _children(up.pid).items() if "celery" in cmd and " worker" in cmd), None)

        first = _wait_for(worker, "the worker")
        os.kill(first, signal.SIGKILL)
        _wait_for(lambda: "worker exited with status -9; restarting it." in log.read_text(errors="replace"),
                  "up to notice the dead worker")
        second = _wait_for(worker, "a new worker")
        assert second != first and up.poll() is None
    finally:
        up.send_signal(signal.SIGTERM)
        up.wait(timeout=60)
    assert up.returncode == 0, log.read_text(errors="replace")[-3000:]


def _descendants(pid: int) -> dict[int, str]:
    """Every live process under ``pid`` (children, theirs, ...): {pid: command line}."""
    found, parents = {}, [pid]
    while parents:
        children = _children(parents.pop())
        found.update(children)
        parents.extend(children)
    return found


def _serves(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return True
    except OSError:
        return False


def test_up_killed_with_sigkill_takes_every_process_it_started_with_it(tmp_path):
    """SIGKILL to `up`: granian and its worker, the Celery worker and beat are all gone within seconds, and
    the port is free."""
    import signal
    import time

    env = {**embedded_env(migrated_database_in(tmp_path)), "WEB_WORKERS": "1"}
    port, log = _free_port(), tmp_path / "up.log"
    with open(log, "wb") as out:
        up = subprocess.Popen([sys.executable, "manage.py", "up", "--no-demo", "--port", str(port)],
                              cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    started: dict[int, str] = {}
    try:
        _wait_for(lambda: "Stateboard is up" in log.read_text(errors="replace"), "up to serve", 180)

        def all_started():
            started.update(_descendants(up.pid))
            commands = list(started.values())
            granian = [pid for pid, cmd in started.items() if "granian" in cmd]
            return (granian and any(_children(pid) for pid in granian)  # its worker, a grandchild of `up`
                    and any("celery" in c and " worker" in c for c in commands)
                    and any("celery" in c and " beat" in c for c in commands))

        _wait_for(all_started, "granian's worker, the Celery worker and beat")
        os.kill(up.pid, signal.SIGKILL)
        up.wait(timeout=10)
        killed = time.monotonic()
        _wait_for(lambda: not [pid for pid in started if _running(pid)], "every process up started to go", 10)
        assert time.monotonic() - killed < 10 and not _serves(port)
    finally:
        if up.poll() is None:
            up.kill()
            up.wait(timeout=10)
        survivors = {pid: cmd for pid, cmd in started.items() if _running(pid)}
        for pid in survivors:
            os.kill(pid, signal.SIGKILL)
    assert not survivors, f"left running after up was killed: {survivors}"


def test_up_refuses_a_port_already_served(tmp_path):
    """A listener that shares its port (as granian does, SO_REUSEPORT) is there: `up` exits non-zero at once
    with a clear message, before it migrates or starts anything."""
    import signal

    env = {k: v for k, v in os.environ.items()
           if k not in ("DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL", "DJANGO_SETTINGS_MODULE")}
    env["STATEBOARD_VAR_DIR"] = str(tmp_path)
    with socket.socket() as served:
        served.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        served.bind(("127.0.0.1", 0))
        served.listen()
        port = served.getsockname()[1]
        second = subprocess.Popen([sys.executable, "manage.py", "up", "--no-demo", "--port", str(port)], cwd=ROOT,
                                  env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            out, err = second.communicate(timeout=60)
        except subprocess.TimeoutExpired:  # it started beside the listener: stop it and what it started
            second.send_signal(signal.SIGTERM)
            out, err = second.communicate(timeout=60)
    assert second.returncode == 1, out + err
    assert f"Port {port} on 127.0.0.1 is already served (another `up`?)" in err
    assert "Applying migrations" not in out and "Traceback" not in err


def test_a_child_started_under_the_watchdog_gets_sigterm_when_its_parent_dies_even_without_the_watchdog():
    """The first layer alone (stateboard.supervise): the parent killed with SIGKILL, its watchdog gone too,
    the child still stops (PR_SET_PDEATHSIG, armed before the command was exec'd)."""
    import signal

    parent = subprocess.Popen([sys.executable, "-c", (
        "import sys, time\n"
        "from stateboard.supervise import Watchdog\n"
        "watchdog = Watchdog(sys.executable)\n"
        "child = watchdog.start(['sleep', '120'])\n"
        "print(watchdog.process.pid, child.pid, flush=True)\n"
        "time.sleep(120)\n")], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    watchdog, child = map(int, parent.stdout.readline().split())
    try:
        _wait_for(lambda: _running(child) and Path(f"/proc/{child}/cmdline").read_bytes().startswith(b"sleep\0"),
                  "the command to be exec'd", 10)
        os.kill(watchdog, signal.SIGKILL)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(timeout=10)
        _wait_for(lambda: not _running(child), "the child to stop", 5)
    finally:
        for pid in (child, watchdog):
            if _running(pid):
                os.kill(pid, signal.SIGKILL)
