"""The observatory's planner pages: the tools table, a tool's detail, and evidence scores.

They read hourly rollups for anything over a time range (traces_app.dashboards), and
score tools with the planner's own scorer (planner_app.evidence).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import plotly.graph_objects as go
from django.contrib.admin.views.decorators import staff_member_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from planner_app.evidence import (
    BucketScore,
    CapabilityEvidence,
    ToolRow,
    capabilities_of,
    capability_evidence,
    capability_names,
    capability_overview,
    current_score,
    own_candidate,
    score_series,
    tool_rows,
)
from planner_app.rulesets import current_ruleset
from tools_app.runtime import get_engine
from traces_app.charts import Chart, make_chart
from traces_app.dashboards import ToolTotals, tool_series, tool_totals
from traces_app.models import Invocation, ToolRollup
from traces_app.ranges import TimeRange, range_context
from traces_app.rollups import bin_bounds

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
    """List every tool with its calls, success rate, latency, tokens, cost and score."""
    context = range_context(request.GET, timezone.now())
    time_range: TimeRange = context["time_range"]  # type: ignore[assignment]
    sort, sort_error = read_sort(request.GET.get("sort"))
    ruleset = current_ruleset()
    rows = tool_rows(time_range, get_engine().registry, ruleset)
    context.update(
        rows=sort_rows(rows, sort),
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
    context = range_context(request.GET, timezone.now())
    time_range: TimeRange = context["time_range"]  # type: ignore[assignment]
    points = tool_series(time_range, [name]).get(name, {})
    if spec is None and not points and not _ever_recorded(name):
        message = f"No tool is named “{name}”: it is not registered and no call to it is recorded."
        return render(request, "planner_app/not_found.html", {"message": message}, status=404)
    ruleset = current_ruleset()
    totals = next(iter(tool_totals(time_range, [name])), ToolTotals(name))
    scores = score_series(own_candidate(spec), ruleset, time_range, points) if spec else []
    context.update(
        tool=name,
        spec=spec,
        totals=totals,
        score=current_score(own_candidate(spec), ruleset) if spec else None,
        evidence_window=ruleset.weights.evidence_window,
        candidacies=capabilities_of(name, ruleset, registry) if spec else [],
        score_chart=score_chart(scores) if spec else None,
        charts=[
            success_chart(time_range, points),
            latency_chart(time_range, points),
            histogram_chart(totals),
            error_kinds_chart(totals),
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


def _when(moment: datetime) -> str:
    return f"{moment:%Y-%m-%d %H:%M}"


def _rate(value: float | None) -> str:
    return "" if value is None else f"{value:.1%}"


def score_chart(scores: list[BucketScore]) -> Chart:
    """Return the chart of a tool's score parts and final score per bucket."""
    x = [point.bucket_start for point in scores]
    parts = [("Base", "base", 1), ("Evidence", "evidence", 1), ("− Penalty", "penalty", -1)]
    traces = [
        go.Scatter(
            x=x,
            y=[sign * getattr(p.score, part) for p in scores],
            name=label,
            mode="lines",
            line={"dash": "dot"},
        )
        for label, part, sign in parts
    ]
    traces.append(
        go.Scatter(
            x=x,
            y=[p.score.final for p in scores],
            name="Final",
            mode="lines+markers",
            line={"width": 3},
        )
    )
    rows = [
        [
            _when(p.bucket_start),
            p.calls,
            _rate(p.score.success_rate),
            round(p.score.latency_ms, 1),
            p.score.base,
            p.score.evidence,
            p.score.penalty,
            p.score.final,
        ]
        for p in scores
    ]
    columns = [
        "Bucket (UTC)",
        "Calls",
        "Success rate used",
        "Latency used (ms)",
        "Base",
        "Evidence",
        "Penalty",
        "Final",
    ]
    return make_chart(
        "evidence-score",
        "Evidence score per bucket",
        traces,
        columns,
        rows,
        yaxis={"title": {"text": "score"}},
    )


def success_chart(time_range: TimeRange, points: dict[datetime, ToolTotals]) -> Chart:
    """Return the chart of a tool's success rate per bucket (gaps where it had no calls)."""
    x = time_range.bucket_starts()
    rates = [points[s].success_rate if s in points else None for s in x]
    rows = [
        [_when(s), points[s].calls, points[s].successes, points[s].failures, _rate(rate)]
        for s, rate in zip(x, rates, strict=True)
        if s in points
    ]
    trace = go.Scatter(x=x, y=rates, name="Success rate", mode="lines+markers")
    return make_chart(
        "success-rate",
        "Success rate",
        [trace],
        ["Bucket (UTC)", "Calls", "Successes", "Failures", "Success rate"],
        rows,
        yaxis={"tickformat": ".0%", "rangemode": "tozero"},
    )


def latency_chart(time_range: TimeRange, points: dict[datetime, ToolTotals]) -> Chart:
    """Return the chart of a tool's p50 and p95 latency per bucket, from the histograms."""
    x = time_range.bucket_starts()
    p50 = [round(points[s].p50_ms, 1) if s in points else None for s in x]
    p95 = [round(points[s].p95_ms, 1) if s in points else None for s in x]
    rows = [
        [_when(s), points[s].calls, low, high, round(points[s].mean_latency_ms, 1)]
        for s, low, high in zip(x, p50, p95, strict=True)
        if s in points
    ]
    traces = [
        go.Scatter(x=x, y=p50, name="p50", mode="lines+markers"),
        go.Scatter(x=x, y=p95, name="p95", mode="lines+markers"),
    ]
    return make_chart(
        "latency",
        "Latency (ms)",
        traces,
        ["Bucket (UTC)", "Calls", "p50 ms", "p95 ms", "Mean ms"],
        rows,
        yaxis={"title": {"text": "ms"}, "rangemode": "tozero"},
    )


def histogram_chart(totals: ToolTotals) -> Chart:
    """Return the latency histogram of the range: the rollups' bins that hold calls."""
    used = [index for index, count in enumerate(totals.latency_histogram) if count]
    bins = range(used[0], used[-1] + 1) if used else range(0)
    rows = []
    for index in bins:
        low, high = bin_bounds(index)
        rows.append(
            [f"{low:g}", f"{high:g}" if high > low else "and over", totals.latency_histogram[index]]
        )
    trace = go.Bar(
        x=[f"{low}–{high}" for low, high, _ in rows], y=[row[2] for row in rows], name="Calls"
    )
    return make_chart(
        "latency-histogram",
        "Latency histogram (ms)",
        [trace],
        ["From ms", "To ms", "Calls"],
        rows,
        hovermode="closest",
        xaxis={"type": "category", "title": {"text": "ms"}},
    )


def error_kinds_chart(totals: ToolTotals) -> Chart:
    """Return the chart of the range's failures by error kind, most frequent first."""
    kinds = sorted(totals.failures_by_kind.items(), key=lambda item: (-item[1], item[0]))
    trace = go.Bar(x=[kind for kind, _ in kinds], y=[count for _, count in kinds], name="Failures")
    return make_chart(
        "error-kinds",
        "Failures by error kind",
        [trace],
        ["Error kind", "Failures"],
        [list(item) for item in kinds],
        hovermode="closest",
        xaxis={"type": "category"},
    )


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
    context = range_context(request.GET, timezone.now())
    time_range: TimeRange = context["time_range"]  # type: ignore[assignment]
    found = capability_evidence(capability, ruleset, registry, time_range)
    info = ruleset.capabilities.get(capability)
    context.update(
        evidence=found,
        description=info.description if info else "",
        chart=leader_chart(found, time_range) if found.candidates else None,
        ruleset_version=ruleset.version,
        evidence_window=ruleset.weights.evidence_window,
        range_note="whole UTC hours",
    )
    return render(request, "planner_app/evidence_capability.html", context)


def leader_chart(found: CapabilityEvidence, time_range: TimeRange) -> Chart:
    """Return one line per candidate's final score, with the buckets where the leader changed."""
    x = time_range.bucket_starts()
    traces = [
        go.Scatter(x=x, y=[p.score.final for p in points], name=tool, mode="lines+markers")
        for tool, points in found.series.items()
    ]
    if found.flips:
        traces.append(
            go.Scatter(
                x=[flip.bucket_start for flip in found.flips],
                y=[flip.final for flip in found.flips],
                name="Leader changes",
                mode="markers",
                marker={"symbol": "star", "size": 14, "color": "#b42318"},
                text=[f"{flip.before} → {flip.after}" for flip in found.flips],
            )
        )
    rows = [
        [
            _when(point.bucket_start),
            tool,
            point.calls,
            _rate(point.score.success_rate),
            round(point.score.latency_ms, 1),
            point.score.base,
            point.score.evidence,
            point.score.penalty,
            point.score.mapping_weight,
            point.score.final,
            "leader" if found.leaders[index] == tool else "",
        ]
        for index in range(len(x))
        for tool, points in found.series.items()
        for point in [points[index]]
    ]
    columns = [
        "Bucket (UTC)",
        "Tool",
        "Calls",
        "Success rate used",
        "Latency used (ms)",
        "Base",
        "Evidence",
        "Penalty",
        "Mapping weight",
        "Final",
        "Leader",
    ]
    return make_chart(
        "capability-scores",
        f"Final score per bucket: {found.capability}",
        traces,
        columns,
        rows,
        yaxis={"title": {"text": "final score"}},
    )
