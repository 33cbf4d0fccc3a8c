"""Run a workflow: its steps as their dependencies allow, with fallbacks, within the step budget.

No Django here; graph.py defines and checks the workflow this runs.

Status of a run: `success` when every step succeeded; `failed` when the workflow had
problems (nothing ran) or no step succeeded; `partial_failure` otherwise.

The step budget. `max_steps` bounds the tool calls a run makes, fallbacks included. A
workflow with more steps than that is refused up front, so every step gets its own call;
a fallback runs only while the calls made plus one per step not yet started stay within
the bound, so fallbacks never take the call of a step still to run.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from planner_app.workflows.graph import (
    UnresolvedReferenceError,
    Workflow,
    WorkflowProblem,
    WorkflowStep,
    execution_order,
    resolve,
    step_dependencies,
    validate_workflow,
)
from tools_app.registry import ToolRegistry
from tools_app.specs import ErrorKind, ToolError, ToolResult

logger = logging.getLogger(__name__)


class StepStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    SUCCESS = "success"
    FAILED = "failed"
    SKIPPED = "skipped"


class RunStatus(StrEnum):
    RUNNING = "running"
    SUCCESS = "success"
    PARTIAL_FAILURE = "partial_failure"
    FAILED = "failed"


RunStep = Callable[[WorkflowStep, dict[str, Any]], Awaitable[ToolResult]]
OnProgress = Callable[["WorkflowRun"], Awaitable[None] | None]


@dataclass
class StepRun:
    """What happened to one step: `tool` is the step's own, `fallback_used` the one that served."""

    step_id: str
    tool: str
    status: StepStatus = StepStatus.PENDING
    arguments: dict[str, Any] | None = None  # resolved
    result: ToolResult | None = None  # the serving call's, or the last failed one's
    error: str = ""
    started_at: datetime | None = None  # None for a step that never started
    ended_at: datetime | None = None
    fallback_used: str | None = None
    tools_tried: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "step_id": self.step_id,
            "tool": self.tool,
            "status": str(self.status),
            "arguments": self.arguments,
            "result": self.result.as_dict() if self.result else None,
            "error": self.error,
            "started_at": _iso(self.started_at),
            "ended_at": _iso(self.ended_at),
            "fallback_used": self.fallback_used,
            "tools_tried": self.tools_tried,
        }


@dataclass
class WorkflowRun:
    """A run's state, complete at the end and consistent at every on_progress call."""

    workflow: str
    max_steps: int
    status: RunStatus = RunStatus.RUNNING
    steps: list[StepRun] = field(default_factory=list)  # in execution order
    problems: list[WorkflowProblem] = field(default_factory=list)
    tool_calls: int = 0  # fallbacks included; never more than max_steps
    max_steps_reached: bool = False  # a fallback was not tried for want of calls
    started_at: datetime | None = None
    ended_at: datetime | None = None

    def step(self, step_id: str) -> StepRun:
        """Return the record of one step."""
        return next(step for step in self.steps if step.step_id == step_id)

    def as_dict(self) -> dict[str, Any]:
        """Return the run as JSON-ready data, for a database record."""
        return {
            "workflow": self.workflow,
            "status": str(self.status),
            "steps": [step.as_dict() for step in self.steps],
            "problems": [
                {"kind": str(problem.kind), "message": str(problem), "steps": list(problem.steps)}
                for problem in self.problems
            ],
            "tool_calls": self.tool_calls,
            "max_steps": self.max_steps,
            "max_steps_reached": self.max_steps_reached,
            "started_at": _iso(self.started_at),
            "ended_at": _iso(self.ended_at),
        }


async def run_workflow(
    workflow: Workflow,
    run_step: RunStep,
    *,
    registry: ToolRegistry | None = None,
    on_progress: OnProgress | None = None,
) -> WorkflowRun:
    """Validate the workflow, run its steps through run_step, and return the run.

    `run_step(step, arguments)` makes one tool call; for a fallback it gets the step with
    `tool` replaced. Without a registry, unknown tools and types are not checked up front
    (a caller that lets the planner stand in for a missing tool wants that). on_progress
    (sync or async) gets the run once per finished step (steps finishing together are
    all shown finished in each of their calls) and once more at the end, final status set.
    """
    run = WorkflowRun(workflow.name, workflow.max_steps, started_at=_now())
    run.problems = validate_workflow(workflow, registry)
    if run.problems:
        reason = "not run: the workflow has problems"
        run.steps = [
            StepRun(s.id, s.tool, StepStatus.SKIPPED, error=reason) for s in workflow.steps
        ]
    else:
        order = execution_order(workflow)
        run.steps = [StepRun(step.id, step.tool) for step in order]
        await _Execution(workflow, order, run, run_step, on_progress).execute()
    run.status = _final_status(run)
    run.ended_at = _now()
    await _notify(on_progress, run)
    return run


def _final_status(run: WorkflowRun) -> RunStatus:
    succeeded = sum(step.status is StepStatus.SUCCESS for step in run.steps)
    if run.problems or succeeded == 0:
        return RunStatus.FAILED
    return RunStatus.SUCCESS if succeeded == len(run.steps) else RunStatus.PARTIAL_FAILURE


class _Execution:
    """Run a validated workflow's steps as their dependencies allow, up to max_parallel at once."""

    def __init__(
        self,
        workflow: Workflow,
        order: list[WorkflowStep],
        run: WorkflowRun,
        run_step: RunStep,
        on_progress: OnProgress | None,
    ) -> None:
        self.workflow, self.order, self.run = workflow, order, run
        self.run_step, self.on_progress = run_step, on_progress
        self.records = {record.step_id: record for record in run.steps}
        self.needs = {step.id: step_dependencies(step) for step in order}
        self.outputs: dict[str, Any] = {}
        self.running: dict[asyncio.Task[None], str] = {}

    async def execute(self) -> None:
        try:
            while True:
                finished = self._start_ready()
                if not finished:
                    if not self.running:
                        return
                    done, _ = await asyncio.wait(
                        set(self.running), return_when=asyncio.FIRST_COMPLETED
                    )
                    finished = self._collect(done)
                for step_id in finished:
                    if self.records[step_id].status is StepStatus.FAILED:
                        self._skip_dependents(step_id)
                for _ in finished:
                    await _notify(self.on_progress, self.run)
        finally:  # only a bug or a cancelled run leaves calls running: stop them
            for task in self.running:
                task.cancel()
            await asyncio.gather(*self.running, return_exceptions=True)

    def _start_ready(self) -> list[str]:
        """Start every step whose dependencies succeeded, while slots are free.

        Return the steps that finished at once: their references did not resolve.
        """
        finished = []
        for step in self.order:
            if len(self.running) >= self.workflow.max_parallel:
                break
            record = self.records[step.id]
            if record.status is not StepStatus.PENDING or not self._dependencies_met(step):
                continue
            record.status, record.started_at = StepStatus.RUNNING, _now()
            try:
                record.arguments = resolve(step.arguments, self.outputs)
            except UnresolvedReferenceError as exc:
                record.status, record.error, record.ended_at = StepStatus.FAILED, str(exc), _now()
                finished.append(step.id)
                continue
            # Counted here, not in the task, so the budget check of a fallback never
            # races a step that has started but not yet called.
            self.run.tool_calls += 1
            self.running[asyncio.create_task(self._call_tools(step, record))] = step.id
        return finished

    def _dependencies_met(self, step: WorkflowStep) -> bool:
        return all(
            self.records[needed].status is StepStatus.SUCCESS for needed in self.needs[step.id]
        )

    def _collect(self, done: set[asyncio.Task[None]]) -> list[str]:
        """Return the finished steps in execution order; re-raise a bug of this module."""
        for task in done:
            task.result()
        finished = {self.running.pop(task) for task in done}
        return [step.id for step in self.order if step.id in finished]

    async def _call_tools(self, step: WorkflowStep, record: StepRun) -> None:
        """Call the step's tool, then its fallbacks in order, until one succeeds."""
        tools = (step.tool, *step.fallback_tools)
        failures: list[str] = []
        for position, tool in enumerate(tools):
            if position > 0 and not self._reserve_fallback():
                failures.append(
                    f"fallback tools not tried ({', '.join(tools[position:])}): the workflow's "
                    f"max_steps ({self.workflow.max_steps}) tool calls are used up"
                )
                break
            record.tools_tried.append(tool)
            record.result = await self._call(dataclasses.replace(step, tool=tool), record)
            if record.result.success:
                record.status, record.fallback_used = StepStatus.SUCCESS, tool if position else None
                self.outputs[step.id] = record.result.data
                break
            failures.append(_failure_text(tool, record.result))
        if record.status is not StepStatus.SUCCESS:
            record.status, record.error = StepStatus.FAILED, "; ".join(failures)
        record.ended_at = _now()

    def _reserve_fallback(self) -> bool:
        """Count one more tool call if the budget allows it after every unstarted step's own."""
        unstarted = sum(record.status is StepStatus.PENDING for record in self.run.steps)
        if self.run.tool_calls + unstarted < self.workflow.max_steps:
            self.run.tool_calls += 1
            return True
        self.run.max_steps_reached = True
        return False

    async def _call(self, step: WorkflowStep, record: StepRun) -> ToolResult:
        try:
            return await self.run_step(step, record.arguments or {})
        except Exception as exc:  # the caller's code: one step's failure, not the whole run's
            logger.exception("run_step raised for step %s (tool %s)", step.id, step.tool)
            error = ToolError(ErrorKind.INTERNAL, f"run_step raised {type(exc).__name__}: {exc}")
            return ToolResult(step.id, step.tool, False, error=error)

    def _skip_dependents(self, failed_id: str) -> None:
        """Skip every step that depends on the failed one, directly or through others."""
        error = self.records[failed_id].error
        queue: deque[tuple[str, tuple[str, ...]]] = deque([(failed_id, ())])
        while queue:
            step_id, through = queue.popleft()
            for step in self.order:
                record = self.records[step.id]
                if step_id in self.needs[step.id] and record.status is StepStatus.PENDING:
                    via = f" (through {', '.join(through)})" if through else ""
                    record.status = StepStatus.SKIPPED
                    record.error = f"depends on {failed_id}{via}, which failed: {error}"
                    queue.append((step.id, (*through, step.id)))


def _failure_text(tool: str, result: ToolResult) -> str:
    if result.text:
        return result.text
    message = result.error.message if result.error else "no error given"
    return f"{tool} failed: {message}"


async def _notify(on_progress: OnProgress | None, run: WorkflowRun) -> None:
    if on_progress is None:
        return
    outcome = on_progress(run)
    if inspect.isawaitable(outcome):
        await outcome


def _now() -> datetime:
    return datetime.now(UTC)


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment else None
