"""Which tools are called together, in which order, and which waste tokens or fail.

The chains page and GET /api/v1/chains read one bounded sample: the tool spans of the
newest traces of a window (7 days before `until` by default), at most MAX_TRACES traces
and about MAX_SPANS spans, whatever the size of the store. From it:

- pairs: two tools called in the same trace, counted once a trace, with the share of
  those traces in which either failed;
- chains: consecutive distinct tool calls in a trace (A then B, A then B then C; a tool's
  retries in a row are one step, failed when its last attempt failed), with how often
  they occur and the share of occurrences in which a step failed;
- waste: per tool, its output tokens (p50, p95: result_tokens of every attempt), the share
  of its calls the agent's token budget cut (result_reduction) and the tokens it dropped;
- often failing ("called often, succeeds rarely"): tools with at least `min_calls` calls
  that failed more often than they succeeded, ranked by failures (calls x failure rate),
  then by failure rate. Calls stopped by their caller count on neither side.

Every row names up to TRACE_LINKS traces behind it, newest first. Percentiles are computed
here in Python on both databases: the sample is read once for every section anyway.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from itertools import combinations
from typing import NamedTuple

from django.db.models import Q, QuerySet, Subquery

from traces_app.models import Invocation, SpanKind, SpanStatus, Trace
from traces_app.rollups.histogram import percentile_cont

DEFAULT_WINDOW = timedelta(days=7)
MAX_TRACES = 5000
MAX_SPANS = 100_000
TRACE_LINKS = 20
DEFAULT_MIN_COUNT = 2  # a chain seen once is no pattern
DEFAULT_MIN_CALLS = 10  # fewer calls say nothing about how often a tool fails
DEFAULT_LIMIT = 50
# Plain strings: comparing a span's status with the enum member costs four times as much,
# and the report compares every span's, several times.
_ERROR: str = SpanStatus.ERROR.value
_STOPPED: str = SpanStatus.STOPPED.value


@dataclass
class Linked:
    """What every row has: how often it was seen and failed, and the traces behind it."""

    count: int = 0
    failed: int = 0
    trace_ids: list[str] = field(default_factory=list)

    @property
    def failure_rate(self) -> float:
        return self.failed / self.count if self.count else 0.0

    def add(self, trace_id: str, failed: bool) -> None:
        self.count += 1
        self.failed += failed
        if len(self.trace_ids) < TRACE_LINKS and trace_id not in self.trace_ids[-1:]:
            self.trace_ids.append(trace_id)


@dataclass
class ToolPair(Linked):
    """Two tools called in the same trace: `count` traces, `failed` of them with a failure."""

    tools: tuple[str, ...] = ()


@dataclass
class ToolChain(Linked):
    """Consecutive distinct calls A then B (then C): `count` occurrences, `failed` with one
    failed step, in `traces` traces."""

    tools: tuple[str, ...] = ()
    traces: int = 0


@dataclass
class ToolWaste:
    """One tool's output tokens and what the token budget cut of them."""

    tool_name: str
    calls: int
    p50_result_tokens: float
    p95_result_tokens: float
    result_tokens: int
    cut_calls: int
    truncated: int
    compressed: int
    omitted: int
    tokens_dropped: int

    @property
    def cut_share(self) -> float:
        return self.cut_calls / self.calls if self.calls else 0.0


@dataclass
class OftenFailing(Linked):
    """A tool called often that succeeds rarely: `count` calls, `failed` of them failures."""

    tool_name: str = ""

    @property
    def rank_key(self) -> tuple[int, float, str]:
        return (-self.failed, -self.failure_rate, self.tool_name)


@dataclass
class ChainReport:
    since: datetime
    until: datetime
    traces_read: int
    spans_read: int
    sample_complete: bool  # False: the window held more traces than were read
    pairs: list[ToolPair]
    chains: list[ToolChain]
    waste: list[ToolWaste]
    often_failing: list[OftenFailing]


class _Span(NamedTuple):
    trace_id: str
    tool_name: str
    status: str
    result_tokens: int
    result_reduction: str
    result_tokens_dropped: int


def chain_report(
    since: datetime,
    until: datetime,
    *,
    tool: str = "",
    min_count: int = DEFAULT_MIN_COUNT,
    min_calls: int = DEFAULT_MIN_CALLS,
    limit: int = DEFAULT_LIMIT,
    max_traces: int | None = None,
) -> ChainReport:
    """Return the pairs, chains, waste and often-failing tools of the newest traces in a window.

    With `tool`, pairs and chains are those that hold it, and waste and often-failing
    its row only.
    """
    window = Trace.objects.filter(started_at__gte=since, started_at__lt=until, tool_calls__gt=0)
    trace_ids, complete = _sampled_traces(window, max_traces or MAX_TRACES)
    by_trace = _tool_spans(window, trace_ids)
    sequences = [(trace_id, _steps(by_trace[trace_id])) for trace_id in trace_ids]
    spans = [span for trace_id in trace_ids for span in by_trace[trace_id]]
    spans_read = len(spans)
    if tool:
        spans = [span for span in spans if span.tool_name == tool]
    pairs = [pair for pair in _pairs(sequences) if not tool or tool in pair.tools]
    chains = [chain for chain in _chains(sequences) if not tool or tool in chain.tools]
    return ChainReport(
        since=since,
        until=until,
        traces_read=len(trace_ids),
        spans_read=spans_read,
        sample_complete=complete,
        pairs=[pair for pair in pairs if pair.count >= min_count][:limit],
        chains=[chain for chain in chains if chain.count >= min_count][:limit],
        waste=_waste(spans)[:limit],
        often_failing=_often_failing(spans, min_calls)[:limit],
    )


def _sampled_traces(window: QuerySet[Trace], max_traces: int) -> tuple[list[str], bool]:
    """Return the newest traces of the window, within the caps, and whether they are all
    the window holds.

    Read without their times: 10,000 time-zone-aware datetimes cost more than the query.
    """
    rows = list(
        window.order_by("-started_at", "-trace_id").values_list("trace_id", "tool_calls")[
            : max_traces + 1
        ]
    )
    chosen: list[str] = []
    spans = 0
    for trace_id, tool_calls in rows[:max_traces]:
        if chosen and spans + tool_calls > MAX_SPANS:
            return chosen, False
        chosen.append(trace_id)
        spans += tool_calls
    return chosen, len(rows) <= max_traces


def _tool_spans(window: QuerySet[Trace], trace_ids: list[str]) -> dict[str, list[_Span]]:
    """Return the tool spans of the sampled traces, each trace's in time order.

    The sample is the window's newest traces down to the last one chosen, so one query
    reads it as the window's traces from that one on (no list of ids: a thousand
    parameters a query cost more to send than the spans), within the sample's own time
    bounds (of_trace_set): on PostgreSQL a slice of one day's partition, where reading
    within the window read every span of it, of every day of a 7-day window. Ordered by
    time (the index's order, where ordering by trace id is a text sort), grouped by trace
    here, and read without their times, as the traces are.
    """
    by_trace: dict[str, list[_Span]] = defaultdict(list)
    if not trace_ids:
        return by_trace
    last = trace_ids[-1]
    last_start = Subquery(Trace.objects.filter(pk=last).values("started_at"))
    sample = window.filter(
        Q(started_at__gt=last_start) | Q(started_at=last_start, trace_id__gte=last)
    )
    rows = (
        Invocation.objects.of_trace_set(sample)
        .filter(kind=SpanKind.TOOL)
        .order_by("started_at", "span_id")
        .values_list(*_Span._fields)
    )
    for row in rows:
        by_trace[row[0]].append(_Span._make(row))
    return by_trace


def _steps(spans: Iterable[_Span]) -> list[tuple[str, bool]]:
    """Return a trace's tool steps as (tool, failed): a tool's attempts in a row are one step."""
    steps: list[tuple[str, bool]] = []
    for span in spans:
        failed = span.status == _ERROR
        if steps and steps[-1][0] == span.tool_name:
            steps[-1] = (span.tool_name, failed)  # the last attempt decides
        else:
            steps.append((span.tool_name, failed))
    return steps


def _pairs(sequences: Iterable[tuple[str, list[tuple[str, bool]]]]) -> list[ToolPair]:
    """Return the tool pairs called in the same trace, most traces first."""
    pairs: dict[tuple[str, ...], ToolPair] = {}
    for trace_id, steps in sequences:
        failed = {name for name, step_failed in steps if step_failed}
        for two in combinations(sorted({name for name, _ in steps}), 2):
            pair = pairs.get(two)
            if pair is None:  # not setdefault: it would build a row for every pair seen
                pair = pairs[two] = ToolPair(tools=two)
            pair.add(trace_id, two[0] in failed or two[1] in failed)
    return sorted(pairs.values(), key=lambda pair: (-pair.count, pair.tools))


def _chains(sequences: Iterable[tuple[str, list[tuple[str, bool]]]]) -> list[ToolChain]:
    """Return the chains of two and three consecutive steps, most occurrences first."""
    chains: dict[tuple[str, ...], ToolChain] = {}
    for trace_id, steps in sequences:
        seen_here: set[tuple[str, ...]] = set()
        names = [name for name, _ in steps]
        failures = [failed for _, failed in steps]
        for length in (2, 3):
            for start in range(len(steps) - length + 1):
                tools = tuple(names[start : start + length])
                chain = chains.get(tools)
                if chain is None:
                    chain = chains[tools] = ToolChain(tools=tools)
                chain.add(trace_id, any(failures[start : start + length]))
                if tools not in seen_here:
                    chain.traces += 1
                    seen_here.add(tools)
    return sorted(chains.values(), key=lambda chain: (-chain.count, len(chain.tools), chain.tools))


def _waste(spans: Iterable[_Span]) -> list[ToolWaste]:
    """Return each tool's output tokens and budget cuts, most tokens dropped first."""
    by_tool: dict[str, list[_Span]] = defaultdict(list)
    for span in spans:
        by_tool[span.tool_name].append(span)
    rows = [_tool_waste(name, found) for name, found in by_tool.items()]
    return sorted(
        rows, key=lambda row: (-row.tokens_dropped, -row.p95_result_tokens, row.tool_name)
    )


def _tool_waste(tool_name: str, spans: list[_Span]) -> ToolWaste:
    tokens = sorted(span.result_tokens for span in spans)
    cuts = defaultdict(int)
    for span in spans:
        cuts[span.result_reduction] += 1
    return ToolWaste(
        tool_name=tool_name,
        calls=len(spans),
        p50_result_tokens=percentile_cont(tokens, 0.5) or 0.0,
        p95_result_tokens=percentile_cont(tokens, 0.95) or 0.0,
        result_tokens=sum(tokens),
        cut_calls=len(spans) - cuts[""],
        truncated=cuts["truncated"],
        compressed=cuts["compressed"],
        omitted=cuts["omitted"],
        tokens_dropped=sum(span.result_tokens_dropped for span in spans),
    )


def _often_failing(spans: Iterable[_Span], min_calls: int) -> list[OftenFailing]:
    """Return the tools with min_calls calls or more that fail more often than they succeed."""
    tools: dict[str, OftenFailing] = {}
    for span in spans:  # newest trace first, so the links are the newest failures
        if span.status == _STOPPED:
            continue
        row = tools.get(span.tool_name)
        if row is None:
            row = tools[span.tool_name] = OftenFailing(tool_name=span.tool_name)
        row.count += 1
        if span.status == _ERROR:
            row.failed += 1
            if len(row.trace_ids) < TRACE_LINKS and span.trace_id not in row.trace_ids:
                row.trace_ids.append(span.trace_id)
    rows = [row for row in tools.values() if row.count >= min_calls and row.failure_rate > 0.5]
    return sorted(rows, key=lambda row: row.rank_key)
