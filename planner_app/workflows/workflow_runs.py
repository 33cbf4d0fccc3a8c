"""Running saved workflows: every step through the Bridge and the engine, progress saved."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from django.db import connections
from django.utils import timezone

from planner_app import bridge
from planner_app.models import WorkflowRun
from planner_app.workflows.executor import RunStep, run_workflow
from planner_app.workflows.graph import WorkflowStep
from tools_app.engine import NOT_RUN_STOPPED, CallContext
from tools_app.formatting import format_error
from tools_app.specs import ErrorKind, ToolError, ToolResult

T = TypeVar("T")


@dataclass(frozen=True)
class StepWatch:
    """Callbacks around each step's call through the Bridge, for a page that shows a run live.

    Both are called in the executor's event loop thread: keep them quick (a queue put) and
    off the database, which Django refuses to touch from there.
    """

    started: Callable[[WorkflowStep, dict[str, Any]], None]
    finished: Callable[[WorkflowStep, dict[str, Any], bridge.BridgeResult], None]


def bridge_step_runner(context: CallContext, watch: StepWatch | None = None) -> RunStep:
    """Return a workflow executor's run_step that makes each call through the Bridge.

    The Bridge is synchronous, so a call runs in a worker thread; a missing or failing
    tool falls back to the planner with the step's own request. Once the context's stop
    signal is set, a step is not started (a cancelled result; the engine abandons the
    calls already running).
    """

    async def run_step(step: WorkflowStep, arguments: dict[str, Any]) -> ToolResult:
        if context.stopped:
            error = ToolError(ErrorKind.CANCELLED, NOT_RUN_STOPPED)
            return ToolResult(step.id, step.tool, False, error=error,
                              text=format_error(step.tool, error))  # fmt: skip
        if watch is not None:
            watch.started(step, arguments)
        outcome = await asyncio.to_thread(
            call_in_thread, bridge.execute, step.tool, arguments, step.request, context,
            call_id=step.id, fallback=bool(step.request),
        )  # fmt: skip
        if watch is not None:
            watch.finished(step, arguments, outcome)
        result = outcome.results[-1]
        if not outcome.success and len(outcome.results) > 1:
            # The planner could not stand in either: keep the step's own failure in view.
            text = "\n".join(earlier.text for earlier in outcome.results if earlier.text)
            result = dataclasses.replace(result, text=text)
        return result

    return run_step


def execute_run(
    run_pk: int, watch: StepWatch | None = None, stop: threading.Event | None = None
) -> None:
    """Run a saved workflow and save its progress after every step.

    Setting `stop` from another thread ends the run soon after: no step starts any more,
    running calls are abandoned, and the run is saved as cancelled.
    """
    run = WorkflowRun.objects.select_related("workflow").get(pk=run_pk)
    workflow = run.workflow.as_workflow()
    context = CallContext(
        trace_id=run.trace_id,
        chosen_by="workflow",
        agent=f"workflow:{workflow.name}"[:200],
        request_text=run.workflow.description,
        stop=stop,
    )
    run.status, run.started_at = WorkflowRun.Status.RUNNING, timezone.now()
    run.save(update_fields=["status", "started_at"])

    async def save_progress(progress: Any) -> None:
        await asyncio.to_thread(call_in_thread, _save_progress, run.pk, progress.as_dict())

    run_step = bridge_step_runner(context, watch)
    result = asyncio.run(run_workflow(workflow, run_step, registry=None, on_progress=save_progress))
    status, progress = str(result.status), result.as_dict()
    if context.stopped:
        status = progress["status"] = WorkflowRun.Status.CANCELLED.value
    WorkflowRun.objects.filter(pk=run.pk).update(
        status=status,
        ended_at=timezone.now(),
        progress=progress,
        error="; ".join(p.message for p in result.problems),
    )


def _save_progress(run_pk: int, progress: dict[str, Any]) -> None:
    WorkflowRun.objects.filter(pk=run_pk).update(progress=progress)


def call_in_thread(function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Call function in a worker thread, closing the thread's database connection after."""
    try:
        return function(*args, **kwargs)
    finally:
        connections.close_all()
