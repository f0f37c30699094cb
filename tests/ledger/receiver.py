"""A real webhook receiver on 127.0.0.1 (http.server in a thread) that counts calls per Idempotency-Key."""

import json
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse


class Receiver:
    """``mode``: ``ok`` (POST 200, GET done), ``absent_once`` (the first GET says absent), ``hang``
    (never answers in time), ``refuse`` (POST 422), ``unavailable`` (POST 503); ``block`` holds each POST until released (to kill a
    worker meanwhile)."""

    def __init__(self, mode: str = "ok"):
        self.mode = mode
        self.posts: Counter = Counter()
        self.gets: Counter = Counter()
        self.bodies: list[dict] = []
        self.headers: list[dict] = []
        self.post_arrived = threading.Event()
        self.release = threading.Event()
        self.block = False
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                key = self.headers.get("Idempotency-Key", "")
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                receiver.posts[key] += 1
                receiver.bodies.append(json.loads(body))
                receiver.headers.append(dict(self.headers))
                receiver.post_arrived.set()
                if receiver.block:
                    receiver.release.wait(30)
                if receiver.mode == "hang":
                    receiver.release.wait(30)
                if receiver.mode == "refuse":
                    return self._answer(422, {"error": "cannot undo"})
                if receiver.mode == "unavailable":
                    return self._answer(503, {"error": "down for maintenance"})
                self._answer(200, {"reference": f"deploy-{receiver.posts.total()}"})

            def do_GET(self):
                key = parse_qs(urlparse(self.path).query).get("idempotency_key", [""])[0]
                receiver.gets[key] += 1
                if receiver.mode == "hang":
                    receiver.release.wait(30)
                    return self._answer(503, {})
                if receiver.mode == "absent_once" and receiver.gets[key] == 1:
                    return self._answer(200, {"status": "absent"})
                if receiver.posts[key]:
                    return self._answer(200, {"status": "done", "reference": f"verified-{key[:8]}"})
                return self._answer(404, {"status": "absent"})

            def _answer(self, code, body):
                try:
                    raw = json.dumps(body).encode()
                    self.send_response(code)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(raw)))
                    self.end_headers()
                    self.wfile.write(raw)
                except OSError:
                    pass  # the caller gave up (timeout, killed)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
