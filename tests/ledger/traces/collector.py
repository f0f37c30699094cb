"""A real OTLP/HTTP receiver on 127.0.0.1 (http.server in a thread): it decodes each ``POST /v1/traces`` body as an
``ExportTraceServiceRequest`` (opentelemetry-proto) and keeps the spans, or answers 500 while ``failing``."""

from __future__ import annotations

import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def value_of(any_value):
    """An OTLP ``AnyValue`` as Python."""
    return getattr(any_value, any_value.WhichOneof("value")) if any_value.WhichOneof("value") else None


def attributes_of(key_values) -> dict:
    return {kv.key: value_of(kv.value) for kv in key_values}


class Collector:
    def __init__(self, port: int | None = None):
        self.port = port or free_port()
        self.requests: list[ExportTraceServiceRequest] = []
        self.headers: list[dict] = []
        self.failing = False
        self.server = None
        self.thread = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Collector:
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path != "/v1/traces":
                    return self._answer(404, b"")
                if collector.failing:
                    return self._answer(500, b"")
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                collector.requests.append(request)
                collector.headers.append(dict(self.headers))
                self._answer(200, ExportTraceServiceResponse().SerializeToString())

            def _answer(self, code, body: bytes):
                self.send_response(code)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def spans(self) -> list[dict]:
        """Every span received, decoded: ids as hex, attributes, events and status as Python values."""
        found = []
        for request in self.requests:
            for resource_spans in request.resource_spans:
                resource = attributes_of(resource_spans.resource.attributes)
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        found.append({
                            "name": span.name, "trace_id": span.trace_id.hex(), "span_id": span.span_id.hex(),
                            "parent_id": span.parent_span_id.hex(), "start": span.start_time_unix_nano,
                            "end": span.end_time_unix_nano, "attributes": attributes_of(span.attributes),
                            "events": [(e.name, attributes_of(e.attributes)) for e in span.events],
                            "status": span.status.code, "status_message": span.status.message,
                            "resource": resource, "scope": scope_spans.scope.name,
                        })
        return found
