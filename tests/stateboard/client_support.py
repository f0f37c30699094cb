"""For tests/stateboard/test_client.py: the agent loop, an agent process to kill, and a faulty local proxy.

Run as ``python -m tests.stateboard.client_support URL TOKEN WORKFLOW CRASH_STAGE``: an agent that triggers a
run and hangs inside CRASH_STAGE (after ``started``), printing ``run <id>`` and ``in <stage>``.
"""

import socket
import sys
import threading
import time

from stateboard.client import Run

EVIDENCE = [{"uri": "https://example.test/check", "observed_at": "2026-11-29T12:00:00+00:00", "digest": "sha256:1"}]
CRASH_INPUTS = {"doc": "v1"}


def effect_for(stage: str) -> dict:
    return {"system": "git", "operation": stage, "reference": f"ref-{stage}"}


def agent_loop(run: Run, on_stage=None) -> Run:
    """The README loop: honour the decision, verify what is listed, go on from ``resume_from``."""
    if run.outcome not in ("fresh", "resume", "verify_only"):
        return run
    for effect in run.effects_to_verify():
        run.verify(effect["stage"], EVIDENCE)
    for stage in run.stages_from():
        with run.stage(stage) as st:
            if on_stage:
                on_stage(stage)
            if run.is_effect_stage(stage):
                st.effect = effect_for(stage)
        if run.is_effect_stage(stage):
            run.verify(stage, EVIDENCE)
    return run.refresh()


def _agent_main(url: str, token: str, workflow: str, crash_stage: str) -> None:
    from stateboard.client import Client

    sb = Client(url, token)
    run = sb.trigger(workflow, CRASH_INPUTS, intent="crash")
    print("run", run.id, flush=True)

    def hang(stage: str) -> None:
        if stage == crash_stage:
            print("in", stage, flush=True)
            time.sleep(120)  # killed here

    agent_loop(run, on_stage=hang)


class FaultyProxy:
    """A bounded HTTP/1.1 proxy on 127.0.0.1 in front of the live server, one request per connection.

    ``fault(method, path)`` returns None (forward), ``"drop"`` (forward, then close without
    answering: the server did the work, the client never hears) or ``"503"`` (answer 503 unforwarded).
    """

    def __init__(self, upstream: tuple[str, int], fault=None):
        self.upstream, self.fault = upstream, fault or (lambda method, path: None)
        self.seen: list[tuple[str, str, str]] = []  # (method, path, what happened)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.2)
        self.port = self.listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.listener.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    @staticmethod
    def _read_request(conn: socket.socket) -> bytes | None:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return None
            data += chunk
            if len(data) > 1 << 20:
                return None
        head, _, body = data.partition(b"\r\n\r\n")
        length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")[1:]
                       if line.lower().startswith(b"content-length:")), 0)
        while len(body) < length:
            chunk = conn.recv(65536)
            if not chunk:
                return None
            body += chunk
        return head + b"\r\n\r\n" + body

    @staticmethod
    def _close_after(message: bytes) -> bytes:
        """The message with ``Connection: close`` instead of any Connection header."""
        head, _, body = message.partition(b"\r\n\r\n")
        lines = [line for line in head.split(b"\r\n") if not line.lower().startswith(b"connection:")]
        return b"\r\n".join([*lines, b"Connection: close"]) + b"\r\n\r\n" + body

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(10)
            request = self._read_request(conn)
            if request is None:
                return
            method, path = request.split(b" ", 2)[:2]
            method, path = method.decode(), path.decode()
            fault = self.fault(method, path)
            if fault == "503":
                self.seen.append((method, path, "503"))
                conn.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                             b"Content-Length: 2\r\nConnection: close\r\n\r\n{}")
                return
            with socket.create_connection(self.upstream, timeout=10) as up:
                up.sendall(self._close_after(request))
                response = b""
                while chunk := up.recv(65536):
                    response += chunk
            self.seen.append((method, path, fault or "forwarded"))
            if fault != "drop":
                conn.sendall(self._close_after(response))


def fault_once(kind: str, method: str, suffix: str):
    """A fault for the first request with this method and path suffix, then none."""
    fired = threading.Event()

    def fault(m: str, path: str):
        if m == method and path.split("?")[0].endswith(suffix) and not fired.is_set():
            fired.set()
            return kind
        return None

    return fault


if __name__ == "__main__":
    _agent_main(*sys.argv[1:5])
