"""``GET /runs/{id}/resume-packet/``: what an agent reads when a run starts (SPEC §9.2)."""

import uuid

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter
from rest_framework.response import Response

from ledger import resume, selectors
from ledger.api.components import ResumePacketSerializer
from ledger.api.operations import OPS
from ledger.models import Run
from stateboard.errors import Invalid, NotFound
from stateboard.openapi import operation
from stateboard.policy import ANY, Policy, PolicyApi


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(str(value))
    except ValueError:
        return False
    return True


class RunResumePacketApi(PolicyApi):
    policy = {"GET": Policy(roles=ANY)}

    @operation(
        OPS["runs_resume_packet_retrieve"],
        parameters=[OpenApiParameter("budget_tokens", OpenApiTypes.INT, description="200 to 100000, default 2000")],
        responses={200: ResumePacketSerializer},
    )
    def get(self, request, run_id):
        raw = request.query_params.get("budget_tokens", str(resume.BUDGET_DEFAULT))
        try:
            budget = int(raw)
        except ValueError:
            raise Invalid("invalid_budget", "budget_tokens must be an integer from 200 to 100000.", status_code=400)
        try:
            run = selectors.run_by_id(run_id) if _is_uuid(run_id) else None
        except Run.DoesNotExist:
            run = None
        if run is None:
            raise NotFound("run_not_found", f"No run with id {run_id}.")
        return Response(resume.resume_packet(run=run, user=request.user, budget_tokens=budget))

