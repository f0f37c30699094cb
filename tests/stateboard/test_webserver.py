"""The web tier `up` and the benchmark start (stateboard.webserver), as real processes."""

import http.client
import os
import signal
import subprocess
import sys

import pytest

from stateboard import webserver
from tests.stateboard.test_up import (
    ROOT,
    _children,
    _free_port,
    _running,
    _wait_for,
    embedded_env,
    migrated_database_in,
)


def test_the_command_is_granian_unless_told_otherwise(monkeypatch):
    monkeypatch.delenv("WEB_SERVER", raising=False)
    monkeypatch.setenv("WEB_WORKERS", "3")
    monkeypatch.setenv("WEB_THREADS", "5")
    command = webserver.web_command("python", "0.0.0.0:8123")
    assert command[:5] == ["python", "-m", "granian", "--interface", "asgi"]
    assert command[-1] == "stateboard.asgi:application"  # its thread pool has WEB_THREADS threads
    assert ["--host", "0.0.0.0", "--port", "8123", "--workers", "3"] == command[5:11]
    monkeypatch.setenv("WEB_SERVER", "gunicorn")
    command = webserver.web_command("python", "127.0.0.1:8123")
    assert command[:3] == ["python", "-m", "gunicorn"] and "gthread" in command and "127.0.0.1:8123" in command
    monkeypatch.setenv("WEB_SERVER", "uwsgi")
    with pytest.raises(ValueError, match="WEB_SERVER must be one of granian, gunicorn"):
        webserver.web_command("python", "127.0.0.1:8123")
    monkeypatch.setenv("WEB_SERVER", "granian")
    for bad in ("0", "four", "-2"):
        monkeypatch.setenv("WEB_THREADS", bad)
        with pytest.raises(ValueError, match="WEB_THREADS must be a whole number of at least 1"):
            webserver.web_command("python", "127.0.0.1:8123")


def test_the_access_log_is_off_unless_asked_for_on_stdout_or_in_a_file(monkeypatch, tmp_path):
    """`up` printed ~170 access-log lines a minute, scrolling its token and the demo's summaries away: off by
    default; WEB_ACCESS_LOG (or `up --access-log`) "-" prints it, a path appends it to that file."""
    import json

    for server in webserver.SERVERS:
        monkeypatch.setenv("WEB_SERVER", server)
        monkeypatch.delenv("WEB_ACCESS_LOG", raising=False)
        command = webserver.web_command("python", "127.0.0.1:8123")
        assert "--access-log" not in command and "--access-logfile" not in command
        monkeypatch.setenv("WEB_ACCESS_LOG", "off")
        assert "--access-log" not in webserver.web_command("python", "127.0.0.1:8123")
        monkeypatch.setenv("WEB_ACCESS_LOG", "-")
        command = webserver.web_command("python", "127.0.0.1:8123")
        assert (["--access-logfile", "-"] == command[command.index("--access-logfile"):][:2] if server == "gunicorn"
                else "--access-log" in command and "--log-config" not in command)
    monkeypatch.setenv("WEB_SERVER", "granian")
    monkeypatch.setenv("WEB_ACCESS_LOG", str(tmp_path / "logs" / "access.log"))
    command = webserver.web_command("python", "127.0.0.1:8123")
    config = json.loads(open(command[command.index("--log-config") + 1]).read())
    assert "--access-log" in command and command[-1] == "stateboard.asgi:application"
    assert config["handlers"]["access"]["filename"] == str(tmp_path / "logs" / "access.log")


def test_up_refuses_an_unknown_web_server_before_it_starts_anything():
    result = subprocess.run([sys.executable, "manage.py", "up", "--no-demo", "--port", str(_free_port())],
                            cwd=ROOT, env={**os.environ, "WEB_SERVER": "nope"}, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 1
    assert "WEB_SERVER must be one of granian, gunicorn, not 'nope'." in result.stderr
    assert "Applying migrations" not in result.stdout and "Traceback" not in result.stderr


def _get(conn, path="/healthz"):
    conn.request("GET", path)
    response = conn.getresponse()
    response.read()
    return response


@pytest.mark.slow
@pytest.mark.parametrize("server", webserver.SERVERS)
def test_the_server_keeps_connections_and_outlives_a_killed_worker(tmp_path, server, monkeypatch):
    """Two requests on one connection (keep-alive); a worker killed with SIGKILL is replaced and the
    server goes on answering."""
    port = _free_port()
    env = {**os.environ, "STATEBOARD_VAR_DIR": str(tmp_path), "WEB_WORKERS": "1", "WEB_THREADS": "2",
           "DEBUG": "0", "ALLOWED_HOSTS": "127.0.0.1", "SECRET_KEY": "test-webserver-" + "x" * 40,
           "WEB_ACCESS_LOG": str(tmp_path / "access.log")}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    log = tmp_path / "web.log"
    with open(log, "wb") as out:
        monkeypatch.setenv("WEB_ACCESS_LOG", env["WEB_ACCESS_LOG"])  # web_command reads it here
        web = subprocess.Popen(webserver.web_command(sys.executable, f"127.0.0.1:{port}", server), cwd=ROOT,
                               env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        def answering():
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
                return conn if _get(conn).status in (200, 503) else None
            except OSError:
                return None

        conn = _wait_for(answering, f"{server} to answer", 60)
        sock = conn.sock
        assert sock is not None, "the server closed the connection after one request"
        assert _get(conn).status in (200, 503) and conn.sock is sock  # the same connection served both

        workers = _wait_for(lambda: list(_children(web.pid)), "a worker process")
        os.kill(workers[0], signal.SIGKILL)
        _wait_for(lambda: workers[0] not in _children(web.pid) and _children(web.pid), "a new worker", 60)
        assert _wait_for(answering, f"{server} to answer after the kill", 60) and web.poll() is None
    finally:
        webserver.processes_stop([web], wait=30)
    assert "/healthz" in (tmp_path / "access.log").read_text() and "/healthz" not in log.read_text()  # in the file


@pytest.mark.slow
def test_up_stops_during_a_long_poll_and_leaves_no_web_process_behind(tmp_path):
    """SIGTERM to `up` while an agent long-polls for a lease (up to 30 s): the poll is answered (204) at once
    instead of being waited out or cut by the kill timeout, the web server is gone within seconds, and no
    process of the web server outlives `up`."""
    import json
    import threading
    import time

    env = {**embedded_env(migrated_database_in(tmp_path)), "WEB_WORKERS": "1", "WEB_THREADS": "2"}
    port = _free_port()
    log = tmp_path / "up.log"
    with open(log, "wb") as out:
        up = subprocess.Popen([sys.executable, "manage.py", "up", "--no-demo", "--port", str(port)],
                              cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    web_processes: list[int] = []
    try:
        _wait_for(lambda: "Stateboard is up" in log.read_text(errors="replace"), "up to serve", 180)
        made = subprocess.run([sys.executable, "manage.py", "create_agent", "poller"], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=120)
        assert made.returncode == 0, made.stderr
        token = made.stdout.strip().splitlines()[-1]
        web = next(pid for pid, cmd in _children(up.pid).items() if "granian" in cmd)
        web_processes = [web, *_children(web)]

        answered = []

        def long_poll():
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            try:
                conn.request("POST", "/api/v1/runs/lease/", body=json.dumps({"wait_seconds": 30}),
                             headers={"Authorization": f"Token {token}", "Content-Type": "application/json"})
                response = conn.getresponse()
                response.read()
                answered.append((response.status, time.monotonic()))
            except OSError:
                pass  # the server went away under the poll (before issue 41: its worker killed at 10 s)

        poller = threading.Thread(target=long_poll, daemon=True)
        poller.start()
        time.sleep(2)  # the poll is waiting in the worker
        assert poller.is_alive()
        started = time.monotonic()
        up.send_signal(signal.SIGTERM)
        _wait_for(lambda: not any(_running(pid) for pid in web_processes), "the web server to stop", 30)
        web_stopped = time.monotonic() - started
        up.wait(timeout=60)
        assert time.monotonic() - started < 30, "up waited for the long poll to end"
        assert answered and answered[0][0] == 204 and answered[0][1] - started < 3, answered
        assert web_stopped < 5, f"the web server took {web_stopped:.1f} s to stop"
    finally:
        if up.poll() is None:
            up.kill()
            up.wait(timeout=30)
    survivors = [pid for pid in web_processes if _running(pid)]
    for pid in survivors:
        os.kill(pid, signal.SIGKILL)
    assert not survivors, f"web processes left running after up stopped: {survivors}"
