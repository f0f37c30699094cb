"""OpenAPI (drf-spectacular) helpers every app's API shares, for the schema only; imports no app.

``Op``/``named`` document an operation (summary, description, error codes by status) and
``operation()`` turns one into its ``extend_schema`` with an ``Error`` response per status it can
answer. ``page_of``/``one_or_many`` build list and batch bodies. ``TypedOutputFields`` types the JSON
fields of an output serializer without changing it. The apps' own components stay in the apps
(``ledger.api.components``, ``knowledge.api.components``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace

from django.utils.module_loading import import_string
from drf_spectacular.extensions import OpenApiSerializerExtension
from drf_spectacular.utils import OpenApiResponse, PolymorphicProxySerializer, extend_schema, inline_serializer
from rest_framework import serializers

# ---------------------------------------------------------------- errors

class ErrorSerializer(serializers.Serializer):
    """Every API error (SPEC §8). Branch on `code`; `detail` is for people. Some codes add fields."""

    code = serializers.CharField(help_text="stable snake_case code, e.g. `effect_exists`")
    detail = serializers.CharField(help_text="a human message")
    reasons = serializers.ListField(child=serializers.JSONField(), required=False,
                                    help_text="`write_gate_rejected`: every reason at once, each {code, field, "
                                              "detail}; `approval_void`: why the permit is void")
    index = serializers.IntegerField(required=False, help_text="a refused batch: the position of the refused event")
    errors = serializers.JSONField(required=False, help_text="`validation_error`: the errors per field; "
                                                             "`entries_invalid`: per entry, with its `index`")


# ---------------------------------------------------------------- operations

@dataclass(frozen=True)
class Op:
    """One operation's documentation: summary, what it does and who may call it, error codes by status."""

    summary: str
    description: str
    errors: dict[int, list[str]] = field(default_factory=dict)
    operation_id: str = ""  # set from the key of its table (``named``)


def named(table: dict[str, Op]) -> dict[str, Op]:
    """A table of operations keyed by their operationId (kept as drf-spectacular first named them)."""
    return {name: replace(op, operation_id=name) for name, op in table.items()}


AUTH_CODES = {401: ["not_authenticated", "authentication_failed"], 403: ["permission_denied"], 429: ["throttled"]}
BODY_CODES = {400: ["malformed_json", "nul_byte", "too_deep", "validation_error", "body_incomplete"],
              413: ["body_too_large"]}
STATUS_WORDS = {400: "bad input", 401: "no or a bad token", 403: "not allowed", 404: "not found",
                409: "conflict", 413: "body too large", 422: "refused input", 429: "over the rate limit (Retry-After)"}


def error_codes(op: Op, *, has_body: bool) -> dict[int, list[str]]:
    """The op's codes by status, with those every call (auth) and every body (parsing) can answer."""
    merged: dict[int, list[str]] = {}
    for source in (AUTH_CODES, BODY_CODES if has_body else {}, op.errors):
        for status_code, codes in source.items():
            merged.setdefault(status_code, [])
            merged[status_code] += [c for c in codes if c not in merged[status_code]]
    return dict(sorted(merged.items()))


def operation(op: Op, *, request=None, responses=None, has_body: bool | None = None, **kwargs):
    """``extend_schema`` for one operation: its responses plus an ``Error`` response per status it can
    answer (the codes in the response's description and in the operation's)."""
    has_body = request is not None if has_body is None else has_body
    codes = error_codes(op, has_body=has_body)
    errors = {status_code: OpenApiResponse(response=ErrorSerializer,
                                           description=f"{STATUS_WORDS.get(status_code, 'error')}; codes: "
                                                       + ", ".join(f"`{c}`" for c in names))
              for status_code, names in codes.items()}
    listing = "\n".join(f"- **{s}**: " + ", ".join(f"`{c}`" for c in names) for s, names in codes.items())
    description = f"{op.description}\n\nError codes (the body is an `Error`):\n\n{listing}"
    return extend_schema(operation_id=op.operation_id or None, summary=op.summary, description=description,
                         request=request,
                         responses={**(responses or {}), **errors}, **kwargs)


# ---------------------------------------------------------------- bodies

@functools.cache
def one_or_many(component_name: str, serializer_class):
    """A response that is one object, or an array of them (the batch form); one component per name."""
    return PolymorphicProxySerializer(component_name=component_name, resource_type_field_name=None, many=False,
                                      serializers=[serializer_class, serializer_class(many=True)])


@functools.cache
def page_of(component_name: str, serializer_class, **extra_fields):
    """``{results: [...], next: <url or null>}`` for the lists that are not cursor paginated by DRF."""
    return inline_serializer(component_name, {
        "results": serializer_class(many=True),
        "next": serializers.URLField(allow_null=True, help_text="the next page, or null"), **extra_fields})


# ---------------------------------------------------------------- typed JSON fields of the output serializers
# The APIs render their JSON fields as stored; subclasses of ``TypedOutputFields`` describe them with
# components and add the properties ``to_representation`` adds, leaving the serializers as they are.

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
