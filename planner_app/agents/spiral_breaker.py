"""The agent loop's spiral breaker: find the spirals a turn's calls made, and block them. No Django.

A spiral is traces_app's rule (the dashboards' rule, read from the same stored calls): a
tool failing alike (blocked as a tool) or called with identical arguments (that call is
blocked). The loop then stops offering the tool and hands the request to the planner.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tools_app.specs import ErrorKind, ToolCall
from traces_app.spirals.detection import (
    ENDED_BY_SUCCESS,
    FAILING,
    CallView,
    SpiralRule,
    SpiralView,
    arguments_fingerprint,
)
from traces_app.spirals.detection import find_spirals as find_trace_spirals


@dataclass(frozen=True)
class BrokenSpiral:
    """A spiral this task's turn made, now blocked, with the last call that made it."""

    spiral: SpiralView
    call: ToolCall
    why: str  # what the model and the trace are told

    @property
    def key(self) -> tuple[str, str]:
        return (self.spiral.tool_name, self.spiral.first_span_id)

    @property
    def own_fault(self) -> bool:
        """Return whether the model's arguments, not the tool, failed (the planner may call it)."""
        spiral = self.spiral
        return spiral.kind == FAILING and spiral.error_kind == ErrorKind.INVALID_ARGUMENTS


class SpiralBreaker:
    """Read a trace's calls under the spiral rule; remember what each spiral blocked."""

    def __init__(
        self, read_calls: Callable[[str], Sequence[CallView]], rule: SpiralRule, trace_id: str
    ) -> None:
        self.read_calls, self.rule, self.trace_id = read_calls, rule, trace_id
        self.handled: set[tuple[str, str]] = set()
        self.blocked_tools: dict[str, str] = {}  # tool -> why (a failing spiral)
        self.blocked_calls: dict[tuple[str, str], str] = {}  # (tool, arguments) -> why (a loop)

    def refusal(self, tool: str, arguments: Any) -> str:
        """Return why a call of the tool with these arguments is refused, or ""."""
        key = (tool, arguments_fingerprint(arguments))
        return self.blocked_tools.get(tool) or self.blocked_calls.get(key) or ""

    def break_new(
        self, ran: Collection[str], last_calls: Mapping[str, ToolCall]
    ) -> list[BrokenSpiral]:
        """Return the new spirals of the tools that ran this turn, each blocked from now on.

        `last_calls` gives each tool of the turn its last call; a spiral of a tool that did
        not run this turn is from before it, not ours to break (it is remembered as seen).
        """
        if not ran:
            return []
        broken = []
        for spiral in find_trace_spirals(self.read_calls(self.trace_id), self.rule):
            key = (spiral.tool_name, spiral.first_span_id)
            if key in self.handled or spiral.resolution in ENDED_BY_SUCCESS:
                continue
            self.handled.add(key)
            if spiral.tool_name not in ran:
                continue
            broken.append(self._block(spiral, last_calls[spiral.tool_name]))
        return broken

    def resolution_now(self, broken: BrokenSpiral) -> str:
        """Return how the spiral stands now, read again under the same rule."""
        for spiral in find_trace_spirals(self.read_calls(self.trace_id), self.rule):
            if (spiral.tool_name, spiral.first_span_id) == broken.key:
                return spiral.resolution
        return broken.spiral.resolution

    def _block(self, spiral: SpiralView, last: ToolCall) -> BrokenSpiral:
        why = (
            f"stopped by the spiral breaker: {spiral.attempts} calls of {spiral.tool_name} "
            + (f"failed alike ({spiral.error_kind})" if spiral.kind == FAILING
               else "had identical arguments")
        )  # fmt: skip
        if spiral.kind == FAILING:
            self.blocked_tools[spiral.tool_name] = why
        else:
            self.blocked_calls[(spiral.tool_name, arguments_fingerprint(last.arguments))] = why
        return BrokenSpiral(spiral, last, why)
