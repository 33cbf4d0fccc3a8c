"""The observatory's planner pages: the tools table, a tool's detail, and evidence scores.

They read hourly rollups for anything over a time range (traces_app.rollups.range_totals), and
score tools with the planner's own scorer (planner_app.evidence).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.contrib.admin.views.decorators import staff_member_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from planner_app import tool_charts as charts
from planner_app.evidence import (
    ToolRow,
    capabilities_of,
    capability_evidence,
    capability_names,
    capability_overview,
    current_score,
    own_candidate,
    own_score_series,
    tool_rows,
)
from planner_app.ruleset_versions import current_ruleset
from planner_app.version_effects import marked
from tools_app.site_engine import get_engine
from traces_app.charts import Chart
from traces_app.models import Invocation, ToolRollup
from traces_app.rollups.range_totals import (
    ToolTotals,
    fresh_range_context,
    tool_changes,
    tool_series,
    tool_totals,
)
from traces_app.rollups.ranges import TimeRange

RECENT_FAILURES = 20


@dataclass(frozen=True)
class SortColumn:
    label: str
    value: Callable[[ToolRow], Any]  # None sorts last, whatever the direction
    numeric: bool = True


SORT_COLUMNS: dict[str, SortColumn] = {
    "name": SortColumn("Tool", lambda row: row.name, numeric=False),
    "calls": SortColumn("Calls", lambda row: row.totals.calls),
    "success_rate": SortColumn("Success rate", lambda row: row.totals.success_rate),
    "p50": SortColumn("p50 ms", lambda row: row.totals.p50_ms if row.totals.calls else None),
    "p95": SortColumn("p95 ms", lambda row: row.totals.p95_ms if row.totals.calls else None),
    "tokens": SortColumn("Tokens", lambda row: row.totals.tokens),
    "cost": SortColumn("Cost (USD)", lambda row: row.totals.cost_usd),
    "score": SortColumn("Evidence score", lambda row: row.score.final if row.score else None),
}
DEFAULT_SORT = "name"


def read_sort(value: str | None) -> tuple[str, str]:
    """Return the sort ('-' first: descending) and an error message ('' when it is known)."""
    if not value:
        return DEFAULT_SORT, ""
    if value.removeprefix("-") in SORT_COLUMNS:
        return value, ""
    known = ", ".join(SORT_COLUMNS)
    return DEFAULT_SORT, f"unknown sort {value[:40]!r}; sort by one of {known} (- for descending)"


def sort_rows(rows: list[ToolRow], sort: str) -> list[ToolRow]:
    """Return rows in the sort's order; ties keep their order (by name), unknowns go last."""
    value = SORT_COLUMNS[sort.removeprefix("-")].value
    known = [row for row in rows if value(row) is not None]
    unknown = [row for row in rows if value(row) is None]
    return sorted(known, key=value, reverse=sort.startswith("-")) + unknown


def sort_headers(sort: str, time_range: TimeRange) -> list[dict[str, Any]]:
    """Return each column's header: its link (flips the current sort) and aria-sort."""
    headers = []
    for key, column in SORT_COLUMNS.items():
        current = sort.removeprefix("-") == key
        descending = sort.startswith("-")
        if current:
            target = key if descending else f"-{key}"
        else:
            target = f"-{key}" if column.numeric else key  # big numbers first
        state = ("descending" if descending else "ascending") if current else ""
        headers.append(
            {
                "key": key,
                "label": column.label,
                "numeric": column.numeric,
                "href": f"?{time_range.query()}&sort={target}",
                "aria_sort": state,
            }
        )
    return headers


@staff_member_required
def tools(request: HttpRequest) -> HttpResponse:
    """List every tool with its calls, success rate, latency, tokens, cost and score.

    Calls, success rate and p95 each show their change against the previous period.
    """
    context = fresh_range_context(request.GET, timezone.now())
    time_range: TimeRange = context["time_range"]  # type: ignore[assignment]
    sort, sort_error = read_sort(request.GET.get("sort"))
    ruleset = current_ruleset()
    rows = sort_rows(tool_rows(time_range, get_engine().registry, ruleset), sort)
    changes = tool_changes(time_range, [row.totals for row in rows])
    context.update(
        rows=rows,
        lines=[(row, changes[row.name]) for row in rows],  # each beside its change
        headers=sort_headers(sort, time_range),
        sort=sort,
        sort_error=sort_error,
        evidence_window=ruleset.weights.evidence_window,
        range_note="whole UTC hours",
    )
    return render(request, "planner_app/tools.html", context)


@staff_member_required
def tool_detail(request: HttpRequest, name: str) -> HttpResponse:
    """Show one tool over the range: its evidence score, success, latency and failures."""
    registry = get_engine().registry
    spec = next((s for s in registry.list(enabled_only=False) if s.name == name), None)
    context = fresh_range_context(request.GET, timezone.now())
    time_range: TimeRange = context["time_range"]  # type: ignore[assignment]
    points = tool_series(time_range, [name]).get(name, {})
    if spec is None and not points and not _ever_recorded(name):
        message = f"No tool is named “{name}”: it is not registered and no call to it is recorded."
        return render(request, "planner_app/not_found.html", {"message": message}, status=404)
    ruleset = current_ruleset()
    totals = next(iter(tool_totals(time_range, [name])), ToolTotals(name))
    scores = own_score_series(spec, ruleset, time_range, points) if spec else []
    over_time = [charts.success_chart(time_range, points), charts.latency_chart(time_range, points)]
    over_time = [charts.tool_drilldown(chart, time_range, name) for chart in over_time]
    over_time = marked(over_time, time_range.since, time_range.until)
    context.update(
        tool=name,
        spec=spec,
        totals=totals,
        score=current_score(own_candidate(spec), ruleset) if spec else None,
        evidence_window=ruleset.weights.evidence_window,
        candidacies=capabilities_of(name, ruleset, registry) if spec else [],
        score_chart=_marked(
            charts.tool_drilldown(charts.score_chart(scores), time_range, name), time_range
        )
        if spec
        else None,
        charts=[
            *over_time,
            charts.histogram_chart(totals),
            charts.failures_drilldown(charts.error_kinds_chart(totals), time_range, name),
        ],
        failures=recent_failures(name, time_range, points),
        range_note="whole UTC hours",
    )
    return render(request, "planner_app/tool_detail.html", context)


def _ever_recorded(name: str) -> bool:
    return (
        ToolRollup.objects.filter(tool_name=name).exists()
        or Invocation.objects.for_tool(name).exists()
    )


def recent_failures(
    name: str, time_range: TimeRange, points: dict[datetime, ToolTotals]
) -> list[Invocation]:
    """Return the tool's latest failed calls in the range, newest first.

    The rollups say which buckets hold failures, so the query starts at the oldest
    bucket it needs and never scans a whole range of a tool that seldom fails.
    """
    found, since = 0, None
    for start in sorted(points, reverse=True):
        if points[start].failures:
            found, since = found + points[start].failures, start
            if found >= RECENT_FAILURES:
                break
    if since is None:
        return []
    calls = Invocation.objects.for_tool(name).tools().failed()
    calls = calls.since(max(since, time_range.since)).until(time_range.until)
    return list(calls.order_by("-started_at")[:RECENT_FAILURES])


@staff_member_required
def evidence(request: HttpRequest) -> HttpResponse:
    """List the capabilities with their candidate tools and the scores they have now."""
    registry, ruleset = get_engine().registry, current_ruleset()
    context = {
        "capabilities": capability_overview(ruleset, registry),
        "evidence_window": ruleset.weights.evidence_window,
        "range_query": request.GET.urlencode(),
    }
    return render(request, "planner_app/evidence.html", context)


def _marked(chart: Chart, time_range: TimeRange) -> Chart:
    """Return a chart over time with the range's rule-set versions marked on it."""
    return marked([chart], time_range.since, time_range.until)[0]


@staff_member_required
def evidence_capability(request: HttpRequest, capability: str) -> HttpResponse:
    """Show a capability's candidates' scores per bucket, and where the leader changed."""
    registry, ruleset = get_engine().registry, current_ruleset()
    known = capability_names(ruleset, registry)
    if capability not in known:
        message = (
            f"No capability is named “{capability}”. The planner knows "
            f"{', '.join(known) or 'none yet'}."
        )
        return render(request, "planner_app/not_found.html", {"message": message}, status=404)
    context = fresh_range_context(request.GET, timezone.now())
    time_range: TimeRange = context["time_range"]  # type: ignore[assignment]
    found = capability_evidence(capability, ruleset, registry, time_range)
    info = ruleset.capabilities.get(capability)
    context.update(
        evidence=found,
        description=info.description if info else "",
        chart=_marked(charts.leader_chart(found, time_range), time_range)
        if found.candidates
        else None,
        ruleset_version=ruleset.version,
        evidence_window=ruleset.weights.evidence_window,
        range_note="whole UTC hours",
    )
    return render(request, "planner_app/evidence_capability.html", context)
