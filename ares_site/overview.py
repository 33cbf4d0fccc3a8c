"""The overview page's numbers and charts, all read from the hourly rollups of a range."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

import plotly.graph_objects as go

from planner_app.version_effects import marked
from traces_app.charts import (
    TRACES_PAGE,
    Chart,
    bucket_drilldown,
    category_drilldown,
    make_chart,
)
from traces_app.models import ChosenBy, FailureSpiral, SpiralResolution
from traces_app.rollups.histogram import merge, percentile_from_histogram
from traces_app.rollups.range_totals import (
    ActivitySummary,
    Change,
    SpanTotals,
    ToolTotals,
    activity,
    rate_change,
    relative_change,
    tool_totals,
)
from traces_app.rollups.ranges import TimeRange

TOP_FAILING_TOOLS = 10
ACTIVE_SPIRALS_SHOWN = 20
AGENTS_SHOWN = 20


@dataclass
class FailingTool:
    """A tool that failed in the range, with its failure rate now and in the previous period."""

    tool: ToolTotals
    rate: float
    previous_rate: float | None
    change: Change

    @property
    def rate_text(self) -> str:
        return f"{self.rate:.1%}"


@dataclass
class Overview:
    """What the overview shows for one range, and the same numbers for the previous period."""

    totals: SpanTotals
    tool_failures: int
    tool_p95_ms: float
    failing_tools: list[FailingTool]
    charts: list[Chart]
    # The busiest agents ("(none)": spans without one), with their caller faults.
    agents: list[tuple[str, SpanTotals]] = field(default_factory=list)
    previous: SpanTotals = field(default_factory=SpanTotals)
    previous_tool_failures: int = 0
    previous_tool_p95_ms: float = 0.0
    tool_stopped: int = 0  # tool calls stopped by their caller: in no error rate

    @property
    def error_rate(self) -> str:
        return _error_rate(self.totals)

    @property
    def tool_error_rate(self) -> str:
        return _rate(self.tool_failures, self.totals.tool_calls - self.tool_stopped)

    @property
    def changes(self) -> dict[str, Change]:
        """Return each card's change against the previous period of the same length."""
        now, before = self.totals, self.previous
        return {
            "calls": relative_change(now.calls, before.calls),
            "error_rate": rate_change(
                _share(now.failures, now.calls_not_stopped),
                _share(before.failures, before.calls_not_stopped),
            ),
            "tool_p95": relative_change(
                round(self.tool_p95_ms, 1) if now.tool_calls else 0,
                round(self.previous_tool_p95_ms, 1) if before.tool_calls else 0,
                worse_when_up=True,
            ),
            "tokens": relative_change(now.tokens, before.tokens),
            "cost": relative_change(round(now.cost_usd, 2), round(before.cost_usd, 2), True),
        }


FAILING_ORDERS = {"count": "most failures", "rate": "highest failure rate"}


def overview_of(time_range: TimeRange, failing_order: str = "count") -> Overview:
    """Return the overview of a range (and its previous period): totals, latency, failing tools."""
    summary = activity(time_range)
    tools = tool_totals(time_range)
    previous_range = time_range.previous()
    previous = activity(previous_range)
    previous_tools = {tool.tool_name: tool for tool in tool_totals(previous_range)}
    return Overview(
        totals=summary.totals,
        tool_failures=sum(tool.failures for tool in tools),
        tool_p95_ms=_p95(tools),
        failing_tools=failing_tools(tools, previous_tools, failing_order)[:TOP_FAILING_TOOLS],
        charts=charts(time_range, summary),
        agents=sorted(summary.by_agent.items(), key=lambda item: (-item[1].calls, item[0]))[
            :AGENTS_SHOWN
        ],
        previous=previous.totals,
        previous_tool_failures=sum(tool.failures for tool in previous_tools.values()),
        previous_tool_p95_ms=_p95(previous_tools.values()),
        tool_stopped=sum(tool.stopped for tool in tools),
    )


def failing_tools(
    tools: list[ToolTotals], previous: dict[str, ToolTotals], order: str = "count"
) -> list[FailingTool]:
    """Return the tools that failed, by failures or by failure rate, most first.

    The rate is failures over all calls, caller faults included, as the failures are;
    calls stopped by their caller are neither.
    """
    found = []
    for tool in tools:
        if not tool.failures:
            continue
        before = previous.get(tool.tool_name)
        before_rate = _share(before.failures, before.calls_not_stopped) if before else None
        rate = tool.failures / tool.calls_not_stopped
        found.append(FailingTool(tool, rate, before_rate, rate_change(rate, before_rate)))
    if order == "rate":
        found.sort(key=lambda item: (-item.rate, -item.tool.failures, item.tool.tool_name))
    else:
        found.sort(key=lambda item: (-item.tool.failures, -item.rate, item.tool.tool_name))
    return found


def _p95(tools: Iterable[ToolTotals]) -> float:
    return percentile_from_histogram(merge(*(tool.latency_histogram for tool in tools)), 0.95)


def _share(part: int, whole: int) -> float | None:
    return part / whole if whole else None


UNRESOLVED = (SpiralResolution.ONGOING, SpiralResolution.GAVE_UP)


def active_spirals(time_range: TimeRange) -> list[FailureSpiral]:
    """Return the spirals nothing resolved that overlap a range, newest first (a bounded read).

    Both kinds: loops still going (the last call succeeded, identical calls repeat) and
    failing spirals the agent gave up on (the last call failed); not the ones that
    recovered or that the planner's fallback ended.
    """
    spirals = FailureSpiral.objects.filter(
        resolution__in=UNRESOLVED,
        started_at__lt=time_range.until,
        ended_at__gte=time_range.since,
    )
    return list(spirals.order_by("-started_at", "-pk")[:ACTIVE_SPIRALS_SHOWN])


def charts(time_range: TimeRange, summary: ActivitySummary) -> list[Chart]:
    """Return the overview's charts: activity over time (rule-set versions marked), then tool
    calls by chooser and place."""
    buckets = [
        (start, summary.by_bucket.get(start, SpanTotals())) for start in time_range.bucket_starts()
    ]
    choosers = dict(ChosenBy.choices)
    by_chooser = {
        choosers.get(key, key or "unknown"): calls
        for key, calls in summary.tool_calls_by_chosen_by.items()
    }
    return [
        *marked(
            [
                bucket_drilldown(
                    calls_chart(buckets),
                    time_range.bucket,
                    by_series={"Failures": {"status": "error"}},
                ),
                bucket_drilldown(tokens_chart(buckets), time_range.bucket),
            ],
            time_range.since,
            time_range.until,
        ),
        category_drilldown(
            share_chart("by-chooser", "Tool calls by who chose the tool", "Chosen by", by_chooser),
            {
                choosers[key]: f"{TRACES_PAGE}?{time_range.query()}&chosen_by={key}"
                for key in summary.tool_calls_by_chosen_by
                if key in choosers
            },
        ),
        share_chart(
            "by-place", "Tool calls by where they ran", "Ran on", summary.tool_calls_by_ran_on
        ),
    ]


def calls_chart(buckets: list[tuple[datetime, SpanTotals]]) -> Chart:
    """Return calls and failures (all span kinds) per chart bucket."""
    x = [start for start, _ in buckets]
    rows = [
        [_when(start), t.calls, t.tool_calls, t.llm_calls, t.failures, _error_rate(t)]
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


def _error_rate(totals: SpanTotals) -> str:
    """Return the share of spans that failed, of those not stopped by their caller."""
    return _rate(totals.failures, totals.calls_not_stopped)


def _rate(part: int, whole: int) -> str:
    return f"{part / whole:.1%}" if whole else "–"
