"""What the trace and spiral pages show, read from the raw spans of one trace (or one page).

Everything here is bounded by one trace (at most MAX_SPANS spans) or one page of traces,
so its cost does not grow with the number of spans stored.
"""

from __future__ import annotations

import html
import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import plotly.graph_objects as go

from traces_app.charts import Chart, make_chart
from traces_app.models import (
    ChosenBy,
    FailureSpiral,
    Invocation,
    SpanKind,
    SpanStatus,
    SpiralResolution,
    Trace,
)

# A trace's spans shown on its page; an agent session reusing one trace id can hold more.
MAX_SPANS = 500
TOOLS_PER_ROW = 6

# Waterfall bar colours and legend names, per (kind, status).
CATEGORIES: dict[tuple[str, str], tuple[str, str]] = {
    (SpanKind.LLM, SpanStatus.OK): ("LLM call", "#7a5af8"),
    (SpanKind.LLM, SpanStatus.ERROR): ("LLM call, failed", "#c11574"),
    (SpanKind.TOOL, SpanStatus.OK): ("Tool call", "#2f5fd0"),
    (SpanKind.TOOL, SpanStatus.ERROR): ("Tool call, failed", "#b42318"),
    (SpanKind.AGENT, SpanStatus.OK): ("Agent step", "#8a94a6"),
    (SpanKind.AGENT, SpanStatus.ERROR): ("Agent step, failed", "#dc6803"),
    (SpanKind.OTHER, SpanStatus.OK): ("Other", "#8a94a6"),
    (SpanKind.OTHER, SpanStatus.ERROR): ("Other, failed", "#dc6803"),
}
ERROR_COLOURS = ["#b42318", "#dc6803", "#c11574", "#6941c6", "#0e9384", "#4e5ba6"]


def as_json(value: Any) -> str:
    """Return a payload as indented JSON text, for a <pre> block (escaped by the template)."""
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)


def plotly_text(text: str, limit: int = 60) -> str:
    """Return text made safe for plotly's labels, which read a little HTML.

    Plotly turns entities back into characters, so an escaped `<b>` shows as `<b>`.
    """
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return html.escape(text)


def naive_utc(moment: datetime) -> str:
    """Return a moment as plotly's date axes read it: UTC without a zone suffix."""
    return moment.astimezone(UTC).replace(tzinfo=None).isoformat(sep=" ")


def span_name(span: Invocation) -> str:
    return span.tool_name or span.model or span.get_kind_display()


def span_tokens(span: Invocation) -> int:
    return span.input_tokens + span.output_tokens + span.result_tokens


# The traces list -------------------------------------------------------------------------


@dataclass
class TraceRow:
    trace: Trace
    tools: list[str]

    @property
    def shown_tools(self) -> list[str]:
        return self.tools[:TOOLS_PER_ROW]

    @property
    def more_tools(self) -> int:
        return max(len(self.tools) - TOOLS_PER_ROW, 0)


def trace_rows(traces: Sequence[Trace]) -> list[TraceRow]:
    """Return a page's traces with the tools each called, read in one query for the page."""
    used: dict[str, list[str]] = defaultdict(list)
    pairs = (
        Invocation.objects.filter(trace_id__in=[trace.pk for trace in traces], kind=SpanKind.TOOL)
        .order_by()
        .values_list("trace_id", "tool_name")
        .distinct()
    )
    for trace_id, tool_name in pairs:
        used[trace_id].append(tool_name)
    return [TraceRow(trace, sorted(used[trace.pk])) for trace in traces]


# One trace --------------------------------------------------------------------------------


@dataclass
class SpanRow:
    number: int
    span: Invocation
    offset_ms: float
    spirals: list[FailureSpiral] = field(default_factory=list)
    is_fallback: bool = False

    @property
    def name(self) -> str:
        return span_name(self.span)

    @property
    def tokens(self) -> int:
        return span_tokens(self.span)

    @property
    def category(self) -> tuple[str, str]:
        return (self.span.kind, self.span.status)

    @property
    def label(self) -> str:
        """Return the span's waterfall row label: unique, since it starts with its number."""
        return f"{self.number}. {plotly_text(self.name, 40)}"

    @property
    def arguments_json(self) -> str:
        return as_json(self.span.arguments)

    @property
    def result_json(self) -> str:
        return as_json(self.span.result)

    @property
    def coercions_json(self) -> str:
        return as_json(self.span.coercions)


def trace_spans(trace: Trace) -> tuple[list[Invocation], bool]:
    """Return a trace's first MAX_SPANS spans in time order, and whether it holds more."""
    spans = list(trace.invocations.order_by("started_at", "span_id")[: MAX_SPANS + 1])
    return spans[:MAX_SPANS], len(spans) > MAX_SPANS


def span_rows(spans: Sequence[Invocation], spirals: Sequence[FailureSpiral]) -> list[SpanRow]:
    """Return the spans with their number, offset, spirals and planner-fallback mark.

    A fallback is a call the planner chose after an earlier call chosen some other way
    (by the LLM, a workflow, an outside agent) failed, or after an LLM call failed.
    """
    start = spans[0].started_at if spans else None
    members = spiral_members(spans, spirals)
    rows, failed_before = [], False
    for number, span in enumerate(spans, start=1):
        row = SpanRow(
            number=number,
            span=span,
            offset_ms=(span.started_at - start).total_seconds() * 1000,
            spirals=members.get(span.span_id, []),
            is_fallback=span.chosen_by == ChosenBy.PLANNER and failed_before,
        )
        rows.append(row)
        if span.status == SpanStatus.ERROR and span.chosen_by != ChosenBy.PLANNER:
            failed_before = True
    return rows


def spiral_members(
    spans: Sequence[Invocation], spirals: Sequence[FailureSpiral]
) -> dict[str, list[FailureSpiral]]:
    """Return, per span id, the spirals the span is an attempt of.

    A spiral's attempts are its tool's calls from its first span to its last; calls of
    other tools in between are not part of it.
    """
    position = {span.span_id: index for index, span in enumerate(spans)}
    members: dict[str, list[FailureSpiral]] = defaultdict(list)
    for spiral in spirals:
        first = position.get(spiral.first_span_id)
        last = position.get(spiral.last_span_id)
        if first is None or last is None:
            continue  # beyond the spans shown, or purged by retention
        for span in spans[first : last + 1]:
            if span.kind == SpanKind.TOOL and span.tool_name == spiral.tool_name:
                members[span.span_id].append(spiral)
    return members


def waterfall_chart(trace: Trace, rows: Sequence[SpanRow]) -> Chart:
    """Return the trace's spans as bars on a time axis, one colour per kind and status."""
    total_ms = max((row.offset_ms + row.span.latency_ms for row in rows), default=0.0)
    # A bar too thin to see (or hover) gets a sliver of width; hover and table say the truth.
    sliver_ms = max(total_ms / 400, 0.001)
    groups: dict[tuple[str, str], list[SpanRow]] = defaultdict(list)
    for row in rows:
        groups[row.category].append(row)
    bars = []
    for category, members in groups.items():
        name, colour = CATEGORIES.get(category, (f"{category[0]}, {category[1]}", "#8a94a6"))
        bars.append(
            go.Bar(
                name=name,
                orientation="h",
                y=[row.label for row in members],
                base=[naive_utc(row.span.started_at) for row in members],
                x=[max(row.span.latency_ms, sliver_ms) for row in members],
                marker_color=colour,
                customdata=[
                    [
                        plotly_text(row.name),
                        row.span.status,
                        row.span.latency_ms,
                        row.tokens,
                        plotly_text(row.span.error_kind or "-"),
                    ]
                    for row in members
                ],
                hovertemplate=(
                    "<b>%{customdata[0]}</b><br>status %{customdata[1]} (%{customdata[4]})<br>"
                    "%{customdata[2]:.1f} ms, %{customdata[3]} tokens<extra></extra>"
                ),
            )
        )
    labels = [row.label for row in rows]
    return make_chart(
        "waterfall",
        f"Waterfall: {len(rows)} span{'s' if len(rows) != 1 else ''} over {total_ms:,.1f} ms",
        bars,
        ["#", "Kind", "Name", "Status", "Starts at (ms)", "Latency (ms)", "Tokens", "Chosen by"],
        [
            [
                row.number,
                row.span.kind,
                row.name,
                row.span.status,
                round(row.offset_ms, 1),
                round(row.span.latency_ms, 1),
                row.tokens,
                row.span.chosen_by or "-",
            ]
            for row in rows
        ],
        height=min(140 + 26 * len(rows), 2400),
        hovermode="closest",
        barmode="overlay",
        xaxis={"type": "date", "title": {"text": "Time (UTC)"}},
        yaxis={
            "type": "category",
            "categoryorder": "array",
            "categoryarray": labels,
            "autorange": "reversed",
            "automargin": True,
        },
        legend={"orientation": "h", "y": 1.02, "yanchor": "bottom"},
        margin={"l": 60, "r": 20, "t": 40, "b": 50},
    )


# One spiral -------------------------------------------------------------------------------


def spiral_attempts(spiral: FailureSpiral) -> list[Invocation]:
    """Return the spiral's attempts in order: its tool's calls from its first to its last span.

    Empty when retention has purged the raw spans; the spiral record keeps its totals.
    """
    spans = spiral.trace.invocations
    ends = {
        span.span_id: span
        for span in spans.filter(span_id__in=[spiral.first_span_id, spiral.last_span_id])
    }
    first, last = ends.get(spiral.first_span_id), ends.get(spiral.last_span_id)
    if first is None or last is None:
        return []
    calls = list(
        spans.filter(
            kind=SpanKind.TOOL,
            tool_name=spiral.tool_name,
            started_at__gte=first.started_at,
            started_at__lte=last.started_at,
        ).order_by("started_at", "span_id")
    )
    ids = [call.span_id for call in calls]
    return calls[ids.index(first.span_id) : ids.index(last.span_id) + 1]


def attempts_chart(spiral: FailureSpiral, attempts: Sequence[Invocation]) -> Chart:
    """Return each attempt's latency as a bar, coloured by its error kind."""
    groups: dict[str, list[tuple[int, Invocation]]] = defaultdict(list)
    for number, span in enumerate(attempts, start=1):
        outcome = span.error_kind or ("failed" if span.status == SpanStatus.ERROR else "ok")
        groups[outcome].append((number, span))
    bars = []
    for index, (outcome, members) in enumerate(sorted(groups.items())):
        colour = "#1a7f37" if outcome == "ok" else ERROR_COLOURS[index % len(ERROR_COLOURS)]
        bars.append(
            go.Bar(
                name=plotly_text(outcome),
                x=[number for number, _ in members],
                y=[span.latency_ms for _, span in members],
                marker_color=colour,
                customdata=[
                    [plotly_text(outcome), span.status, span_tokens(span)] for _, span in members
                ],
                hovertemplate=(
                    "attempt %{x}: %{customdata[0]} (%{customdata[1]})<br>"
                    "%{y:.1f} ms, %{customdata[2]} tokens<extra></extra>"
                ),
            )
        )
    return make_chart(
        "attempts",
        f"Attempts of {spiral.tool_name}: latency and error kind",
        bars,
        ["Attempt", "Span", "Started (UTC)", "Status", "Error kind", "Latency (ms)", "Tokens"],
        [
            [
                number,
                span.span_id,
                f"{span.started_at.astimezone(UTC):%Y-%m-%d %H:%M:%S.%f}"[:-3],
                span.status,
                span.error_kind or "-",
                round(span.latency_ms, 1),
                span_tokens(span),
            ]
            for number, span in enumerate(attempts, start=1)
        ],
        hovermode="closest",
        barmode="overlay",
        showlegend=True,  # names the error kind even when all attempts share one
        xaxis={"title": {"text": "Attempt"}, "dtick": 1},
        yaxis={"title": {"text": "Latency (ms)"}},
    )


@dataclass(frozen=True)
class ArgumentChange:
    step: str
    keys: list[str]
    before: str
    after: str

    @property
    def names_differ(self) -> bool:
        return self.keys == ["*"]


def argument_changes(spiral: FailureSpiral, attempts: Sequence[Invocation]) -> list[ArgumentChange]:
    """Return, per step between attempts, the argument keys that changed and their values.

    The keys come from the spiral record (["*"] when the key sets differ, [""] for a
    change of non-object arguments); the values from the raw spans, when still stored.
    """
    changes = []
    for index, keys in enumerate(spiral.argument_changes or []):
        before = after = ""
        if index + 1 < len(attempts):
            old, new = attempts[index].arguments, attempts[index + 1].arguments
            if keys and all(key not in ("*", "") for key in keys) and _both_objects(old, new):
                old = {key: old.get(key) for key in keys}
                new = {key: new.get(key) for key in keys}
            if keys:
                before, after = as_json(old), as_json(new)
        changes.append(ArgumentChange(f"{index + 1} → {index + 2}", list(keys), before, after))
    return changes


def _both_objects(old: Any, new: Any) -> bool:
    return isinstance(old, dict) and isinstance(new, dict)


def spiral_ending(spiral: FailureSpiral, attempts: Sequence[Invocation]) -> Invocation | None:
    """Return the call that ended the spiral (the planner's fallback or a success), if any.

    The same rule as traces_app.spirals.resolution: the first later call the planner
    chose, or the first later success of the same tool.
    """
    resolved = (SpiralResolution.PLANNER_FALLBACK, SpiralResolution.RECOVERED)
    if not attempts or spiral.resolution not in resolved:
        return None
    last = attempts[-1]
    later = spiral.trace.invocations.filter(
        kind=SpanKind.TOOL, started_at__gte=last.started_at
    ).order_by("started_at", "span_id")[:MAX_SPANS]
    after_last = False
    for span in later:
        if not after_last:
            after_last = span.span_id == last.span_id
            continue
        if span.chosen_by == ChosenBy.PLANNER:
            return span
        if span.tool_name == spiral.tool_name and span.status == SpanStatus.OK:
            return span
    return None
