"""The filters of the trace and spiral pages: validated query strings, applied to querysets.

A bad value never fails a page: the form reports it, and the valid filters still apply.
"""

from __future__ import annotations

from django import forms
from django.db.models import Q, QuerySet, TextField
from django.db.models.functions import Cast
from ninja.errors import HttpError

from traces_app.api import TRACE_SORTS, TraceFilter, sorted_traces
from traces_app.http.paging import SortKey
from traces_app.models import ChosenBy, SpiralKind, SpiralResolution, TraceStatus
from traces_app.rollups.ranges import TimeRange
from traces_app.scores.judgements import SCORE_FILTER_PATTERN

ANY = [("", "any")]
ARGUMENT_CHOICES = [("changed", "changed"), ("same", "never changed")]


MATCHES = [("contains", "contains"), ("prefix", "starts with"), ("exact", "is exactly")]


class TraceFilterForm(forms.Form):
    agent = forms.CharField(max_length=200, required=False)
    tool = forms.CharField(max_length=200, required=False)
    match = forms.ChoiceField(choices=MATCHES, required=False, label="Agent and tool names")
    status = forms.ChoiceField(choices=ANY + TraceStatus.choices, required=False)
    chosen_by = forms.ChoiceField(choices=ANY + ChosenBy.choices, required=False, label="Who chose")
    q = forms.CharField(max_length=200, required=False, label="Search")
    session = forms.CharField(max_length=200, required=False, label="Session")
    score = forms.RegexField(
        regex=SCORE_FILTER_PATTERN,
        required=False,
        label="Score",
        error_messages={"invalid": "Give a score's name, or name:value (result_correct:false)."},
    )
    sort = forms.ChoiceField(
        choices=[(key, label) for key, (_, label) in TRACE_SORTS.items()],
        required=False,
        label="Order",
    )

    def filter(self, traces: QuerySet, time_range: TimeRange) -> QuerySet:
        """Return the traces started in the range that pass the valid filters, in the order asked.

        The REST API's TraceFilter does the work, so the page and GET /api/v1/traces
        agree on what every filter means; only the page matches names by "contains" unless
        told otherwise, as an operator types part of a name.
        """
        self.is_valid()
        values = {name: value for name, value in self.cleaned_data.items() if value}
        values.pop("sort", None)
        values.setdefault("match", "contains")
        try:
            found = self._filtered(traces, time_range, values)
        except HttpError as exc:  # a name that matches too many tools
            self.add_error("tool", exc.message)
            values.pop("tool", None)
            found = self._filtered(traces, time_range, values)
        return sorted_traces(found, self.order)[0]

    @staticmethod
    def _filtered(traces: QuerySet, time_range: TimeRange, values: dict[str, str]) -> QuerySet:
        return TraceFilter(since=time_range.since, until=time_range.until, **values).filter(traces)

    @property
    def order(self) -> str:
        """Return the valid sort asked for, or newest first."""
        cleaned = getattr(self, "cleaned_data", {})
        return cleaned.get("sort") or "-started"

    @property
    def sort_key(self) -> SortKey:
        return TRACE_SORTS[self.order][0]


class SpiralFilterForm(forms.Form):
    tool = forms.CharField(max_length=200, required=False)
    resolution = forms.ChoiceField(
        choices=ANY + SpiralResolution.choices, required=False, label="How it ended"
    )
    kind = forms.ChoiceField(choices=ANY + SpiralKind.choices, required=False)
    arguments = forms.ChoiceField(
        choices=ANY + ARGUMENT_CHOICES, required=False, label="Arguments between attempts"
    )

    def filter(self, spirals: QuerySet, time_range: TimeRange) -> QuerySet:
        """Return the spirals started in the range that pass the valid filters."""
        self.is_valid()
        spirals = spirals.filter(started_at__gte=time_range.since, started_at__lt=time_range.until)
        lookups = {"tool": "tool_name", "resolution": "resolution", "kind": "kind"}
        for name, value in self.cleaned_data.items():
            if value and name in lookups:
                spirals = spirals.filter(**{lookups[name]: value})
        return _by_arguments(spirals, self.cleaned_data.get("arguments", ""))


def _by_arguments(spirals: QuerySet, which: str) -> QuerySet:
    """Return the spirals whose arguments changed between attempts, or never did.

    A step that changed lists its keys (strings), so a quote in the JSON text is a change:
    one portable test on SQLite and PostgreSQL, after the range has bounded the rows.
    """
    if not which:
        return spirals
    changed = Q(argument_text__contains='"')
    spirals = spirals.annotate(argument_text=Cast("argument_changes", TextField()))
    return spirals.filter(changed) if which == "changed" else spirals.exclude(changed)


def error_messages(form: forms.Form) -> list[str]:
    """Return one line per bad filter, saying which filter and why."""
    return [
        f"{form.fields[name].label or name}: {' '.join(errors)}"
        for name, errors in form.errors.items()
    ]
