"""What a rule-set version did: the recorded requests after it against the same span before.

A recorded request is a trace with a request text and at least one tool call not stopped
by its caller, dated by its trace's start; the version that planned it is the newest one
created at or before that moment. From its tool calls in order (the raw spans):

- planned: the planner chose at least one of its tool calls;
- planned without the LLM: the planner chose its first tool call (no LLM or outside agent
  chose one before it);
- a fallback: the planner's calls came after a failed call someone else chose (the
  Bridge's fallback, a spiral broken, a workflow step that failed);
- the planner succeeded: every call the planner chose in it succeeded.

Requests the planner could not plan leave no planner call, so they count as requests
and not as planned ones. Both sides of a comparison are grouped by the capabilities the
version's own rules read in each request, so the same kind of request falls in the same
row before and after the change.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db.models import Exists, OuterRef, QuerySet
from django.urls import reverse
from django.utils import timezone

from planner_app.models import RuleSetVersion
from planner_app.pipeline.analysis import SemanticAnalyzer
from planner_app.pipeline.ruleset import RuleSet
from planner_app.ruleset_versions import ruleset_from_snapshot
from traces_app.charts import Chart, Marker, with_markers
from traces_app.models import ChosenBy, Invocation, SpanKind, SpanStatus, Trace

# The most requests one side of a comparison reads (the first after, the last before).
REQUESTS_READ = 2000
NO_RULE = "(no rule matches)"
Z_95 = 1.959964


@dataclass(frozen=True)
class RequestOutcome:
    """One recorded request and what the planner did in it (see the module's docstring)."""

    trace_id: str
    request: str
    at: datetime
    planner_first: bool
    fallback: bool
    planner_ok: bool | None  # None: the planner chose none of its calls

    @property
    def planned(self) -> bool:
        return self.planner_ok is not None


def outcome_of(
    trace_id: str, request: str, at: datetime, calls: list[tuple[str, str]]
) -> RequestOutcome:
    """Return what the planner did in a request, from its tool calls (chosen_by, status)."""
    planner = [status for chosen_by, status in calls if chosen_by == ChosenBy.PLANNER]
    if not planner:
        return RequestOutcome(trace_id, request, at, False, False, None)
    first_planned = next(i for i, (chosen_by, _) in enumerate(calls) if chosen_by == "planner")
    fallback = any(status == SpanStatus.ERROR for _, status in calls[:first_planned])
    ok = all(status == SpanStatus.OK for status in planner)
    return RequestOutcome(trace_id, request, at, first_planned == 0, fallback, ok)


def recorded_requests(
    traces: QuerySet[Trace], limit: int = REQUESTS_READ
) -> tuple[list[RequestOutcome], bool]:
    """Return the outcomes of up to `limit` requests of an ordered trace query, and whether
    more were left unread.

    Two queries whatever the limit: the traces, then their tool calls (the same trace query
    as a subquery, which the database runs once, rather than thousands of ids sent back).
    """
    requests = traces.exclude(request_text="").filter(tool_calls__gt=0)
    fields = ("trace_id", "request_text", "started_at", "ended_at")
    rows = list(requests.values_list(*fields)[: limit + 1])
    more = len(rows) > limit
    rows = rows[:limit]
    bounds = (min(row[2] for row in rows), max(row[3] for row in rows)) if rows else None
    calls = _tool_calls(requests.values("pk")[:limit], bounds) if bounds else {}
    outcomes = [
        outcome_of(trace_id, request, at, calls[trace_id])
        for trace_id, request, at, _ in rows
        if calls.get(trace_id)  # every tool call stopped: nothing to judge
    ]
    return outcomes, more


def _tool_calls(
    trace_ids: QuerySet[Trace], bounds: tuple[datetime, datetime]
) -> dict[str, list[tuple[str, str]]]:
    """Return each trace's tool calls not stopped, (chosen_by, status) in the order they began.

    Every span of a trace starts within the trace's [started_at, ended_at], so only the
    spans within `bounds` (those of the traces read) need be: the span time index (and on
    PostgreSQL the day partitions) bounds the scan.
    """
    spans = (
        Invocation.objects.filter(trace_id__in=trace_ids, kind=SpanKind.TOOL)
        .within(bounds)
        .exclude(status=SpanStatus.STOPPED)
        .order_by("trace_id", "started_at", "pk")
        .values_list("trace_id", "chosen_by", "status")
    )
    found: dict[str, list[tuple[str, str]]] = {}
    for trace_id, chosen_by, status in spans.iterator(chunk_size=5000):
        found.setdefault(trace_id, []).append((chosen_by, status))
    return found


def requests_between(since: datetime, until: datetime) -> QuerySet[Trace]:
    """Return the traces that started in [since, until)."""
    return Trace.objects.filter(started_at__gte=since, started_at__lt=until)


def planned_requests(traces: QuerySet[Trace]) -> QuerySet[Trace]:
    """Return the traces in which the planner chose a tool call that was not stopped."""
    planner_calls = Invocation.objects.filter(
        trace_id=OuterRef("pk"),
        kind=SpanKind.TOOL,
        chosen_by=ChosenBy.PLANNER,
        started_at__gte=OuterRef("started_at"),  # the trace's bounds: its partitions
        started_at__lte=OuterRef("ended_at"),
    ).exclude(status=SpanStatus.STOPPED)
    return traces.filter(Exists(planner_calls))


@dataclass(frozen=True)
class Share:
    """A part of a whole, with its 95% Wilson interval."""

    part: int
    whole: int

    @property
    def rate(self) -> float | None:
        return self.part / self.whole if self.whole else None

    @property
    def interval(self) -> tuple[float, float] | None:
        return wilson_interval(self.part, self.whole)

    @property
    def text(self) -> str:
        if not self.whole:
            return "–"
        low, high = self.interval or (0.0, 0.0)
        return f"{self.rate:.1%} ({self.part} of {self.whole}; 95% CI {low:.0%}–{high:.0%})"

    @property
    def percent(self) -> str:
        return f"{self.rate:.1%}" if self.whole else "–"


def wilson_interval(part: int, whole: int, z: float = Z_95) -> tuple[float, float] | None:
    """Return the Wilson score interval of part/whole (None when whole is 0)."""
    if not whole:
        return None
    p = part / whole
    centre = (p + z * z / (2 * whole)) / (1 + z * z / whole)
    half = z * math.sqrt(p * (1 - p) / whole + z * z / (4 * whole * whole)) / (1 + z * z / whole)
    return max(0.0, centre - half), min(1.0, centre + half)


def change_text(before: Share, after: Share) -> str:
    """Return after minus before in percentage points, "after vs before: +12.0 points"."""
    if before.rate is None or after.rate is None:
        return "– (a side has no requests)"
    points = (after.rate - before.rate) * 100
    return f"after vs before: {points:+.1f} points"


@dataclass
class Tally:
    """What the planner did in a set of requests, counted."""

    requests: int = 0
    planner_first: int = 0
    planned: int = 0
    planner_ok: int = 0
    fallbacks: int = 0

    def add(self, outcome: RequestOutcome) -> None:
        self.requests += 1
        self.planner_first += outcome.planner_first
        self.fallbacks += outcome.fallback
        if outcome.planned:
            self.planned += 1
            self.planner_ok += bool(outcome.planner_ok)

    @property
    def without_llm(self) -> Share:
        return Share(self.planner_first, self.requests)

    @property
    def success(self) -> Share:
        return Share(self.planner_ok, self.planned)

    @property
    def fallback_share(self) -> Share:
        return Share(self.fallbacks, self.requests)


@dataclass(frozen=True)
class Window:
    """One side of a comparison: a span of time and the requests read in it."""

    since: datetime
    until: datetime
    outcomes: list[RequestOutcome]
    more: bool  # more requests than REQUESTS_READ: only the ones nearest the version were read

    @property
    def hours(self) -> float:
        return (self.until - self.since).total_seconds() / 3600


@dataclass
class VersionEffect:
    """A version's requests against those of the same span of time before it."""

    version: RuleSetVersion
    previous: RuleSetVersion | None
    following: RuleSetVersion | None
    before: Window
    after: Window
    totals: tuple[Tally, Tally] = field(default_factory=lambda: (Tally(), Tally()))
    by_capability: dict[str, tuple[Tally, Tally]] = field(default_factory=dict)

    @property
    def rows(self) -> list[tuple[str, Share, Share]]:
        """Return the three compared figures as (label, before, after)."""
        before, after = self.totals
        return [
            ("Planned without the LLM (of requests)", before.without_llm, after.without_llm),
            ("Planner success (of planned requests)", before.success, after.success),
            ("Fallbacks to the planner (of requests)", before.fallback_share, after.fallback_share),
        ]

    @property
    def capability_rows(self) -> list[tuple[str, Tally, Tally]]:
        """Return the per-capability tallies, busiest first, the unmatched requests last."""
        rows = [(name, b, a) for name, (b, a) in self.by_capability.items()]
        rows.sort(key=lambda row: (row[0] == NO_RULE, -(row[1].requests + row[2].requests),
                                   row[0]))  # fmt: skip
        return rows


def effect_of(
    version: RuleSetVersion, now: datetime | None = None, limit: int = REQUESTS_READ
) -> VersionEffect:
    """Return what `version` did: its requests (until the next version, or now) against the
    requests of the same span of time before it."""
    now = now or timezone.now()
    following = RuleSetVersion.objects.filter(number__gt=version.number).order_by("number").first()
    previous = RuleSetVersion.objects.filter(number__lt=version.number).order_by("-number").first()
    start = version.created_at
    end = max(following.created_at if following else now, start)
    span = end - start
    after_q = requests_between(start, end).order_by("started_at", "trace_id")
    before_q = requests_between(start - span, start).order_by("-started_at", "-trace_id")
    after = Window(start, end, *recorded_requests(after_q, limit))
    before = Window(start - span, start, *recorded_requests(before_q, limit))
    effect = VersionEffect(version, previous, following, before, after)
    _count(effect, ruleset_from_snapshot(version.snapshot, version.number))
    return effect


def _count(effect: VersionEffect, ruleset: RuleSet) -> None:
    """Tally both sides, in total and by the capabilities `ruleset` reads in each request."""
    analyzer = SemanticAnalyzer()
    read: dict[str, str] = {}  # request text -> its row: agents send the same text often
    for side, window in enumerate((effect.before, effect.after)):
        for outcome in window.outcomes:
            name = read.get(outcome.request)
            if name is None:
                capabilities = analyzer.analyze(outcome.request, ruleset).capabilities
                name = read[outcome.request] = " + ".join(sorted(capabilities)) or NO_RULE
            pair = effect.by_capability.setdefault(name, (Tally(), Tally()))
            pair[side].add(outcome)
            effect.totals[side].add(outcome)


def version_at(moment: datetime) -> RuleSetVersion | None:
    """Return the version in effect at `moment`: the newest created at or before it."""
    return RuleSetVersion.objects.filter(created_at__lte=moment).order_by("-number").first()


def span_text(span: timedelta) -> str:
    """Return a span of time as people say it: 45 min, 3.5 h, 2.0 days."""
    hours = span.total_seconds() / 3600
    if hours < 1:
        return f"{span.total_seconds() / 60:.0f} min"
    return f"{hours:.1f} h" if hours < 48 else f"{hours / 24:.1f} days"


MARKERS_SHOWN = 40  # the newest versions of a range marked on its charts


def version_markers(since: datetime, until: datetime) -> list[Marker]:
    """Return a marker for each rule-set version made in [since, until), oldest first."""
    versions = (
        RuleSetVersion.objects.filter(created_at__gte=since, created_at__lt=until)
        .order_by("-number")
        .values_list("number", "created_at", "change")[:MARKERS_SHOWN]
    )
    return [
        Marker(at, f"v{number}", reverse("planner-version", args=[number]), change)
        for number, at, change in reversed(list(versions))
    ]


def marked(charts: list[Chart], since: datetime, until: datetime) -> list[Chart]:
    """Return the charts with the range's rule-set versions marked on their time axes."""
    markers = version_markers(since, until)
    return [with_markers(chart, markers) for chart in charts]
