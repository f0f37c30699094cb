"""The web tier `up` and the benchmark start (stateboard.webserver), as real processes."""

import http.client
import os
import signal
import subprocess
import sys

import pytest

from stateboard import webserver
from tests.test_up import ROOT, _children, _free_port, _wait_for


def test_the_command_is_granian_unless_told_otherwise(monkeypatch):
    monkeypatch.delenv("WEB_SERVER", raising=False)
    monkeypatch.setenv("WEB_WORKERS", "3")
    monkeypatch.setenv("WEB_THREADS", "5")
    command = webserver.web_command("python", "0.0.0.0:8123")
    assert command[:3] == ["python", "-m", "granian"] and command[-1] == "stateboard.wsgi:application"
    assert ["--host", "0.0.0.0", "--port", "8123", "--workers", "3", "--blocking-threads", "5"] == command[5:13]
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


@pytest.mark.parametrize("server", webserver.SERVERS)
def test_the_server_keeps_connections_and_outlives_a_killed_worker(tmp_path, server):
    """Two requests on one connection (keep-alive); a worker killed with SIGKILL is replaced and the
    server goes on answering."""
    port = _free_port()
    env = {**os.environ, "STATEBOARD_VAR_DIR": str(tmp_path), "WEB_WORKERS": "1", "WEB_THREADS": "2",
           "DEBUG": "0", "ALLOWED_HOSTS": "127.0.0.1", "SECRET_KEY": "test-webserver-" + "x" * 40}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    log = tmp_path / "web.log"
    with open(log, "wb") as out:
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
        os.killpg(web.pid, signal.SIGTERM)
        try:
            web.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(web.pid, signal.SIGKILL)
            web.wait(timeout=10)
        assert web.poll() is not None, log.read_text(errors="replace")[-2000:]
