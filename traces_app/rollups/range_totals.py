"""What dashboard pages read for a time range: sums of the rollups, never raw spans.

A range is widened to whole UTC hours (the rollups' grain); pages say so next to the range.
Tool totals read a day's row for each whole UTC day of the range and hourly rows for the rest.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db.models import F, Q, Sum
from django.db.models.functions import Trunc

from traces_app.models import CALLER_FAULTS, SpanRollup, ToolDayRollup, ToolRollup
from traces_app.models.rollup_tables import ROLLUP_SUMMED_FIELDS, add_tool_totals
from traces_app.partitions.layout import day_of, day_start
from traces_app.rollups.histogram import (
    empty_histogram,
    percentile_from_histogram,
)
from traces_app.rollups.ranges import DAY, TimeRange, range_context
from traces_app.rollups.recount import recount_marked_rollups


def fresh_range_context(params: Mapping[str, str], now: datetime) -> dict[str, object]:
    """Return a page's range context after recounting the marked rollups of its range.

    So a page never shows counts older than the request: every span stored before it is
    counted (without a broker; with one, marks younger than ARES_ROLLUP_PAGE_GRACE_S are
    left to the beat). At most ARES_ROLLUP_PAGE_RECOUNT_MAX marks, oldest first; the
    marks left over, if any, are in `rollups_pending` and the page says so.
    """
    context = range_context(params, now)
    time_range: TimeRange = context["time_range"]  # type: ignore[assignment]
    done = recount_marked_rollups(
        time_range.since,
        time_range.until,
        marked_before=now - timedelta(seconds=settings.ARES_ROLLUP_PAGE_GRACE_S),
        limit=settings.ARES_ROLLUP_PAGE_RECOUNT_MAX,
    )
    context["rollups_pending"] = done.pending
    return context


@dataclass
class ToolTotals:
    """One tool's calls summed over some hours (a whole range, or one chart bucket)."""

    tool_name: str
    calls: int = 0
    successes: int = 0
    failures: int = 0
    stopped: int = 0  # stopped by their caller: neither successes nor failures
    failures_by_kind: dict[str, int] = field(default_factory=dict)
    latency_histogram: list[int] = field(default_factory=empty_histogram)
    latency_sum_ms: float = 0.0
    input_tokens: int = 0
    output_tokens: int = 0
    result_tokens: int = 0
    cost_usd: float = 0.0

    def add(self, rollup: ToolRollup) -> None:
        add_tool_totals(self, rollup)

    @property
    def caller_faults(self) -> int:
        """Return the failures that were the caller's fault (CALLER_FAULTS), not the tool's."""
        return sum(self.failures_by_kind.get(kind, 0) for kind in CALLER_FAULTS)

    @property
    def judged_calls(self) -> int:
        """Return the calls that judge the tool: all but the caller's faults and stops."""
        return self.calls - self.caller_faults - self.stopped

    @property
    def success_rate(self) -> float | None:
        """Return the share of the calls judging the tool that succeeded (the evidence's)."""
        return self.successes / self.judged_calls if self.judged_calls else None

    @property
    def mean_latency_ms(self) -> float:
        """Return the mean latency of the calls judging the tool.

        The caller's faults are refused before the tool runs, in a fraction of a
        millisecond, so their latency is left in the sum but not in the count; a stopped
        call ended early, so its latency tells nothing either (in the sum, a small excess).
        """
        return self.latency_sum_ms / self.judged_calls if self.judged_calls else 0.0

    @property
    def calls_not_stopped(self) -> int:
        """Return the calls a failure rate is of: a stopped one neither failed nor succeeded."""
        return self.calls - self.stopped

    @property
    def p50_ms(self) -> float:
        return percentile_from_histogram(self.latency_histogram, 0.5)

    @property
    def p95_ms(self) -> float:
        return percentile_from_histogram(self.latency_histogram, 0.95)

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens + self.result_tokens


def _hours(time_range: TimeRange) -> dict[str, datetime]:
    """Return the rollup filter for the whole hours that overlap a range."""
    first = time_range.since.replace(minute=0, second=0, microsecond=0)
    return {"bucket_start__gte": first, "bucket_start__lt": time_range.until}


def whole_days(time_range: TimeRange) -> tuple[datetime, datetime]:
    """Return [first, end) of the UTC days whose 24 hours all overlap a range (maybe empty).

    An hour overlaps the range when it starts in [the range's first whole hour, until).
    """
    first = time_range.since.replace(minute=0, second=0, microsecond=0)
    first_day = day_start(day_of(first))
    if first_day < first:
        first_day += DAY
    # A day is whole when its last hour (day + 23 h) starts before `until`.
    end = day_start(day_of(time_range.until - timedelta(hours=23, microseconds=1))) + DAY
    return first_day, max(first_day, end)


# What ToolTotals.add reads of a rollup: named rows of these cost a fifth of model instances
# (a 7-day range of a busy site is thousands of rows).
_TOOL_ROLLUP_FIELDS = ("tool_name", "bucket_start", *ROLLUP_SUMMED_FIELDS)


def _tool_rollups(time_range: TimeRange, tools: Iterable[str] | None) -> Iterable[ToolRollup]:
    """Yield the hourly rollups of a range as tool_totals reads them (all tools, or some)."""
    rollups = ToolRollup.objects.filter(**_hours(time_range)).order_by()
    if tools is not None:
        rollups = rollups.filter(tool_name__in=list(tools))
    return rollups.values_list(*_TOOL_ROLLUP_FIELDS, named=True).iterator(chunk_size=2000)


def _tool_day_and_hour_rollups(
    time_range: TimeRange, tools: Iterable[str] | None
) -> Iterable[ToolRollup | ToolDayRollup]:
    """Yield, as _tool_rollups does, a day's row for each whole day and hours for the rest.

    The same sums in a seventh of the rows and less over a 7-day range: each day row is
    the sum of its day's hourly rows (ToolDayRollup).
    """
    days_from, days_until = whole_days(time_range)
    if days_from == days_until:
        return _tool_rollups(time_range, tools)
    hours = ToolRollup.objects.filter(**_hours(time_range)).exclude(
        bucket_start__gte=days_from, bucket_start__lt=days_until
    )
    days = ToolDayRollup.objects.filter(bucket_start__gte=days_from, bucket_start__lt=days_until)
    if tools is not None:
        tools = list(tools)
        hours, days = hours.filter(tool_name__in=tools), days.filter(tool_name__in=tools)
    return itertools.chain.from_iterable(
        rows.order_by().values_list(*_TOOL_ROLLUP_FIELDS, named=True).iterator(chunk_size=2000)
        for rows in (days, hours)
    )


def tool_totals(time_range: TimeRange, tools: Iterable[str] | None = None) -> list[ToolTotals]:
    """Return each tool's totals over a range (all tools, or the named ones), by name."""
    totals: dict[str, ToolTotals] = {}
    for rollup in _tool_day_and_hour_rollups(time_range, tools):
        totals.setdefault(rollup.tool_name, ToolTotals(rollup.tool_name)).add(rollup)
    return [totals[name] for name in sorted(totals)]


def tool_series(
    time_range: TimeRange, tools: Iterable[str] | None = None
) -> dict[str, dict[datetime, ToolTotals]]:
    """Return, per tool, its totals per chart bucket of a range (buckets without calls left out)."""
    series: dict[str, dict[datetime, ToolTotals]] = defaultdict(dict)
    for rollup in _tool_rollups(time_range, tools):
        bucket = time_range.bucket_of(rollup.bucket_start)
        points = series[rollup.tool_name]
        points.setdefault(bucket, ToolTotals(rollup.tool_name)).add(rollup)
    return dict(series)


@dataclass
class SpanTotals:
    """Spans of every kind summed over some hours: calls, failures, tokens and cost."""

    calls: int = 0
    failures: int = 0
    stopped: int = 0  # spans stopped by their caller: not failures
    caller_faults: int = 0  # failed tool calls that were the caller's fault (CALLER_FAULTS)
    tool_calls: int = 0
    llm_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    result_tokens: int = 0
    cost_usd: float = 0.0

    def add(self, rollup: SpanRollup) -> None:
        self.calls += rollup.calls
        self.failures += rollup.failures
        self.stopped += rollup.stopped
        self.caller_faults += rollup.caller_faults
        self.tool_calls += rollup.calls if rollup.kind == "tool" else 0
        self.llm_calls += rollup.calls if rollup.kind == "llm" else 0
        self.input_tokens += rollup.input_tokens
        self.output_tokens += rollup.output_tokens
        self.result_tokens += rollup.result_tokens
        self.cost_usd += rollup.cost_usd

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    @property
    def calls_not_stopped(self) -> int:
        """Return the spans an error rate is of: a stopped one neither failed nor succeeded."""
        return self.calls - self.stopped


@dataclass
class ActivitySummary:
    """The overview's numbers: totals, per chart bucket, and tool calls by chooser and place."""

    totals: SpanTotals
    by_bucket: dict[datetime, SpanTotals]
    tool_calls_by_chosen_by: dict[str, int]
    tool_calls_by_ran_on: dict[str, int]
    calls_by_agent: dict[str, int]
    by_agent: dict[str, SpanTotals] = field(default_factory=dict)  # "(none)": no agent


# SpanTotals' fields, summed in the database: a 7-day range holds one row an hour for every
# kind, chooser, place and agent (tens of thousands on a busy site), and the overview
# needs only these sums of them, over the range and by chart bucket, chooser, place, agent.
# (Named sum_<field>: an annotation may not take a field's name.)
_SPAN_SUMS = {
    **{
        f"sum_{name}": Sum(name, default=0)
        for name in (
            "calls", "failures", "stopped", "caller_faults", "input_tokens", "output_tokens",
            "result_tokens",
        )
    },
    "sum_cost_usd": Sum("cost_usd", default=0.0),
    "sum_tool_calls": Sum("calls", filter=Q(kind="tool"), default=0),
    "sum_llm_calls": Sum("calls", filter=Q(kind="llm"), default=0),
}  # fmt: skip


def _span_totals(sums: dict[str, object]) -> SpanTotals:
    """Return the SpanTotals of one row of _SPAN_SUMS."""
    return SpanTotals(**{name.removeprefix("sum_"): value for name, value in sums.items()})


def activity(time_range: TimeRange) -> ActivitySummary:
    """Return the span totals of a range, from the span rollups: four sums in the database."""
    hours = SpanRollup.objects.filter(**_hours(time_range)).order_by()
    totals = _span_totals(hours.aggregate(**_SPAN_SUMS))
    if time_range.bucket == DAY:
        chart_bucket = Trunc("bucket_start", "day", tzinfo=UTC)
    else:
        chart_bucket = F("bucket_start")
    by_bucket = {
        row.pop("chart_bucket").astimezone(UTC): _span_totals(row)
        for row in hours.values(chart_bucket=chart_bucket).annotate(**_SPAN_SUMS)
    }
    agents = {
        row.pop("agent") or "(none)": _span_totals(row)
        for row in hours.values("agent").annotate(**_SPAN_SUMS)
    }
    chosen_by: dict[str, int] = defaultdict(int)
    ran_on: dict[str, int] = defaultdict(int)
    tool_hours = hours.filter(kind="tool").values("chosen_by", "ran_on")
    for row in tool_hours.annotate(tool_calls=Sum("calls")):
        chosen_by[row["chosen_by"] or "unknown"] += row["tool_calls"]
        ran_on[row["ran_on"] or "unknown"] += row["tool_calls"]
    calls_by_agent = {agent: agent_totals.calls for agent, agent_totals in agents.items()}
    return ActivitySummary(totals, by_bucket, dict(chosen_by), dict(ran_on), calls_by_agent, agents)


def range_spend(time_range: TimeRange) -> dict[str, float]:
    """Return the input and output tokens and the cost of the spans started in a range's hours."""
    hours = SpanRollup.objects.filter(**_hours(time_range)).order_by()
    return hours.aggregate(
        input_tokens=Sum("input_tokens", default=0),
        output_tokens=Sum("output_tokens", default=0),
        cost_usd=Sum("cost_usd", default=0.0),
    )


@dataclass(frozen=True)
class Change:
    """A number against the previous period: "+12.5%", "-3.0 pts", "new", or "no change".

    `tone` says whether it went the good way ("better"), the bad way ("worse"), or neither.
    """

    text: str
    previous: str
    tone: str = ""
    absent: bool = False  # the previous period had nothing to compare with

    @property
    def arrow(self) -> str:
        """Return ▲ for a rise and ▼ for a fall, whichever way is good."""
        return {"+": "▲", "-": "▼"}.get(self.text[:1], "")


def relative_change(now: float, before: float, worse_when_up: bool | None = None) -> Change:
    """Return the change of a count or amount against the previous period, in percent."""
    previous = f"{before:,.0f}" if float(before).is_integer() else f"{before:,.2f}"
    if now == before:
        return Change("no change", previous)
    if not before:
        return Change("new", previous, absent=True)
    return Change(f"{(now - before) / before:+.1%}", previous, _tone(now > before, worse_when_up))


def rate_change(now: float | None, before: float | None, worse_when_up: bool = True) -> Change:
    """Return the change of a rate (a share) against the previous period, in points."""
    if before is None:
        return Change("no previous calls", "–", absent=True)
    previous = f"{before:.1%}"
    if now is None:
        return Change("no calls now", previous)
    points = (now - before) * 100
    if abs(points) < 0.05:
        return Change("no change", previous)
    return Change(f"{points:+.1f} pts", previous, _tone(points > 0, worse_when_up))


def _tone(went_up: bool, worse_when_up: bool | None) -> str:
    if worse_when_up is None:
        return ""
    return "worse" if went_up == worse_when_up else "better"


@dataclass(frozen=True)
class ToolChange:
    """One tool's calls, success rate and p95 against the previous period of the same length."""

    calls: Change
    success_rate: Change
    p95_ms: Change
    previous: ToolTotals


def tool_changes(time_range: TimeRange, tools: Iterable[ToolTotals]) -> dict[str, ToolChange]:
    """Return, per tool of a range's totals, its changes against the previous period.

    One more read of the rollups (the previous period's), whatever the number of tools.
    """
    tools = list(tools)
    before = {
        tool.tool_name: tool
        for tool in tool_totals(time_range.previous(), [tool.tool_name for tool in tools])
    }
    changes = {}
    for tool in tools:
        old = before.get(tool.tool_name, ToolTotals(tool.tool_name))
        changes[tool.tool_name] = ToolChange(
            calls=relative_change(tool.calls, old.calls),
            success_rate=rate_change(tool.success_rate, old.success_rate, worse_when_up=False),
            p95_ms=relative_change(
                round(tool.p95_ms, 1) if tool.calls else 0,
                round(old.p95_ms, 1) if old.calls else 0,
                worse_when_up=True,
            ),
            previous=old,
        )
    return changes
