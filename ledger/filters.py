"""The run filter: one meaning of every field for the runs page, the on-call page and GET /api/v1/runs/.

``workflow`` a workflow slug · ``state`` a run state · ``intent`` exact · ``created_after`` (≥) and
``created_before`` (<) ISO 8601 date-times (naive ones are UTC; any offset is converted to UTC) ·
``q`` a run id, an id prefix (``3f2a9c``) or a substring of the intent · ``group=attempts`` one row per
attempt group (its latest run, ``attempt_count`` annotated) · ``attr.<key>=<value>`` (SPEC §15) an
attribute equal to the value (``2`` the integer or the string, ``true`` the boolean or the string; a repeated
key: each holds), at most 16. The pages ignore a value that does not parse; the API answers 400
``invalid_filter`` (``StrictFilterBackend``).
"""

import re
import uuid

import django_filters as filters
from django import forms
from django.db.models import Q
from django_filters.rest_framework import DjangoFilterBackend

from ledger.attempt_selectors import attempt_groups
from ledger.domain.attributes import MAX_KEYS, AttributesInvalid, query_pairs, selection_parse
from ledger.models import Run, RunState, Workflow
from ledger.store import store
from stateboard.errors import DomainError
from stateboard.moments import parse_moment

_HEX_PREFIX = re.compile(r"^[0-9a-f-]{1,36}$")


class MomentField(forms.Field):
    widget = forms.DateTimeInput(attrs={"type": "datetime-local"})

    def to_python(self, value):
        if value in self.empty_values:
            return None
        moment = parse_moment(str(value), naive_as_utc=True)
        if moment is None:
            raise forms.ValidationError("Use an ISO 8601 date-time such as 2026-01-01T00:00:00Z.", code="invalid")
        return moment


class MomentFilter(filters.Filter):
    field_class = MomentField


def id_prefix_q(text: str) -> Q | None:
    """Runs whose id starts with ``text`` (hex digits, dashes ignored) as a range on the primary key."""
    digits = text.lower().replace("-", "")
    if not _HEX_PREFIX.match(text.lower()) or not digits or len(digits) > 32:
        return None
    return Q(id__gte=uuid.UUID(digits.ljust(32, "0")), id__lte=uuid.UUID(digits.ljust(32, "f")))


def attributes_selected(queryset, selection: list[tuple[str, tuple]], field: str = "attributes"):
    """``queryset`` narrowed to rows whose attributes (the JSON column ``field``) hold every (key, values) of
    ``selection`` (``ledger.domain.attributes.selection_parse``): the filter's, an alert rule's."""
    return queryset.filter(store().attributes_q(selection, field)) if selection else queryset


class RunFilter(filters.FilterSet):
    workflow = filters.ModelChoiceFilter(queryset=Workflow.objects.order_by("slug"), to_field_name="slug",
                                         field_name="workflow", empty_label="any workflow")
    state = filters.ChoiceFilter(choices=[(s, s) for s in RunState.values], empty_label="any state")  # the badges' words
    intent = filters.CharFilter(max_length=500)
    created_after = MomentFilter(field_name="created_at", lookup_expr="gte", label="created since")
    created_before = MomentFilter(field_name="created_at", lookup_expr="lt", label="created before")
    q = filters.CharFilter(method="search", max_length=200, label="search")
    group = filters.ChoiceFilter(choices=[("attempts", "one row per attempt group")], method="grouped",
                                 empty_label="one row per run", label="rows")

    class Meta:
        model = Run
        fields = ["workflow", "state", "intent", "created_after", "created_before", "q", "group"]

    def __init__(self, data=None, *args, **kwargs):
        super().__init__(data, *args, **kwargs)
        self.attributes, self.attribute_params, self.attribute_errors = [], [], {}
        for key, text in dict.fromkeys(query_pairs(self.data)):  # (a pair repeated: once)
            try:
                self.attributes += selection_parse([(key, text)])
                self.attribute_params.append((f"attr.{key}", text))
            except AttributesInvalid as invalid:
                self.attribute_errors.setdefault(f"attr.{key}", []).append(invalid.detail)
        if len(self.attributes) > MAX_KEYS:
            self.attribute_errors["attr"] = [f"At most {MAX_KEYS} attribute filters."]
            self.attributes, self.attribute_params = self.attributes[:MAX_KEYS], self.attribute_params[:MAX_KEYS]

    @property
    def errors(self):
        return {**self.form.errors, **self.attribute_errors}

    def is_valid(self):
        return super().is_valid() and not self.attribute_errors

    def filter_queryset(self, queryset):
        return super().filter_queryset(attributes_selected(queryset, self.attributes))

    def grouped(self, queryset, name, value):
        return attempt_groups(queryset) if value == "attempts" else queryset

    def search(self, queryset, name, value):
        text = value.strip()
        if not text:
            return queryset
        match = Q(intent__icontains=text)
        prefix = id_prefix_q(text)
        return queryset.filter(match | prefix if prefix is not None else match)


class OncallRunFilter(RunFilter):
    """The on-call page: the same fields, its states only."""

    def __init__(self, *args, states=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.filters.pop("group", None)  # on-call acts on runs, not groups
        if states:
            self.filters["state"].extra["choices"] = [(s, s) for s in states]


class StrictFilterBackend(DjangoFilterBackend):
    """A filter that does not parse (unknown workflow or state, a bad date) is 400 ``invalid_filter``."""

    def filter_queryset(self, request, queryset, view):
        filterset = self.get_filterset(request, queryset, view)
        if filterset is None:
            return queryset
        if not filterset.is_valid():
            raise DomainError("invalid_filter", "A query filter does not parse.", status_code=400,
                              errors={name: [str(e) for e in errs] for name, errs in filterset.errors.items()})
        return filterset.qs
