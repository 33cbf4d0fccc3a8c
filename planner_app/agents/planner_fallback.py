"""The planner standing in for the model (Path 2) in the agent loop. No Django.

The planner takes the user's request instead of the model's call when the model calls a
tool that does not exist, gives no call where it was asked to act, or makes a spiral. It
says what it did in one tool result, and what its calls gave is the answer when the model
gives none. The loop emits and records the planner's calls.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from planner_app.agents.llm.messages import LlmReply
from planner_app.agents.spiral_breaker import BrokenSpiral
from tools_app.engine import CallContext
from tools_app.specs import ToolCall, ToolResult


class PlannerFallback:
    """Ask the planner (the Bridge) for the user's request; keep what its calls gave."""

    def __init__(self, fallback: Callable[..., Any], plan_without: Callable[..., Any]) -> None:
        self.fallback, self.plan_without = fallback, plan_without
        self.planned_for_request = False
        self.answer = ""  # what the planner's calls gave, for a model that gives nothing

    def for_unknown_tool(self, call: ToolCall, request: str, context: CallContext) -> Any:
        """Return the Bridge's outcome for a call of a tool that does not exist."""
        return self.fallback(call.name, call.arguments, request, context, call_id=call.id)

    def for_request(self, request: str, context: CallContext) -> Any:
        """Return the planner's outcome for the request itself (the model called no tool)."""
        self.planned_for_request = True
        return self.fallback(None, None, request, context)

    def for_spiral(self, broken: BrokenSpiral, request: str, context: CallContext) -> Any:
        """Return the planner's outcome for a request whose calls made a spiral.

        The model's bad arguments are no fault of the tool: the planner may call it with
        its own. A tool that failed or looped by itself is left out. From now on the answer
        is what this plan gave.
        """
        outcome = self.plan_without(
            "" if broken.own_fault else broken.spiral.tool_name, request, context,
            call_id=broken.call.id,
        )  # fmt: skip
        self.answer = ""
        return outcome

    def should_plan(self, reply: LlmReply, choice: str, has_tools: bool) -> bool:
        """Return whether a reply without tool calls should go to the planner instead."""
        if not has_tools or self.planned_for_request:
            return False
        return choice == "required" or not reply.content.strip()

    def result(self, call: ToolCall, outcome: Any, headline: str) -> ToolResult:
        """Return one result that tells the model what the planner did."""
        lines = [f"{headline}; the planner took the user's request instead (path 2):"]
        ran = []
        for result in outcome.results:
            if not result.tool:
                lines.append(result.text or (result.error.message if result.error else ""))
                continue
            lines.append(result.text)
            ran.append(result.text)
        if outcome.success and ran:
            self.answer = "\n".join(ran)
        return ToolResult(call.id, call.name, outcome.success, text="\n".join(lines))

    def answer_text(self) -> str:
        """Return the planner's results as the task's answer, for a model that gave none."""
        return "The model gave no answer; the planner's results (path 2):\n" + self.answer
