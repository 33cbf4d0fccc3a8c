"""The sandbox's runner: one message down a chosen path, every step sent as a loop event.

A conversation is its earlier turns (user messages and answers), given with each message:
the LLM paths read them, the planner plans from the newest message alone. A task stops
when its `stop` event is set: nothing new starts, the step running is abandoned (a call
that changes things is let finish), and it ends with finish_reason "cancelled".

Modes: the agent loop (Path 1, with active discovery when the agent is in active mode),
plan-execute-replan, the planner alone (Path 2, no LLM) and a saved workflow (Path 3).
MCP tools (Path 4) come up through any of them. Every mode emits the agent loop's events.
The page streams them (planner_app/sandbox_stream.py).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from planner_app import bridge
from planner_app.agents.llm.messages import Message
from planner_app.agents.loop_events import (
    PATH_PLANNER,
    Final,
    LoopEvent,
    Notice,
    Started,
    ToolStarted,
)
from planner_app.agents.plan_agent import PlanDrafted, finished_event, run_plan_agent, watch_steps
from planner_app.agents.site_agents import llm_problem, run_agent
from planner_app.agents.stopping import CANCELLED
from planner_app.models import Agent, Workflow, WorkflowRun
from planner_app.workflows.workflow_runs import execute_run
from tools_app.engine import CallContext
from tools_app.site_engine import get_engine
from tools_app.specs import ToolResult

SANDBOX_AGENT = "sandbox"
MODES = {
    "llm": "LLM agent (path 1)",
    "replan": "Plan-execute-replan",
    "planner": "Planner only (path 2, no LLM)",
    "workflow": "Run a workflow (path 3)",
}
LLM_MODES = frozenset({"llm", "replan"})
# What the page says of each finish reason (the loop's, plan-execute-replan's, a workflow
# run's status), so the reader never has to decode "stop".
FINISHED = {
    "stop": "Answered",
    "planner_answer": "Answered by the planner: the model gave no answer of its own",
    "spiral_breaker": "Answered after a failure spiral was broken",
    "no_answer": "The model gave no answer",
    "max_iterations": "Reached the step limit",
    "budget": "Reached the token budget",
    "discovery_exhausted": "Found no tool for what the model asked for",
    "max_replans": "Reached the replanning limit: answered from what ran",
    "error": "Ended with an error",
    CANCELLED: "Stopped by you",
    "partial_failure": "Some steps failed",
    "failed": "The workflow failed",
}

Send = Callable[[LoopEvent], None]


@dataclass(frozen=True)
class SandboxTask:
    """One message to run: the mode, the agent (None: the sandbox's own), the workflow,
    the conversation's earlier turns and session, and the event that stops it."""

    mode: str
    message: str
    agent: Agent | None
    workflow: Workflow | None
    trace_id: str
    history: tuple[Message, ...] = ()
    session_id: str = ""
    stop: threading.Event = field(default_factory=threading.Event, compare=False)


def sandbox_agent(agent: Agent | None) -> Agent:
    """Return the agent to run as: the chosen one, or an unsaved one that may call any tool."""
    if agent is not None:
        return agent
    return Agent(name=SANDBOX_AGENT, tools=[spec.name for spec in get_engine().registry.list()])


def llm_problem_of(agent: Agent | None) -> str | None:
    """Return why the LLM modes cannot run for this choice of agent, or None when they can."""
    return llm_problem(sandbox_agent(agent))


def finished_sentence(finish_reason: str) -> str:
    """Return what the page says of a finish reason: a sentence, never the bare slug."""
    return FINISHED.get(finish_reason) or finish_reason.replace("_", " ").capitalize()


def answer_line(result: ToolResult) -> str:
    """Return one planned call's answer as a person reads it.

    An MCP tool's answer is its text content, shown as text: its data also holds the raw
    content blocks, and JSON of that escapes every quote and newline of the text.
    """
    if not result.success:
        return result.text
    data = result.data
    if str(result.metadata.get("ran_on", "")).startswith("mcp:") and isinstance(data, dict):
        shown = data.get("text") or json.dumps(data.get("structured"), ensure_ascii=False)
    elif isinstance(data, str):
        shown = data
    else:
        shown = json.dumps(data, ensure_ascii=False, default=str)
    separator = "\n" if "\n" in shown else " "  # a text of many lines starts on its own
    return f"{result.tool}:{separator}{shown}"


def run_sandbox_task(task: SandboxTask, send: Send) -> None:
    """Run the task down its mode's path to its end, every step to send as a loop event."""
    _RUNNERS[task.mode](task, send)


def _run_llm(task: SandboxTask, send: Send) -> None:
    run_agent(
        sandbox_agent(task.agent),
        [*task.history, Message("user", task.message)],
        trace_id=task.trace_id,
        session_id=task.session_id,
        on_event=send,
        stop=task.stop,
    )


def _run_replan(task: SandboxTask, send: Send) -> None:
    run_plan_agent(
        sandbox_agent(task.agent),
        task.message,
        trace_id=task.trace_id,
        session_id=task.session_id,
        on_event=send,
        stop=task.stop,
        history=task.history,
    )


def _run_planner(task: SandboxTask, send: Send) -> None:
    """Plan from the message and run the plan through the Bridge (Path 2), no LLM at all."""
    agent = task.agent
    name = agent.name if agent else SANDBOX_AGENT
    allowed = frozenset(agent.tools) if agent else None
    tools = (
        sorted(allowed) if allowed is not None else [s.name for s in get_engine().registry.list()]
    )
    send(Started(task.trace_id, name, "", tools, 0))
    if task.history:
        send(Notice("the planner plans from this message alone; earlier turns are not read"))
    context = CallContext(trace_id=task.trace_id, agent=name, session_id=task.session_id,
                          request_text=task.message, chosen_by="planner",
                          allowed_tools=allowed, stop=task.stop)  # fmt: skip
    outcome = bridge.execute(None, None, task.message, context)
    for warning in outcome.warnings:  # the tools passed over: the agent may not use them
        send(Notice(warning))
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
    answer = "\n".join(answer_line(result) for result in outcome.results)
    reason = "stop" if outcome.success else CANCELLED if task.stop.is_set() else "error"
    send(Final(answer, reason, task.trace_id, 0, 0, 0))


def _run_workflow(task: SandboxTask, send: Send) -> None:
    """Run the saved workflow as the admin's "run now" does, every step shown as it runs."""
    saved = task.workflow
    assert saved is not None  # the form requires one in this mode
    workflow = saved.as_workflow()
    tools = sorted({step.tool for step in workflow.steps})
    send(Started(task.trace_id, f"workflow:{saved.name}", "", tools, 0))
    run = WorkflowRun.objects.create(workflow=saved, trace_id=task.trace_id)
    execute_run(run.pk, watch_steps(send), stop=task.stop)
    run.refresh_from_db()
    lines = [f"Workflow {saved.name}: {run.status}"]
    for step in run.progress.get("steps", []):
        result = step.get("result") or {}
        lines.append(f"{step['step_id']} {step['tool']} [{step['status']}]: "
                     f"{result.get('text') or step.get('error') or ''}")  # fmt: skip
    reason = {WorkflowRun.Status.SUCCESS: "stop", WorkflowRun.Status.CANCELLED: CANCELLED}.get(
        run.status, str(run.status)
    )
    send(Final("\n".join(lines), reason, task.trace_id, 0, 0, 0))


_RUNNERS: dict[str, Callable[[SandboxTask, Send], None]] = {
    "llm": _run_llm,
    "replan": _run_replan,
    "planner": _run_planner,
    "workflow": _run_workflow,
}
