"""The sandbox chat: run one message down a chosen path and stream every step as it happens.

Modes: the agent loop (Path 1, with active discovery when the agent is in active mode),
plan-execute-replan, the planner alone (Path 2, no LLM) and a saved workflow (Path 3).
MCP tools (Path 4) come up through any of them. Every mode emits the agent loop's events.

Streaming: the POST that starts a task answers with server-sent events (text/event-stream).
The task runs in a thread of the same process that feeds a queue, and the response reads
the queue until the task ends or ARES_SANDBOX_TIMEOUT_S passes. One request, no state
between requests: it works under runserver and gunicorn's sync workers alike, with any
number of processes. A failure in the task becomes an `error` event, never a 500.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from django.db import connections
from django.urls import reverse

from planner_app import bridge
from planner_app.agents.llm.messages import Message
from planner_app.agents.loop import (
    PATH_PLANNER,
    Final,
    LoopEvent,
    Notice,
    Started,
    ToolStarted,
)
from planner_app.agents.plan_agent import PlanDrafted, finished_event, run_plan_agent, watch_steps
from planner_app.agents.run import llm_problem, run_agent
from planner_app.models import Agent, Workflow, WorkflowRun
from planner_app.workflows.runs import execute_run
from tools_app.engine import CallContext
from tools_app.registry import ToolRegistry
from tools_app.runtime import get_engine

logger = logging.getLogger(__name__)

SANDBOX_AGENT = "sandbox"
MODES = {
    "llm": "LLM agent (path 1)",
    "replan": "Plan-execute-replan",
    "planner": "Planner only (path 2, no LLM)",
    "workflow": "Run a workflow (path 3)",
}
LLM_MODES = frozenset({"llm", "replan"})
HEARTBEAT_S = 10.0

Emit = Callable[[dict[str, Any]], None]


@dataclass(frozen=True)
class SandboxTask:
    """One message to run: the mode, the agent (None: the sandbox's own), the workflow."""

    mode: str
    message: str
    agent: Agent | None
    workflow: Workflow | None
    trace_id: str


def sandbox_agent(agent: Agent | None) -> Agent:
    """Return the agent to run as: the chosen one, or an unsaved one that may call any tool."""
    if agent is not None:
        return agent
    return Agent(name=SANDBOX_AGENT, tools=[spec.name for spec in get_engine().registry.list()])


def llm_problem_of(agent: Agent | None) -> str | None:
    """Return why the LLM modes cannot run for this choice of agent, or None when they can."""
    return llm_problem(sandbox_agent(agent))


def stream_events(task: SandboxTask, timeout_s: float) -> Iterator[str]:
    """Run the task in a thread and yield its events as server-sent events until it ends."""
    events: queue.SimpleQueue[dict[str, Any] | None] = queue.SimpleQueue()
    worker = threading.Thread(
        target=_run_into, args=(task, events.put), name=f"sandbox-{task.trace_id[:8]}", daemon=True
    )
    worker.start()
    deadline = time.monotonic() + timeout_s
    while (left := deadline - time.monotonic()) > 0:
        try:
            event = events.get(timeout=min(left, HEARTBEAT_S))
        except queue.Empty:
            yield ": still working\n\n"  # a comment line: keeps proxies from closing the stream
            continue
        if event is None:
            return
        yield sse_frame(event)
    message = (
        f"no answer within {timeout_s:g} s (ARES_SANDBOX_TIMEOUT_S): the task goes on in "
        "the background, and its trace fills in as it runs"
    )
    yield sse_frame(with_links({"type": "error", "message": message, "trace_id": task.trace_id}))


def sse_frame(event: dict[str, Any]) -> str:
    """Return one server-sent event; JSON keeps every newline escaped, so one data line."""
    return f"event: {event['type']}\ndata: {json.dumps(event, default=str)}\n\n"


def with_links(event: dict[str, Any], registry: ToolRegistry | None = None) -> dict[str, Any]:
    """Add what the page shows beside an event: the trace's URL, where a tool ran."""
    if event.get("trace_id"):
        event["trace_url"] = reverse("trace-detail", args=[event["trace_id"]])
    if registry is not None and event["type"] in ("tool_started", "tool_finished"):
        tool = event.get("tool") or ""
        event["ran_on"] = registry.get(tool).ran_on if tool in registry else ""
    return event


def run_task(task: SandboxTask, emit: Emit) -> None:
    """Run the task to its end, every step to emit as a JSON-ready dict."""
    # Taken here: get_engine() may read the database, which events sent from inside a
    # workflow's event loop must not.
    registry = get_engine().registry

    def send(event: LoopEvent) -> None:
        emit(with_links(event.as_dict(), registry))

    _RUNNERS[task.mode](task, send)


def _run_into(task: SandboxTask, put: Callable[[dict[str, Any] | None], None]) -> None:
    try:
        run_task(task, put)
    except Exception as exc:  # the page must hear of it; the log keeps the traceback
        logger.exception("sandbox task %s (%s) failed", task.trace_id, task.mode)
        error = {"type": "error", "message": f"{type(exc).__name__}: {exc}"}
        put(with_links({**error, "trace_id": task.trace_id}))
    finally:
        put(None)
        connections.close_all()


# The modes --------------------------------------------------------------------------------


def _run_llm(task: SandboxTask, send: Callable[[LoopEvent], None]) -> None:
    agent = sandbox_agent(task.agent)
    run_agent(agent, [Message("user", task.message)], trace_id=task.trace_id, on_event=send)


def _run_replan(task: SandboxTask, send: Callable[[LoopEvent], None]) -> None:
    run_plan_agent(sandbox_agent(task.agent), task.message, trace_id=task.trace_id, on_event=send)


def _run_planner(task: SandboxTask, send: Callable[[LoopEvent], None]) -> None:
    """Plan from the message and run the plan through the Bridge (Path 2), no LLM at all."""
    agent = task.agent
    name = agent.name if agent else SANDBOX_AGENT
    allowed = frozenset(agent.tools) if agent else None
    tools = (
        sorted(allowed) if allowed is not None else [s.name for s in get_engine().registry.list()]
    )
    send(Started(task.trace_id, name, "", tools, 0))
    context = CallContext(trace_id=task.trace_id, agent=name, request_text=task.message,
                          chosen_by="planner", allowed_tools=allowed)  # fmt: skip
    outcome = bridge.execute(None, None, task.message, context)
    arguments: dict[str, Any] = {}
    if outcome.plan is not None:
        plan = outcome.plan
        steps = [
            {"id": s.step_id, "tool": s.tool, "arguments": s.arguments,
             "depends_on": list(s.depends_on), "reason": s.capability}
            for s in plan.steps
        ]  # fmt: skip
        arguments = {step["id"]: step["arguments"] for step in steps}
        send(PlanDrafted(1, steps, [] if plan.steps else [plan.reason]))
    for result in outcome.results:
        if not result.tool:
            send(Notice(result.text or "the planner found no tool"))
            continue
        send(ToolStarted(result.call_id, result.tool, arguments.get(result.call_id), PATH_PLANNER))
        send(finished_event(result.call_id, result, PATH_PLANNER))
    answer = "\n".join(
        f"{result.tool}: {json.dumps(result.data, ensure_ascii=False, default=str)}"
        if result.success
        else result.text
        for result in outcome.results
    )
    send(Final(answer, "stop" if outcome.success else "error", task.trace_id, 0, 0, 0))


def _run_workflow(task: SandboxTask, send: Callable[[LoopEvent], None]) -> None:
    """Run the saved workflow as the admin's "run now" does, every step shown as it runs."""
    saved = task.workflow
    assert saved is not None  # the form requires one in this mode
    workflow = saved.as_workflow()
    tools = sorted({step.tool for step in workflow.steps})
    send(Started(task.trace_id, f"workflow:{saved.name}", "", tools, 0))
    run = WorkflowRun.objects.create(workflow=saved, trace_id=task.trace_id)
    execute_run(run.pk, watch_steps(send))
    run.refresh_from_db()
    lines = [f"Workflow {saved.name}: {run.status}"]
    for step in run.progress.get("steps", []):
        result = step.get("result") or {}
        lines.append(f"{step['step_id']} {step['tool']} [{step['status']}]: "
                     f"{result.get('text') or step.get('error') or ''}")  # fmt: skip
    reason = "stop" if run.status == WorkflowRun.Status.SUCCESS else str(run.status)
    send(Final("\n".join(lines), reason, task.trace_id, 0, 0, 0))


_RUNNERS: dict[str, Callable[[SandboxTask, Callable[[LoopEvent], None]], None]] = {
    "llm": _run_llm,
    "replan": _run_replan,
    "planner": _run_planner,
    "workflow": _run_workflow,
}
