"""OpenAPI (drf-spectacular) extensions: the token authentication, and typed JSON fields of the outputs."""

from django.utils.module_loading import import_string
from drf_spectacular.extensions import OpenApiAuthenticationExtension, OpenApiSerializerExtension

from ledger.api import components


class HashedTokenScheme(OpenApiAuthenticationExtension):
    target_class = "ledger.auth.HashedTokenAuthentication"
    name = "tokenAuth"

    def get_security_definition(self, auto_schema):
        return {"type": "apiKey", "in": "header", "name": "Authorization",
                "description": "`Token <key>` — keys come from `create_agent` / `create_operator --token`."}


# ---------------------------------------------------------------- typed JSON fields of the output serializers
# The API renders its JSON fields (``effect``, ``evidence``, ``decision``, ``lease``, ``action``) as stored;
# these extensions describe them with the components of ``ledger.api.components`` and add the
# properties ``to_representation`` adds (``queued``, ...), leaving the serializers themselves as they are.

class TypedOutputFields(OpenApiSerializerExtension):
    """Base: ``typed`` maps a property to (component, how: "one" | "nullable" | "many"); ``extra`` adds
    properties (name -> (component, how, required)). A component is a schema dict, a serializer or its
    dotted path."""

    match_subclasses = True
    typed: dict = {}
    extra: dict = {}

    def map_serializer(self, auto_schema, direction):
        schema = auto_schema._map_serializer(self.target, direction, bypass_extensions=True)
        properties = schema.setdefault("properties", {})
        for name, (component, how) in self.typed.items():
            if name in properties:
                kept = {k: v for k, v in properties[name].items() if k in ("readOnly", "description")}
                properties[name] = {**typed_schema(auto_schema, component, how, direction), **kept}
        for name, (component, how, required) in self.extra.items():
            properties[name] = {**typed_schema(auto_schema, component, how, direction), "readOnly": True}
            if required:
                schema.setdefault("required", []).append(name)
        return schema


def typed_schema(auto_schema, component, how: str, direction) -> dict:
    """A property's schema: a plain schema dict as is, else a reference to a serializer's component."""
    if isinstance(component, dict):
        return dict(component)
    if isinstance(component, str):
        component = import_string(component)
    ref = auto_schema.resolve_serializer(component, direction).ref
    if how == "many":
        return {"type": "array", "items": ref}
    if how == "nullable":
        return {"allOf": [ref], "nullable": True}
    return {"allOf": [ref]}


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
