"""The filters of the trace and spiral pages: validated query strings, applied to querysets.

A bad value never fails a page: the form reports it, and the valid filters still apply.
"""

from __future__ import annotations

from django import forms
from django.db.models import QuerySet

from traces_app.api import TraceFilter
from traces_app.models import ChosenBy, SpiralKind, SpiralResolution, TraceStatus
from traces_app.ranges import TimeRange

ANY = [("", "any")]


class TraceFilterForm(forms.Form):
    agent = forms.CharField(max_length=200, required=False)
    tool = forms.CharField(max_length=200, required=False)
    status = forms.ChoiceField(choices=ANY + TraceStatus.choices, required=False)
    chosen_by = forms.ChoiceField(choices=ANY + ChosenBy.choices, required=False, label="Who chose")
    q = forms.CharField(max_length=200, required=False, label="Request contains")

    def filter(self, traces: QuerySet, time_range: TimeRange) -> QuerySet:
        """Return the traces started in the range that pass the valid filters.

        The REST API's TraceFilter does the work, so the page and GET /api/v1/traces
        agree on what every filter means.
        """
        self.is_valid()
        values = {name: value for name, value in self.cleaned_data.items() if value}
        return TraceFilter(since=time_range.since, until=time_range.until, **values).filter(traces)


class SpiralFilterForm(forms.Form):
    tool = forms.CharField(max_length=200, required=False)
    resolution = forms.ChoiceField(
        choices=ANY + SpiralResolution.choices, required=False, label="How it ended"
    )
    kind = forms.ChoiceField(choices=ANY + SpiralKind.choices, required=False)

    def filter(self, spirals: QuerySet, time_range: TimeRange) -> QuerySet:
        """Return the spirals started in the range that pass the valid filters."""
        self.is_valid()
        spirals = spirals.filter(started_at__gte=time_range.since, started_at__lt=time_range.until)
        lookups = {"tool": "tool_name", "resolution": "resolution", "kind": "kind"}
        for name, value in self.cleaned_data.items():
            if value:
                spirals = spirals.filter(**{lookups[name]: value})
        return spirals


def error_messages(form: forms.Form) -> list[str]:
    """Return one line per bad filter, saying which filter and why."""
    return [
        f"{form.fields[name].label or name}: {' '.join(errors)}"
        for name, errors in form.errors.items()
    ]
