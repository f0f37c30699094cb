"""``/runs/{id}/events/``: the run's ledger, read by anyone, appended to by its lease holder."""

from drf_spectacular.utils import extend_schema_view
from rest_framework import status
from rest_framework.response import Response

from ledger import authorizers, selectors, services
from ledger.api.common import PolicyListApi, SeqCursor, agents_of_run, json_object, run_get, run_peek_of
from ledger.api.components import EVENT_INPUT_OR_BATCH
from ledger.api.operations import OPS
from ledger.api.shapes import EventOutputSerializer, event_body
from stateboard.openapi import one_or_many, operation
from stateboard.policy import ANY, Policy
from stateboard.roles import actor_for


@extend_schema_view(get=operation(OPS["runs_events_list"], responses={200: EventOutputSerializer}))
class RunEventsApi(PolicyListApi):
    policy = {"GET": Policy(roles=ANY),
              "POST": Policy(roles=ANY, authorizer=authorizers.may_append_event, run_scope="holder",
                             agents=agents_of_run, audit="event_append")}
    serializer_class = EventOutputSerializer
    pagination_class = SeqCursor

    def get_queryset(self):
        return selectors.run_events(run=run_get(self.kwargs["run_id"]))

    @operation(OPS["runs_events_create"], request=EVENT_INPUT_OR_BATCH,
               responses={201: one_or_many("EventOrBatch", EventOutputSerializer),
                          200: one_or_many("EventOrBatch", EventOutputSerializer)})
    def post(self, request, run_id):
        """One event or a batch (all or nothing, docs/api.md)."""
        actor, data, run = actor_for(request.user), request.data, run_peek_of(request, self.kwargs)
        intent = run.intent if run is not None else None
        if isinstance(data, list):
            events, created = services.events_append(run_id=run_id, bodies=data, actor=actor, intent=intent)
            body = [event_body(event) for event in events]
        else:
            event, created = services.event_append(run_id=run_id, body=json_object(data), actor=actor, run=run)
            body = event_body(event)
        return Response(body, status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)
