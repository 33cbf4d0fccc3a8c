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
    # Grey: a span its caller stopped is neither a success nor a failure.
    (SpanKind.LLM, SpanStatus.STOPPED): ("LLM call, stopped", "#667085"),
    (SpanKind.TOOL, SpanStatus.STOPPED): ("Tool call, stopped", "#667085"),
    (SpanKind.AGENT, SpanStatus.STOPPED): ("Agent step, stopped", "#667085"),
    (SpanKind.OTHER, SpanStatus.STOPPED): ("Other, stopped", "#667085"),
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
        Invocation.objects.of_traces(traces)
        .filter(kind=SpanKind.TOOL)
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
    depth: int = 0  # how deep in the span tree: 0 for a span without a stored parent
    # (spiral, n): this span is the spiral's attempt n, numbered as the spiral page does.
    spiral_attempts: list[tuple[FailureSpiral, int]] = field(default_factory=list)
    children: list[SpanRow] = field(default_factory=list)

    @property
    def llm(self) -> LlmExchange | None:
        """Return what an LLM span recorded of its call, or None for other spans."""
        return llm_exchange(self.span) if self.span.kind == SpanKind.LLM else None

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
    spans = list(
        Invocation.objects.of_trace(trace).order_by("started_at", "span_id")[: MAX_SPANS + 1]
    )
    return spans[:MAX_SPANS], len(spans) > MAX_SPANS


def span_rows(spans: Sequence[Invocation], spirals: Sequence[FailureSpiral]) -> list[SpanRow]:
    """Return the spans in span-tree order, with their number, depth, offset, spirals and marks.

    The tree nests each span under its parent (by parent_span_id); a span whose parent is
    not stored is a root. Siblings keep their time order, and rows are numbered in tree
    order, which is also the waterfall's order. A fallback is a call the planner chose
    after an earlier call chosen some other way (by the LLM, a workflow, an outside
    agent) failed, or after an LLM call failed.
    """
    start = spans[0].started_at if spans else None
    attempts = spiral_attempt_numbers(spans, spirals)
    rows, failed_before = {}, False
    for span in spans:
        rows[span.span_id] = SpanRow(
            number=0,
            span=span,
            offset_ms=(span.started_at - start).total_seconds() * 1000,
            spirals=[spiral for spiral, _ in attempts.get(span.span_id, [])],
            spiral_attempts=attempts.get(span.span_id, []),
            is_fallback=span.chosen_by == ChosenBy.PLANNER and failed_before,
        )
        if span.status == SpanStatus.ERROR and span.chosen_by != ChosenBy.PLANNER:
            failed_before = True
    roots = []
    for span in spans:
        parent = rows.get(span.parent_span_id) if span.parent_span_id != span.span_id else None
        (parent.children if parent is not None else roots).append(rows[span.span_id])
    ordered: list[SpanRow] = []
    _walk(roots, 0, ordered, set())
    for number, row in enumerate(ordered, start=1):
        row.number = number
    return ordered


def _walk(rows: list[SpanRow], depth: int, ordered: list[SpanRow], seen: set[str]) -> None:
    """Append rows and their descendants depth first; a span in a parent loop comes once."""
    for row in rows:
        if row.span.span_id in seen:
            continue
        seen.add(row.span.span_id)
        row.depth = depth
        ordered.append(row)
        _walk(row.children, depth + 1, ordered, seen)


def span_tree(rows: Sequence[SpanRow]) -> list[SpanRow]:
    """Return the roots of the span tree (each row holds its children)."""
    return [row for row in rows if row.depth == 0]


def spiral_attempt_numbers(
    spans: Sequence[Invocation], spirals: Sequence[FailureSpiral]
) -> dict[str, list[tuple[FailureSpiral, int]]]:
    """Return, per span id, the spirals the span is an attempt of, and its attempt number.

    A spiral's attempts are its tool's calls from its first span to its last, numbered
    from 1 in time order as on the spiral page; calls of other tools in between are not
    part of it.
    """
    position = {span.span_id: index for index, span in enumerate(spans)}
    members: dict[str, list[tuple[FailureSpiral, int]]] = defaultdict(list)
    for spiral in spirals:
        first = position.get(spiral.first_span_id)
        last = position.get(spiral.last_span_id)
        if first is None or last is None:
            continue  # beyond the spans shown, or purged by retention
        number = 0
        for span in spans[first : last + 1]:
            if span.kind == SpanKind.TOOL and span.tool_name == spiral.tool_name:
                number += 1
                members[span.span_id].append((spiral, number))
    return members


def waterfall_chart(trace: Trace, rows: Sequence[SpanRow]) -> Chart:
    """Return the trace's spans as bars on a +ms axis, in tree order, coloured by kind and status.

    Each bar carries its span id (customdata[5]) so that a click on it selects the span.
    """
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
                base=[round(row.offset_ms, 3) for row in members],
                x=[max(row.span.latency_ms, sliver_ms) for row in members],
                marker_color=colour,
                customdata=[
                    [
                        plotly_text(row.name),
                        row.span.status,
                        row.span.latency_ms,
                        row.tokens,
                        plotly_text(row.span.error_kind or "-"),
                        row.span.span_id,
                        row.offset_ms,
                    ]
                    for row in members
                ],
                hovertemplate=(
                    "<b>%{customdata[0]}</b><br>status %{customdata[1]} (%{customdata[4]})<br>"
                    "+%{customdata[6]:,.1f} ms, lasted %{customdata[2]:,.1f} ms, "
                    "%{customdata[3]:,} tokens<br>click to show the span<extra></extra>"
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
        xaxis={
            "type": "linear",
            "title": {"text": "ms since the trace started"},
            "tickprefix": "+",
            "ticksuffix": " ms",
            "rangemode": "tozero",
            "tickformat": ",~r",
        },
        yaxis={
            "type": "category",
            "categoryorder": "array",
            "categoryarray": labels,
            "autorange": "reversed",
            "automargin": True,
        },
        legend={"orientation": "h", "y": 1.02, "yanchor": "bottom"},
        margin={"l": 60, "r": 20, "t": 40, "b": 50},
        meta={"selects": "span"},
    )


# What an LLM span recorded ----------------------------------------------------------------


@dataclass(frozen=True)
class LlmMessage:
    role: str
    content: str


@dataclass(frozen=True)
class LlmExchange:
    """What an LLM call was sent and answered, as far as its span recorded it.

    Read from the span's arguments (`messages`, `tools`; `input`/`prompt` as text) and
    result (`content`/`output`/`completion`, `tool_calls`, `finish_reason`). A producer
    that records only counts (our agent loop records how many messages and tools) shows
    the counts; one that records nothing shows nothing here.
    """

    messages: list[LlmMessage]
    message_count: int | None
    tools: list[str]
    tool_count: int | None
    output: str
    tool_calls: list[str]
    finish_reason: str

    @property
    def recorded(self) -> bool:
        return bool(
            self.messages
            or self.message_count
            or self.tools
            or self.tool_count
            or self.output
            or self.tool_calls
        )


def llm_exchange(span: Invocation) -> LlmExchange:
    """Return what an LLM span recorded of its input messages, offered tools and output.

    Reads OpenAI's chat shapes, and OpenTelemetry GenAI's messages made of `parts`
    (text parts, and tool_call parts in an output message list).
    """
    sent = span.arguments if isinstance(span.arguments, dict) else {}
    raw_messages = sent.get("messages")
    if isinstance(raw_messages, list):
        messages = [_message(item) for item in raw_messages]
    else:
        prompt = sent.get("input", sent.get("prompt"))
        messages = [LlmMessage("user", _text(prompt))] if prompt is not None else []
    raw_tools = sent.get("tools")
    if isinstance(span.result, list):  # GenAI output messages
        answer = {
            "content": "\n".join(_message(item).content for item in span.result),
            "tool_calls": [call for item in span.result for call in _tool_call_parts(item)],
            "finish_reason": next(
                (item.get("finish_reason") for item in span.result if isinstance(item, dict)), ""
            ),
        }
    else:
        answer = span.result if isinstance(span.result, dict) else {}
    output = answer.get("content", answer.get("output", answer.get("completion")))
    if output is None and isinstance(span.result, str):
        output = span.result
    return LlmExchange(
        messages=messages,
        message_count=_count(raw_messages),
        tools=[_tool_name(tool) for tool in raw_tools] if isinstance(raw_tools, list) else [],
        tool_count=_count(raw_tools),
        output="" if output is None else _text(output),
        tool_calls=[_tool_call(call) for call in answer.get("tool_calls") or [] if call],
        finish_reason=_text(answer.get("finish_reason") or ""),
    )


def _tool_call_parts(message: Any) -> list[Any]:
    parts = message.get("parts") if isinstance(message, dict) else None
    if not isinstance(parts, list):
        return []
    return [part for part in parts if isinstance(part, dict) and part.get("type") == "tool_call"]


def _count(value: Any) -> int | None:
    """Return a recorded count (an int), or None when the value is a list or absent."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):  # content parts: [{"type": "text", "text": ...}, ...]
        parts = [part.get("text") if isinstance(part, dict) else part for part in value]
        if all(isinstance(part, str) for part in parts):
            return "\n".join(parts)
    return as_json(value)


def _message(item: Any) -> LlmMessage:
    if not isinstance(item, dict):
        return LlmMessage("", _text(item))
    content = item.get("content")
    parts = item.get("parts")
    if content is None and isinstance(parts, list):  # GenAI: [{"type": "text", "content": ...}]
        texts = [
            part.get("content", part.get("text"))
            for part in parts
            if isinstance(part, dict) and part.get("type", "text") == "text"
        ]
        calls = [_tool_call(part) for part in _tool_call_parts(item)]
        content = "\n".join([_text(text) for text in texts if text is not None] + calls)
    if content is None and item.get("tool_calls"):
        content = "calls " + ", ".join(_tool_call(call) for call in item["tool_calls"])
    return LlmMessage(_text(item.get("role", "")), "" if content is None else _text(content))


def _tool_name(tool: Any) -> str:
    """Return the name of an offered tool: OpenAI's {"function": {"name"}}, or {"name"}."""
    if isinstance(tool, dict):
        function = tool.get("function")
        name = function.get("name") if isinstance(function, dict) else tool.get("name")
        return _text(name) if name is not None else as_json(tool)
    return _text(tool)


def _tool_call(call: Any) -> str:
    """Return a tool call as `name(arguments)`, from OpenAI's or a flat shape."""
    if not isinstance(call, dict):
        return _text(call)
    function = call.get("function") if isinstance(call.get("function"), dict) else call
    name = _text(function.get("name", "?"))
    arguments = function.get("arguments", function.get("input", ""))
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments, ensure_ascii=False, sort_keys=True, default=str)
    return f"{name}({arguments})"


# One spiral -------------------------------------------------------------------------------


def spiral_attempts(spiral: FailureSpiral) -> list[Invocation]:
    """Return the spiral's attempts in order: its tool's calls from its first to its last span.

    Empty when retention has purged the raw spans; the spiral record keeps its totals.
    """
    spans = Invocation.objects.of_trace(spiral.trace)
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
        outcome = "stopped" if span.status == SpanStatus.STOPPED else span.error_kind
        outcome = outcome or ("failed" if span.status == SpanStatus.ERROR else "ok")
        groups[outcome].append((number, span))
    bars = []
    for index, (outcome, members) in enumerate(sorted(groups.items())):
        colour = {"ok": "#1a7f37", "stopped": "#667085"}.get(
            outcome, ERROR_COLOURS[index % len(ERROR_COLOURS)]
        )
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

    The same rule as traces_app.spirals.detection.resolution: the first later call the planner
    chose, or the first later success of the same tool.
    """
    resolved = (
        SpiralResolution.PLANNER_FALLBACK,
        SpiralResolution.RECOVERED,
        SpiralResolution.REPEATED,
    )
    if not attempts or spiral.resolution not in resolved:
        return None
    last = attempts[-1]
    later = (
        Invocation.objects.of_trace(spiral.trace)
        .filter(kind=SpanKind.TOOL, started_at__gte=last.started_at)
        .order_by("started_at", "span_id")[:MAX_SPANS]
    )
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
