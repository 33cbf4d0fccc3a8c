"""Plan-execute-replan for an agent: its LLM drafts the plans, the Bridge runs their steps.

replan.py is the core (no Django); this is where it meets the site: the agent's model at
its endpoint drafts each plan (the system prompt lists the agent's tools with their
parameters; the feedback on a plan that failed is the next user message), every step
runs through the Bridge as a saved workflow's does (chosen_by=workflow, planner fallback
with the step's reason), and one trace holds it all: an agent span, an llm span per
draft with its tokens, and every tool call. A last LLM call turns the results into the
answer.

It emits the agent loop's events (started, model_turn, tool_started, tool_finished,
fallback, notice, final), plus `plan` (a draft's steps, or why it cannot run) and
`replan` (the feedback that asks for the next draft), so the sandbox shows either alike.

A caller's stop signal (a threading.Event) ends the task as cancelled: checked before
each model call, while waiting for one and between drafts; steps not yet started are not
run and running ones are abandoned (runs.bridge_step_runner and the engine see to that).
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, ClassVar

from django.conf import settings

from planner_app.agents.llm.messages import ChatModel, LlmError, LlmReply, Message, Usage
from planner_app.agents.loop_events import (
    PATH_MCP,
    PATH_PLANNER,
    PATH_WORKFLOW,
    Fallback,
    Final,
    LoopEvent,
    ModelTurn,
    Notice,
    Started,
    ToolFinished,
    ToolStarted,
)
from planner_app.agents.replan import (
    PLAN_INSTRUCTIONS,
    ReplanOutcome,
    ReplanSettings,
    plan_execute_replan,
    plan_from_reply,
)
from planner_app.agents.site_agents import chat_model, record_spans
from planner_app.agents.stopping import (
    CANCELLED,
    STOPPED_ANSWER,
    Stopped,
    call_unless_stopped,
    check_stop,
    mark_stopped,
)
from planner_app.agents.task_records import TaskRecords
from planner_app.bridge import BridgeResult
from planner_app.models import Agent
from planner_app.workflows.executor import StepStatus, WorkflowRun
from planner_app.workflows.graph import WorkflowError, WorkflowStep
from planner_app.workflows.graph import validate_workflow as check_plan
from planner_app.workflows.workflow_runs import StepWatch, bridge_step_runner, call_in_thread
from tools_app.engine import CallContext
from tools_app.formatting import estimate_tokens
from tools_app.registry import ToolRegistry
from tools_app.site_engine import get_engine
from tools_app.specs import ToolResult

logger = logging.getLogger(__name__)

ANSWER_INSTRUCTION = (
    "Answer the request from these results. If a step failed or something is missing, say what."
)


@dataclass(frozen=True)
class PlanDrafted(LoopEvent):
    type: ClassVar[str] = "plan"
    attempt: int  # 1 for the first draft
    steps: list[dict[str, Any]]  # as the model wrote them: id, tool, arguments, depends_on
    problems: list[str]  # why it cannot run; empty: it runs now
    # A draft that was tool calls instead of a plan: the calls as the model made them (each
    # is read as one step of the plan, in order).
    tool_calls: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class Replanning(LoopEvent):
    type: ClassVar[str] = "replan"
    attempt: int  # the draft now asked for
    feedback: str  # what the model is told about its previous plan


@dataclass
class PlanAgentResult:
    content: str
    finish_reason: str  # stop, max_replans, error, cancelled
    trace_id: str
    drafts: int
    usage: Usage
    outcome: ReplanOutcome | None
    events: list[LoopEvent]
    error: str = ""


def run_plan_agent(
    agent: Agent,
    request: str,
    *,
    trace_id: str | None = None,
    session_id: str = "",
    max_replans: int | None = None,
    on_event: Callable[[LoopEvent], None] | None = None,
    stop: threading.Event | None = None,
    history: Sequence[Message] = (),
) -> PlanAgentResult:
    """Plan, run and replan the request with the agent's LLM; LlmNotConfigured without one.

    `history` holds the conversation's earlier turns (user and assistant messages, oldest
    first), so a follow-up ("and double it") can be planned. Setting `stop` from another
    thread ends the task soon after (finish_reason cancelled).
    """
    replan = ReplanSettings(
        max_replans=settings.ARES_REPLAN_MAX if max_replans is None else max_replans
    )
    task = _PlanTask(agent, chat_model(agent), trace_id or secrets.token_hex(16), on_event, stop)
    return task.run(request, replan, session_id, history)


def plan_prompt(agent: Agent, tools: list[Any]) -> str:
    """Return the drafting system prompt: the agent's own, the plan format, its tools."""
    listing = "\n".join(
        f"- {spec.name}: {spec.description}\n  parameters: "
        f"{json.dumps(spec.parameters, ensure_ascii=False, separators=(',', ':'))}"
        for spec in tools
    )
    parts = [agent.system_prompt, PLAN_INSTRUCTIONS, f"Tools:\n{listing or '(none)'}"]
    return "\n\n".join(part for part in parts if part)


def results_text(run: WorkflowRun) -> str:
    """Return a run's steps and what each gave, one line each, for the model to answer from."""
    lines = []
    for step in run.steps:
        data = step.result.data if step.result and step.status is StepStatus.SUCCESS else None
        shown = json.dumps(data, default=str, ensure_ascii=False)[:1000] if data is not None else ""
        lines.append(f"- {step.step_id} {step.tool} [{step.status}]: {shown or step.error}")
    return "\n".join(lines)


def watch_steps(emit: Callable[[LoopEvent], None]) -> StepWatch:
    """Return a StepWatch that emits each workflow step's call as loop events.

    The step's own call has badge 3 (workflow), or 4 when its tool is an MCP server's;
    the calls the planner made in its place (a failed or unknown tool) badge 2.
    """
    registry = get_engine().registry  # now: get_engine() may read the database

    def path_of(tool: str) -> int:
        spec = registry.get(tool) if tool in registry else None
        return PATH_MCP if spec is not None and spec.ran_on.startswith("mcp:") else PATH_WORKFLOW

    def started(step: WorkflowStep, arguments: dict[str, Any]) -> None:
        emit(ToolStarted(step.id, step.tool, arguments, path_of(step.tool)))

    def finished(step: WorkflowStep, arguments: dict[str, Any], outcome: BridgeResult) -> None:
        results = list(outcome.results)
        if outcome.path in ("direct", "error"):
            emit(finished_event(step.id, results[0], path_of(step.tool), tool=step.tool))
            return
        if outcome.path == "fallback":
            emit(finished_event(step.id, results.pop(0), path_of(step.tool)))
            reason = "step_failed"
        else:  # the Bridge found no such tool and planned from the step's reason
            warning = outcome.warnings[0] if outcome.warnings else f"no tool named {step.tool!r}"
            missing = ToolResult(step.id, step.tool, False, text=warning)
            emit(finished_event(step.id, missing, path_of(step.tool), error_kind="not_found"))
            reason = "unknown_tool"
        emit(Fallback(reason, step.tool, outcome.path, list(outcome.warnings)))
        for result in results:
            if not result.tool:  # the planner found nothing to run
                emit(Notice(result.text or "the planner found no tool"))
                continue
            emit(ToolStarted(result.call_id, result.tool, None, PATH_PLANNER))
            emit(finished_event(result.call_id, result, PATH_PLANNER))

    return StepWatch(started, finished)


def finished_event(
    call_id: str, result: ToolResult, path: int, *, tool: str = "", error_kind: str = ""
) -> ToolFinished:
    """Return the tool_finished event of one result (`tool` names it when the result does not)."""
    if result.error is not None:
        error_kind = str(result.error.kind)
    text = result.text or (result.error.message if result.error else "")
    return ToolFinished(call_id, result.tool or tool, path, result.success, error_kind,
                        text, result.metadata.get("latency_ms", 0.0), estimate_tokens(text),
                        False, True)  # fmt: skip


class _PlanTask(TaskRecords):
    def __init__(
        self,
        agent: Agent,
        model: ChatModel,
        trace_id: str,
        on_event: Callable[[LoopEvent], None] | None,
        stop: threading.Event | None = None,
    ) -> None:
        super().__init__(agent.name, model, trace_id, "", record_spans, on_event)
        self.agent, self.stop = agent, stop
        self.earlier: list[Message] = []  # the conversation before this request
        self.so_far = ""  # where the task stood, for an answer when it is stopped
        self.usage = Usage()
        self.drafts = 0
        engine = get_engine()
        # Plans are checked against the tools the agent may call, and only those.
        self.registry = ToolRegistry(engine.registry.list(names=agent.tools))
        self.tools = self.registry.list()

    # The whole task ----------------------------------------------------------------------

    def run(
        self,
        request: str,
        replan: ReplanSettings,
        session_id: str,
        history: Sequence[Message] = (),
    ) -> PlanAgentResult:
        self.request, self.session_id = request, session_id
        self.started_at, self.clock = datetime.now(UTC), time.perf_counter()
        # Text only: an earlier turn's tool calls would need their tool messages too.
        self.earlier = [
            Message(m.role, m.content) for m in history if m.role in ("user", "assistant")
        ]
        try:
            return self._run(request, replan, session_id)
        except Stopped:
            content = STOPPED_ANSWER + (
                f" Where the task stood:\n{self.so_far}" if self.so_far else ""
            )
            return self._finish(content, CANCELLED, None)

    def _run(self, request: str, replan: ReplanSettings, session_id: str) -> PlanAgentResult:
        prompt = plan_prompt(self.agent, self.tools)
        self.history = [Message("system", prompt), *self.earlier, Message("user", request)]
        self.emit(Started(self.trace_id, self.agent.name, self.model.model,
                          [spec.name for spec in self.tools], estimate_tokens(prompt)))  # fmt: skip
        context = CallContext(
            trace_id=self.trace_id,
            parent_span_id=self.root_span_id,
            agent=self.agent.name,
            session_id=session_id,
            request_text=request,
            chosen_by="workflow",
            allowed_tools=frozenset(self.agent.tools),
            timeout_s=self.agent.tool_timeout_s,
            stop=self.stop,
        )
        run_step = bridge_step_runner(context, watch_steps(self.emit))
        try:
            outcome = asyncio.run(
                plan_execute_replan(request, self._draft, run_step, self.registry, replan)
            )
        except LlmError as exc:
            self.emit(Notice(f"the LLM call failed: {exc}"))
            return self._finish("", "error", None, error=str(exc))
        if outcome.succeeded:
            return self._finish(self._answer(outcome.final_run), "stop", outcome)
        drafts = len(outcome.attempts)
        bound = f"at most {replan.max_replans} replans"
        self.emit(
            Notice(f"no plan ran cleanly after {drafts} drafts ({bound}): answering from what ran")
        )
        if outcome.final_run is None:
            problems = "; ".join(outcome.attempts[-1].problems)
            return self._finish(f"No plan could be run: {problems}", "max_replans", outcome)
        return self._finish(self._answer(outcome.final_run), "max_replans", outcome)

    async def _draft(self, request: str, notes: str) -> str:
        """Ask the model for the next plan (the drafter of plan_execute_replan)."""
        check_stop(self.stop)
        self.drafts += 1
        if notes:
            self.so_far = notes
            self.emit(Replanning(self.drafts, notes))
            self.history.append(Message("user", notes))
        reply = await asyncio.to_thread(call_in_thread, self._ask, "plan")
        text, calls = reply.content, []
        if reply.tool_calls and not text.strip():
            text, calls = plan_of_calls(reply), [_call_dict(call) for call in reply.tool_calls]
            names = ", ".join(call["name"] for call in calls)
            self.emit(Notice(f"draft {self.drafts} is a tool call ({names}), not a plan: "
                             "read as a plan of one step per call"))  # fmt: skip
        self.history.append(Message("assistant", text))
        self.emit(PlanDrafted(self.drafts, *self._read_plan(text), tool_calls=calls))
        return text

    def _read_plan(self, reply: str) -> tuple[list[dict[str, Any]], list[str]]:
        """Return the draft's steps as written and its problems, as the core will find them."""
        try:
            plan = plan_from_reply(reply, f"plan-{self.drafts}", ReplanSettings().max_steps)
        except WorkflowError as exc:
            return [], [str(problem) for problem in exc.problems]
        steps = [
            {"id": s.id, "tool": s.tool, "arguments": s.arguments,
             "depends_on": list(s.depends_on), "reason": s.request}
            for s in plan.steps
        ]  # fmt: skip
        return steps, [str(problem) for problem in check_plan(plan, self.registry)]

    def _answer(self, run: WorkflowRun | None) -> str:
        """Return the model's answer from the run's results (the results when it fails)."""
        results = results_text(run) if run else ""
        question = f"Request: {self.request}\n\nResults of the plan that ran for it:\n{results}"
        self.so_far = f"The plan's results were:\n{results}" if results else ""
        self.history = [*self.earlier, Message("user", f"{question}\n\n{ANSWER_INSTRUCTION}")]
        if self.agent.system_prompt:
            self.history.insert(0, Message("system", self.agent.system_prompt))
        try:
            answer = self._ask("answer").content
        except LlmError as exc:
            self.emit(Notice(f"the LLM call for the answer failed: {exc}"))
            return f"The model gave no answer. The plan's results were:\n{results}"
        if not answer.strip():
            return f"The model gave no answer. The plan's results were:\n{results}"
        return answer

    # The model -------------------------------------------------------------------------

    def _ask(self, purpose: str) -> LlmReply:
        """Call the model without tools once, record the call and emit the turn.

        Raise Stopped instead when the task is stopped before or during the call.
        """
        check_stop(self.stop)
        started_at, clock = datetime.now(UTC), time.perf_counter()
        iteration = self.drafts + (purpose == "answer")
        try:
            reply = call_unless_stopped(
                lambda: self.model.complete(self.history, (), "none"), self.stop
            )
        except (LlmError, Stopped) as exc:
            self._record_llm(purpose, iteration, started_at, clock, error=exc)
            raise
        if reply.usage.estimated:
            sent = sum(estimate_tokens(m.content) + 4 for m in self.history)
            reply.usage = Usage(sent, estimate_tokens(reply.content), estimated=True)
        self.usage += reply.usage
        latency_ms = self._record_llm(purpose, iteration, started_at, clock, reply=reply)
        calls = [_call_dict(call) for call in reply.tool_calls]
        self.emit(ModelTurn(iteration, reply.content, calls, reply.usage.input_tokens,
                            reply.usage.output_tokens, latency_ms, reply.finish_reason,
                            False))  # fmt: skip
        return reply

    # Records ---------------------------------------------------------------------------

    def _record_llm(
        self,
        purpose: str,
        iteration: int,
        started_at: datetime,
        clock: float,
        *,
        reply: LlmReply | None = None,
        error: LlmError | Stopped | None = None,
    ) -> float:
        arguments = {"purpose": purpose, "iteration": iteration, "messages": len(self.history)}
        span = self.llm_span(started_at, clock, arguments, reply, error)
        if reply is not None:
            span["result"]["tool_calls"] = [_call_dict(call) for call in reply.tool_calls]
        self.store([span])
        return span["latency_ms"]

    def _finish(
        self, content: str, reason: str, outcome: ReplanOutcome | None, *, error: str = ""
    ) -> PlanAgentResult:
        latency_ms = (time.perf_counter() - self.clock) * 1000
        span = self.span("agent", self.started_at, latency_ms)
        span.update(span_id=self.root_span_id, parent_span_id=None)
        span["arguments"] = {"mode": "plan_execute_replan", "tools": list(self.agent.tools)}
        span["result"] = {
            "answer": content,
            "finish_reason": reason,
            "drafts": self.drafts,
            "model_input_tokens": self.usage.input_tokens,
            "model_output_tokens": self.usage.output_tokens,
            "attempts": [_attempt_summary(attempt) for attempt in outcome.attempts]
            if outcome
            else [],
        }
        if error:
            span.update(status="error", error_kind="llm_error", error_message=error)
        elif reason == CANCELLED:
            mark_stopped(span)
        self.store([span])
        self.emit(Final(content, reason, self.trace_id, self.drafts,
                        self.usage.input_tokens, self.usage.output_tokens))  # fmt: skip
        return PlanAgentResult(content, reason, self.trace_id, self.drafts, self.usage, outcome,
                               self.events, error)  # fmt: skip


def plan_of_calls(reply: LlmReply) -> str:
    """Return the plan a draft of tool calls stands for: one step per call, in order."""
    steps = [
        {"id": f"s{index}", "tool": call.name, "arguments": call.arguments,
         "reason": f"the model's call {call.id}"}
        for index, call in enumerate(reply.tool_calls, start=1)
    ]  # fmt: skip
    return json.dumps({"steps": steps}, ensure_ascii=False, default=str)


def _call_dict(call: Any) -> dict[str, Any]:
    return {"id": call.id, "name": call.name, "arguments": call.arguments}


def _attempt_summary(attempt: Any) -> dict[str, Any]:
    return {
        "problems": attempt.problems,
        "status": str(attempt.run.status) if attempt.run else None,
        "replan_reasons": attempt.replan_reasons,
    }
