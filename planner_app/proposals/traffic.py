"""Recorded traffic as the proposals read it: each request and the tool calls that served it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class Call:
    """One recorded tool call: which tool, who chose it, whether it worked, and its data."""

    tool: str
    chosen_by: str  # traces_app.models.ChosenBy: llm, planner, workflow, external ("" unknown)
    ok: bool
    arguments: Any
    result: Any
    at: datetime
    span_id: str = ""


@dataclass(frozen=True)
class Served:
    """A recorded request (a trace with a request text) and its tool calls in order."""

    trace_id: str
    request: str
    at: datetime
    calls: tuple[Call, ...]

    @property
    def tools(self) -> tuple[str, ...]:
        """Return the tools called, in order."""
        return tuple(call.tool for call in self.calls)

    def served_by(self) -> Call | None:
        """Return the last successful call the planner did not choose, if any.

        That is the call that answered a request the planner left to someone else (an
        LLM, an outside agent): what a rule or mapping proposal learns from.
        """
        for call in reversed(self.calls):
            if call.ok and call.chosen_by != "planner":
                return call
        return None


TRACES_PER_QUERY = 500  # traces whose spans one query reads
CALLS_PER_QUERY = 5_000  # spans one query returns, at most
CALLS_PER_TRACE = 50  # a trace's first tool calls kept; a long agent session is not one request


def recorded_traffic(limit: int = 5_000, since: datetime | None = None) -> list[Served]:
    """Return the newest `limit` traces with a request text, each with its tool calls in order.

    Calls their caller stopped are left out (they neither worked nor failed). Every query
    is bounded: the traces come by their start-time index, newest first; their spans in
    chunks of at most TRACES_PER_QUERY traces and CALLS_PER_QUERY spans, and a trace with
    more than CALLS_PER_TRACE tool calls by a query of its own, cut there.
    """
    from traces_app.models import Trace  # Django models: loaded when traffic is read

    traces = Trace.objects.exclude(request_text="").order_by("-started_at", "trace_id")
    if since is not None:
        traces = traces.filter(started_at__gte=since)
    fields = ("trace_id", "request_text", "started_at", "tool_calls", "ended_at")
    rows = list(traces.values_list(*fields)[:limit])
    bounds = {trace_id: (start, end) for trace_id, _, start, _, end in rows}
    calls: dict[str, list[Call]] = {}
    for chunk in _chunks([(trace_id, count) for trace_id, _, _, count, _ in rows]):
        calls.update(_calls_of(chunk, bounds))
    return [
        Served(trace_id, request, at, tuple(calls.get(trace_id, ())))
        for trace_id, request, at, _, _ in rows
    ]


def _chunks(traces: list[tuple[str, int]]) -> list[list[str]]:
    """Group trace ids so that one query reads each group's spans (by their tool-call counts)."""
    chunks: list[list[str]] = []
    small: list[str] = []
    spans = 0
    for trace_id, tool_calls in traces:
        if tool_calls > CALLS_PER_TRACE:
            chunks.append([trace_id])
            continue
        if small and (len(small) >= TRACES_PER_QUERY or spans + tool_calls > CALLS_PER_QUERY):
            chunks.append(small)
            small, spans = [], 0
        small.append(trace_id)
        spans += tool_calls
    return [*chunks, small] if small else chunks


def _calls_of(
    trace_ids: list[str], bounds: dict[str, tuple[datetime, datetime]]
) -> dict[str, list[Call]]:
    """Return the tool calls of these traces in order, at most CALLS_PER_TRACE of each.

    Read within the traces' time bounds (`bounds`, by trace id): every span of a trace
    starts in its [started_at, ended_at], and on PostgreSQL only those days are read.
    """
    from traces_app.models import Invocation, SpanKind, SpanStatus

    low = min(bounds[trace_id][0] for trace_id in trace_ids)
    high = max(bounds[trace_id][1] for trace_id in trace_ids)
    spans = (
        Invocation.objects.filter(trace_id__in=trace_ids, kind=SpanKind.TOOL)
        .within((low, high))
        .exclude(status=SpanStatus.STOPPED)
        .order_by("trace_id", "started_at", "span_id")
        .values_list(
            "trace_id",
            "tool_name",
            "chosen_by",
            "status",
            "arguments",
            "result",
            "started_at",
            "span_id",
        )
    )
    bound = CALLS_PER_TRACE if len(trace_ids) == 1 else CALLS_PER_QUERY
    calls: dict[str, list[Call]] = {}
    for trace_id, tool, chosen_by, status, arguments, result, at, span_id in spans[:bound]:
        kept = calls.setdefault(trace_id, [])
        if len(kept) < CALLS_PER_TRACE:
            ok = status == SpanStatus.OK
            kept.append(Call(tool, chosen_by, ok, arguments, result, at, span_id))
    return calls
