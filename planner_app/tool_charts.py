"""The charts of the tools and evidence pages, each with the numbers it shows.

Core: it reads the plain records the pages load (evidence, range totals) and builds
charts; the record types are imported for the type checker only, so no Django here.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING
from urllib.parse import urlencode

import plotly.graph_objects as go

from traces_app.charts import (
    TRACES_PAGE,
    Chart,
    bucket_drilldown,
    category_drilldown,
    latency_bin_label,
    make_chart,
)
from traces_app.rollups.histogram import bin_bounds

if TYPE_CHECKING:
    from planner_app.evidence import BucketScore, CapabilityEvidence
    from traces_app.rollups.range_totals import ToolTotals
    from traces_app.rollups.ranges import TimeRange


def _tool_filters(tool: str) -> dict[str, str]:
    return {"tool": tool, "match": "exact"}


def tool_drilldown(chart: Chart, time_range: TimeRange, tool: str) -> Chart:
    """Return a tool's chart over time with each point opening that bucket's traces of it."""
    return bucket_drilldown(chart, time_range.bucket, _tool_filters(tool))


def failures_drilldown(chart: Chart, time_range: TimeRange, tool: str) -> Chart:
    """Return the error-kinds chart with each bar opening the range's failed traces of the tool."""
    query = urlencode({**_tool_filters(tool), "status": "error"})
    url = f"{TRACES_PAGE}?{time_range.query()}&{query}"
    kinds = [x for trace in chart.figure.get("data", []) for x in trace.get("x") or []]
    return category_drilldown(chart, {str(kind): url for kind in kinds})


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
            p.source,
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
        "Evidence from",
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
    """Return the chart of a tool's success rate per bucket (gaps where it had no calls).

    The rate is the evidence's: calls that failed by the caller's fault are left out.
    """
    x = time_range.bucket_starts()
    rates = [points[s].success_rate if s in points else None for s in x]
    rows = [
        [_when(s), points[s].calls, points[s].successes, points[s].failures, _rate(rate),
         points[s].caller_faults]
        for s, rate in zip(x, rates, strict=True)
        if s in points
    ]  # fmt: skip
    trace = go.Scatter(x=x, y=rates, name="Success rate", mode="lines+markers")
    return make_chart(
        "success-rate",
        "Success rate (caller faults left out)",
        [trace],
        ["Bucket (UTC)", "Calls", "Successes", "Failures", "Success rate", "Caller faults"],
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
    """Return the latency histogram of the range: the rollups' bins that hold calls.

    Bars are labelled as people read latencies ("25 s – 32 s"); the table keeps each bin's
    exact bounds in ms beside its label, for the CSV.
    """
    used = [index for index, count in enumerate(totals.latency_histogram) if count]
    bins = range(used[0], used[-1] + 1) if used else range(0)
    rows = []
    for index in bins:
        low, high = bin_bounds(index)
        rows.append(
            [
                latency_bin_label(low, high),
                f"{low:g}",
                f"{high:g}" if high > low else "and over",
                totals.latency_histogram[index],
            ]
        )
    trace = go.Bar(x=[row[0] for row in rows], y=[row[3] for row in rows], name="Calls")
    return make_chart(
        "latency-histogram",
        "Latency histogram",
        [trace],
        ["Latency", "From ms", "To ms", "Calls"],
        rows,
        hovermode="closest",
        xaxis={"type": "category", "title": {"text": "Latency"}},
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
            point.source,
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
        "Evidence from",
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
