"""The benchmark's HTTP/1.1 load generator (``ledger.ops.bench.appends._Http``) against a real local server:
what it reads is what the server sent, whatever the framing, and a refused answer stops the benchmark."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ledger.ops.bench.appends import _Http
from ledger.ops.bench.common import BenchError


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive unless a response says otherwise
    timeout = 0.5  # an idle connection is closed by the server after this
    seen: list = []

    def log_message(self, *args):
        pass

    def _answer(self, status: int, body: dict, *, chunked: bool = False, close: bool = False):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Content-Length", str(len(data)))
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if chunked:
            for start in range(0, len(data), 5):  # several chunks, then the last, empty one
                piece = data[start:start + 5]
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            self.wfile.write(b"0\r\n\r\n")
        else:
            self.wfile.write(data)

    def do_GET(self):
        _Handler.seen.append((self.command, self.path, self.headers.get("Authorization"), None))
        if self.path == "/chunked":
            self._answer(200, {"framing": "chunked", "padding": "x" * 40}, chunked=True)
        elif self.path == "/close":
            self._answer(200, {"framing": "close"}, close=True)
        elif self.path == "/refused":
            self._answer(409, {"code": "conflict"})
        else:
            self._answer(200, {"framing": "length", "path": self.path})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _Handler.seen.append((self.command, self.path, self.headers.get("Authorization"), body))
        self._answer(201, {"echo": body})


@pytest.fixture
def server():
    _Handler.seen = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_requests_and_answers_on_one_connection_whatever_the_framing(server):
    http = _Http(server, "tok")
    try:
        assert http.post("/a", {"n": 1}) == {"echo": {"n": 1}}
        first = http.sock
        assert http.get("/chunked") == {"framing": "chunked", "padding": "x" * 40}
        assert http.get("/plain") == {"framing": "length", "path": "/plain"}
        assert http.sock is first  # keep-alive: all three on one connection
        assert http.get("/close") == {"framing": "close"}
        assert http.sock is None  # the server said close
        assert http.post("/b", {"n": 2}) == {"echo": {"n": 2}}  # a new connection
    finally:
        http.close()
    assert [(m, p, a) for m, p, a, _ in _Handler.seen] == [
        ("POST", "/a", "Token tok"), ("GET", "/chunked", "Token tok"), ("GET", "/plain", "Token tok"),
        ("GET", "/close", "Token tok"), ("POST", "/b", "Token tok")]


def test_an_unexpected_status_stops_the_benchmark(server):
    http = _Http(server, "tok")
    try:
        with pytest.raises(BenchError, match="answered 409"):
            http.get("/refused")
    finally:
        http.close()


def test_a_connection_the_server_closed_is_replaced_once(server):
    http = _Http(server, "tok")
    try:
        http.get("/plain")
        first = http.sock
        time.sleep(1.0)  # the server drops the idle connection; the client does not know yet
        assert http.post("/again", {"n": 3}) == {"echo": {"n": 3}}
        assert http.sock is not first
    finally:
        http.close()
