"""The chains page: tools called together and in order, output-token waste, tools that fail."""

from __future__ import annotations

from urllib.parse import urlencode

from django import forms
from django.contrib.admin.views.decorators import staff_member_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from traces_app import tool_chains as chains
from traces_app.chain_api import OFTEN_FAILING_RANKING
from traces_app.forms import error_messages
from traces_app.models import ToolRollup
from traces_app.rollups.ranges import range_context
from traces_app.views import _known


class ChainFilterForm(forms.Form):
    tool = forms.CharField(max_length=200, required=False)
    min_count = forms.IntegerField(
        min_value=1, max_value=1_000_000, required=False, label="Seen at least"
    )
    min_calls = forms.IntegerField(
        min_value=1, max_value=1_000_000, required=False, label="Fewest calls (often failing)"
    )

    def value(self, name: str, default: int | str) -> int | str:
        """Return a valid field's value, else the default (a bad one is said and left out)."""
        self.is_valid()
        cleaned = getattr(self, "cleaned_data", {})
        found = cleaned.get(name)
        return default if found in (None, "") else found


@staff_member_required
def chains_page(request: HttpRequest) -> HttpResponse:
    """Show the tool pairs, chains, waste and often-failing tools of a range's newest traces."""
    context = range_context(request.GET, timezone.now())
    time_range = context["time_range"]
    form = ChainFilterForm(request.GET)
    report = chains.chain_report(
        time_range.since,  # type: ignore[attr-defined]
        time_range.until,  # type: ignore[attr-defined]
        tool=str(form.value("tool", "")),
        min_count=int(form.value("min_count", chains.DEFAULT_MIN_COUNT)),
        min_calls=int(form.value("min_calls", chains.DEFAULT_MIN_CALLS)),
    )
    context.update(
        form=form,
        filter_errors=error_messages(form),
        report=report,
        ranking=OFTEN_FAILING_RANKING,
        api_query=_api_query(form, report),
        tools=_known(ToolRollup, "tool_name", time_range),  # type: ignore[arg-type]
    )
    return render(request, "traces_app/chains.html", context)


def _api_query(form: ChainFilterForm, report: chains.ChainReport) -> str:
    """Return the query of GET /api/v1/chains that gives the report the page shows."""
    values = {name: value for name, value in getattr(form, "cleaned_data", {}).items() if value}
    return urlencode(
        {"since": report.since.isoformat(), "until": report.until.isoformat(), **values}
    )
