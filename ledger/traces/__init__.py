"""SPEC §16's traces: a run's ledger exported as one OpenTelemetry trace (docs/decisions.md, "The ledger is the
outbox").

- ``context``: the W3C ``traceparent`` a trigger carries, the trace and span ids (pure);
- ``spans``: a run and its events mapped to plain spans (pure);
- ``otlp``: those spans as the SDK's, sent with its OTLP/HTTP (protobuf) exporter, configured by the standard
  ``OTEL_*`` variables; the SDK is imported only there, and only when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set.

The pass that reads the ledger after its mark and advances it is the service ``traces_export``
(``ledger/services/traces.py``), run by beat every few seconds.
"""
