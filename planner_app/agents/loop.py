"""The agent loop (Path 1): model -> tool calls -> results -> model, until a text answer.

No Django here: the loop takes the agent as plain data, a ChatModel, the tool engine and
a few services (the Bridge, a recorder, the trace's calls for the spiral rule), so it
runs the same in a web request, a Celery task or a test. What can go wrong is caught:

- an unknown tool name goes to the Bridge, which plans from the user's request (Path 2);
  so does a reply with no tool call where the agent was asked to act;
- a call's failure goes back to the model as text in one shape (tool, error kind,
  message, and for invalid arguments the field-level problems);
- the spiral breaker: when the trace's calls make a spiral under traces_app's rule (the
  dashboards' rule, read from the same stored calls), the tool is no longer offered and
  the user's request goes to the planner (which may call the tool itself when the fault
  was the model's arguments); the model is then asked once, without tools, for its
  answer, and the planner's result is the answer when it gives none;
- a reply with neither text nor a usable call ends with the planner's result
  (finish_reason planner_answer) or says so (no_answer), never an empty "stop";
- a call the loop refuses (the spiral breaker, a side effect not replayed, a tool not
  offered) is recorded as a span that never ran (kind other, cancelled, ran_on none);
- a tool with side effects that already ran with the same arguments is not run again;
- tool output fed back is held to a token budget (see token_budget.py);
- at the iteration limit (or a spent budget) one last call without tools asks for an
  answer from what the model has;
- a caller's stop signal (a threading.Event) ends the task (finish_reason cancelled):
  checked before each model call and while waiting for one, before a reply's tool calls
  run (they are refused) and after them; running tool calls are abandoned by the engine,
  and neither the model nor the planner is asked anything more.

In active discovery mode the model starts with no tools and asks for them in
`<tool_request>` blocks (planner_app.discovery reads them and routes them); the tools
found, among those the agent may call, are offered from the next call on, each once.
How each request was routed (per-stage scores, the tools found) goes to the event and
into the trace as a `tool_discovery` span.

Every step is an event (`on_event`), typed and JSON-ready, for a page to stream.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, ClassVar, Protocol

from planner_app.agents.llm.messages import (
    ChatModel,
    LlmError,
    LlmReply,
    Message,
    ToolsNotSupported,
    Usage,
)
from planner_app.agents.stopping import (
    CANCELLED,
    STOPPED_ANSWER,
    STOPPED_REASON,
    STOPPED_STATUS,
    Stopped,
    call_unless_stopped,
    check_stop,
    is_stopped,
    mark_stopped,
)
from planner_app.agents.token_budget import TokenBudget
from planner_app.discovery.requests import (
    MAX_TOOL_REQUESTS,
    ToolRequest,
    ToolRequestError,
    TooManyToolRequests,
    parse_tool_requests,
)
from tools_app.engine import CallContext, ToolEngine
from tools_app.formatting import estimate_tokens, format_error
from tools_app.specs import ErrorKind, ToolCall, ToolError, ToolResult, ToolSpec
from traces_app.spirals.detection import (
    ENDED_BY_SUCCESS,
    FAILING,
    CallView,
    SpiralRule,
    arguments_fingerprint,
)
from traces_app.spirals.detection import find_spirals as find_trace_spirals

logger = logging.getLogger(__name__)

# Failures that mean the tool never ran: a call refused this way had no side effects.
NOT_RUN = frozenset(
    {ErrorKind.INVALID_ARGUMENTS, ErrorKind.NOT_FOUND, ErrorKind.DISABLED,
     ErrorKind.PERMISSION_DENIED, ErrorKind.CANCELLED}
)  # fmt: skip
SPIRAL_PROMPT = (
    "No more tool calls for this task: {why}. The planner's results are in the last tool "
    "result. Answer the user's request now from them."
)
FINAL_PROMPT = (
    "No more tool calls for this task ({reason}). Answer the user's request now from the "
    "information above; if something is missing, say what."
)
ACTIVE_PROMPT = f"""You start with no tools. When you need one, ask for it in your reply,
one block per tool, and the tools found are given to you to call:
<tool_request>
server: <what kind of service would have it>
tool: <what the tool should do>
</tool_request>
At most {MAX_TOOL_REQUESTS} requests per task."""
PATH_LLM, PATH_PLANNER, PATH_WORKFLOW, PATH_MCP = 1, 2, 3, 4


@dataclass(frozen=True)
class AgentSpec:
    """An agent as the loop needs it (the Agent row, as plain data)."""

    name: str
    system_prompt: str = ""
    tools: tuple[str, ...] = ()  # allowed; empty: no tool calls at all
    max_iterations: int = 10
    parallel_tools: bool = True
    tool_timeout_s: float = 30.0
    tool_calling: bool = True
    discovery: str = "passive"
    token_budget: int = 8000
    tool_output_share: float = 0.3


# Events -------------------------------------------------------------------------------


@dataclass(frozen=True)
class LoopEvent:
    type: ClassVar[str] = ""

    def as_dict(self) -> dict[str, Any]:
        return {"type": self.type, **dataclasses.asdict(self)}


@dataclass(frozen=True)
class Started(LoopEvent):
    type: ClassVar[str] = "started"
    trace_id: str
    agent: str
    model: str
    tools: list[str]
    schema_tokens: int


@dataclass(frozen=True)
class ModelTurn(LoopEvent):
    type: ClassVar[str] = "model_turn"
    iteration: int
    content: str
    tool_calls: list[dict[str, Any]]
    input_tokens: int
    output_tokens: int
    latency_ms: float
    finish_reason: str
    with_tools: bool


@dataclass(frozen=True)
class ToolStarted(LoopEvent):
    type: ClassVar[str] = "tool_started"
    call_id: str
    tool: str
    arguments: Any
    path: int  # 1 LLM, 2 planner, 3 workflow, 4 MCP


@dataclass(frozen=True)
class ToolFinished(LoopEvent):
    type: ClassVar[str] = "tool_finished"
    call_id: str
    tool: str
    path: int
    success: bool
    error_kind: str
    text: str  # as fed back to the model
    latency_ms: float
    tokens: int
    truncated: bool
    ran: bool  # False: refused by the loop (spiral breaker, no replay) and never sent


@dataclass(frozen=True)
class Fallback(LoopEvent):
    type: ClassVar[str] = "fallback"
    reason: str  # unknown_tool, no_tool_call, spiral
    tool: str
    outcome: str  # the Bridge's path: planner, fallback, direct or error
    warnings: list[str]
    path: int = PATH_PLANNER


@dataclass(frozen=True)
class Spiral(LoopEvent):
    type: ClassVar[str] = "spiral"
    tool: str
    kind: str
    attempts: int
    error_kind: str
    resolution: str


@dataclass(frozen=True)
class ToolsDiscovered(LoopEvent):
    type: ClassVar[str] = "tools_discovered"
    requests: list[dict[str, str]]
    loaded: list[str]  # new this time
    offered: list[str]  # every tool the model may call now
    # Per request: how the router found its tools (mode, stage-1 servers, tools with scores).
    routing: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class Notice(LoopEvent):
    type: ClassVar[str] = "notice"
    message: str


@dataclass(frozen=True)
class Final(LoopEvent):
    type: ClassVar[str] = "final"
    content: str
    # stop, spiral_breaker, planner_answer, no_answer, max_iterations, budget,
    # discovery_exhausted, error, cancelled
    finish_reason: str
    trace_id: str
    iterations: int
    input_tokens: int
    output_tokens: int


# The loop ------------------------------------------------------------------------------


class Discovered(Protocol):
    """The router's answer to one tool request (planner_app.discovery's Routing)."""

    @property
    def tool_names(self) -> list[str]: ...

    def explain(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class LoopServices:
    """What the loop uses from the site; the Django adapter (agents/site_agents.py) fills it."""

    engine: ToolEngine
    fallback: Callable[..., Any]  # planner_app.bridge.execute
    plan_without: Callable[..., Any]  # planner_app.bridge.plan_without
    read_calls: Callable[[str], Sequence[CallView]]  # the trace's tool calls, oldest first
    record: Callable[[list[dict[str, Any]]], None]
    spiral_rule: SpiralRule = SpiralRule()
    spiral_resolved: Callable[[str], None] = lambda trace_id: None
    # Active discovery: (what the tool should do, which server) -> the tools found.
    discover: Callable[[str, str], Discovered] | None = None


@dataclass
class LoopResult:
    content: str
    finish_reason: str
    trace_id: str
    iterations: int
    usage: Usage
    tokens: dict[str, int]
    messages: list[Message]
    tool_calls: list[dict[str, Any]]
    events: list[LoopEvent]
    error: str = ""


def run_agent_loop(
    agent: AgentSpec,
    model: ChatModel,
    messages: Sequence[Message],
    services: LoopServices,
    *,
    trace_id: str | None = None,
    session_id: str = "",
    tool_choice: str = "auto",
    on_event: Callable[[LoopEvent], None] | None = None,
    stop: threading.Event | None = None,
) -> LoopResult:
    """Run one task to its answer; every step goes to on_event and into the trace.

    Setting `stop` (from another thread) ends the task soon after, as cancelled.
    """
    task = _Task(
        agent, model, services, trace_id or secrets.token_hex(16), session_id, on_event, stop
    )
    return task.run(list(messages), tool_choice)


class TaskRecords:
    """What an LLM task's spans share (trace, root span, agent, model, request), and how it
    stores them and tells its events; the agent loop and plan-execute-replan both use it."""

    def __init__(
        self,
        agent_name: str,
        model: ChatModel,
        trace_id: str,
        session_id: str,
        record: Callable[[list[dict[str, Any]]], None],
        on_event: Callable[[LoopEvent], None] | None,
    ) -> None:
        self.agent_name, self.model, self.record = agent_name, model, record
        self.trace_id, self.root_span_id = trace_id, secrets.token_hex(8)
        self.session_id, self.request = session_id, ""
        self.on_event = on_event
        self.events: list[LoopEvent] = []

    def emit(self, event: LoopEvent) -> None:
        self.events.append(event)
        if self.on_event is not None:
            self.on_event(event)

    def span(self, kind: str, started_at: datetime, latency_ms: float) -> dict[str, Any]:
        return {
            "trace_id": self.trace_id,
            "span_id": secrets.token_hex(8),
            "parent_span_id": self.root_span_id,
            "kind": kind,
            "agent": self.agent_name,
            "session_id": self.session_id,
            "request_text": self.request,
            "model": self.model.model[:200],
            "started_at": started_at,
            "latency_ms": latency_ms,
            "status": "ok",
        }

    def llm_span(
        self,
        started_at: datetime,
        clock: float,
        arguments: dict[str, Any],
        reply: LlmReply | None,
        error: LlmError | Stopped | None,
    ) -> dict[str, Any]:
        """Return the span of one LLM call: its tokens and reply, or its error (or its stop)."""
        span = self.span("llm", started_at, (time.perf_counter() - clock) * 1000)
        span["arguments"] = arguments
        if reply is not None:
            span["model"] = (reply.model or self.model.model)[:200]
            span.update(input_tokens=reply.usage.input_tokens,
                        output_tokens=reply.usage.output_tokens)  # fmt: skip
            arguments["usage_estimated"] = reply.usage.estimated
            span["result"] = {"content": reply.content, "finish_reason": reply.finish_reason}
        elif isinstance(error, Stopped):
            mark_stopped(span)
        else:
            kind = "tools_not_supported" if isinstance(error, ToolsNotSupported) else "llm_error"
            span.update(status="error", error_kind=kind, error_message=str(error))
        return span

    def store(self, spans: list[dict[str, Any]]) -> None:
        try:
            self.record(spans)
        except Exception:  # a lost record must not lose the user's answer
            logger.exception("could not record %d span(s) of trace %s", len(spans), self.trace_id)


@dataclass
class _Turn:
    """One call of a model turn on its way to a tool message."""

    call: ToolCall
    spec: ToolSpec | None
    result: ToolResult | None = None
    path: int = PATH_LLM
    ran: bool = True
    refused_by: str = ""  # who refused it when it did not run: spiral_breaker or agent_loop
    # The planner's answers to a spiral this call ended, with why: told to the model in
    # this call's tool message, recorded after the call itself.
    fallbacks: list[tuple[Any, str]] = field(default_factory=list)


class _Task(TaskRecords):
    def __init__(
        self,
        agent: AgentSpec,
        model: ChatModel,
        services: LoopServices,
        trace_id: str,
        session_id: str,
        on_event: Callable[[LoopEvent], None] | None,
        stop: threading.Event | None = None,
    ) -> None:
        super().__init__(agent.name, model, trace_id, session_id, services.record, on_event)
        self.agent, self.services, self.stop = agent, services, stop
        self.iteration = 0  # the model calls started, as the task's iterations when stopped
        self.engine = services.engine
        self.budget = TokenBudget(agent.token_budget, agent.tool_output_share)
        self.usage = Usage()
        self.schema_tokens_sent = 0
        self.records: list[dict[str, Any]] = []
        self.handled_spirals: set[tuple[str, str]] = set()
        self.blocked_tools: dict[str, str] = {}  # tool -> why (a failing spiral)
        self.blocked_calls: dict[tuple[str, str], str] = {}  # (tool, arguments) -> why (a loop)
        self.side_effects: dict[tuple[str, str], str] = {}  # (tool, arguments) -> call id
        self.planned_for_request = False
        self.planner_answer = ""  # what the planner's calls gave, for a model that gives nothing
        self.spirals_broken: list[tuple[str, Any]] = []  # (why, the planner's outcome)
        self.active = False
        self.tool_requests = 0
        self.tools_loaded = 0
        self.llm_calls = 0
        self.passive_per_call = 0  # the allowed tools' schema tokens
        self.passive_schema_tokens = 0  # what passive mode would have sent, for comparison
        self.error = ""
        self.context = CallContext(
            trace_id=trace_id,
            parent_span_id=self.root_span_id,
            agent=agent.name,
            session_id=session_id,
            chosen_by="llm",
            allowed_tools=frozenset(agent.tools),
            timeout_s=agent.tool_timeout_s,
            stop=stop,
        )

    # The whole task --------------------------------------------------------------------

    def run(self, messages: list[Message], tool_choice: str) -> LoopResult:
        self.started_at, self.clock = datetime.now(UTC), time.perf_counter()
        self.history: list[Message] = []
        try:
            return self._run(messages, tool_choice)
        except Stopped:
            return self._finish(self._what_we_have(STOPPED_ANSWER), CANCELLED, self.iteration)

    def _run(self, messages: list[Message], tool_choice: str) -> LoopResult:
        self.request = next((m.content for m in reversed(messages) if m.role == "user"), "")
        self.context = dataclasses.replace(self.context, request_text=self.request)
        self.tools = self._tools_to_show()
        prompt = self.agent.system_prompt
        if self.active:
            prompt = f"{prompt}\n\n{ACTIVE_PROMPT}" if prompt else ACTIVE_PROMPT
        self.history = _with_system_prompt(prompt, messages)
        self.emit(Started(self.trace_id, self.agent.name, self.model.model,
                          [spec.name for spec in self.tools], self._schema_tokens()))  # fmt: skip
        reason, iteration = "max_iterations", 0
        while iteration < self.agent.max_iterations:
            if self.budget.is_exhausted:
                reason = "budget"
                break
            iteration += 1
            choice = tool_choice if iteration == 1 else "auto"
            reply = self._ask(iteration, self.tools, choice)
            if reply is None:
                return self._finish("", "error", iteration)
            calls = reply.tool_calls if self.tools else []  # none offered: text is the answer
            if calls and is_stopped(self.stop):
                self._refuse_calls(calls, STOPPED_REASON, "stopped")
                self.history.append(Message("assistant", reply.content))
                raise Stopped
            if self.active and reply.tool_calls and not calls:
                self._refuse_calls(
                    reply.tool_calls, "not offered: ask for it in a <tool_request>", "discovery"
                )
            self.history.append(Message("assistant", reply.content, tuple(calls)))
            discovery = self._discover(reply.content) if self.active and not calls else ""
            if calls:
                self._run_turn(calls)
                if self.spirals_broken:
                    return self._end_spiral(iteration)
            elif discovery == "exhausted":
                reason = "discovery_exhausted"
                break
            elif discovery == "served":
                continue
            elif self._should_have_acted(reply, choice):
                self._plan_for_request("no_tool_call")
                if choice == "required" and self.planner_answer:
                    # The model would not call although told to: the planner's result is the
                    # answer, not the model's talk ("I don't know.").
                    return self._finish(self._planner_answer_text(), "planner_answer", iteration)
            elif not reply.content.strip():
                return self._no_answer(iteration)
            else:
                return self._finish(reply.content, "stop", iteration)
        check_stop(self.stop)
        self.emit(Notice(f"asking for a final answer without tools ({reason})"))
        self.history.append(Message("user", FINAL_PROMPT.format(reason=reason.replace("_", " "))))
        reply = self._ask(iteration + 1, [], "none")
        if reply is None:
            return self._finish("", "error", iteration + 1)
        self._refuse_calls(
            reply.tool_calls, f"no more tool calls in this task ({reason})", "agent_loop"
        )
        self.history.append(Message("assistant", reply.content))
        return self._finish(reply.content or self._what_we_have(), reason, iteration + 1)

    def _end_spiral(self, iteration: int) -> LoopResult:
        """End the task the spiral breaker stopped: one last call without tools.

        With the planner's results the model is asked to answer from them (and they are the
        answer when it gives none or fails); without, it is told why there is nothing more.
        """
        why = "; ".join(why for why, _ in self.spirals_broken)
        helped = self.planner_answer
        if helped:
            prompt = SPIRAL_PROMPT.format(why=why)
        else:
            found = [
                result.text or (result.error.message if result.error else "")
                for _, outcome in self.spirals_broken
                for result in outcome.results
                if not result.tool
            ]
            prompt = FINAL_PROMPT.format(reason="; ".join([why, *found]))
        check_stop(self.stop)
        self.emit(Notice(f"asking for a final answer without tools ({why})"))
        self.history.append(Message("user", prompt))
        reply = self._ask(iteration + 1, [], "none")
        if reply is None:
            if helped:
                return self._finish(self._planner_answer_text(), "spiral_breaker", iteration + 1)
            return self._finish("", "error", iteration + 1)
        self._refuse_calls(
            reply.tool_calls, f"no more tool calls in this task ({why})", "spiral_breaker"
        )
        self.history.append(Message("assistant", reply.content))
        content = reply.content if reply.content.strip() else ""
        if not content:
            content = self._planner_answer_text() if helped else self._what_we_have()
        return self._finish(content, "spiral_breaker", iteration + 1)

    def _no_answer(self, iteration: int) -> LoopResult:
        """End a task whose model replied with nothing: the planner's result, or say so."""
        if self.planner_answer:
            return self._finish(self._planner_answer_text(), "planner_answer", iteration)
        return self._finish(self._what_we_have(), "no_answer", iteration)

    def _planner_answer_text(self) -> str:
        return "The model gave no answer; the planner's results (path 2):\n" + self.planner_answer

    def _tools_to_show(self) -> list[ToolSpec]:
        if not self.agent.tool_calling or not self.agent.tools:
            return []
        allowed = self.engine.registry.list(names=self.agent.tools)
        self.passive_per_call = _schema_tokens(allowed)
        if self.agent.discovery != "active":
            return allowed
        if self.services.discover is None:
            self.emit(Notice("active discovery is not available here: showing every allowed tool"))
            return allowed
        self.active = True
        return []

    def _discover(self, text: str) -> str:
        """Serve the reply's tool requests; return served, exhausted or "" (none asked)."""
        try:
            requests = parse_tool_requests(text, already_made=self.tool_requests)
            over = ""
        except TooManyToolRequests as exc:
            requests, over = exc.allowed, str(exc)
            if not requests:
                return "exhausted"
        except ToolRequestError as exc:
            self.history.append(Message("user", f"Your tool request could not be read: {exc}"))
            return "served"
        if not requests:
            return ""
        self.tool_requests += len(requests)
        started_at, clock = datetime.now(UTC), time.perf_counter()
        offered = {spec.name for spec in self.tools}
        new: list[ToolSpec] = []
        found: set[str] = set()  # callable by this agent, new or loaded before
        routing = []
        for request in requests:
            discovered = self.services.discover(request.tool, request.server)
            routing.append(discovered.explain())
            for name in discovered.tool_names:
                if name not in self.agent.tools or name not in self.engine.registry:
                    continue
                found.add(name)
                if name not in offered:  # loaded once, however often it is found
                    new.append(self.engine.registry.get(name))
                    offered.add(name)
        self.tools = [*self.tools, *new]
        self.tools_loaded += len(new)
        note = self._discovery_note(requests, new, found)
        if over:
            note += f" ({over})"
        self.history.append(Message("user", note))
        asked = [dataclasses.asdict(r) for r in requests]
        loaded = [spec.name for spec in new]
        self._record_discovery(started_at, clock, asked, routing, loaded, sorted(offered))
        self.emit(ToolsDiscovered(asked, loaded, sorted(offered), routing))
        return "served"

    def _discovery_note(
        self, requests: list[ToolRequest], new: list[ToolSpec], found: set[str]
    ) -> str:
        """Return what the model is told about its requests: the tools loaded, or none found."""
        if not found:
            asked = "; ".join(request.tool for request in requests)
            return f"No tools found for: {asked}. Ask in other words, or answer without."
        listing = "; ".join(f"{spec.llm_name}: {spec.description}" for spec in new)
        note = f"Tools discovered and loaded ({len(new)} new)"
        note += f": {listing}." if new else "."
        before = sorted(found - {spec.name for spec in new})
        if before:
            names = ", ".join(self.engine.registry.get(name).llm_name for name in before)
            note += f" Already loaded: {names}."
        return f"{note} Call them as tools."

    def _should_have_acted(self, reply: LlmReply, choice: str) -> bool:
        """Return whether a reply without tool calls should go to the planner instead."""
        if not self.agent.tools or self.planned_for_request:
            return False
        return choice == "required" or not reply.content.strip()

    # The model ---------------------------------------------------------------------------

    def _ask(self, iteration: int, tools: list[ToolSpec], choice: str) -> LlmReply | None:
        """Call the model once, record the call, and return its reply (None: it failed).

        Raise Stopped instead when the task is stopped before or during the call.
        """
        check_stop(self.stop)
        self.iteration = iteration
        started_at, clock = datetime.now(UTC), time.perf_counter()
        schema_tokens = self._schema_tokens() if tools else 0
        self.llm_calls += 1
        try:
            reply = call_unless_stopped(
                lambda: self.model.complete(self.history, tools, choice), self.stop
            )
        except Stopped as exc:
            self._record_llm(iteration, started_at, clock, schema_tokens, error=exc)
            raise
        except ToolsNotSupported as exc:
            self._record_llm(iteration, started_at, clock, schema_tokens, error=exc)
            self.tools = []
            self.emit(Notice(f"{self.model.model} takes no tools ({exc}); answering without"))
            return self._ask(iteration, [], "auto")
        except LlmError as exc:
            self._record_llm(iteration, started_at, clock, schema_tokens, error=exc)
            self.error = str(exc)
            self.emit(Notice(f"the LLM call failed: {exc}"))
            return None
        usage = reply.usage if not reply.usage.estimated else self._estimated_usage(reply, tools)
        reply.usage = usage
        self.usage += usage
        self.schema_tokens_sent += schema_tokens
        if tools or (self.active and choice != "none"):
            self.passive_schema_tokens += self.passive_per_call
        self.budget.record_call(usage.input_tokens, usage.output_tokens)
        latency_ms = self._record_llm(iteration, started_at, clock, schema_tokens, reply=reply)
        self.emit(ModelTurn(iteration, reply.content, [_call_dict(c) for c in reply.tool_calls],
                            usage.input_tokens, usage.output_tokens, latency_ms,
                            reply.finish_reason, bool(tools)))  # fmt: skip
        return reply

    def _estimated_usage(self, reply: LlmReply, tools: list[ToolSpec]) -> Usage:
        sent = sum(estimate_tokens(m.content) + 4 for m in self.history)
        sent += self._schema_tokens() if tools else 0
        answer = estimate_tokens(reply.content) + sum(
            estimate_tokens(json.dumps(_call_dict(c), default=str)) for c in reply.tool_calls
        )
        return Usage(sent, answer, estimated=True)

    def _schema_tokens(self) -> int:
        return _schema_tokens(self.tools)

    # One turn of tool calls --------------------------------------------------------------

    def _run_turn(self, calls: Sequence[ToolCall]) -> None:
        turns = [self._prepare(call) for call in calls]
        runnable = [turn for turn in turns if turn.result is None and turn.path == PATH_LLM]
        for turn in runnable:
            self.emit(ToolStarted(turn.call.id, turn.spec.name if turn.spec else turn.call.name,
                                  turn.call.arguments, self._path_of(turn.spec)))  # fmt: skip
        if runnable:
            limit = None if self.agent.parallel_tools else 1
            results = self.engine.execute_many(
                [turn.call for turn in runnable], self.context, max_parallel=limit
            )
            for turn, result in zip(runnable, results, strict=True):
                turn.result, turn.path = result, self._path_of(turn.spec)
                self._remember_side_effects(turn)
        if is_stopped(self.stop):  # the planner is asked nothing once the task is stopped
            for turn in turns:
                if turn.path == PATH_PLANNER:
                    turn.path, turn.ran, turn.refused_by = PATH_LLM, False, "stopped"
                    turn.result = self._refused(turn.call, None, f"not run: {STOPPED_REASON}")
        else:
            for turn in turns:
                if turn.path == PATH_PLANNER:
                    self._bridge_unknown(turn)
            self._break_spirals(turns)
        for turn in turns:
            self._answer(turn)

    def _prepare(self, call: ToolCall) -> _Turn:
        """Return the call's turn: to run, for the planner, or refused without running."""
        if call.name not in self.engine.registry:
            # With no tools allowed there is nothing to plan with: the engine says not_found.
            return _Turn(call, None, path=PATH_PLANNER if self.agent.tools else PATH_LLM)
        spec = self.engine.registry.get(call.name)
        key = (spec.name, arguments_fingerprint(call.arguments))
        turn = _Turn(call, spec)
        why = self.blocked_tools.get(spec.name) or self.blocked_calls.get(key)
        if why:
            turn.result, turn.refused_by = self._refused(call, spec, why), "spiral_breaker"
        elif not spec.retryable and key in self.side_effects:
            earlier = self.side_effects[key]
            turn.refused_by = "agent_loop"
            turn.result = self._refused(
                call, spec,
                f"not run again: {spec.name} changes things and already ran with these "
                f"arguments in this task (call {earlier}); change the arguments if a second "
                "change is really wanted",
            )  # fmt: skip
        elif not spec.retryable:
            self.side_effects[key] = call.id  # a twin later in this turn is refused too
        if turn.result is not None:
            turn.ran = False
        return turn

    def _refused(self, call: ToolCall, spec: ToolSpec | None, message: str) -> ToolResult:
        name = spec.name if spec else call.name
        error = ToolError(ErrorKind.CANCELLED, message)
        return ToolResult(call.id, name, False, error=error, text=format_error(name, error))

    def _remember_side_effects(self, turn: _Turn) -> None:
        result = turn.result
        if turn.spec is None or turn.spec.retryable or result is None:
            return
        key = (turn.spec.name, arguments_fingerprint(turn.call.arguments))
        if not result.success and result.error.kind in NOT_RUN:
            self.side_effects.pop(key, None)  # it never ran: a corrected call may run

    def _bridge_unknown(self, turn: _Turn) -> None:
        """Send a call of an unknown tool to the Bridge, which plans from the request."""
        call = turn.call
        outcome = self.services.fallback(
            call.name, call.arguments, self.request, self.context, call_id=call.id
        )
        # The model's own call, listed with the planner's: the engine recorded it (not_found).
        error = ToolError(ErrorKind.NOT_FOUND, f"no tool named {call.name!r}")
        missed = ToolResult(call.id, call.name, False, error=error, text=error.message)
        self.emit(ToolStarted(call.id, call.name, call.arguments, PATH_LLM))
        self.emit(ToolFinished(call.id, call.name, PATH_LLM, False, str(error.kind), error.message,
                               0.0, estimate_tokens(error.message), False, False))  # fmt: skip
        self.records.append(_record(missed, call, PATH_LLM, False))
        self.emit(Fallback("unknown_tool", call.name, outcome.path, list(outcome.warnings)))
        turn.result = self._planner_result(call, outcome, f"no tool named {call.name!r}")

    def _planner_result(
        self, call: ToolCall, outcome: Any, headline: str, *, emit: bool = True
    ) -> ToolResult:
        """Return one result that tells the model what the planner did; emit its calls if asked."""
        lines = [f"{headline}; the planner took the user's request instead (path 2):"]
        ran = []
        for result in outcome.results:
            if not result.tool:
                lines.append(result.text or (result.error.message if result.error else ""))
                continue
            lines.append(result.text)
            ran.append(result.text)
        if emit:
            self._emit_planner_calls(outcome)
        if outcome.success and ran:
            self.planner_answer = "\n".join(ran)
        return ToolResult(call.id, call.name, outcome.success, text="\n".join(lines))

    def _emit_planner_calls(self, outcome: Any) -> None:
        for result in outcome.results:
            if result.tool:
                self._emit_planner_call(result)

    def _emit_planner_call(self, result: ToolResult) -> None:
        text, cut = result.text, False
        arguments = result.metadata.get("arguments")
        self.emit(ToolStarted(result.call_id, result.tool, arguments, PATH_PLANNER))
        self.emit(ToolFinished(result.call_id, result.tool, PATH_PLANNER, result.success,
                               str(result.error.kind) if result.error else "", text,
                               result.metadata.get("latency_ms", 0.0), estimate_tokens(text),
                               cut, True))  # fmt: skip
        self.records.append(_record(result, None, PATH_PLANNER, True, arguments))

    def _plan_for_request(self, reason: str) -> None:
        """Hand the user's request to the planner and tell the model what came of it."""
        check_stop(self.stop)
        self.planned_for_request = True
        outcome = self.services.fallback(None, None, self.request, self.context)
        self.emit(Fallback(reason, "", outcome.path, list(outcome.warnings)))
        note = self._planner_result(ToolCall("", None, ""), outcome, "you called no tool")
        text, _ = self.budget.fit(note)
        self.history.append(Message("user", f"{text}\nAnswer the request from these results."))

    # The spiral breaker ------------------------------------------------------------------

    def _break_spirals(self, turns: list[_Turn]) -> None:
        """Stop a call that now makes a spiral in the trace, and plan from the request."""
        called = {turn.result.tool for turn in turns if turn.ran and turn.result is not None}
        if not called:
            return
        calls = self.services.read_calls(self.trace_id)
        for spiral in find_trace_spirals(calls, self.services.spiral_rule):
            key = (spiral.tool_name, spiral.first_span_id)
            if key in self.handled_spirals or spiral.resolution in ENDED_BY_SUCCESS:
                continue
            self.handled_spirals.add(key)
            if spiral.tool_name not in called:
                continue  # from before this task's turn: not ours to break
            last = next(
                t for t in reversed(turns) if t.result and t.result.tool == spiral.tool_name
            )
            why = (
                f"stopped by the spiral breaker: {spiral.attempts} calls of {spiral.tool_name} "
                + (f"failed alike ({spiral.error_kind})" if spiral.kind == FAILING
                   else "had identical arguments")
            )  # fmt: skip
            if spiral.kind == FAILING:
                self.blocked_tools[spiral.tool_name] = why
            else:
                self.blocked_calls[
                    (spiral.tool_name, arguments_fingerprint(last.call.arguments))
                ] = why
            self.tools = [spec for spec in self.tools if spec.name != spiral.tool_name]
            # The model's bad arguments are no fault of the tool: the planner may call it with
            # its own. A tool that failed or looped by itself is left out.
            own_fault = spiral.kind == FAILING and spiral.error_kind == ErrorKind.INVALID_ARGUMENTS
            outcome = self.services.plan_without(
                "" if own_fault else spiral.tool_name, self.request, self.context,
                call_id=last.call.id,
            )  # fmt: skip
            if any(result.tool for result in outcome.results):
                self.services.spiral_resolved(self.trace_id)
            resolution = self._resolution_now(key, spiral.resolution)
            self.emit(Spiral(spiral.tool_name, spiral.kind, spiral.attempts, spiral.error_kind,
                             resolution))  # fmt: skip
            self.emit(Fallback("spiral", spiral.tool_name, outcome.path, list(outcome.warnings)))
            self.planner_answer = ""  # from now on: what this plan gave
            last.fallbacks.append((outcome, why))
            self.spirals_broken.append((why, outcome))

    def _resolution_now(self, key: tuple[str, str], before: str) -> str:
        """Return how the spiral stands now, read again under the same rule."""
        calls = self.services.read_calls(self.trace_id)
        for spiral in find_trace_spirals(calls, self.services.spiral_rule):
            if (spiral.tool_name, spiral.first_span_id) == key:
                return spiral.resolution
        return before

    # Tool messages -----------------------------------------------------------------------

    def _answer(self, turn: _Turn) -> None:
        """Append the tool message for one call, in call order, held to the budget."""
        result = turn.result
        notes = [
            self._planner_result(turn.call, outcome, why, emit=False).text
            for outcome, why in turn.fallbacks
        ]
        if notes:
            result = dataclasses.replace(result, text="\n".join([result.text, *notes]))
        text, cut = self.budget.fit(result)
        self.history.append(
            Message("tool", text, tool_call_id=turn.call.id, name=turn.call.name,
                    is_error=not result.success)
        )  # fmt: skip
        if turn.path == PATH_PLANNER:
            return  # its planner calls were emitted and recorded as they came
        if not turn.ran:
            self._record_refused(turn.call, result.tool, result.error.message, turn.refused_by)
        error_kind = str(result.error.kind) if result.error else ""
        self.emit(ToolFinished(turn.call.id, result.tool, turn.path, result.success, error_kind,
                               text, result.metadata.get("latency_ms", 0.0), estimate_tokens(text),
                               cut, turn.ran))  # fmt: skip
        self.records.append(_record(result, turn.call, turn.path, turn.ran))
        for outcome, _ in turn.fallbacks:  # the planner's calls after the call they answer
            self._emit_planner_calls(outcome)

    def _path_of(self, spec: ToolSpec | None) -> int:
        return PATH_MCP if spec is not None and spec.ran_on.startswith("mcp:") else PATH_LLM

    # The end -----------------------------------------------------------------------------

    def _what_we_have(self, headline: str = "The model gave no answer.") -> str:
        """Return the tool results of the task as the answer, when the model gave none."""
        results = [m.content for m in self.history if m.role == "tool"]
        if not results:
            return headline
        return f"{headline} The tool results were:\n" + "\n".join(results)

    def _finish(self, content: str, reason: str, iterations: int) -> LoopResult:
        # The task's metrics (tokens and counts), new with each task.
        tokens = {
            "schema_tokens": self.schema_tokens_sent,
            "passive_schema_tokens": self.passive_schema_tokens,
            "tool_requests": self.tool_requests,
            "tools_loaded": self.tools_loaded,
            "tool_output_tokens": self.budget.tool_tokens,
            "model_input_tokens": self.usage.input_tokens,
            "model_output_tokens": self.usage.output_tokens,
            "tokens_used": self.usage.input_tokens + self.usage.output_tokens,
            "llm_calls": self.llm_calls,
            "tool_calls": sum(record["ran"] for record in self.records),
        }
        self._record_agent(content, reason, iterations, tokens)
        self.emit(Final(content, reason, self.trace_id, iterations,
                        self.usage.input_tokens, self.usage.output_tokens))  # fmt: skip
        return LoopResult(content, reason, self.trace_id, iterations, self.usage, tokens,
                          self.history, self.records, self.events, self.error)  # fmt: skip

    # Records -----------------------------------------------------------------------------

    def _record_llm(
        self,
        iteration: int,
        started_at: datetime,
        clock: float,
        schema_tokens: int,
        *,
        reply: LlmReply | None = None,
        error: LlmError | Stopped | None = None,
    ) -> float:
        fed = self.budget.tool_tokens
        arguments = {
            "iteration": iteration,
            "messages": len(self.history),
            "tools": len(self.tools) if schema_tokens else 0,
            "schema_tokens": schema_tokens,
            "tool_output_tokens": fed,
        }
        span = self.llm_span(started_at, clock, arguments, reply, error)
        if reply is not None:
            arguments["conversation_tokens"] = max(
                0, reply.usage.input_tokens - schema_tokens - fed
            )
            span["result"]["tool_calls"] = [_call_dict(call) for call in reply.tool_calls]
        self.store([span])
        return span["latency_ms"]

    def _refuse_calls(self, calls: Sequence[ToolCall], why: str, refused_by: str) -> None:
        """Refuse calls the model made where none could run; list and record each."""
        for call in calls:
            spec = (
                self.engine.registry.get(call.name) if call.name in self.engine.registry else None
            )
            name = spec.name if spec else call.name
            error = ToolError(ErrorKind.CANCELLED, f"not run: {why}")
            result = ToolResult(call.id, name, False, error=error, text=format_error(name, error))
            self.emit(ToolFinished(call.id, name, PATH_LLM, False, str(error.kind), result.text,
                                   0.0, estimate_tokens(result.text), False, False))  # fmt: skip
            self.records.append(_record(result, call, PATH_LLM, False))
            self._record_refused(call, name, error.message, refused_by)

    def _record_refused(self, call: ToolCall, tool: str, why: str, refused_by: str) -> None:
        """Record a call the loop refused as a span that never ran, with the reason.

        Kind "other", not "tool": a call never sent is no attempt of the tool, so it counts
        neither in the tool's evidence nor as one more call of a spiral.
        """
        span = self.span("other", datetime.now(UTC), 0.0)
        span.update(
            tool_name=_one_line(tool) or "?",
            tool_call_id=_one_line(call.id),
            chosen_by="llm",
            ran_on="none",
            arguments=call.arguments,
            # Refused because the user stopped the task: stopped, no failure.
            status=STOPPED_STATUS if refused_by == "stopped" else "error",
            error_kind=str(ErrorKind.CANCELLED),
            error_message=why,
            result={"refused_by": refused_by},
        )
        self.store([span])

    def _record_discovery(
        self,
        started_at: datetime,
        clock: float,
        requests: list[dict[str, str]],
        routing: list[dict[str, Any]],
        loaded: list[str],
        offered: list[str],
    ) -> None:
        """Record one round of tool requests as a span: what was asked, how it was routed."""
        span = self.span("other", started_at, (time.perf_counter() - clock) * 1000)
        span["tool_name"] = "tool_discovery"
        span["arguments"] = {"requests": requests}
        span["result"] = {"routing": routing, "loaded": loaded, "offered": offered}
        self.store([span])

    def _record_agent(self, content: str, reason: str, iterations: int, tokens: dict) -> None:
        latency_ms = (time.perf_counter() - self.clock) * 1000
        span = self.span("agent", self.started_at, latency_ms)
        span.update(span_id=self.root_span_id, parent_span_id=None)
        span["arguments"] = {"tools": list(self.agent.tools), "discovery": self.agent.discovery,
                             "max_iterations": self.agent.max_iterations}  # fmt: skip
        span["result"] = {
            "answer": content,
            "finish_reason": reason,
            "iterations": iterations,
            **tokens,
            "budget_tokens": self.budget.max_tokens,
            "tool_output_cap_tokens": self.budget.tool_cap,
        }
        if reason == "error":
            span.update(status="error", error_kind="llm_error", error_message=self.error)
        elif reason == CANCELLED:
            mark_stopped(span)
        self.store([span])


def _with_system_prompt(prompt: str, messages: list[Message]) -> list[Message]:
    """Return the messages behind one system message: the agent's prompt, then the caller's.

    One, and first: several chat templates (llama.cpp, vLLM) refuse any other place.
    """
    parts = [prompt] + [m.content for m in messages if m.role == "system"]
    system = "\n\n".join(part for part in parts if part)
    rest = [m for m in messages if m.role != "system"]
    return [Message("system", system), *rest] if system else rest


def _schema_tokens(tools: Sequence[ToolSpec]) -> int:
    """Return the tokens the tools' definitions take in a request."""
    definitions = [spec.openai_definition() for spec in tools]
    return estimate_tokens(json.dumps(definitions)) if definitions else 0


def _one_line(text: str) -> str:
    """Return text fit for a span's name fields: one line, at most 200 characters."""
    return "".join(ch if ch.isprintable() else "?" for ch in str(text))[:200]


def _call_dict(call: ToolCall) -> dict[str, Any]:
    return {"id": call.id, "name": call.name, "arguments": call.arguments}


def _record(
    result: ToolResult, call: ToolCall | None, path: int, ran: bool, arguments: Any = None
) -> dict[str, Any]:
    return {
        "call_id": result.call_id,
        "tool": result.tool,
        "arguments": call.arguments if call else arguments,
        "success": result.success,
        "error_kind": str(result.error.kind) if result.error else "",
        "path": path,
        "ran": ran,
        "latency_ms": result.metadata.get("latency_ms", 0.0),
    }
