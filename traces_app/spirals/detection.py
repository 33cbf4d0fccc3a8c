"""Failure spirals: runs of calls in one trace to the same tool that get nowhere.

Plain data in, plain data out, no Django: the ingest path, the dashboards and the agent
loop's spiral breaker all apply this one rule.

A spiral is either
- "failing": at least `min_repeats` consecutive calls of one tool that fail with the same
  error kind, each with the same or near-same arguments as the call before it, or
- "loop": at least `min_repeats` consecutive calls of one tool with identical arguments,
  whatever their status, unless the tool is in `allow_tools` (polling a status is a
  legitimate repeat; an allowed tool's repeated *failures* are still a failing spiral).

A call is what the chooser (a model, the planner, a workflow, an outside agent) asked
for once; the engine's retries of it are attempts of that one call, not more calls. A
span with attempt n > 1 joins the call whose last span is attempt n - 1 of the same
tool, tool_call_id and arguments (tools_app.engine records each attempt so). Its status
and error kind are those of its last attempt; what it wasted is all of its attempts'.
So an engine that retries a timed-out read three times makes one call, never a spiral,
while three calls of the chooser that each fail (each attempt 1, whatever their ids) do.

"Consecutive" counts only that tool's calls: another tool called in between does not
break a run. Arguments are near-same when both are objects with the same keys and at
most `max_changed_values` values differ (an agent retrying with one tweak). Each call
starts at most one spiral; a failing run is looked for first, then a loop.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

FAILING = "failing"
LOOP = "loop"

GAVE_UP = "gave_up"
RECOVERED = "recovered"
REPEATED = "repeated"  # a loop of successes the agent moved on from: no failure to recover
PLANNER_FALLBACK = "planner_fallback"
ONGOING = "ongoing"
# Ended by a later success of the tool: nothing is left for a spiral breaker to stop.
ENDED_BY_SUCCESS = frozenset({RECOVERED, REPEATED})


@dataclass(frozen=True)
class SpiralRule:
    """The thresholds that make a run of calls a spiral."""

    min_repeats: int = 3
    max_changed_values: int = 1
    allow_tools: frozenset[str] = frozenset()


@dataclass(frozen=True)
class CallView:
    """One tool call of a trace, as the rule sees it."""

    span_id: str
    tool_name: str
    status: str
    error_kind: str = ""
    arguments: Any = None
    started_at: datetime | None = None
    latency_ms: float = 0.0
    tokens: int = 0
    cost_usd: float = 0.0
    chosen_by: str = ""
    tool_call_id: str = ""
    attempt: int = 1  # the engine's attempt number of its call (1: a new call)


@dataclass(frozen=True)
class SpiralView:
    """A spiral found in one trace's calls, with what it cost and how it ended."""

    tool_name: str
    kind: str
    first_index: int
    last_index: int
    first_span_id: str
    last_span_id: str
    attempts: int
    error_kind: str
    resolution: str
    started_at: datetime | None
    ended_at: datetime | None
    wasted_tokens: int
    wasted_ms: float
    wasted_cost_usd: float
    argument_changes: list[list[str]] = field(default_factory=list)


def arguments_fingerprint(arguments: Any) -> str:
    """Return a short stable hash of the arguments' canonical JSON."""
    text = json.dumps(arguments, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def changed_keys(before: Any, after: Any) -> list[str] | None:
    """Return the keys whose values differ between two argument objects.

    None when they are not comparable key by key (not both objects, or different keys);
    a non-object pair counts as one change under the key "" when the values differ.
    """
    if isinstance(before, dict) and isinstance(after, dict):
        if before.keys() != after.keys():
            return None
        return sorted(key for key in before if before[key] != after[key])
    return [] if before == after else [""]


def calls_of(spans: Sequence[CallView]) -> list[list[int]]:
    """Return the spans grouped into calls: each call's span indexes, attempts in order.

    A span of attempt n > 1 joins the open call of the same tool, tool_call_id and
    arguments whose last span is attempt n - 1; any other span starts a call.
    """
    calls: list[list[int]] = []
    open_calls: dict[tuple[str, str, str], int] = {}  # key -> position in `calls`
    for index, span in enumerate(spans):
        key = (span.tool_name, span.tool_call_id, arguments_fingerprint(span.arguments))
        position = open_calls.get(key)
        if position is not None and spans[calls[position][-1]].attempt == span.attempt - 1:
            calls[position].append(index)
            continue
        open_calls[key] = len(calls)
        calls.append([index])
    return calls


def _as_one_call(spans: Sequence[CallView], indexes: list[int]) -> CallView:
    """Return a call's attempts as one CallView: the last attempt's outcome, all their costs."""
    first, last = spans[indexes[0]], spans[indexes[-1]]
    attempts = [spans[i] for i in indexes]
    return dataclasses.replace(
        first,
        status=last.status,
        error_kind=last.error_kind,
        latency_ms=sum(span.latency_ms for span in attempts),
        tokens=sum(span.tokens for span in attempts),
        cost_usd=sum(span.cost_usd for span in attempts),
        attempt=len(attempts),
    )


def find_spirals(spans: Sequence[CallView], rule: SpiralRule) -> list[SpiralView]:
    """Return the spirals in one trace's tool spans, given in time order.

    Indexes and span ids in the result are the spans'; an engine retry's spans count as
    one call (calls_of).
    """
    groups = calls_of(spans)
    calls = [_as_one_call(spans, group) for group in groups]
    return [_in_spans(spiral, spans, groups) for spiral in _find_in_calls(calls, rule)]


def _in_spans(spiral: SpiralView, spans: Sequence[CallView], groups: list[list[int]]) -> SpiralView:
    """Return a spiral found among calls with its indexes, last span and end in the spans."""
    first_index, last_index = groups[spiral.first_index][0], groups[spiral.last_index][-1]
    last = spans[last_index]
    ended_at = spiral.ended_at
    if last.started_at is not None:
        ended_at = last.started_at + timedelta(milliseconds=last.latency_ms)
    return dataclasses.replace(
        spiral,
        first_index=first_index,
        last_index=last_index,
        last_span_id=last.span_id,
        ended_at=ended_at,
    )


def _find_in_calls(calls: Sequence[CallView], rule: SpiralRule) -> list[SpiralView]:
    """Return the spirals among calls (retries already joined), indexes being the calls'."""
    by_tool: dict[str, list[int]] = {}
    for index, call in enumerate(calls):
        by_tool.setdefault(call.tool_name, []).append(index)
    spirals = []
    for tool_name, indexes in by_tool.items():
        fingerprints = [arguments_fingerprint(calls[i].arguments) for i in indexes]
        position = 0
        while position < len(indexes):
            run = _failing_run(calls, indexes, position, rule)
            kind = FAILING
            if len(run) < rule.min_repeats and tool_name not in rule.allow_tools:
                run, kind = _identical_run(indexes, fingerprints, position), LOOP
            if len(run) >= rule.min_repeats:
                spirals.append(_spiral(calls, run, kind))
                position += len(run)
            else:
                position += 1
    return sorted(spirals, key=lambda spiral: spiral.first_index)


def _failing_run(
    calls: Sequence[CallView], indexes: list[int], position: int, rule: SpiralRule
) -> list[int]:
    """Return the tool's calls from `position` on that fail alike with near-same arguments."""
    first = calls[indexes[position]]
    if first.status != "error":
        return []
    run = [indexes[position]]
    for index in indexes[position + 1 :]:
        call, previous = calls[index], calls[run[-1]]
        if call.status != "error" or call.error_kind != first.error_kind:
            break
        changes = changed_keys(previous.arguments, call.arguments)
        if changes is None or len(changes) > rule.max_changed_values:
            break
        run.append(index)
    return run


def _identical_run(indexes: list[int], fingerprints: list[str], position: int) -> list[int]:
    """Return the tool's calls from `position` on with arguments identical to the first's."""
    run = [indexes[position]]
    for offset in range(position + 1, len(indexes)):
        if fingerprints[offset] != fingerprints[position]:
            break
        run.append(indexes[offset])
    return run


def _spiral(calls: Sequence[CallView], run: list[int], kind: str) -> SpiralView:
    """Return the spiral made of the calls at `run`, summed up."""
    spiral_calls = [calls[i] for i in run]
    first, last = spiral_calls[0], spiral_calls[-1]
    ended_at = None
    if last.started_at is not None:
        ended_at = last.started_at + timedelta(milliseconds=last.latency_ms)
    return SpiralView(
        tool_name=first.tool_name,
        kind=kind,
        first_index=run[0],
        last_index=run[-1],
        first_span_id=first.span_id,
        last_span_id=last.span_id,
        attempts=len(run),
        error_kind=first.error_kind if kind == FAILING else _common_error_kind(spiral_calls),
        resolution=resolution(
            calls, run[-1], failed=any(call.status == "error" for call in spiral_calls)
        ),
        started_at=first.started_at,
        ended_at=ended_at,
        wasted_tokens=sum(call.tokens for call in spiral_calls),
        wasted_ms=sum(call.latency_ms for call in spiral_calls),
        wasted_cost_usd=sum(call.cost_usd for call in spiral_calls),
        argument_changes=[
            _step_changes(before, after)
            for before, after in zip(spiral_calls, spiral_calls[1:], strict=False)
        ],
    )


def _step_changes(before: CallView, after: CallView) -> list[str]:
    """Return the argument keys changed from one attempt to the next; ["*"] if the keys differ."""
    changes = changed_keys(before.arguments, after.arguments)
    return ["*"] if changes is None else changes


def _common_error_kind(calls: Sequence[CallView]) -> str:
    """Return the error kind all the calls share, or "" when they don't share one."""
    kinds = {call.error_kind for call in calls}
    return kinds.pop() if len(kinds) == 1 else ""


def resolution(calls: Sequence[CallView], last_index: int, *, failed: bool = True) -> str:
    """Return how a spiral whose last call is at `last_index` ended.

    The first decisive later call wins: one the planner chose (planner_fallback) or a
    success of the same tool: recovered when the spiral's calls had `failed`, repeated when
    they all succeeded (a loop of successes is not a recovery). Without one, the spiral
    gave up when the tool's last call in the trace failed, and is ongoing otherwise.
    """
    tool_name = calls[last_index].tool_name
    for call in calls[last_index + 1 :]:
        if call.chosen_by == "planner":
            return PLANNER_FALLBACK
        if call.tool_name == tool_name and call.status == "ok":
            return RECOVERED if failed else REPEATED
    last_of_tool = [call for call in calls if call.tool_name == tool_name][-1]
    return GAVE_UP if last_of_tool.status == "error" else ONGOING
