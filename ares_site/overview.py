"""The overview page's numbers and charts, all read from the hourly rollups of a range."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

import plotly.graph_objects as go

from traces_app.charts import Chart, make_chart
from traces_app.dashboards import ActivitySummary, SpanTotals, ToolTotals, activity, tool_totals
from traces_app.models import ChosenBy, FailureSpiral, SpiralResolution
from traces_app.ranges import TimeRange
from traces_app.rollups import merge, percentile_from_histogram

TOP_FAILING_TOOLS = 10
ACTIVE_SPIRALS_SHOWN = 20
AGENTS_SHOWN = 20


@dataclass
class Overview:
    """What the overview shows for one range."""

    totals: SpanTotals
    tool_failures: int
    tool_p95_ms: float
    failing_tools: list[tuple[ToolTotals, str]]  # with each one's failure rate, as text
    charts: list[Chart]
    # The busiest agents ("(none)": spans without one), with their caller faults.
    agents: list[tuple[str, SpanTotals]] = field(default_factory=list)

    @property
    def error_rate(self) -> str:
        return _rate(self.totals.failures, self.totals.calls)

    @property
    def tool_error_rate(self) -> str:
        return _rate(self.tool_failures, self.totals.tool_calls)


def overview_of(time_range: TimeRange) -> Overview:
    """Return the overview of a range: span totals, tool latency, failing tools, charts."""
    summary = activity(time_range)
    tools = tool_totals(time_range)
    latency = merge(*(tool.latency_histogram for tool in tools))
    failing = sorted(
        (tool for tool in tools if tool.failures), key=lambda tool: (-tool.failures, tool.tool_name)
    )
    return Overview(
        totals=summary.totals,
        tool_failures=sum(tool.failures for tool in tools),
        tool_p95_ms=percentile_from_histogram(latency, 0.95),
        failing_tools=[(tool, _rate(tool.failures, tool.calls)) for tool in failing][
            :TOP_FAILING_TOOLS
        ],
        charts=charts(time_range, summary),
        agents=sorted(summary.by_agent.items(), key=lambda item: (-item[1].calls, item[0]))[
            :AGENTS_SHOWN
        ],
    )


def active_spirals(time_range: TimeRange) -> list[FailureSpiral]:
    """Return the ongoing spirals that overlap a range, newest first (a bounded read)."""
    spirals = FailureSpiral.objects.filter(
        resolution=SpiralResolution.ONGOING,
        started_at__lt=time_range.until,
        ended_at__gte=time_range.since,
    )
    return list(spirals.order_by("-started_at")[:ACTIVE_SPIRALS_SHOWN])


def charts(time_range: TimeRange, summary: ActivitySummary) -> list[Chart]:
    """Return the overview's charts: activity over time, then tool calls by chooser and place."""
    buckets = [
        (start, summary.by_bucket.get(start, SpanTotals())) for start in time_range.bucket_starts()
    ]
    choosers = dict(ChosenBy.choices)
    by_chooser = {
        choosers.get(key, key or "unknown"): calls
        for key, calls in summary.tool_calls_by_chosen_by.items()
    }
    return [
        calls_chart(buckets),
        tokens_chart(buckets),
        share_chart("by-chooser", "Tool calls by who chose the tool", "Chosen by", by_chooser),
        share_chart(
            "by-place", "Tool calls by where they ran", "Ran on", summary.tool_calls_by_ran_on
        ),
    ]


def calls_chart(buckets: list[tuple[datetime, SpanTotals]]) -> Chart:
    """Return calls and failures (all span kinds) per chart bucket."""
    x = [start for start, _ in buckets]
    rows = [
        [_when(start), t.calls, t.tool_calls, t.llm_calls, t.failures, _rate(t.failures, t.calls)]
        for start, t in buckets
    ]
    traces = [
        go.Bar(x=x, y=[t.calls for _, t in buckets], name="Calls", marker_color="#2f5fd0"),
        go.Bar(x=x, y=[t.failures for _, t in buckets], name="Failures", marker_color="#b42318"),
    ]
    columns = ["Bucket (UTC)", "Calls", "Tool calls", "LLM calls", "Failures", "Error rate"]
    return make_chart(
        "calls-over-time", "Calls and failures", traces, columns, rows, barmode="overlay"
    )


def tokens_chart(buckets: list[tuple[datetime, SpanTotals]]) -> Chart:
    """Return tokens (bars) and cost (a line on its own axis) per chart bucket."""
    x = [start for start, _ in buckets]
    rows = [
        [_when(start), t.input_tokens, t.output_tokens, round(t.cost_usd, 6)]
        for start, t in buckets
    ]
    traces = [
        go.Bar(x=x, y=[t.tokens for _, t in buckets], name="Tokens (in + out)"),
        go.Scatter(
            x=x, y=[round(t.cost_usd, 6) for _, t in buckets], name="Cost (USD)", yaxis="y2",
            mode="lines+markers",
        ),
    ]  # fmt: skip
    return make_chart(
        "tokens-over-time",
        "Tokens and cost",
        traces,
        ["Bucket (UTC)", "Input tokens", "Output tokens", "Cost (USD)"],
        rows,
        yaxis={"title": {"text": "tokens"}, "rangemode": "tozero"},
        yaxis2={
            "title": {"text": "USD"},
            "overlaying": "y",
            "side": "right",
            "rangemode": "tozero",
        },
    )


def share_chart(chart_id: str, title: str, label: str, counts: dict[str, int]) -> Chart:
    """Return a bar chart of tool calls per category, most first, with each one's share."""
    ordered = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    total = sum(counts.values())
    rows = [[name, calls, _rate(calls, total)] for name, calls in ordered]
    trace = go.Bar(x=[name for name, _ in ordered], y=[calls for _, calls in ordered], name="Calls")
    return make_chart(
        chart_id,
        title,
        [trace],
        [label, "Tool calls", "Share"],
        rows,
        hovermode="closest",
        xaxis={"type": "category"},
    )


def _when(moment: datetime) -> str:
    return f"{moment:%Y-%m-%d %H:%M}"


def _rate(part: int, whole: int) -> str:
    return f"{part / whole:.1%}" if whole else "–"
