"""Forms of the HTML pages: the reasons of human decisions (POST). The run filters are ``ledger/filters.py``."""

import uuid

from django import forms
from django.http import QueryDict

from ledger.domain.attributes import FILTER_PREFIX, KEY


class ReasonForm(forms.Form):
    """Approve, retry, compensate: a reason is welcome but optional."""

    reason = forms.CharField(required=False, max_length=2000)

    def reason_text(self) -> str:
        return (self.cleaned_data.get("reason") or "").strip()


class RequiredReasonForm(ReasonForm):
    """Reject and abandon: the reason is recorded with the decision, so it is required (a blank one
    too: CharField strips it first)."""

    reason = forms.CharField(required=True, max_length=2000,
                             error_messages={"required": "A reason is required."})


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

    name = forms.CharField(max_length=100, error_messages={"required": "A name is required."})
    query = forms.CharField(required=False, max_length=2000, widget=forms.HiddenInput)

    def clean_query(self):
        """The run filter's parameters only: its fields and ``attr.<key>`` (SPEC §15: a saved view keeps them)."""
        allowed = {"q", "workflow", "state", "intent", "since", "created_after", "created_before", "group"}
        query = QueryDict(self.cleaned_data.get("query") or "", mutable=True)
        for key in list(query):
            if key not in allowed and not (key.startswith(FILTER_PREFIX) and KEY.match(key[len(FILTER_PREFIX):])):
                del query[key]
        return query.urlencode()


class PreviewForm(forms.Form):
    """The runs an on-call action would touch, before it is applied."""

    action = forms.ChoiceField(choices=BULK_ACTIONS)
    run = UUIDListField(error_messages={"required": "Select at least one run."})
    reason = forms.CharField(required=False, max_length=2000)
