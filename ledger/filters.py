"""The run filter: one meaning of every field for the runs page, the on-call page and GET /api/v1/runs/.

``workflow`` a workflow slug · ``state`` a run state · ``intent`` exact · ``created_after`` (≥) and
``created_before`` (<) ISO 8601 date-times (naive ones are UTC; any offset is converted to UTC) ·
``q`` a run id, an id prefix (``3f2a9c``) or a substring of the intent · ``group=attempts`` one row per
attempt group (its latest run, ``attempt_count`` annotated). The pages ignore a value
that does not parse; the API answers 400 ``invalid_filter`` (``StrictFilterBackend``).
"""

import re
import uuid

import django_filters as filters
from django import forms
from django.db.models import Q
from django_filters.rest_framework import DjangoFilterBackend

from ledger.attempt_selectors import attempt_groups
from ledger.models import Run, RunState, Workflow
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
