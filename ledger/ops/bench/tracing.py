"""``bench fleet --tracing``: the fleet with the trace export running beside it, as beat runs it (SPEC §16).

What runs: a local OTLP/HTTP collector (a thread of the bench that decodes each request's protobuf and counts
its spans) and an exporter process calling ``traces_export`` every ``EVERY`` seconds against it, as beat's
``stateboard: export traces`` does, with the standard ``OTEL_EXPORTER_OTLP_ENDPOINT``. Its CPU is counted
apart (the exporter's process) and in the database's (its backend is one of the scratch database's).

In ``--tracing both`` each step runs twice at the same N, without then with the export. Before a step with
it, the export's mark is set ``LAG`` behind now, so the step exports what the fleet wrote in the 30 s before
it (the step without it, at the same N): the steady state of a fleet whose traces are exported.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

EVERY = 10.0  # seconds between passes (ledger/schedules: "stateboard: export traces"); shorter for short steps
MODES = ("off", "on", "both")


class Collector:
    """An OTLP/HTTP traces endpoint on 127.0.0.1 that accepts every request and counts spans."""

    def __init__(self):
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

        collector = self
        self.requests = self.spans = 0
        self.lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                message = ExportTraceServiceRequest.FromString(body)
                spans = sum(len(scope.spans) for resource in message.resource_spans for scope in resource.scope_spans)
                with collector.lock:
                    collector.requests += 1
                    collector.spans += spans
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()

    def taken(self) -> tuple[int, int]:
        with self.lock:
            return self.requests, self.spans


class Exporter:
    """The exporter's process (``python -m ledger.ops.bench.tracing``), ready when built; paused while a step
    runs without it."""

    def __init__(self, db_url: str, endpoint: str, every: float = EVERY):
        self.every = every
        env = dict(os.environ, DATABASE_URL=db_url, OTEL_EXPORTER_OTLP_ENDPOINT=endpoint, BENCH_EXPORT_EVERY=str(every),
                   DJANGO_SETTINGS_MODULE="stateboard.settings", LOG_LEVEL="WARNING")
        self.process = subprocess.Popen([sys.executable, "-m", "ledger.ops.bench.tracing"], env=env,
                                        stdout=subprocess.PIPE, start_new_session=True)
        self.process.stdout.readline()  # "ready": Django set up, so its start is not counted in a step
        self.running = True

    def pause(self) -> None:
        if self.running:
            self.process.send_signal(signal.SIGSTOP)
            self.running = False

    def resume(self, *, mark_behind: bool) -> None:
        if mark_behind:
            mark_set_behind()
        if not self.running:
            self.process.send_signal(signal.SIGCONT)
            self.running = True

    def stop(self) -> None:
        self.process.send_signal(signal.SIGCONT)
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def mark_set_behind() -> None:
    """The export's mark at ``LAG`` before now: the next passes export what was written since then."""
    from django.utils import timezone

    from ledger import services
    from ledger.models import TraceMark

    now = timezone.now()
    TraceMark.objects.update_or_create(name=services.TRACES_MARK, defaults={"at": now - services.TRACES_LAG, "event_id": 2**62,
                                                            "exported_at": now, "last_error": ""})


def _loop() -> None:
    import django

    django.setup()
    from django.db import close_old_connections

    from ledger import services

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    every = float(os.environ.get("BENCH_EXPORT_EVERY") or EVERY)
    print("ready", flush=True)
    while True:
        began = time.monotonic()
        services.traces_export()
        close_old_connections()
        time.sleep(max(0.0, every - (time.monotonic() - began)))


if __name__ == "__main__":
    _loop()
