"""SPEC §16: the Python client sends ``traceparent`` when it is given one, or when its caller has a current span;
the server keeps it on the new run (its trace continues the caller's)."""

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from ledger.models import Run
from stateboard.client import Client, current_traceparent
from tests.factories import make_agent, make_workflow

pytestmark = pytest.mark.django_db(transaction=True)

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_the_trigger_carries_the_given_or_current_traceparent(live_server):
    wf = make_workflow(stages=["build"], effect_stages=[], approval_stages=[])
    tracer = TracerProvider().get_tracer("an-agent")  # the caller's own SDK, not installed globally
    with Client(live_server.url, make_agent()[1]) as client:
        assert current_traceparent() is None
        plain = client.trigger(wf.slug, {"v": 1}, intent="plain")
        given = client.trigger(wf.slug, {"v": 1}, intent="given", traceparent=TRACEPARENT)
        with tracer.start_as_current_span("plan") as span:
            context = span.get_span_context()
            current = client.trigger(wf.slug, {"v": 1}, intent="current")
    kept = dict(Run.objects.filter(id__in=[plain.id, given.id, current.id]).values_list("intent", "traceparent"))
    assert kept == {"plain": "", "given": TRACEPARENT,
                    "current": f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"}
    assert trace.get_current_span().get_span_context().is_valid is False
