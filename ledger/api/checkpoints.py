"""``/runs/{id}/checkpoints/`` (saved by the lease holder) and ``/runs/{id}/checkpoint/`` (the latest)."""

from rest_framework import status
from rest_framework.response import Response

from ledger import authorizers, selectors, services
from ledger.api.common import agents_of_run, body_of, run_get, run_intent_of
from ledger.api.components import CheckpointPayloadSerializer, CheckpointSerializer
from ledger.api.operations import OPS
from ledger.api.shapes import checkpoint_body
from stateboard.errors import NotFound
from stateboard.openapi import operation
from stateboard.policy import ANY, Policy, PolicyApi
from stateboard.roles import actor_for


class RunCheckpointCreateApi(PolicyApi):
    policy = {"POST": Policy(roles=ANY, authorizer=authorizers.may_save_checkpoint, run_scope="holder",
                             agents=agents_of_run, audit="checkpoint_save")}

    @operation(OPS["runs_checkpoints_create"], request=CheckpointPayloadSerializer,
               responses={201: CheckpointSerializer})
    def post(self, request, run_id):
        checkpoint = services.checkpoint_save(run_id=run_id, payload=body_of(request), actor=actor_for(request.user),
                                              intent=run_intent_of(request, self.kwargs))
        return Response(checkpoint_body(checkpoint), status=status.HTTP_201_CREATED)


class RunCheckpointLatestApi(PolicyApi):
    policy = {"GET": Policy(roles=ANY)}

    @operation(OPS["runs_checkpoint_retrieve"], responses={200: CheckpointSerializer})
    def get(self, request, run_id):
        checkpoint = selectors.checkpoint_latest(run=run_get(run_id))
        if checkpoint is None:
            raise NotFound("no_checkpoint", "No checkpoint has been saved for this run's intent.")
        return Response(checkpoint_body(checkpoint))
