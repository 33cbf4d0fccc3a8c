"""The trace pages: traces (filtered, paged), one trace's waterfall, failure spirals."""

from __future__ import annotations

from collections import Counter
from typing import Any
from urllib.parse import urlencode

from django.contrib.admin.views.decorators import staff_member_required
from django.db.models import Model, QuerySet
from django.http import HttpRequest, HttpResponse, QueryDict
from django.shortcuts import get_object_or_404, render
from django.utils import timezone

from traces_app import api, timeline
from traces_app.api import count_up_to_limit, first_up_to_limit
from traces_app.forms import SpiralFilterForm, TraceFilterForm, error_messages
from traces_app.http.paging import (
    NEWEST_FIRST,
    BadCursor,
    KeysetPage,
    SortKey,
    encode_cursor,
    keyset_page,
)
from traces_app.models import FailureSpiral, SpanRollup, ToolRollup, Trace, TraceStatus
from traces_app.rollups.range_totals import fresh_range_context, range_spend
from traces_app.rollups.ranges import TimeRange

PAGE_SIZE = 50


@staff_member_required
def traces(request: HttpRequest) -> HttpResponse:
    """List the traces of a time range that pass the filters, newest first, a page at a time.

    The totals read the newest matches (see _trace_totals); the first page in that order is
    taken from them rather than searched for again: a text search or a tool filter over a
    busy day is most of the page's time, and it runs once.
    """
    context = _filtered(request, TraceFilterForm, Trace.objects.all())
    form: TraceFilterForm = context["form"]
    newest = context["matching"].order_by("-started_at", "-pk")
    matches, exact = first_up_to_limit(newest, "pk", *TRACE_SUMS)
    first_page = not (request.GET.get("after") or request.GET.get("before"))
    # (exact or more than a page: the matches then hold the whole first page and whether
    # there is more)
    if first_page and form.sort_key == NEWEST_FIRST and (exact or len(matches) > PAGE_SIZE):
        context["page"] = _first_page_of([match[0] for match in matches])
    else:
        context["page"], cursor_error = _page(context["matching"], request.GET, form.sort_key)
        context["filter_errors"] += cursor_error
    context.update(
        rows=timeline.trace_rows(context["page"].rows),
        totals=_trace_totals(
            [match[1:] for match in matches], exact, newest, form, context["time_range"]
        ),
        api_query=_api_query(form, context["time_range"]),
        sort=form.order,
        sort_query=_without(request, "after", "before", "sort"),
        agents=_known(SpanRollup, "agent", context["time_range"]),
        tools=_known(ToolRollup, "tool_name", context["time_range"]),
    )
    return render(request, "traces_app/traces.html", context)


def _api_query(form: TraceFilterForm, time_range: TimeRange) -> str:
    """Return the query of GET /api/v1/traces that lists what the page lists, range included."""
    values = {name: value for name, value in form.cleaned_data.items() if value}
    values.setdefault("match", "contains")  # the page's default; the API's is exact
    values.update(since=time_range.since.isoformat(), until=time_range.until.isoformat())
    return urlencode(values)


def _first_page_of(newest_pks: list[str]) -> KeysetPage:
    """Return the first page newest first, given the matches' keys in that order."""
    found = Trace.objects.in_bulk(newest_pks[:PAGE_SIZE])
    rows = [found[pk] for pk in newest_pks[:PAGE_SIZE] if pk in found]
    has_older = len(newest_pks) > PAGE_SIZE
    return KeysetPage(
        rows,
        next_cursor=encode_cursor(rows[-1], NEWEST_FIRST) if has_older and rows else None,
        prev_cursor=None,
    )


def _trace_totals(
    rows: list[tuple[Any, ...]],
    exact: bool,
    traces: QuerySet,
    form: TraceFilterForm,
    time_range: TimeRange,
) -> dict[str, Any]:
    """Return how many traces match, with failures or stopped, their tokens and cost.

    `rows` are TRACE_SUMS of the newest api.COUNT_LIMIT traces that match (first_up_to_limit
    of `traces`, and `exact` whether those are all), as the API counts, so a page load reads
    no more whatever the range holds. When more match, with a filter the other figures are
    those of the newest COUNT_LIMIT (basis "newest"); without one, see _rollup_totals. The
    page says which.
    """
    filtered = any(form.cleaned_data.get(name) for name in RAW_ROW_FILTERS)
    if not exact and not filtered:
        return _rollup_totals(traces, time_range)
    statuses = Counter(row[0] for row in rows)
    return {
        "limit": api.COUNT_LIMIT,
        "basis": "exact" if exact else "newest",
        "traces": len(rows),
        "traces_exact": exact,
        "failed": statuses[TraceStatus.ERROR],
        "failed_exact": True,  # of the traces summed
        "stopped": statuses[TraceStatus.STOPPED],
        "stopped_exact": True,
        "tokens": sum(row[1] + row[2] for row in rows),
        "cost_usd": sum(row[3] for row in rows),
    }


# The filters only raw rows answer (match and sort only shape them).
RAW_ROW_FILTERS = ("agent", "tool", "status", "chosen_by", "q", "session", "score")
# What the totals sum, by row.
TRACE_SUMS = ("status", "input_tokens", "output_tokens", "cost_usd")


def _rollup_totals(traces: QuerySet, time_range: TimeRange) -> dict[str, Any]:
    """Return the totals of more than COUNT_LIMIT traces and no filter (basis "rollups").

    Failures and stops are counted up to the limit on their own (the status index), and
    tokens and cost are the hourly rollups' sums of the spans started in the range's hours.
    """
    failed = count_up_to_limit(traces.filter(status=TraceStatus.ERROR))
    stopped = count_up_to_limit(traces.filter(status=TraceStatus.STOPPED))
    spend = range_spend(time_range)
    return {
        "limit": api.COUNT_LIMIT,
        "basis": "rollups",
        "traces": api.COUNT_LIMIT,
        "traces_exact": False,
        "failed": failed["count"],
        "failed_exact": failed["exact"],
        "stopped": stopped["count"],
        "stopped_exact": stopped["exact"],
        "tokens": spend["input_tokens"] + spend["output_tokens"],
        "cost_usd": spend["cost_usd"],
    }


def _filtered(
    request: HttpRequest, form_class: type[TraceFilterForm | SpiralFilterForm], rows: QuerySet
) -> dict[str, Any]:
    """Return a list page's context without its page: its range, filter form and errors."""
    context = fresh_range_context(request.GET, timezone.now())
    form = form_class(request.GET)
    context.update(
        form=form,
        matching=form.filter(rows, context["time_range"]),
        filter_errors=error_messages(form),
        page_query=_without(request, "after", "before"),
    )
    return context


def _filtered_page(
    request: HttpRequest, form_class: type[SpiralFilterForm], rows: QuerySet
) -> dict[str, Any]:
    """Return a list page's context: its range, filter form and errors, and one page of rows."""
    context = _filtered(request, form_class, rows)
    context["page"], cursor_error = _page(context["matching"], request.GET)
    context["filter_errors"] += cursor_error
    return context


@staff_member_required
def trace_detail(request: HttpRequest, trace_id: str) -> HttpResponse:
    """Show one trace: its waterfall, then every span with its payloads and marks."""
    trace = get_object_or_404(Trace, trace_id=trace_id.lower())
    spans, more = timeline.trace_spans(trace)
    spirals = list(trace.spirals.order_by("started_at", "pk"))
    rows = timeline.span_rows(spans, spirals)
    context = {
        "trace": trace,
        "rows": rows,
        "tree": timeline.span_tree(rows),
        "more_spans": more,
        "spirals": spirals,
        "waterfall": timeline.waterfall_chart(trace, rows),
        "planner_chose": any(row.span.chosen_by == "planner" for row in rows),
    }
    return render(request, "traces_app/trace_detail.html", context)


@staff_member_required
def spirals(request: HttpRequest) -> HttpResponse:
    """List the failure spirals of a time range that pass the filters, newest first."""
    context = _filtered_page(request, SpiralFilterForm, FailureSpiral.objects.all())
    context["tools"] = _known(ToolRollup, "tool_name", context["time_range"])
    return render(request, "traces_app/spirals.html", context)


@staff_member_required
def spiral_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """Show one spiral: its attempts in order, what changed between them, what it wasted."""
    spiral = get_object_or_404(FailureSpiral.objects.select_related("trace"), pk=pk)
    attempts = timeline.spiral_attempts(spiral)
    context = {
        "spiral": spiral,
        "attempts": attempts,
        "chart": timeline.attempts_chart(spiral, attempts),
        "changes": timeline.argument_changes(spiral, attempts),
        "ending": timeline.spiral_ending(spiral, attempts),
    }
    return render(request, "traces_app/spiral_detail.html", context)


def _page(
    queryset: QuerySet, params: QueryDict, key: SortKey = NEWEST_FIRST
) -> tuple[KeysetPage, list[str]]:
    """Return the page the query string's cursor asks for; the first one for a bad cursor."""
    try:
        return keyset_page(
            queryset, PAGE_SIZE, after=params.get("after"), before=params.get("before"), key=key
        ), []
    except BadCursor as exc:
        return keyset_page(queryset, PAGE_SIZE, key=key), [f"Page: {exc}; showing the first page."]


def _without(request: HttpRequest, *names: str) -> str:
    """Return the page's query string without some parameters (its cursor), for links."""
    params = request.GET.copy()
    for name in names:
        params.pop(name, None)
    return params.urlencode()


def _known(model: type[Model], field: str, time_range: TimeRange) -> list[str]:
    """Return the distinct values of a rollup field in a range, for a filter's suggestions.

    Read from the hourly rollups, which stay small whatever the number of raw spans.
    """
    hours = model.objects.filter(
        bucket_start__gte=time_range.since.replace(minute=0, second=0, microsecond=0),
        bucket_start__lt=time_range.until,
    )
    values = hours.order_by().values_list(field, flat=True).distinct()
    return sorted(value for value in values if value)
