"""Plan-execute-replan: the model drafts a multi-step plan as JSON, the workflow executor
runs it, and a plan that fails, returns nothing or reports low confidence goes back to the
model with the results so far, a bounded number of times.

No Django here. The model is a `Drafter`: given the request and the feedback on earlier
plans (empty the first time), it returns the model's reply text. A plan is

    {"steps": [{"id": "s1", "tool": "web_search", "arguments": {"query": "..."},
                "depends_on": [], "reason": "find the population"},
               {"id": "s2", "tool": "calculator",
                "arguments": {"expression": "{$s1.results[0].value} * 2"},
                "reason": "double it"}]}

in the reply, bare or in a ```json fence. `reason` becomes the step's `request`, which is
what the Bridge plans from when the step's tool is missing or fails. Plans are checked
like any workflow (ids, dependencies, cycles, tools, reference types) before anything runs.
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from planner_app.workflows.executor import RunStatus, RunStep, StepStatus, WorkflowRun, run_workflow
from planner_app.workflows.graph import (
    ProblemKind,
    Workflow,
    WorkflowError,
    WorkflowProblem,
    validate_workflow,
    workflow_from_json,
)
from tools_app.registry import ToolRegistry

Drafter = Callable[[str, str], Awaitable[str] | str]

PLAN_INSTRUCTIONS = """Answer with a plan only: one JSON object
{"steps": [{"id": "s1", "tool": "<tool name>", "arguments": {...}, "depends_on": [],
"reason": "<why>"}]}. A later step may use an earlier step's output in an argument as
{$s1} (all of it) or {$s1.field} / {$s1.items[0].field}. Use only the tools listed."""

_FENCE = re.compile(r"```(?:json)?\s*(?P<body>.*?)```", re.DOTALL)
_PLAN_FIELDS = {"id", "tool", "arguments", "depends_on", "reason"}


@dataclass(frozen=True)
class ReplanSettings:
    max_replans: int = 2  # drafts after the first
    low_confidence: float = 0.5  # a step result with "confidence" below this asks for a replan
    max_steps: int = 10


@dataclass
class Attempt:
    """One draft: the plan's problems, or the run and why it asks for a replan."""

    reply: str
    problems: list[str] = field(default_factory=list)
    run: WorkflowRun | None = None
    replan_reasons: list[str] = field(default_factory=list)


@dataclass
class ReplanOutcome:
    """Every attempt in order; `succeeded` when the last plan ran with nothing to replan."""

    attempts: list[Attempt]

    @property
    def succeeded(self) -> bool:
        last = self.attempts[-1] if self.attempts else None
        return bool(last and last.run and not last.problems and not last.replan_reasons)

    @property
    def final_run(self) -> WorkflowRun | None:
        runs = [attempt.run for attempt in self.attempts if attempt.run is not None]
        return runs[-1] if runs else None


def plan_from_reply(reply: str, name: str, max_steps: int) -> Workflow:
    """Return the workflow a model reply describes, or raise WorkflowError naming each problem."""
    fenced = _FENCE.search(reply)
    text = (fenced.group("body") if fenced else reply).strip()
    start, end = text.find("{"), text.rfind("}")
    try:
        data = json.loads(text[start : end + 1] if start >= 0 else text)
    except ValueError as exc:
        raise WorkflowError([_problem(f"the plan is not JSON: {exc}")]) from None
    if not isinstance(data, dict) or not isinstance(data.get("steps"), list):
        raise WorkflowError([_problem('expected an object with a "steps" array')])
    steps = []
    for index, step in enumerate(data["steps"]):
        if not isinstance(step, dict):
            raise WorkflowError([_problem(f"steps[{index}]: expected an object")])
        unknown = sorted(set(step) - _PLAN_FIELDS)
        if unknown:
            allowed = ", ".join(sorted(_PLAN_FIELDS))
            message = f"steps[{index}]: unknown fields {unknown}; allowed: {allowed}"
            raise WorkflowError([_problem(message)])
        step = dict(step)
        reason = step.pop("reason", "")
        steps.append({**step, "request": reason} if isinstance(reason, str) else step)
    return workflow_from_json({"name": name, "steps": steps, "max_steps": max_steps})


def replan_reasons(run: WorkflowRun, low_confidence: float) -> list[str]:
    """Return why a run needs a new plan: failed or skipped steps, empty or unsure results."""
    reasons = []
    for step in run.steps:
        if step.status is not StepStatus.SUCCESS:
            reasons.append(f"step {step.step_id} ({step.tool}) {step.status}: {step.error}")
            continue
        data = step.result.data if step.result else None
        if data in (None, "", [], {}) or _is_empty_listing(data):
            reasons.append(f"step {step.step_id} ({step.tool}) returned nothing")
        confidence = data.get("confidence") if isinstance(data, dict) else None
        if isinstance(confidence, int | float) and confidence < low_confidence:
            reasons.append(
                f"step {step.step_id} ({step.tool}) reported low confidence {confidence}"
            )
    if run.status is RunStatus.FAILED and not reasons:
        reasons.append("the run failed")
    return reasons


def feedback(attempt: Attempt) -> str:
    """Return what the model is told about its previous plan: problems, results, reasons."""
    if attempt.problems:
        return "Your plan could not be used:\n- " + "\n- ".join(attempt.problems)
    assert attempt.run is not None
    lines = ["Your plan ran. Results so far:"]
    for step in attempt.run.steps:
        data = step.result.data if step.result and step.status is StepStatus.SUCCESS else None
        shown = json.dumps(data, default=str)[:500] if data is not None else step.error
        lines.append(f"- {step.step_id} {step.tool} [{step.status}]: {shown}")
    lines.append("It needs a new plan because:\n- " + "\n- ".join(attempt.replan_reasons))
    return "\n".join(lines)


async def plan_execute_replan(
    request: str,
    draft: Drafter,
    run_step: RunStep,
    registry: ToolRegistry,
    settings: ReplanSettings = ReplanSettings(),
) -> ReplanOutcome:
    """Draft, check and run plans until one runs with nothing to replan, or the bound is hit."""
    outcome = ReplanOutcome([])
    notes = ""
    for round_number in range(settings.max_replans + 1):
        reply = draft(request, notes)
        reply = await reply if inspect.isawaitable(reply) else reply
        attempt = Attempt(reply)
        outcome.attempts.append(attempt)
        try:
            plan = plan_from_reply(reply, f"plan-{round_number + 1}", settings.max_steps)
            attempt.problems = [str(p) for p in validate_workflow(plan, registry)]
        except WorkflowError as exc:
            attempt.problems = [str(problem) for problem in exc.problems]
        if not attempt.problems:
            attempt.run = await run_workflow(plan, run_step, registry=registry)
            attempt.replan_reasons = replan_reasons(attempt.run, settings.low_confidence)
            if not attempt.replan_reasons:
                return outcome
        notes = feedback(attempt)
    return outcome


def _is_empty_listing(data: Any) -> bool:
    """True for a result like {"results": [], "count": 0}: every list in it empty, no text."""
    if not isinstance(data, dict) or not data:
        return False
    lists = [value for value in data.values() if isinstance(value, list)]
    return bool(lists) and all(not value for value in lists)


def _problem(message: str) -> WorkflowProblem:
    return WorkflowProblem(ProblemKind.INVALID_JSON, message)
