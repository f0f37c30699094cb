"""The spans of ``ledger.traces.spans`` as the OpenTelemetry SDK's, sent by its OTLP/HTTP (protobuf) exporter.

Configured by the standard variables, read by the SDK itself: ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``; unset: no export, and nothing imported), ``OTEL_EXPORTER_OTLP_HEADERS``,
``OTEL_EXPORTER_OTLP_TIMEOUT``, ``OTEL_SERVICE_NAME`` (default ``stateboard``) and
``OTEL_RESOURCE_ATTRIBUTES``.
"""

from __future__ import annotations

import os
from datetime import datetime

SCOPE = "stateboard.ledger"
ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")


def enabled() -> bool:
    """Whether traces are exported: an OTLP endpoint is configured."""
    return any(os.environ.get(name) for name in ENDPOINT_VARIABLES)


def _ns(at: datetime) -> int:
    return int(at.timestamp() * 1_000_000) * 1000


def readable(span, resource):
    """One ``spans.Span`` as the SDK's ``ReadableSpan``, with its own ids, times and status."""
    from opentelemetry.sdk.trace import Event, ReadableSpan
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope
    from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

    sampled = TraceFlags(TraceFlags.SAMPLED)
    context = SpanContext(span.trace_id, span.span_id, is_remote=False, trace_flags=sampled)
    parent = (SpanContext(span.trace_id, span.parent_id, is_remote=span.remote_parent, trace_flags=sampled)
              if span.parent_id is not None else None)
    status = Status(StatusCode.ERROR, span.error) if span.error is not None else Status(StatusCode.UNSET)
    return ReadableSpan(
        name=span.name, context=context, parent=parent, resource=resource, attributes=span.attributes,
        events=[Event(e.name, e.attributes, _ns(e.at)) for e in span.events], kind=SpanKind.INTERNAL,
        status=status, start_time=_ns(span.start), end_time=max(_ns(span.end), _ns(span.start)),
        instrumentation_scope=InstrumentationScope(SCOPE))


def resource():
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource

    return Resource.create({SERVICE_NAME: os.environ.get("OTEL_SERVICE_NAME") or "stateboard"})


def send(spans) -> str | None:
    """Export ``spans`` in one request (the exporter retries a transient failure within its timeout); None
    when the collector accepted them, else why not."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import SpanExportResult

    exporter = OTLPSpanExporter()  # endpoint, headers, timeout and compression from the OTEL_* variables
    try:
        found = resource()
        result = exporter.export([readable(span, found) for span in spans])
    except Exception as exc:  # an exporter that raises is a failed export: the mark stays
        return f"{type(exc).__name__}: {exc}"[:500]
    finally:
        exporter.shutdown()
    return None if result is SpanExportResult.SUCCESS else "the collector did not accept the spans"
