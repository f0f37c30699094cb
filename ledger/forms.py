"""Forms of the HTML pages: filters (GET) and the reasons of human decisions (POST)."""

import uuid

from django import forms

from ledger.models import RunState
from ledger.selectors import ONCALL_STATES


class RunFilterForm(forms.Form):
    """Runs page filters; every field optional, an invalid value is ignored rather than an error page."""

    q = forms.CharField(required=False, max_length=200, label="search")
    workflow = forms.ChoiceField(required=False)
    state = forms.ChoiceField(required=False, choices=[("", "any state"), *RunState.choices])
    intent = forms.CharField(required=False, max_length=500)
    since = forms.DateTimeField(required=False, label="created since",
                                widget=forms.DateTimeInput(attrs={"type": "datetime-local"}))

    def __init__(self, data=None, *, workflows=(), states=None, **kwargs):
        super().__init__(data, **kwargs)
        self.fields["workflow"].choices = [("", "any workflow"), *((w.slug, w.slug) for w in workflows)]
        if states is not None:
            self.fields["state"].choices = [("", "any state"), *((s, s) for s in states)]

    def filters(self) -> dict:
        """The valid filters as selector keyword arguments (call after ``is_valid``)."""
        data = getattr(self, "cleaned_data", {})
        return {
            "workflow": data.get("workflow") or "",
            "state": data.get("state") or "",
            "intent": (data.get("intent") or "").strip(),
            "since": data.get("since"),
            "q": (data.get("q") or "").strip(),
        }

    def valid_filters(self) -> dict:
        """The filters that did validate, when some did not (an unknown value is reported, not applied)."""
        data = getattr(self, "cleaned_data", {})
        return {**self.filters(), **{k: "" for k in ("workflow", "state") if k not in data}}


class OncallFilterForm(RunFilterForm):
    def __init__(self, data=None, *, workflows=(), **kwargs):
        super().__init__(data, workflows=workflows, states=ONCALL_STATES, **kwargs)
        del self.fields["q"]

    def filters(self) -> dict:
        out = super().filters()
        out.pop("q")
        return out


class ReasonForm(forms.Form):
    """Approve, retry, compensate: a reason is welcome but optional."""

    reason = forms.CharField(required=False, max_length=2000)

    def reason_text(self) -> str:
        return (self.cleaned_data.get("reason") or "").strip()


class RequiredReasonForm(ReasonForm):
    """Reject and abandon: the reason is recorded with the decision, so it is required."""

    reason = forms.CharField(required=True, max_length=2000,
                             error_messages={"required": "A reason is required."})

    def clean_reason(self):
        reason = self.cleaned_data["reason"].strip()
        if not reason:
            raise forms.ValidationError("A reason is required.")
        return reason


class UUIDListField(forms.Field):
    """Repeated ``name=<uuid>`` values (checkboxes) as a list of UUIDs, at most 500."""

    widget = forms.MultipleHiddenInput

    def to_python(self, value):
        if not value:
            return []
        values = value if isinstance(value, (list, tuple)) else [value]
        if len(values) > 500:
            raise forms.ValidationError("Select at most 500 runs at once.")
        try:
            return list(dict.fromkeys(uuid.UUID(str(v)) for v in values))
        except ValueError:
            raise forms.ValidationError("Invalid run id.")


BULK_ACTIONS = [("retry", "Retry"), ("compensate", "Compensate"), ("abandon", "Abandon")]


class BulkActionForm(forms.Form):
    """One POST for a set of selected on-call runs."""

    action = forms.ChoiceField(choices=BULK_ACTIONS)
    run = UUIDListField(error_messages={"required": "Select at least one run."})
    reason = forms.CharField(required=False, max_length=2000)

    def clean(self):
        cleaned = super().clean()
        if cleaned.get("action") == "abandon" and not (cleaned.get("reason") or "").strip():
            self.add_error("reason", "Abandoning needs a reason.")
        return cleaned


class SavedViewForm(forms.Form):
    """A named filter set of the runs page, shared by the team."""

    name = forms.CharField(max_length=100)
    query = forms.CharField(required=False, max_length=2000, widget=forms.HiddenInput)

    def clean_name(self):
        name = self.cleaned_data["name"].strip()
        if not name:
            raise forms.ValidationError("A name is required.")
        return name

    def clean_query(self):
        from django.http import QueryDict

        allowed = {"q", "workflow", "state", "intent", "since"}
        query = QueryDict(self.cleaned_data.get("query") or "", mutable=True)
        for key in list(query):
            if key not in allowed:
                del query[key]
        return query.urlencode()


class PreviewForm(forms.Form):
    """The runs an on-call action would touch, before it is applied."""

    action = forms.ChoiceField(choices=BULK_ACTIONS)
    run = UUIDListField(error_messages={"required": "Select at least one run."})
    reason = forms.CharField(required=False, max_length=2000)
