"""What a monitor measures: one metric of its target over the window [now - window, now).

Each read is bounded by the window on an indexed start time (spans, traces, spirals), and by
the target's own index where it has one (tool name, agent). A rate or a percentile of fewer
calls than the monitor's min_calls has no value (None): evaluation leaves the state as it is.
Counts and sums (calls, cost, spirals, breaker trips) always have one.

Scopes: a tool (its name), a capability (the tools mapped to it or declaring it), an agent
(the spans or traces it recorded) or the whole site. `monitor_problems` says which
definitions cannot be measured, for the admin's form and the API.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import connection
from django.db.models import Count, Exists, OuterRef, Q, QuerySet, Sum

from planner_app.evidence import capability_names, own_candidate, score_with
from planner_app.monitors.records import Comparison, Metric, Monitor, Scope
from planner_app.pipeline.resolution import Candidate, ToolResolver
from planner_app.pipeline.scoring import Evidence
from planner_app.ruleset_versions import current_ruleset
from planner_app.version_effects import recorded_requests
from tools_app.site_engine import get_engine
from traces_app.models import (
    FailureSpiral,
    Invocation,
    SpanKind,
    SpanStatus,
    Trace,
    caller_fault_q,
)
from traces_app.models.trace_records import PercentileCont
from traces_app.rollups.histogram import percentile_cont

TRACES_SHOWN = 20
# Rates and counts a threshold can be set on: (lowest, highest) of each metric.
THRESHOLD_RANGES: dict[str, tuple[float, float]] = {
    Metric.ERROR_RATE: (0.0, 1.0),
    Metric.P95_LATENCY: (0.0, 24 * 3600 * 1000.0),
    Metric.CALLS: (0.0, 1e9),
    Metric.COST_PER_HOUR: (0.0, 1e6),
    Metric.SCORE_DROP: (-100.0, 100.0),
    Metric.SPIRALS: (0.0, 1e9),
    Metric.BREAKER_TRIPS: (0.0, 1e9),
    Metric.NEEDS_LLM_RATE: (0.0, 1.0),
}
# Metrics that only mean something for tools (a score is a tool's, or a capability's best).
TOOL_METRICS = {Metric.SCORE_DROP}
_resolver = ToolResolver()


@dataclass(frozen=True)
class Measurement:
    """A metric's value over a window, the calls it judged and some traces behind it."""

    value: float | None  # None: fewer calls than min_calls, not judged
    calls: int
    window_start: datetime
    window_end: datetime
    trace_ids: list[str]
    detail: str


def measure(monitor: Monitor, now: datetime) -> Measurement:
    """Return the monitor's metric of its target over the window ending at `now`."""
    start = now - timedelta(minutes=monitor.window_minutes)
    return MEASURES[monitor.metric](monitor, start, now)


def target_text(monitor: Monitor) -> str:
    """Return what the monitor watches, in words: "tool web_search", "the whole site"."""
    if monitor.scope == Scope.SITE:
        return "the whole site"
    return f"{monitor.scope} {monitor.target}"


def value_text(metric: str, value: float | None) -> str:
    """Return a metric's value as shown: a percentage, milliseconds, dollars or a count."""
    if value is None:
        return "not judged"
    if metric in (Metric.ERROR_RATE, Metric.NEEDS_LLM_RATE):
        return f"{value:.1%}"
    if metric == Metric.P95_LATENCY:
        return f"{value:.0f} ms"
    if metric == Metric.COST_PER_HOUR:
        return f"${value:.4f}/h"
    if metric == Metric.SCORE_DROP:
        return f"{value:+.3f}"
    return f"{value:g}"


def breaches(monitor: Monitor, value: float | None) -> bool:
    """Return whether a value crosses the monitor's threshold (None never does)."""
    if value is None:
        return False
    if monitor.comparison == Comparison.BELOW:
        return value < monitor.threshold
    return value > monitor.threshold


# Targets -------------------------------------------------------------------------------


def capability_tools(capability: str) -> list[str]:
    """Return the tools that serve a capability: mapped to it, or declaring it."""
    ruleset, registry = current_ruleset(), get_engine().registry
    mapped = {m.tool for m in ruleset.mappings if m.capability == capability}
    declared = {
        spec.name for spec in registry.list(enabled_only=False) if capability in spec.capabilities
    }
    return sorted(mapped | declared)


def scoped_tools(monitor: Monitor) -> list[str] | None:
    """Return the tools a tool or capability monitor watches; None for an agent or the site."""
    if monitor.scope == Scope.TOOL:
        return [monitor.target]
    if monitor.scope == Scope.CAPABILITY:
        return capability_tools(monitor.target)
    return None


def scoped_spans(monitor: Monitor, start: datetime, end: datetime) -> QuerySet[Invocation]:
    """Return the monitor's spans (any kind) that started in [start, end)."""
    spans = Invocation.objects.filter(started_at__gte=start, started_at__lt=end)
    tools = scoped_tools(monitor)
    if tools is not None:
        return spans.filter(tool_name__in=tools)
    if monitor.scope == Scope.AGENT:
        return spans.filter(agent=monitor.target)
    return spans


def judged_tool_spans(monitor: Monitor, start: datetime, end: datetime) -> QuerySet[Invocation]:
    """Return the monitor's tool calls in the window that a stop did not end."""
    spans = scoped_spans(monitor, start, end).filter(kind=SpanKind.TOOL)
    return spans.exclude(status=SpanStatus.STOPPED)


def monitor_problems(fields: dict[str, Any]) -> dict[str, str]:
    """Return what is wrong with a monitor's definition, per field; {} when it can be measured.

    `fields` holds metric, scope, target and threshold (as the form or the API has them).
    """
    problems: dict[str, str] = {}
    metric, scope = fields.get("metric"), fields.get("scope")
    target = (fields.get("target") or "").strip()
    if scope == Scope.SITE and target:
        problems["target"] = "a site monitor has no target: leave it blank"
    elif scope != Scope.SITE and not target:
        problems["target"] = f"name the {scope} to watch"
    elif scope == Scope.TOOL and not _tool_exists(target):
        problems["target"] = f"no tool named {target!r} is registered or recorded"
    elif scope == Scope.CAPABILITY and target not in _capabilities():
        problems["target"] = f"no capability named {target!r} (see /capabilities/)"
    if metric in TOOL_METRICS and scope in (Scope.SITE, Scope.AGENT):
        problems["scope"] = "an evidence-score drop is measured on a tool or a capability"
    threshold = fields.get("threshold")
    if metric in THRESHOLD_RANGES and isinstance(threshold, int | float):
        low, high = THRESHOLD_RANGES[metric]
        if not low <= threshold <= high:
            problems["threshold"] = f"{metric} thresholds are between {low:g} and {high:g}"
    return problems


def _tool_exists(name: str) -> bool:
    """Return whether a tool is registered, or an outside agent has reported calls of it."""
    if name in get_engine().registry:
        return True
    return Invocation.objects.filter(tool_name=name).exists()


def _capabilities() -> list[str]:
    return capability_names(current_ruleset(), get_engine().registry)


# The metrics ---------------------------------------------------------------------------


def _newest_traces(spans: QuerySet, order: Iterable[str] = ("-started_at",)) -> list[str]:
    """Return up to TRACES_SHOWN distinct trace ids of these rows, in the given order."""
    found: list[str] = []
    for trace_id in spans.order_by(*order).values_list("trace_id", flat=True)[: TRACES_SHOWN * 5]:
        if trace_id not in found:
            found.append(trace_id)
        if len(found) == TRACES_SHOWN:
            break
    return found


def _judged(monitor: Monitor, calls: int) -> bool:
    return calls > 0 and calls >= monitor.min_calls


def _too_few(monitor: Monitor, calls: int, what: str = "calls") -> str:
    return f"{calls} {what} in the window, fewer than the {monitor.min_calls} it needs"


def error_rate(monitor: Monitor, start: datetime, end: datetime) -> Measurement:
    """Return the share of tool calls that failed (calls a stop ended are not judged)."""
    spans = judged_tool_spans(monitor, start, end)
    totals = spans.aggregate(calls=Count("pk"), failures=Count("pk", filter=Q(status="error")))
    calls, failures = totals["calls"], totals["failures"]
    traces = _newest_traces(spans.filter(status=SpanStatus.ERROR))
    if not _judged(monitor, calls):
        return Measurement(None, calls, start, end, traces, _too_few(monitor, calls))
    detail = f"{failures} of {calls} calls failed"
    return Measurement(failures / calls, calls, start, end, traces, detail)


def p95_latency(monitor: Monitor, start: datetime, end: datetime) -> Measurement:
    """Return the 95th percentile of the tool calls' latency, in milliseconds."""
    spans = judged_tool_spans(monitor, start, end)
    calls = spans.count()
    traces = _newest_traces(spans, ("-latency_ms", "-started_at"))
    if not _judged(monitor, calls):
        return Measurement(None, calls, start, end, traces, _too_few(monitor, calls))
    if connection.vendor == "postgresql":
        value = spans.aggregate(p95=PercentileCont("latency_ms", 0.95))["p95"]
    else:  # SQLite has no percentile function: interpolate the same way in Python
        latencies = list(spans.order_by("latency_ms").values_list("latency_ms", flat=True))
        value = percentile_cont(latencies, 0.95)
    return Measurement(value, calls, start, end, traces, f"p95 of {calls} calls")


def calls(monitor: Monitor, start: datetime, end: datetime) -> Measurement:
    """Return how many tool calls were made (a "below" monitor watches them stopping)."""
    spans = scoped_spans(monitor, start, end).filter(kind=SpanKind.TOOL)
    count = spans.count()
    detail = f"{count} tool calls"
    return Measurement(float(count), count, start, end, _newest_traces(spans), detail)


def cost_per_hour(monitor: Monitor, start: datetime, end: datetime) -> Measurement:
    """Return the cost of the window's spans (LLM and tool calls) per hour, in USD."""
    spans = scoped_spans(monitor, start, end)
    totals = spans.aggregate(spans=Count("pk"), cost=Sum("cost_usd", default=0.0))
    hours = (end - start).total_seconds() / 3600
    traces = _newest_traces(spans.filter(cost_usd__gt=0), ("-cost_usd", "-started_at"))
    detail = f"${totals['cost']:.4f} over {totals['spans']} spans"
    return Measurement(totals["cost"] / hours, totals["spans"], start, end, traces, detail)


def score_drop(monitor: Monitor, start: datetime, end: datetime) -> Measurement:
    """Return how far the evidence score fell against the window before (positive: fell).

    A tool is scored as the planner scores it (its own candidate); a capability by its best
    candidate. Each window's calls are the evidence, as on the evidence pages: calls that
    failed by the caller's fault and stopped calls are left out.
    """
    previous = start - (end - start)
    candidates = _candidates(monitor)
    if not candidates:
        detail = f"{target_text(monitor)} has no registered tool to score"
        return Measurement(None, 0, start, end, [], detail)
    now_score, now_calls = _best_score(monitor, candidates, start, end)
    before_score, before_calls = _best_score(monitor, candidates, previous, start)
    spans = judged_tool_spans(monitor, start, end).filter(status=SpanStatus.ERROR)
    traces = _newest_traces(spans)
    if not (_judged(monitor, now_calls) and _judged(monitor, before_calls)):
        detail = f"{now_calls} calls in the window and {before_calls} in the one before"
        return Measurement(None, now_calls, start, end, traces, detail + ": too few to score")
    detail = f"score {now_score:.3f} now, {before_score:.3f} in the window before"
    return Measurement(before_score - now_score, now_calls, start, end, traces, detail)


def _candidates(monitor: Monitor) -> list[Candidate]:
    """Return the candidates a score-drop monitor scores: the tool's own, or the capability's."""
    registry, ruleset = get_engine().registry, current_ruleset()
    if monitor.scope == Scope.CAPABILITY:
        return _resolver.resolve(monitor.target, registry, ruleset)[0]
    specs = [spec for spec in registry.list(enabled_only=False) if spec.name == monitor.target]
    return [own_candidate(spec) for spec in specs]


def _best_score(
    monitor: Monitor, candidates: list[Candidate], start: datetime, end: datetime
) -> tuple[float, int]:
    """Return the best candidate's score on the window's calls, and the calls judged."""
    ruleset = current_ruleset()
    names = [c.spec.name for c in candidates]
    spans = (
        Invocation.objects.filter(
            kind=SpanKind.TOOL, tool_name__in=names, started_at__gte=start, started_at__lt=end
        )
        .exclude(caller_fault_q())
        .exclude(status=SpanStatus.STOPPED)
    )
    rows = spans.values("tool_name").annotate(
        calls=Count("pk"), ok=Count("pk", filter=Q(status=SpanStatus.OK)), latency=Sum("latency_ms")
    )
    evidence = {
        row["tool_name"]: Evidence(
            row["calls"], row["ok"] / row["calls"], row["latency"] / row["calls"]
        )
        for row in rows
    }
    scores = [score_with(c, ruleset, evidence.get(c.spec.name)).final for c in candidates]
    return max(scores), sum(e.samples for e in evidence.values())


def spirals_started(monitor: Monitor, start: datetime, end: datetime) -> Measurement:
    """Return how many failure spirals started in the window."""
    spirals = FailureSpiral.objects.filter(started_at__gte=start, started_at__lt=end)
    tools = scoped_tools(monitor)
    if tools is not None:
        spirals = spirals.filter(tool_name__in=tools)
    elif monitor.scope == Scope.AGENT:
        spirals = spirals.filter(trace__agent=monitor.target)
    count = spirals.count()
    traces = _newest_traces(spirals)
    return Measurement(float(count), count, start, end, traces, f"{count} spirals started")


def breaker_trips(monitor: Monitor, start: datetime, end: datetime) -> Measurement:
    """Return how many agent tasks the loop's spiral breaker ended in the window.

    The agent loop records each task as an agent span whose result's finish_reason is
    "spiral_breaker" when the breaker stopped a spiral (planner_app.agents.loop). A tool
    or capability monitor counts the tasks whose trace holds a spiral of its tools.
    """
    spans = Invocation.objects.filter(
        kind=SpanKind.AGENT, started_at__gte=start, started_at__lt=end
    ).filter(result__finish_reason="spiral_breaker")
    tools = scoped_tools(monitor)
    if tools is not None:
        spirals = FailureSpiral.objects.filter(trace_id=OuterRef("trace_id"), tool_name__in=tools)
        spans = spans.filter(Exists(spirals))
    elif monitor.scope == Scope.AGENT:
        spans = spans.filter(agent=monitor.target)
    count = spans.count()
    traces = _newest_traces(spans)
    return Measurement(
        float(count), count, start, end, traces, f"{count} tasks ended by the breaker"
    )


def needs_llm_rate(monitor: Monitor, start: datetime, end: datetime) -> Measurement:
    """Return the share of recorded requests whose first tool call the planner did not choose.

    A recorded request as planner_app.version_effects reads it: a trace with a request text
    and a tool call not stopped; the planner planned it without the LLM when it chose the
    first call. The newest requests of the window are read, at most REQUESTS_READ.
    """
    traces = Trace.objects.filter(started_at__gte=start, started_at__lt=end)
    tools = scoped_tools(monitor)
    if tools is not None:
        held = Invocation.objects.filter(
            trace_id=OuterRef("pk"),
            tool_name__in=tools,
            started_at__gte=OuterRef("started_at"),  # the trace's bounds: its partitions
            started_at__lte=OuterRef("ended_at"),
        )
        traces = traces.filter(Exists(held))
    elif monitor.scope == Scope.AGENT:
        traces = traces.filter(agent=monitor.target)
    outcomes, more = recorded_requests(traces.order_by("-started_at"))
    needed = [outcome for outcome in outcomes if not outcome.planner_first]
    traces_shown = [outcome.trace_id for outcome in needed[:TRACES_SHOWN]]
    count = len(outcomes)
    if not _judged(monitor, count):
        detail = _too_few(monitor, count, "requests")
        return Measurement(None, count, start, end, traces_shown, detail)
    detail = f"{len(needed)} of {count} {'newest ' if more else ''}requests needed the LLM"
    return Measurement(len(needed) / count, count, start, end, traces_shown, detail)


MEASURES: dict[str, Callable[[Monitor, datetime, datetime], Measurement]] = {
    Metric.ERROR_RATE: error_rate,
    Metric.P95_LATENCY: p95_latency,
    Metric.CALLS: calls,
    Metric.COST_PER_HOUR: cost_per_hour,
    Metric.SCORE_DROP: score_drop,
    Metric.SPIRALS: spirals_started,
    Metric.BREAKER_TRIPS: breaker_trips,
    Metric.NEEDS_LLM_RATE: needs_llm_rate,
}
