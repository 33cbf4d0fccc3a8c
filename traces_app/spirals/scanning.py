"""Failure spirals in stored traces: read a trace's calls, apply the rule, store what it finds.

The rule itself is plain data in spirals/detection.py; this is where it meets the
database: which traces new spans may have changed (spiral_candidates), detection for one
trace or for a batch's traces at once, the periodic rescan, and the LLM turns that a
spiral's calls cost. Ingest (ingest/recording.py), the beat (tasks.py) and the agent
loop's breaker all use it, so it imports neither of them.
"""

from __future__ import annotations

import dataclasses
import threading
from bisect import bisect_right
from collections import Counter, OrderedDict
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, F, OuterRef, Q, Window
from django.db.models.functions import RowNumber
from django.utils import timezone

from traces_app.models import (
    FailureSpiral,
    Invocation,
    SpanKind,
    SpanStatus,
    SpiralResolution,
    Trace,
)
from traces_app.models.trace_records import InvocationQuerySet
from traces_app.spirals.detection import CallView, SpiralRule, arguments_fingerprint, find_spirals


def spiral_rule() -> SpiralRule:
    """Return the spiral rule the settings define."""
    return SpiralRule(
        min_repeats=settings.ARES_SPIRAL_MIN_REPEATS,
        allow_tools=frozenset(settings.ARES_SPIRAL_ALLOW_TOOLS),
    )


class _RecentCalls:
    """A bounded, thread-safe count of recent (trace, tool, arguments) this process stored.

    It lets a healthy span cost no query: only a trace where one call's arguments have
    come min_repeats times is worth re-reading for a loop. Being per process, a loop whose
    calls reach different worker processes can go unseen until one process has counted
    min_repeats of them (or the trace fails min_repeats times).
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self.counts: OrderedDict[tuple[str, str, str], int] = OrderedDict()
        self.lock = threading.Lock()

    def add(self, key: tuple[str, str, str]) -> int:
        """Count one more call with this key; return how many have been counted."""
        with self.lock:
            count = self.counts.pop(key, 0) + 1
            self.counts[key] = count
            if len(self.counts) > self.size:
                self.counts.popitem(last=False)
            return count


_recent_calls = _RecentCalls(size=10_000)  # ~2 MB a process; loops repeat within seconds


def spiral_candidates(rows: Sequence[dict[str, Any]], failed_calls: dict[str, int]) -> set[str]:
    """Return the traces whose new tool spans may have started or changed a spiral.

    A trace qualifies when it has failed at least min_repeats times in all (a failing
    spiral needs that many failures, and later spans may resolve it) or when a call's
    arguments have now come min_repeats times (a loop). Others are not read again.
    """
    rule = spiral_rule()
    candidates = set()
    for row in rows:
        if row["kind"] != SpanKind.TOOL:
            continue
        trace_id = row["trace_id"]
        if failed_calls.get(trace_id, 0) >= rule.min_repeats:
            candidates.add(trace_id)
        elif row["tool_name"] not in rule.allow_tools:
            key = (trace_id, row["tool_name"], arguments_fingerprint(row["arguments"]))
            if _recent_calls.add(key) >= rule.min_repeats:
                candidates.add(trace_id)
    return candidates


# How many of a trace's newest tool calls detection reads: a long-lived trace (an agent
# session reusing one id) must not cost a read of its whole history on every new span.
SPIRAL_WINDOW = 100


def detect_spirals(trace_id: str) -> None:
    """Read a trace's newest tool calls and store their spirals, replacing older findings.

    The reads are the agent loop's breaker's (newest_tool_calls, with_llm_turns), so the
    breaker and the dashboards agree; detect_spirals_in_traces finds the same for many.
    """
    spans = Invocation.objects.of_trace_ids([trace_id])
    calls = with_llm_turns(spans, newest_tool_calls(spans))
    FailureSpiral.objects.replace_for_traces({trace_id: _found_spirals(calls)})


def detect_spirals_in_traces(trace_ids: Iterable[str]) -> None:
    """Detect and store the spirals of many traces at once, as detect_spirals does for one.

    A constant number of queries whatever the number of traces (their bounds, their newest
    tool calls, the LLM turns before them, then the spirals' writes), where one trace at
    a time took six each. In ingest this runs after the traces' totals were updated, in
    the same transaction: their time bounds already hold the spans just stored.
    """
    trace_ids = sorted(set(trace_ids))
    if not trace_ids:
        return
    spans = Invocation.objects.of_trace_ids(trace_ids)
    calls_by_trace = with_llm_turns_by_trace(spans, newest_tool_calls_by_trace(spans))
    FailureSpiral.objects.replace_for_traces(
        {trace_id: _found_spirals(calls_by_trace.get(trace_id, [])) for trace_id in trace_ids}
    )


def _found_spirals(calls: list[CallView]) -> tuple[list[Any], datetime | None]:
    """Return the spirals in a trace's newest calls, and where the calls read begin.

    With a full window, spirals that began before it are left as they were stored.
    """
    window_start = calls[0].started_at if len(calls) == SPIRAL_WINDOW else None
    return find_spirals(calls, spiral_rule()), window_start


_CALL_FIELDS = (
    "span_id", "tool_name", "status", "error_kind", "arguments", "started_at", "latency_ms",
    "input_tokens", "output_tokens", "result_tokens", "cost_usd", "chosen_by", "tool_call_id",
    "attempt",
)  # fmt: skip


def _call_view(row: Sequence[Any]) -> CallView:
    """Return the CallView of a row of _CALL_FIELDS."""
    (span_id, tool_name, status, error_kind, arguments, started_at, latency_ms, input_tokens,
     output_tokens, result_tokens, cost_usd, chosen_by, tool_call_id, attempt) = row  # fmt: skip
    return CallView(
        span_id=span_id,
        tool_name=tool_name,
        status=status,
        error_kind=error_kind,
        arguments=arguments,
        started_at=started_at,
        latency_ms=latency_ms,
        tokens=input_tokens + output_tokens + result_tokens,
        cost_usd=cost_usd,
        chosen_by=chosen_by,
        tool_call_id=tool_call_id,
        attempt=attempt,
    )


def newest_tool_calls(spans: InvocationQuerySet) -> list[CallView]:
    """Return a trace's newest SPIRAL_WINDOW tool calls, oldest first, as the rule reads them.

    `spans` are the trace's, within its time bounds (Invocation.objects.of_trace_ids). The
    agent loop's spiral breaker reads the same calls, so it and the dashboards agree.
    """
    newest = (
        spans.filter(kind=SpanKind.TOOL)
        .order_by("-started_at", "-span_id")
        .values_list(*_CALL_FIELDS)
    )[:SPIRAL_WINDOW]
    return [_call_view(row) for row in reversed(newest)]


def _newest_per_trace(spans: InvocationQuerySet) -> InvocationQuerySet:
    """Return the spans among `spans` that are among their trace's SPIRAL_WINDOW newest."""
    newest_first = Window(
        RowNumber(),
        partition_by=[F("trace_id")],
        order_by=[F("started_at").desc(), F("span_id").desc()],
    )
    return (
        spans.annotate(newness=newest_first)
        .filter(newness__lte=SPIRAL_WINDOW)
        .order_by("trace_id", "started_at", "span_id")
    )


def newest_tool_calls_by_trace(spans: InvocationQuerySet) -> dict[str, list[CallView]]:
    """Return newest_tool_calls for each trace among `spans`, in one query.

    `spans` are the traces', within their time bounds (Invocation.objects.of_trace_ids).
    """
    calls: dict[str, list[CallView]] = {}
    rows = _newest_per_trace(spans.filter(kind=SpanKind.TOOL)).values_list(
        "trace_id", *_CALL_FIELDS
    )
    for trace_id, *row in rows:
        calls.setdefault(trace_id, []).append(_call_view(row))
    return calls


# A trace whose spiral has seen no new call for this long has stopped spiralling.
SPIRAL_QUIET = timedelta(minutes=10)


def rescan_spirals(since: datetime, limit: int = 2000) -> int:
    """Re-detect spirals in traces with tool calls received since `since`; return how many.

    Ingest sees a loop only when one process counted its repeats, so a loop whose calls
    reached different processes waits for this scan (the beat runs it every minute). It
    also settles loops that went quiet (settle_quiet_loops). At most `limit` traces, the
    most recently received first.
    """
    recent = (
        Invocation.objects.filter(received_at__gte=since, kind=SpanKind.TOOL)
        .order_by("-received_at")
        .values_list("trace_id", flat=True)[: limit * 10]
    )
    trace_ids = list(
        Trace.objects.filter(pk__in=set(recent), tool_calls__gte=spiral_rule().min_repeats)
        .order_by("-started_at")
        .values_list("pk", flat=True)[:limit]
    )
    for trace_id in trace_ids:
        with transaction.atomic():
            detect_spirals(trace_id)
    settle_quiet_loops()
    return len(trace_ids)


def settle_quiet_loops() -> None:
    """End the `ongoing` loops with no call for SPIRAL_QUIET: gave up, or repeated calls.

    An ongoing loop's last call succeeded. One whose calls all succeeded is a loop of
    successes (repeated), not a tool the agent gave up on; one with a failed call among
    them gave up.
    """
    now = timezone.now()
    quiet = FailureSpiral.objects.filter(
        resolution=SpiralResolution.ONGOING, ended_at__lt=now - SPIRAL_QUIET
    )
    failed_call = Invocation.objects.filter(
        trace_id=OuterRef("trace_id"),
        tool_name=OuterRef("tool_name"),
        kind=SpanKind.TOOL,
        status=SpanStatus.ERROR,
        started_at__gte=OuterRef("started_at"),
        started_at__lte=OuterRef("ended_at"),
    )
    quiet.filter(Exists(failed_call)).update(resolution=SpiralResolution.GAVE_UP, updated_at=now)
    quiet.update(resolution=SpiralResolution.REPEATED, updated_at=now)


def with_llm_turns(spans: InvocationQuerySet, calls: list[CallView]) -> list[CallView]:
    """Return the calls with the LLM turn that asked for each one added to its cost.

    A spiral wastes the model's turns as well as the tool's time: each call a model chose
    (not the planner or a workflow) takes its share of the trace's latest llm span started
    before it, shared evenly by the calls of that turn; its start moves back by that share
    of time, so a spiral starts when the model's first turn in it did.
    """
    chosen = _chosen_by_model(calls)
    if not chosen:
        return calls
    turns = list(
        spans.filter(kind=SpanKind.LLM, started_at__lte=calls[chosen[-1]].started_at)
        .order_by("-started_at", "-span_id")
        .values_list(*_TURN_FIELDS)[:SPIRAL_WINDOW]
    )[::-1]
    return _add_turns(calls, chosen, turns)


def with_llm_turns_by_trace(
    spans: InvocationQuerySet, calls_by_trace: dict[str, list[CallView]]
) -> dict[str, list[CallView]]:
    """Return with_llm_turns for each trace's calls, the turns of all read in one query."""
    chosen_by_trace = {
        trace_id: chosen
        for trace_id, calls in calls_by_trace.items()
        if (chosen := _chosen_by_model(calls))
    }
    if not chosen_by_trace:
        return calls_by_trace
    before_last_chosen = Q()
    for trace_id, chosen in chosen_by_trace.items():
        last = calls_by_trace[trace_id][chosen[-1]].started_at
        before_last_chosen |= Q(trace_id=trace_id, started_at__lte=last)
    turns: dict[str, list[tuple[Any, ...]]] = {}
    rows = _newest_per_trace(spans.filter(before_last_chosen, kind=SpanKind.LLM)).values_list(
        "trace_id", *_TURN_FIELDS
    )
    for trace_id, *turn in rows:
        turns.setdefault(trace_id, []).append(tuple(turn))
    with_turns = dict(calls_by_trace)
    for trace_id, chosen in chosen_by_trace.items():
        calls = calls_by_trace[trace_id]
        with_turns[trace_id] = _add_turns(calls, chosen, turns.get(trace_id, []))
    return with_turns


_TURN_FIELDS = ("started_at", "latency_ms", "input_tokens", "output_tokens")


def _chosen_by_model(calls: list[CallView]) -> list[int]:
    """Return the indexes of the calls a model chose (not the planner or a workflow)."""
    return [
        index for index, call in enumerate(calls)
        if call.started_at is not None and call.chosen_by not in ("planner", "workflow")
    ]  # fmt: skip


def _add_turns(
    calls: list[CallView], chosen: list[int], turns: Sequence[Sequence[Any]]
) -> list[CallView]:
    """Return the calls with their share of the turns (rows of _TURN_FIELDS, oldest first)."""
    starts = [turn[0] for turn in turns]
    owners = {index: bisect_right(starts, calls[index].started_at) - 1 for index in chosen}
    owners = {index: turn for index, turn in owners.items() if turn >= 0}
    shares = Counter(owners.values())
    with_turns = list(calls)
    for index, turn in owners.items():
        _, latency_ms, input_tokens, output_tokens = turns[turn]
        call, share = calls[index], shares[turn]
        moved = latency_ms / share
        with_turns[index] = dataclasses.replace(
            call,
            tokens=call.tokens + (input_tokens + output_tokens) // share,
            latency_ms=call.latency_ms + moved,
            started_at=call.started_at - timedelta(milliseconds=moved),
        )
    return with_turns
