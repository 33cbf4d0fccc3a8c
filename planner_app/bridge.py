"""The Bridge: the one fork between the LLM's own tool calls (Path 1) and the planner (Path 2).

tool named and registered      -> run it (and, when asked, plan if it fails)
tool named but unknown         -> record the miss, plan from the request
no tool, but a request         -> plan from the request
neither                        -> a clear error
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from typing import Any

from planner_app.pipeline.planner import Plan
from planner_app.pipeline.resolution import NOT_ALLOWED
from planner_app.services import plan_request
from tools_app.engine import CallContext
from tools_app.site_engine import get_engine
from tools_app.specs import ErrorKind, ToolCall, ToolError, ToolResult

logger = logging.getLogger(__name__)


@dataclass
class BridgeResult:
    """What the Bridge did: the path taken, the results in order, and the plan if one ran."""

    path: str  # direct, planner, fallback or error
    results: list[ToolResult] = field(default_factory=list)
    plan: Plan | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def success(self) -> bool:
        return bool(self.results) and self.results[-1].success

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "success": self.success,
            "results": [result.as_dict() for result in self.results],
            "plan": self.plan.as_dict() if self.plan else None,
            "warnings": self.warnings,
        }


def execute(
    tool: str | None,
    arguments: Any,
    request: str,
    context: CallContext | None = None,
    *,
    call_id: str = "",
    fallback: bool = True,
) -> BridgeResult:
    """Run a call the way the decision table says, recording every attempt."""
    context = context or CallContext()
    context = replace(context, request_text=context.request_text or request)
    engine = get_engine()
    if tool:
        if tool in engine.registry:
            result = engine.execute(ToolCall(tool, arguments, call_id), context)
            if result.success or not fallback or not request.strip() or context.stopped:
                return BridgeResult("direct", [result])
            outcome = _run_plan(request, context, path="fallback", exclude=result.tool)
            outcome.results.insert(0, result)
            outcome.warnings.insert(
                0, f"{result.tool} failed ({result.error.kind}); planned instead"
            )
            return outcome
        # Record the model's miss as its own not_found span before planning.
        missed = engine.execute(ToolCall(tool, arguments, call_id), context)
        if not request.strip() or context.stopped:
            return BridgeResult("direct", [missed])
        outcome = _run_plan(request, context, path="planner", call_id=call_id)
        outcome.warnings.insert(0, f"no tool named {tool!r}; planned from the request instead")
        return outcome
    if request.strip():
        return _run_plan(request, context, path="planner")
    error = ToolError(ErrorKind.INVALID_ARGUMENTS, "name a tool or give the user's request")
    return BridgeResult("error", [ToolResult(call_id, "", False, error=error, text=error.message)])


def plan_without(
    tool: str, request: str, context: CallContext | None = None, *, call_id: str = ""
) -> BridgeResult:
    """Plan from the request, leaving out a tool that failed or looped (a spiral's).

    An empty `tool` leaves nothing out: a spiral of the model's invalid arguments, where the
    tool itself is sound and the planner may call it with arguments of its own. `call_id`
    (the model's call the plan stands in for) becomes each planned call's id.
    """
    context = context or CallContext()
    context = replace(context, request_text=context.request_text or request)
    if not request.strip():
        error = ToolError(ErrorKind.INVALID_ARGUMENTS, "no request to plan from")
        return BridgeResult("error", [ToolResult("", "", False, error=error, text=error.message)])
    return _run_plan(request, context, path="fallback", exclude=tool, call_id=call_id)


def _run_plan(
    request: str, context: CallContext, *, path: str, exclude: str = "", call_id: str = ""
) -> BridgeResult:
    """Plan from the request and run its steps in order, each through the engine.

    Only tools the caller may use are planned (context.allowed_tools): the planner chooses
    among them, and the warnings say which others it passed over for that.
    """
    plan = plan_request(request, context.allowed_tools)
    steps = [step for step in plan.steps if step.tool != exclude]
    if not steps:
        if exclude and not plan.needs_llm:
            reason = f"the plan offers nothing but {exclude}"
        else:
            reason = plan.reason or "no step matched the request"
        error = ToolError(ErrorKind.NOT_FOUND, f"the planner found no tool: {reason}")
        return BridgeResult(path, [ToolResult("", "", False, error=error, text=error.message)],
                            plan, passed_over(plan))  # fmt: skip
    planned = replace(context, chosen_by="planner")
    engine = get_engine()
    outcome = BridgeResult(path, plan=plan, warnings=passed_over(plan))
    for step in steps:
        result = engine.execute(
            ToolCall(step.tool, step.arguments, call_id or step.step_id), planned
        )
        result.metadata.setdefault("arguments", step.arguments)
        outcome.results.append(result)
        if not result.success:
            break
    return outcome


def passed_over(plan: Plan) -> list[str]:
    """Return a sentence for each tool the plan left out because its caller may not use it."""
    return [
        f"{entry['tool']} passed over for {entry['capability']}: {NOT_ALLOWED}"
        for entry in plan.explanation.get("rejected", [])
        if entry.get("why") == NOT_ALLOWED
    ]
