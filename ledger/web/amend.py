"""Amending a request's action from the inbox (SPEC §17): a form generated from the stage's ``action_schema``
(one input per top-level property; a JSON text without a schema), the change previewed against the proposed
action before it is sent, and the amend itself through ``services.approval_amend``.

The form shows the action redacted, as every page does; a value sent back unchanged (still its redacted text)
keeps the original, so amending one field never writes a mask over a secret in another."""

import json

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from ledger import authorizers, services
from ledger.domain.approval_rules import action_problem, action_schema_of
from ledger.web.common import approval_of_page, form_checked, inputs_diff
from ledger.web.forms import RequiredReasonForm
from stateboard.errors import Invalid
from stateboard.policy import ANY, Policy, page
from stateboard.redact import redact, redact_data

PAGE = "ledger/approval_amend.html"


def _schema_properties(approval) -> dict | None:
    schema = action_schema_of(approval.run.workflow.approval_rules, approval.stage)
    properties = schema.get("properties") if isinstance(schema, dict) else None
    return properties if isinstance(properties, dict) else None


def amend_fields(approval, data=None) -> list[dict]:
    """The inputs of the form when the stage's schema names properties: the required ones in the schema's order,
    the other properties, then the action's other keys (jsonb keeps no key order: these two by name); each
    {name, text (a string value: taken as typed; else JSON), value, required, description}."""
    properties = _schema_properties(approval)
    if properties is None:
        return []
    schema = action_schema_of(approval.run.workflow.approval_rules, approval.stage)
    required = [n for n in schema.get("required") or [] if n in properties] \
        if isinstance(schema.get("required"), list) else []
    names = list(dict.fromkeys([*required, *sorted(properties), *sorted(approval.action)]))
    fields = []
    for name in names:
        spec = properties.get(name) if isinstance(properties.get(name), dict) else {}
        current = approval.action.get(name)
        text = spec.get("type") == "string" or ("type" not in spec and isinstance(current, (str, type(None))))
        shown = "" if name not in approval.action else redact(current) if text else json.dumps(redact_data(current))
        fields.append({"name": name, "text": text, "required": name in required,
                       "description": str(spec.get("description") or spec.get("title") or "")[:200],
                       "value": data.get(f"field_{name}", shown) if data is not None else shown})
    return fields


def _unredacted(new, old):
    """``new`` with each string that is the redacted text of the value at the same place in ``old`` put back."""
    if isinstance(new, dict) and isinstance(old, dict):
        return {key: _unredacted(value, old[key]) if key in old else value for key, value in new.items()}
    if isinstance(new, list) and isinstance(old, list) and len(new) == len(old):
        return [_unredacted(a, b) for a, b in zip(new, old)]
    if isinstance(new, str) and isinstance(old, str) and new == redact(old) and new != old:
        return old
    return new


def amended_action(approval, data) -> dict:
    """The action the form describes (422 ``invalid_input`` naming what does not parse)."""
    fields = amend_fields(approval, data)
    if not fields:
        try:
            action = json.loads(data.get("action_json") or "")
        except ValueError as exc:
            raise Invalid("invalid_input", f"The action is not JSON ({exc.msg}).")
    else:
        action = {}
        for field in fields:
            raw = field["value"]
            if raw == "":  # left empty: not in the action
                continue
            try:
                action[field["name"]] = raw if field["text"] else json.loads(raw)
            except ValueError:
                raise Invalid("invalid_input", f"{field['name']}: not JSON (quote a text: \"…\").")
    return _unredacted(action, approval.action)


def _context(approval, data=None) -> dict:
    fields = amend_fields(approval, data)
    context = {"approval": approval, "fields": fields, "preview": None,
               "action_json": (data or {}).get("action_json", json.dumps(redact_data(approval.action), indent=2)),
               "reason": (data or {}).get("reason", "")}
    if data is not None and data.get("preview"):
        try:
            action = amended_action(approval, data)
            schema = action_schema_of(approval.run.workflow.approval_rules, approval.stage)
            context["preview"] = {"changes": inputs_diff(approval.action, action) if isinstance(action, dict) else [],
                                  "problem": action_problem(schema, action)}
        except Invalid as exc:
            context["preview"] = {"changes": [], "problem": exc.detail}
    return context


def _here(request) -> str:
    return reverse("ledger:approval_amend", args=[request.resolver_match.kwargs["approval_id"]])


@require_http_methods(["GET", "POST"])
@page(Policy(roles=ANY, authorizer=authorizers.may_amend_approval, subject=approval_of_page, audit="amend",
             audit_all=True), back=_here)
def approval_amend(request, approval_id):
    """GET: the form (``?preview=1``: with the change against the proposed action; htmx gets that part alone).
    POST: amend, then back to the inbox, where the new request waits for the other approvers."""
    approval = approval_of_page(request, {"approval_id": approval_id})
    if request.method == "GET":
        data = request.GET if request.GET.get("preview") else None
        template = f"{PAGE}#amend-preview" if request.htmx and data is not None else PAGE
        return render(request, template, _context(approval, data))
    reason = form_checked(RequiredReasonForm(request.POST)).reason_text()
    amended = services.approval_amend(approval_id=approval_id, user=request.user,
                                      action=amended_action(approval, request.POST), reason=reason)
    messages.success(request, f"Amended: a new request for {amended.stage or amended.kind} of "
                              f"{approval.run.workflow.slug} · {approval.run.intent} waits for its approvers "
                              "(you requested it: you cannot approve it).")
    inbox = reverse("ledger:approval_list") + f"#approval-{amended.id}"
    if request.htmx:
        return HttpResponse(status=204, headers={"HX-Redirect": inbox})
    return redirect(inbox)
