"""The agent loop (Path 1): model -> tool calls -> results -> model, until a text answer.

No Django here: the loop takes the agent as plain data, a ChatModel, the tool engine and
a few services (the Bridge, a recorder, the trace's calls for the spiral rule), so it
runs the same in a web request, a Celery task or a test. What can go wrong is caught:

- an unknown tool name goes to the Bridge, which plans from the user's request (Path 2);
  so does a reply with no tool call where the agent was asked to act (planner_fallback.py);
- a call's failure goes back to the model as text in one shape (tool, error kind,
  message, and for invalid arguments the field-level problems);
- the spiral breaker (spiral_breaker.py): when the trace's calls make a spiral under
  traces_app's rule, the tool is no longer offered and the user's request goes to the
  planner (which may call the tool itself when the fault was the model's arguments); the
  model is then asked once, without tools, for its answer, and the planner's result is the
  answer when it gives none;
- a reply with neither text nor a usable call ends with the planner's result
  (finish_reason planner_answer) or says so (no_answer), never an empty "stop";
- a call the loop refuses (the spiral breaker, a side effect not replayed, a tool not
  offered) is recorded as a span that never ran (kind other, cancelled, ran_on none);
- a tool with side effects that already ran with the same arguments is not run again
  (replay_guard.py);
- tool output fed back is held to a token budget (see token_budget.py); an agent allowed
  the built-in `recall` (recall.py) is told a cut output can be fetched again by its call
  id, and the loop answers recall itself from the trace store (the session's own results);
- at the iteration limit (or a spent budget) one last call without tools asks for an
  answer from what the model has;
- a caller's stop signal (a threading.Event) ends the task (finish_reason cancelled):
  checked before each model call and while waiting for one, before a reply's tool calls
  run (they are refused) and after them; running tool calls are abandoned by the engine,
  and neither the model nor the planner is asked anything more.

In active discovery mode (loop_discovery.py) the model starts with no tools and asks for
them in `<tool_request>` blocks; how each request was routed goes to the event and into the
trace as a `tool_discovery` span. Every step is an event (`on_event`, loop_events.py),
typed and JSON-ready, for a page to stream; spans are stored through task_records.py.
"""

from __future__ import annotations

import dataclasses
import json
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from planner_app.agents.llm.messages import (
    ChatModel,
    LlmError,
    LlmReply,
    Message,
    ToolsNotSupported,
    Usage,
)
from planner_app.agents.loop_discovery import (
    EXHAUSTED,
    NONE_ASKED,
    SERVED,
    Discovered,
    DiscoveryRound,
    ToolDiscovery,
)
from planner_app.agents.loop_events import (
    PATH_LLM,
    PATH_MCP,
    PATH_PLANNER,
    Fallback,
    Final,
    LoopEvent,
    ModelTurn,
    Notice,
    Spiral,
    Started,
    ToolFinished,
    ToolsDiscovered,
    ToolStarted,
)
from planner_app.agents.planner_fallback import PlannerFallback
from planner_app.agents.recall import (
    RECALL_TOOL,
    RecallScope,
    RecallStore,
    recall_hint,
    recall_span_fields,
    recall_spec,
    refused_recall,
    run_recall,
)
from planner_app.agents.replay_guard import ReplayGuard
from planner_app.agents.spiral_breaker import SpiralBreaker
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
from planner_app.agents.task_records import TaskRecords
from planner_app.agents.token_budget import TokenBudget
from planner_app.discovery.requests import MAX_TOOL_REQUESTS
from tools_app.engine import CallContext, ToolEngine
from tools_app.formatting import estimate_tokens, format_error
from tools_app.specs import ErrorKind, ToolCall, ToolError, ToolResult, ToolSpec
from traces_app.spirals.detection import CallView, SpiralRule

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


# The loop ------------------------------------------------------------------------------


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
    # (trace id, span id, how the budget cut its output, tokens dropped): onto the tool span.
    record_reduction: Callable[[str, str, str, int], None] = lambda *cut: None
    # Active discovery: (what the tool should do, which server) -> the tools found.
    discover: Callable[[str, str], Discovered] | None = None
    # The trace store's earlier results, for the built-in recall tool (recall.py).
    recall: RecallStore | None = None


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
        self.breaker = SpiralBreaker(services.read_calls, services.spiral_rule, trace_id)
        self.planner = PlannerFallback(services.fallback, services.plan_without)
        self.replays = ReplayGuard()
        self.recall_scope = RecallScope(agent.name, session_id, trace_id)
        self.can_recall = services.recall is not None and RECALL_TOOL in agent.tools
        self.recalls_in_turn = 0
        self.spirals_broken: list[tuple[str, Any]] = []  # (why, the planner's outcome)
        self.discovery: ToolDiscovery | None = None  # set in active discovery mode
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
            return self._finish(_what_we_have(self.history, STOPPED_ANSWER), CANCELLED,
                                self.iteration)  # fmt: skip

    def _run(self, messages: list[Message], tool_choice: str) -> LoopResult:
        self.request = next((m.content for m in reversed(messages) if m.role == "user"), "")
        self.context = dataclasses.replace(self.context, request_text=self.request)
        self.tools = self._tools_to_show()
        active = self.discovery is not None
        prompt = self.agent.system_prompt
        if active:
            prompt = f"{prompt}\n\n{ACTIVE_PROMPT}" if prompt else ACTIVE_PROMPT
        self.history = _with_system_prompt(prompt, messages)
        names = [spec.name for spec in self.tools]
        self.emit(Started(self.trace_id, self.agent.name, self.model.model, names,
                          _schema_tokens(self.tools)))  # fmt: skip
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
            if active and reply.tool_calls and not calls:
                self._refuse_calls(
                    reply.tool_calls, "not offered: ask for it in a <tool_request>", "discovery"
                )
            self.history.append(Message("assistant", reply.content, tuple(calls)))
            discovery = self._discover(reply.content) if active and not calls else NONE_ASKED
            if calls:
                self._run_turn(calls)
                if self.spirals_broken:
                    return self._end_spiral(iteration)
            elif discovery == EXHAUSTED:
                reason = "discovery_exhausted"
                break
            elif discovery == SERVED:
                continue
            elif self.planner.should_plan(reply, choice, bool(self.agent.tools)):
                self._plan_for_request("no_tool_call")
                if choice == "required" and self.planner.answer:
                    # The model would not call although told to: the planner's result is the
                    # answer, not the model's talk ("I don't know.").
                    return self._finish(self.planner.answer_text(), "planner_answer", iteration)
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
        return self._finish(reply.content or _what_we_have(self.history), reason, iteration + 1)

    def _end_spiral(self, iteration: int) -> LoopResult:
        """End the task the spiral breaker stopped: one last call without tools.

        With the planner's results the model is asked to answer from them (and they are the
        answer when it gives none or fails); without, it is told why there is nothing more.
        """
        why = "; ".join(why for why, _ in self.spirals_broken)
        helped = self.planner.answer
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
                return self._finish(self.planner.answer_text(), "spiral_breaker", iteration + 1)
            return self._finish("", "error", iteration + 1)
        self._refuse_calls(
            reply.tool_calls, f"no more tool calls in this task ({why})", "spiral_breaker"
        )
        self.history.append(Message("assistant", reply.content))
        content = reply.content if reply.content.strip() else ""
        if not content:
            content = self.planner.answer_text() if helped else _what_we_have(self.history)
        return self._finish(content, "spiral_breaker", iteration + 1)

    def _no_answer(self, iteration: int) -> LoopResult:
        """End a task whose model replied with nothing: the planner's result, or say so."""
        if self.planner.answer:
            return self._finish(self.planner.answer_text(), "planner_answer", iteration)
        return self._finish(_what_we_have(self.history), "no_answer", iteration)

    def _tools_to_show(self) -> list[ToolSpec]:
        if not self.agent.tool_calling or not self.agent.tools:
            return []
        allowed = self.engine.registry.list(names=self.agent.tools)
        if self.can_recall and self.agent.discovery != "active":
            allowed = [*allowed, recall_spec()]
        self.passive_per_call = _schema_tokens(allowed)
        if self.agent.discovery != "active":
            return allowed
        if self.services.discover is None:
            self.emit(Notice("active discovery is not available here: showing every allowed tool"))
            return allowed
        self.discovery = ToolDiscovery(self.services.discover, self.agent.tools,
                                       self.engine.registry)  # fmt: skip
        return []

    def _discover(self, text: str) -> str:
        """Serve the reply's tool requests; return served, exhausted or "" (none asked)."""
        found = self.discovery.serve(text, self.tools)
        if found.started_at is not None:
            self.tools = [*self.tools, *found.new]
        if found.note:
            self.history.append(Message("user", found.note))
        if found.started_at is not None:
            self._record_discovery(found)
            self.emit(ToolsDiscovered(found.requests, found.loaded, found.offered, found.routing))
        return found.outcome

    # The model ---------------------------------------------------------------------------

    def _ask(self, iteration: int, tools: list[ToolSpec], choice: str) -> LlmReply | None:
        """Call the model once, record the call, and return its reply (None: it failed).

        Raise Stopped instead when the task is stopped before or during the call.
        """
        check_stop(self.stop)
        self.iteration = iteration
        started_at, clock = datetime.now(UTC), time.perf_counter()
        schema_tokens = _schema_tokens(self.tools) if tools else 0
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
        usage = reply.usage
        if usage.estimated:
            usage = _estimated_usage(self.history, reply, schema_tokens)
        reply.usage = usage
        self.usage += usage
        self.schema_tokens_sent += schema_tokens
        if tools or (self.discovery is not None and choice != "none"):
            self.passive_schema_tokens += self.passive_per_call
        self.budget.record_call(usage.input_tokens, usage.output_tokens)
        latency_ms = self._record_llm(iteration, started_at, clock, schema_tokens, reply=reply)
        self.emit(ModelTurn(iteration, reply.content, [_call_dict(c) for c in reply.tool_calls],
                            usage.input_tokens, usage.output_tokens, latency_ms,
                            reply.finish_reason, bool(tools)))  # fmt: skip
        return reply

    # One turn of tool calls --------------------------------------------------------------

    def _run_turn(self, calls: Sequence[ToolCall]) -> None:
        self.recalls_in_turn = sum(call.name == RECALL_TOOL for call in calls)
        turns = [self._prepare(call) for call in calls]
        runnable = [turn for turn in turns if turn.result is None and turn.path == PATH_LLM]
        for turn in runnable:
            self.emit(ToolStarted(turn.call.id, turn.spec.name if turn.spec else turn.call.name,
                                  turn.call.arguments, _path_of(turn.spec)))  # fmt: skip
        if runnable:
            limit = None if self.agent.parallel_tools else 1
            results = self.engine.execute_many(
                [turn.call for turn in runnable], self.context, max_parallel=limit
            )
            for turn, result in zip(runnable, results, strict=True):
                turn.result, turn.path = result, _path_of(turn.spec)
                self.replays.forget_unrun(turn.spec, turn.call, result)
        if is_stopped(self.stop):  # the planner is asked nothing once the task is stopped
            for turn in turns:
                if turn.path == PATH_PLANNER:
                    turn.path, turn.ran, turn.refused_by = PATH_LLM, False, "stopped"
                    turn.result = _refused(turn.call, None, f"not run: {STOPPED_REASON}")
        else:
            for turn in turns:
                if turn.path == PATH_PLANNER:
                    self._bridge_unknown(turn)
            self._break_spirals(turns)
        for turn in turns:
            self._answer(turn)

    def _prepare(self, call: ToolCall) -> _Turn:
        """Return the call's turn: to run, for the planner, or refused without running."""
        if call.name == RECALL_TOOL and self.services.recall is not None:
            return self._recall(call)
        if call.name not in self.engine.registry:
            # With no tools allowed there is nothing to plan with: the engine says not_found.
            return _Turn(call, None, path=PATH_PLANNER if self.agent.tools else PATH_LLM)
        spec = self.engine.registry.get(call.name)
        turn = _Turn(call, spec)
        if why := self.breaker.refusal(spec.name, call.arguments):
            turn.result, turn.refused_by = _refused(call, spec, why), "spiral_breaker"
        elif why := self.replays.refusal(spec, call):
            turn.result, turn.refused_by = _refused(call, spec, why), "agent_loop"
        if turn.result is not None:
            turn.ran = False
        return turn

    def _recall(self, call: ToolCall) -> _Turn:
        """Answer a recall call from the trace store (recall.py), and record it as a tool span."""
        started_at, clock = datetime.now(UTC), time.perf_counter()
        self.emit(ToolStarted(call.id, RECALL_TOOL, call.arguments, PATH_LLM))
        if self.can_recall:
            # The turn's recalls share what is left, so the budget cuts none of them again.
            left = max(0, self.budget.tool_cap - self.budget.tool_tokens)
            allowance = min(self.budget.allowance(), left // max(1, self.recalls_in_turn))
            result = run_recall(self.services.recall, self.recall_scope, call, allowance)
        else:
            result = refused_recall(call, self.agent.name)
        latency_ms = (time.perf_counter() - clock) * 1000
        span = self.span("tool", started_at, latency_ms)
        span.update(recall_span_fields(call, result))
        self.store([span])
        result.metadata.update(latency_ms=latency_ms, span_ids=[span["span_id"]])
        return _Turn(call, recall_spec(), result)

    # The planner standing in (planner_fallback.py) ---------------------------------------

    def _bridge_unknown(self, turn: _Turn) -> None:
        """Send a call of an unknown tool to the Bridge, which plans from the request."""
        call = turn.call
        outcome = self.planner.for_unknown_tool(call, self.request, self.context)
        # The model's own call, listed with the planner's: the engine recorded it (not_found).
        error = ToolError(ErrorKind.NOT_FOUND, f"no tool named {call.name!r}")
        missed = ToolResult(call.id, call.name, False, error=error, text=error.message)
        self.emit(ToolStarted(call.id, call.name, call.arguments, PATH_LLM))
        self.emit(ToolFinished(call.id, call.name, PATH_LLM, False, str(error.kind), error.message,
                               0.0, estimate_tokens(error.message), False, False))  # fmt: skip
        self.records.append(_record(missed, call, PATH_LLM, False))
        self.emit(Fallback("unknown_tool", call.name, outcome.path, list(outcome.warnings)))
        self._emit_planner_calls(outcome)
        turn.result = self.planner.result(call, outcome, f"no tool named {call.name!r}")

    def _plan_for_request(self, reason: str) -> None:
        """Hand the user's request to the planner and tell the model what came of it."""
        check_stop(self.stop)
        outcome = self.planner.for_request(self.request, self.context)
        self.emit(Fallback(reason, "", outcome.path, list(outcome.warnings)))
        self._emit_planner_calls(outcome)
        note = self.planner.result(ToolCall("", None, ""), outcome, "you called no tool")
        text, _ = self.budget.fit(note)
        self.history.append(Message("user", f"{text}\nAnswer the request from these results."))

    def _emit_planner_calls(self, outcome: Any) -> None:
        """Emit and list the calls the planner made, as they ran."""
        for result in outcome.results:
            if not result.tool:
                continue
            text, arguments = result.text, result.metadata.get("arguments")
            self.emit(ToolStarted(result.call_id, result.tool, arguments, PATH_PLANNER))
            self.emit(ToolFinished(result.call_id, result.tool, PATH_PLANNER, result.success,
                                   str(result.error.kind) if result.error else "", text,
                                   result.metadata.get("latency_ms", 0.0), estimate_tokens(text),
                                   False, True))  # fmt: skip
            self.records.append(_record(result, None, PATH_PLANNER, True, arguments))

    # The spiral breaker (spiral_breaker.py) ----------------------------------------------

    def _break_spirals(self, turns: list[_Turn]) -> None:
        """Stop a call that now makes a spiral in the trace, and plan from the request."""
        ran = {turn.result.tool for turn in turns if turn.ran and turn.result is not None}
        last = {turn.result.tool: turn for turn in turns if turn.result is not None}
        calls = {tool: turn.call for tool, turn in last.items()}
        for broken in self.breaker.break_new(ran, calls):
            spiral = broken.spiral
            self.tools = [spec for spec in self.tools if spec.name != spiral.tool_name]
            outcome = self.planner.for_spiral(broken, self.request, self.context)
            if any(result.tool for result in outcome.results):
                self.services.spiral_resolved(self.trace_id)
            resolution = self.breaker.resolution_now(broken)
            self.emit(Spiral(spiral.tool_name, spiral.kind, spiral.attempts, spiral.error_kind,
                             resolution))  # fmt: skip
            self.emit(Fallback("spiral", spiral.tool_name, outcome.path, list(outcome.warnings)))
            last[spiral.tool_name].fallbacks.append((outcome, broken.why))
            self.spirals_broken.append((broken.why, outcome))

    # Tool messages -----------------------------------------------------------------------

    def _answer(self, turn: _Turn) -> None:
        """Append the tool message for one call, in call order, held to the budget."""
        result = turn.result
        notes = [
            self.planner.result(turn.call, outcome, why).text for outcome, why in turn.fallbacks
        ]
        if notes:
            result = dataclasses.replace(result, text="\n".join([result.text, *notes]))
        fitted = self.budget.fit(result)
        text, cut = fitted.text, fitted.cut
        if cut and self.can_recall and turn.call.id and turn.call.name != RECALL_TOOL:
            hint = recall_hint(turn.call.id)  # the full output is in the trace store
            text = f"{text}\n{hint}"
            self.budget.tool_tokens += estimate_tokens(hint)
        if cut and (span_ids := result.metadata.get("span_ids")):
            self.services.record_reduction(
                self.trace_id, span_ids[-1], fitted.reduction, fitted.tokens_dropped
            )
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

    # The end -----------------------------------------------------------------------------

    def _finish(self, content: str, reason: str, iterations: int) -> LoopResult:
        # The task's metrics (tokens and counts), new with each task.
        discovery = self.discovery
        tokens = {
            "schema_tokens": self.schema_tokens_sent,
            "passive_schema_tokens": self.passive_schema_tokens,
            "tool_requests": discovery.requests_made if discovery else 0,
            "tools_loaded": discovery.tools_loaded if discovery else 0,
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
            result = _refused(call, spec, f"not run: {why}")
            name, error = result.tool, result.error
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

    def _record_discovery(self, found: DiscoveryRound) -> None:
        """Record one round of tool requests as a span: what was asked, how it was routed."""
        span = self.span("other", found.started_at, (time.perf_counter() - found.clock) * 1000)
        span["tool_name"] = "tool_discovery"
        span["arguments"] = {"requests": found.requests}
        span["result"] = {
            "routing": found.routing,
            "loaded": found.loaded,
            "offered": found.offered,
        }
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


def _refused(call: ToolCall, spec: ToolSpec | None, message: str) -> ToolResult:
    """Return the result of a call the loop refused: cancelled, with why."""
    name = spec.name if spec else call.name
    error = ToolError(ErrorKind.CANCELLED, message)
    return ToolResult(call.id, name, False, error=error, text=format_error(name, error))


def _path_of(spec: ToolSpec | None) -> int:
    return PATH_MCP if spec is not None and spec.ran_on.startswith("mcp:") else PATH_LLM


def _estimated_usage(history: list[Message], reply: LlmReply, schema_tokens: int) -> Usage:
    """Return the tokens of a call whose model reported none, estimated from the text."""
    sent = sum(estimate_tokens(m.content) + 4 for m in history) + schema_tokens
    answer = estimate_tokens(reply.content) + sum(
        estimate_tokens(json.dumps(_call_dict(c), default=str)) for c in reply.tool_calls
    )
    return Usage(sent, answer, estimated=True)


def _what_we_have(history: list[Message], headline: str = "The model gave no answer.") -> str:
    """Return the tool results of the task as the answer, when the model gave none."""
    results = [m.content for m in history if m.role == "tool"]
    if not results:
        return headline
    return f"{headline} The tool results were:\n" + "\n".join(results)
