"""OpenAPI (drf-spectacular) extensions: the token authentication, and typed JSON fields of the outputs."""

from drf_spectacular.extensions import OpenApiAuthenticationExtension

from ledger.api import components
from stateboard.openapi import TypedOutputFields


class HashedTokenScheme(OpenApiAuthenticationExtension):
    target_class = "ledger.auth.HashedTokenAuthentication"
    name = "tokenAuth"

    def get_security_definition(self, auto_schema):
        return {"type": "apiKey", "in": "header", "name": "Authorization",
                "description": "`Token <key>` — keys come from `create_agent` / `create_operator --token`."}


# ---------------------------------------------------------------- typed JSON fields of the output serializers
# The API renders its JSON fields (``effect``, ``evidence``, ``decision``, ``lease``, ``action``) as stored;
# these extensions (``stateboard.openapi.TypedOutputFields``) describe them with the components of
# ``ledger.api.components`` and add the properties ``to_representation`` adds (``queued``, ...), leaving
# the serializers themselves as they are.

class RunOutputTyped(TypedOutputFields):
    target_class = "ledger.api.shapes.RunOutputSerializer"
    typed = {"decision": (components.DecisionSerializer, "one"), "lease": (components.LeaseSerializer, "nullable")}
    extra = {
        "queued": ({"type": "boolean", "description": "queued for an agent to lease (then `lease` is null)"},
                   "one", True),
        "queued_until": ({"type": "string", "format": "date-time",
                          "description": "a queued run only: it fails with `not_leased` if no agent leases it "
                                         "by then"}, "one", False),
        "duplicate": ({"type": "boolean", "description": "the trigger's answer only: true when the trigger "
                                                         "was seen before (200)"}, "one", False),
        # compensate's answer only: the compensation approval request, null when it escalated
        "approval": ("ledger.api.shapes.ApprovalOutputSerializer", "nullable", False),
    }


class EventOutputTyped(TypedOutputFields):
    target_class = "ledger.api.shapes.EventOutputSerializer"
    typed = {"effect": (components.EffectSerializer, "nullable"), "evidence": (components.EvidenceSerializer, "many"),
             "data": ({"type": "object", "additionalProperties": {}}, "one")}


class ApprovalOutputTyped(TypedOutputFields):
    target_class = "ledger.api.shapes.ApprovalOutputSerializer"
    typed = {"action": (components.ActionSerializer, "one")}
