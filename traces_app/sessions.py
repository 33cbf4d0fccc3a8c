"""Sessions: the conversations an agent's traces make up (Trace.session_id), listed and read.

A session is every trace that shares a session id; each trace is one turn. The list
groups the traces of a time range by session in one query (index trace_session_started),
then reads the tools and spirals of the page's sessions in one query each: no query per
session. A session page reads its turns a page at a time, oldest first, and for those
turns their requests and answers, tool calls, spirals and scores, one query each.
"""

from __future__ import annotations

import base64
import binascii
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from itertools import groupby
from typing import Any

from django.db.models import Count, Max, Min, Q, QuerySet, Sum

from traces_app.http.paging import BadCursor, SortKey, keyset_page
from traces_app.models import (
    FailureSpiral,
    Invocation,
    Score,
    SpanKind,
    SpanStatus,
    Trace,
    TraceStatus,
)
from traces_app.timeline import llm_exchange

# The orders a session list can take: (the aggregate it sorts on, how its cursor reads, label).
SESSION_SORTS: dict[str, tuple[str, str, str]] = {
    "-last": ("last_at", "moment", "latest activity first"),
    "-first": ("first_at", "moment", "newest start first"),
    "-turns": ("turns", "number", "most turns first"),
    "-tokens": ("tokens", "number", "most tokens first"),
    "-cost": ("sum_cost", "number", "most expensive first"),
    "-errors": ("errors", "number", "most failed turns first"),
}
DEFAULT_SORT = "-last"
# A session page shows at most this many turns at a time; its tool calls, at most this many.
TURNS_PER_PAGE = 100
MAX_TOOL_CALLS = 5000
TOOLS_PER_ROW = 8
# A list row names the tools of its session's latest turns in the range, this many.
TOOL_TURNS = 20
# The default order finds a page's sessions by walking the newest traces, WALK_CHUNK at a
# time, giving up (and summing every trace of the range) after WALK_CHUNKS of them.
WALK_CHUNK = 1000
WALK_CHUNKS = 10


@dataclass(frozen=True)
class SessionFilters:
    """What a session list keeps: traces started in [since, until), of an agent, id text."""

    since: datetime | None = None
    until: datetime | None = None
    agent: str = ""
    q: str = ""  # text (any case) in the session id
    sort: str = DEFAULT_SORT


@dataclass
class SessionRow:
    """One session of a list: its totals over the traces the filters keep."""

    session_id: str
    agent: str
    several_agents: bool
    turns: int
    first_at: datetime
    last_at: datetime
    input_tokens: int
    output_tokens: int
    cost_usd: float
    failed_calls: int
    errors: int  # turns with a failed span
    tool_calls: int
    tools: set[str] = field(default_factory=set)  # of its latest TOOL_TURNS turns
    spirals: int = 0
    # Its traces in the range, newest first (the first TOOL_TURNS are its latest turns).
    trace_ids: list[str] = field(default_factory=list, repr=False)

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    @property
    def tool_names(self) -> list[str]:
        return sorted(self.tools)

    @property
    def shown_tools(self) -> list[str]:
        return self.tool_names[:TOOLS_PER_ROW]

    @property
    def more_tools(self) -> int:
        return max(len(self.tools) - TOOLS_PER_ROW, 0)


@dataclass(frozen=True)
class SessionPage:
    rows: list[SessionRow]
    next_cursor: str | None


# What a session sums of its traces: {the name it is known by: (the aggregate's alias, it)}.
# Aliases differ from the traces' own field names, which an aggregate may not reuse.
def _session_totals() -> dict[str, Any]:
    """Return the aggregates of a session's traces, under their aliases."""
    return {
        "agent_name": Max("agent"),
        # Not COUNT(DISTINCT agent): PostgreSQL would then sort the range's traces to group.
        "other_agent": Min("agent"),
        "turns": Count("pk"),
        "first_at": Min("started_at"),
        "last_at": Max("started_at"),
        "sum_input": Sum("input_tokens", default=0),
        "sum_output": Sum("output_tokens", default=0),
        "sum_cost": Sum("cost_usd", default=0.0),
        "sum_failed": Sum("failed_calls", default=0),
        "errors": Count("pk", filter=Q(status=TraceStatus.ERROR)),
        "sum_tool_calls": Sum("tool_calls", default=0),
    }


ALIASES = {
    "agent_name": "agent",
    "sum_input": "input_tokens",
    "sum_output": "output_tokens",
    "sum_cost": "cost_usd",
    "sum_failed": "failed_calls",
    "sum_tool_calls": "tool_calls",
}


def _named(group: dict[str, Any]) -> dict[str, Any]:
    """Return a session's aggregates under the names SessionRow and the API use."""
    named = {ALIASES.get(name, name): value for name, value in group.items()}
    named["several_agents"] = named.pop("other_agent") != named["agent"]
    return named


def _trace_range(prefix: str, filters: SessionFilters) -> dict[str, Any]:
    """Return the lookups of the filters' traces, seen through `prefix` (a relation)."""
    lookups: dict[str, Any] = {}
    if filters.since is not None:
        lookups[f"{prefix}started_at__gte"] = filters.since
    if filters.until is not None:
        lookups[f"{prefix}started_at__lt"] = filters.until
    if filters.agent:
        lookups[f"{prefix}agent"] = filters.agent
    return lookups


def filtered_traces(filters: SessionFilters) -> QuerySet:
    """Return the traces with a session that the filters keep."""
    traces = Trace.objects.exclude(session_id="")
    if filters.since is not None:
        traces = traces.filter(started_at__gte=filters.since)
    if filters.until is not None:
        traces = traces.filter(started_at__lt=filters.until)
    if filters.agent:
        traces = traces.filter(agent=filters.agent)
    if filters.q:
        traces = traces.filter(session_id__icontains=filters.q)
    return traces


def session_rows(filters: SessionFilters, limit: int, after: str | None = None) -> SessionPage:
    """Return one page of sessions in the filters' order, and the cursor of the next page.

    Pages on (the sort's aggregate, session id), so a page never repeats or skips a
    session while traces arrive. Raises BadCursor for a cursor this site did not hand out.
    """
    column, kind, _ = SESSION_SORTS[filters.sort]
    key = SortKey(column, kind=kind)
    groups = (
        filtered_traces(filters)
        .order_by()
        .values("session_id")
        .annotate(**_session_totals())
        .annotate(tokens=Sum("input_tokens", default=0) + Sum("output_tokens", default=0))
    )
    cursor = _decode_cursor(after, key) if after else None
    latest = _latest_sessions(filters, limit + 1, cursor) if filters.sort == "-last" else None
    if latest is not None:  # the page's sessions are known: sum only theirs
        found = sorted(
            _summed_rows(filters, latest),
            key=lambda row: (row.last_at, row.session_id),
            reverse=True,
        )
    else:
        if cursor is not None:
            value, session_id = cursor
            groups = groups.filter(
                Q(**{f"{column}__lt": value}) | Q(**{column: value, "session_id__lt": session_id})
            )
        ids = [
            group["session_id"]
            for group in groups.order_by(f"-{column}", "-session_id")[: limit + 1]
        ]
        summed = {row.session_id: row for row in _summed_rows(filters, ids)}
        # A session purged between the two reads is left out.
        found = [summed[session_id] for session_id in ids if session_id in summed]
    rows = found[:limit]
    _add_tools_and_spirals(rows, filters)
    more = len(found) > limit
    return SessionPage(rows, _encode_cursor(found[limit - 1], key) if more else None)


def _latest_sessions(
    filters: SessionFilters, count: int, cursor: tuple[datetime, str] | None
) -> list[str] | None:
    """Return the `count` sessions of latest activity (after the cursor), or None if costly.

    Walks the range's traces newest first (index trace_started) and notes each session the
    first time it appears: its latest turn. So the default order needs the newest few
    traces, not a sum over every trace of the range. After a cursor (last_at, id), the
    walk starts at last_at and leaves out the sessions with a later turn (earlier pages).
    None after WALK_CHUNKS chunks of traces: the caller then sums every trace of the range.
    """
    traces = filtered_traces(filters)
    if cursor is not None:
        traces = traces.filter(started_at__lte=cursor[0])
    first_seen: dict[str, datetime] = {}
    kept: dict[str, datetime] = {}
    position: tuple[datetime, str] | None = None
    for _ in range(WALK_CHUNKS):
        chunk = traces.order_by("-started_at", "-pk")
        if position is not None:
            moment, pk = position
            chunk = chunk.filter(Q(started_at__lt=moment) | Q(started_at=moment, pk__lt=pk))
        rows = list(chunk.values_list("started_at", "pk", "session_id")[:WALK_CHUNK])
        new = {}
        for started_at, _, session_id in rows:
            if session_id not in first_seen:
                first_seen[session_id] = new[session_id] = started_at
        kept.update(_after_cursor(new, filters, cursor))
        ordered = sorted(kept.items(), key=lambda item: (item[1], item[0]), reverse=True)
        # Done at the range's end, or when the page is full and no older trace can bring a
        # session as late as its last one.
        if len(rows) < WALK_CHUNK or (
            len(ordered) >= count and rows[-1][0] < ordered[count - 1][1]
        ):
            return [session_id for session_id, _ in ordered[:count]]
        position = rows[-1][:2]
    return None


def _after_cursor(
    new: dict[str, datetime], filters: SessionFilters, cursor: tuple[datetime, str] | None
) -> dict[str, datetime]:
    """Return the newly seen sessions that come after the cursor (all of them without one)."""
    if cursor is None or not new:
        return new
    value, cursor_id = cursor
    later = (
        filtered_traces(filters)
        .filter(session_id__in=list(new), started_at__gt=value)
        .order_by()
        .values_list("session_id", flat=True)
        .distinct()
    )
    earlier_pages = set(later)
    return {
        session_id: seen
        for session_id, seen in new.items()
        if session_id not in earlier_pages and (seen < value or session_id < cursor_id)
    }


# The attribute of a SessionRow that each sort's aggregate is.
ROW_VALUES = {"sum_cost": "cost_usd"}


def _summed_rows(filters: SessionFilters, session_ids: list[str]) -> list[SessionRow]:
    """Return the rows of these sessions, summed over their traces in the range.

    Two reads of those traces (index trace_session_started): the sums in SQL, then their
    ids newest first, which give each session's latest TOOL_TURNS turns (for its tools)
    and its spirals. Moments are not read row by row: converting thousands of them cost
    more than the queries.
    """
    traces = filtered_traces(filters).filter(session_id__in=session_ids)
    groups = traces.order_by().values("session_id").annotate(**_session_totals())
    rows = {group["session_id"]: _row(group) for group in groups}
    newest = traces.order_by("-started_at", "-pk").values_list("trace_id", "session_id")
    for trace_id, session_id in newest:
        if session_id in rows:  # not a session whose first turn arrived between the reads
            rows[session_id].trace_ids.append(trace_id)
    return list(rows.values())


def _row(group: dict[str, Any]) -> SessionRow:
    named = _named(group)
    fields = SessionRow.__dataclass_fields__
    return SessionRow(**{name: value for name, value in named.items() if name in fields})


def _encode_cursor(row: SessionRow, key: SortKey) -> str:
    value = getattr(row, ROW_VALUES.get(key.field, key.field))
    token = f"{key.encode(value)}|{row.session_id}".encode()
    return base64.urlsafe_b64encode(token).decode()


def _decode_cursor(cursor: str, key: SortKey) -> tuple[Any, str]:
    try:
        value, session_id = base64.urlsafe_b64decode(cursor.encode()).decode().split("|", 1)
        return key.decode(value), session_id
    except (ValueError, OverflowError, binascii.Error, UnicodeError):
        raise BadCursor("cursor is not one this site handed out") from None


def _add_tools_and_spirals(rows: list[SessionRow], filters: SessionFilters) -> None:
    """Fill in each row's tools (of its latest TOOL_TURNS turns) and spirals, for the page.

    Four queries for the whole page (the latest turns' time bounds first). The tools are
    read from each session's latest turns only, so a session of thousands of turns costs no
    more than one of twenty.
    """
    if not rows:
        return
    by_id = {row.session_id: row for row in rows}
    latest = {trace_id: row for row in rows for trace_id in row.trace_ids[:TOOL_TURNS]}
    pairs = (
        Invocation.objects.of_trace_ids(latest)
        .filter(kind=SpanKind.TOOL)
        .order_by()
        .values_list("trace_id", "tool_name")
        .distinct()
    )
    for trace_id, tool_name in pairs:
        latest[trace_id].tools.add(tool_name)
    if filters.since is None:
        found = FailureSpiral.objects.filter(
            trace__session_id__in=list(by_id), **_trace_range("trace__", filters)
        )
        spirals = found.order_by().values_list("trace_id", flat=True)
    else:  # a spiral starts in its trace: the few of the range, not the sessions' traces
        spirals = FailureSpiral.objects.filter(started_at__gte=filters.since).values_list(
            "trace_id", flat=True
        )
    session_of = {trace_id: row for row in rows for trace_id in row.trace_ids}
    for trace_id in spirals.order_by():
        if trace_id in session_of:
            session_of[trace_id].spirals += 1


# One session ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ToolCall:
    """One tool call of a session, as the turns and the cross-turn spirals see it."""

    trace_id: str
    span_id: str
    tool_name: str
    status: str
    error_kind: str
    started_at: datetime

    @property
    def failure(self) -> tuple[str, str] | None:
        """Return (tool, error kind) when the call failed, else None."""
        return (self.tool_name, self.error_kind) if self.status == SpanStatus.ERROR else None


@dataclass
class Turn:
    """One trace of a session: its request, its answer, its tool calls, spirals and scores."""

    number: int
    trace: Trace
    answer: str = ""
    calls: list[ToolCall] = field(default_factory=list)
    spirals: list[FailureSpiral] = field(default_factory=list)
    scores: list[Score] = field(default_factory=list)


@dataclass(frozen=True)
class CrossTurnSpiral:
    """The same tool failing the same way at the end of one turn and the start of the next."""

    tool_name: str
    error_kind: str
    calls: tuple[ToolCall, ...]
    turns: tuple[int, ...]  # the turn numbers it spans, in order

    @property
    def attempts(self) -> int:
        return len(self.calls)


@dataclass
class SessionDetail:
    session_id: str
    totals: dict[str, Any]
    turns: list[Turn]
    next_cursor: str | None
    cross_turn_spirals: list[CrossTurnSpiral]
    tool_sequence: list[ToolCall]
    calls_truncated: bool
    score_summary: list[dict[str, Any]]


class UnknownSession(LookupError):
    """No trace has this session id."""


TURN_ORDER = SortKey("started_at", descending=False)


def session_detail(
    session_id: str, limit: int = TURNS_PER_PAGE, after: str | None = None
) -> SessionDetail:
    """Return a session: its totals, then a page of its turns in order, with what they hold.

    Raises UnknownSession when no trace has the id, BadCursor for a bad cursor.
    """
    traces = Trace.objects.filter(session_id=session_id)
    totals = _named(traces.order_by().aggregate(**_session_totals()))
    if not totals["turns"]:
        raise UnknownSession(session_id)
    page = keyset_page(traces, limit, after=after, key=TURN_ORDER)
    first_number = _turn_number(traces, page.rows[0]) if after and page.rows else 1
    turns = [Turn(first_number + index, trace) for index, trace in enumerate(page.rows)]
    calls, truncated = _tool_calls(turns)
    _add_answers(turns)
    _add_spirals_and_scores(turns)
    return SessionDetail(
        session_id=session_id,
        totals={**totals, "tokens": totals["input_tokens"] + totals["output_tokens"]},
        turns=turns,
        next_cursor=page.next_cursor,
        cross_turn_spirals=cross_turn_spirals([turn.calls for turn in turns], first_number),
        tool_sequence=calls,
        calls_truncated=truncated,
        score_summary=score_summary([score for turn in turns for score in turn.scores]),
    )


def _turn_number(traces: QuerySet, trace: Trace) -> int:
    """Return the number of a turn: 1 + the session's turns before it (by start, then id)."""
    earlier = Q(started_at__lt=trace.started_at) | Q(started_at=trace.started_at, pk__lt=trace.pk)
    return 1 + traces.filter(earlier).count()


def _tool_calls(turns: list[Turn]) -> tuple[list[ToolCall], bool]:
    """Give each turn its tool calls in order; return them all across turns, and if cut."""
    by_trace = {turn.trace.pk: turn for turn in turns}
    rows = (
        Invocation.objects.of_traces(turn.trace for turn in turns)
        .filter(kind=SpanKind.TOOL)
        .order_by("started_at", "pk")
        .values_list("trace_id", "span_id", "tool_name", "status", "error_kind", "started_at")
    )[: MAX_TOOL_CALLS + 1]
    calls = [ToolCall(*row) for row in rows]
    truncated = len(calls) > MAX_TOOL_CALLS
    calls = calls[:MAX_TOOL_CALLS]
    for call in calls:
        by_trace[call.trace_id].calls.append(call)
    order = {turn.trace.pk: turn.number for turn in turns}
    calls.sort(key=lambda call: (order[call.trace_id], call.started_at))
    return calls, truncated


def _add_answers(turns: list[Turn]) -> None:
    """Give each turn its answer: the agent span's, else the last LLM output it recorded.

    Our agent loop records the answer on the agent (root) span's result; other producers
    (OTLP dialects, the REST API) on their LLM spans, read as the trace page reads them.
    """
    by_trace = {turn.trace.pk: turn for turn in turns}
    spans = (
        Invocation.objects.of_traces(turn.trace for turn in turns)
        .filter(kind__in=[SpanKind.AGENT, SpanKind.LLM])
        .order_by("started_at", "pk")
        .values_list("trace_id", "kind", "result")  # not the LLM calls' (long) arguments
    )
    from_agent: dict[str, str] = {}
    from_llm: dict[str, str] = {}
    for trace_id, kind, result in spans:
        if kind == SpanKind.AGENT:
            answer = result.get("answer") if isinstance(result, dict) else None
            if isinstance(answer, str) and answer:
                from_agent[trace_id] = answer
        else:
            output = llm_exchange(Invocation(kind=kind, result=result)).output
            if output:
                from_llm[trace_id] = output
    for trace_id, turn in by_trace.items():
        turn.answer = from_agent.get(trace_id) or from_llm.get(trace_id, "")


def _add_spirals_and_scores(turns: list[Turn]) -> None:
    by_trace = {turn.trace.pk: turn for turn in turns}
    for spiral in FailureSpiral.objects.filter(trace_id__in=list(by_trace)).order_by("started_at"):
        by_trace[spiral.trace_id].spirals.append(spiral)
    scores = Score.objects.filter(trace_id__in=list(by_trace)).order_by("created_at", "pk")
    for score in scores:
        by_trace[score.trace_id].scores.append(score)


def cross_turn_spirals(
    turn_calls: Sequence[Sequence[ToolCall]], first_number: int = 1
) -> list[CrossTurnSpiral]:
    """Return the runs of one tool failing with one error kind that cross a turn boundary.

    A run is consecutive tool calls of the session, in order, that fail with the same
    (tool, error kind); it counts when it spans turns, i.e. holds the last call of one
    turn and the first call of the next: the agent met the same failure again after the
    turn ended. A turn without tool calls does not break a run.
    """
    flat = [
        (first_number + offset, call) for offset, calls in enumerate(turn_calls) for call in calls
    ]
    found = []
    for failure, group in groupby(flat, key=lambda numbered: numbered[1].failure):
        run = list(group)
        turns = tuple(dict.fromkeys(number for number, _ in run))
        if failure is not None and len(turns) > 1:
            calls = tuple(call for _, call in run)
            found.append(CrossTurnSpiral(failure[0], failure[1], calls, turns))
    return found


def score_summary(scores: Sequence[Score]) -> list[dict[str, Any]]:
    """Return per score name: how many, the mean of the numeric ones, the labels' counts."""
    names: dict[str, list[Score]] = defaultdict(list)
    for score in scores:
        names[score.name].append(score)
    summary = []
    for name, found in sorted(names.items()):
        values = [score.value for score in found if score.value is not None]
        labels: dict[str, int] = defaultdict(int)
        for score in found:
            if score.label:
                labels[score.label] += 1
        summary.append(
            {
                "name": name,
                "count": len(found),
                "mean": sum(values) / len(values) if values else None,
                "labels": dict(sorted(labels.items())),
            }
        )
    return summary
