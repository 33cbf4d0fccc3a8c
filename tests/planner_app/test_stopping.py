"""A task's stop signal: the agent loop, plan-execute-replan and saved workflows end cancelled."""

from __future__ import annotations

import json
import secrets
import threading
from collections.abc import Callable
from typing import Any

import pytest

from planner_app.agents.llm.messages import Message
from planner_app.agents.loop_events import LoopEvent, ModelTurn, ToolFinished
from planner_app.agents.plan_agent import run_plan_agent
from planner_app.agents.site_agents import run_agent
from planner_app.models import Agent, Workflow, WorkflowRun
from planner_app.workflows.workflow_runs import execute_run
from tests.planner_app.conftest import Gate
from tests.planner_app.fake_llm import FakeLlm, Reply, call, say
from traces_app.models import Invocation, Trace

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("llm_settings")]


@pytest.fixture
def stop() -> threading.Event:
    return threading.Event()


def press_stop_when(entered: threading.Event, stop: threading.Event) -> None:
    """Set stop from another thread (the operator's Stop button) once `entered` is set."""

    def press() -> None:
        if entered.wait(10):
            stop.set()

    threading.Thread(target=press, daemon=True).start()


def thinking(gate: Gate, reply: Reply) -> Callable[[dict[str, Any]], Reply]:
    """A model reply that comes only when the gate is released."""

    def answer(body: dict[str, Any]) -> Reply:
        gate.hold()
        return reply

    return answer


def spans(trace_id: str, kind: str) -> list[Invocation]:
    return list(Invocation.objects.filter(trace_id=trace_id, kind=kind).order_by("started_at"))


def assert_agent_cancelled(trace_id: str) -> None:
    [agent] = spans(trace_id, "agent")
    assert (agent.status, agent.error_kind, agent.error_message) == (
        "stopped",
        "cancelled",
        "stopped by its caller",
    )
    assert agent.result["finish_reason"] == "cancelled"


# The agent loop ----------------------------------------------------------------------------


def test_the_loop_stopped_while_the_model_thinks_ends_cancelled(
    fake_llm: FakeLlm, gate: Gate, stop: threading.Event
) -> None:
    agent = Agent.objects.create(name="tutor", tools=["calculator"])
    fake_llm.script(thinking(gate, say("too late")))
    press_stop_when(gate.entered, stop)
    result = run_agent(agent, [Message("user", "what is 6*7?")], stop=stop)
    assert not gate.finished.is_set()  # it did not wait for the reply
    assert (result.finish_reason, result.content) == (
        "cancelled",
        "Stopped before the model answered.",
    )
    assert result.events[-1].type == "final"
    assert result.events[-1].finish_reason == "cancelled"
    assert len(fake_llm.requests) == 1
    [llm] = spans(result.trace_id, "llm")
    assert (llm.status, llm.error_kind) == ("stopped", "cancelled")
    assert_agent_cancelled(result.trace_id)


def test_the_loop_stopped_during_a_tool_call_asks_the_model_nothing_more(
    fake_llm: FakeLlm, gate: Gate, stop: threading.Event, site_tools: None
) -> None:
    agent = Agent.objects.create(name="tutor", tools=["slow"])
    fake_llm.script(call("slow", {"key": "a"}))
    fake_llm.always(say("a final answer nobody asked for"))
    press_stop_when(gate.entered, stop)
    result = run_agent(agent, [Message("user", "take your time")], stop=stop)
    assert not gate.finished.is_set()  # the tool call was abandoned
    assert result.finish_reason == "cancelled"
    assert len(fake_llm.requests) == 1  # no final-answer call
    [finished] = [e for e in result.events if isinstance(e, ToolFinished)]
    assert (finished.tool, finished.error_kind) == ("slow", "cancelled")
    assert result.content.startswith("Stopped before the model answered. The tool results were:")
    [tool_span] = spans(result.trace_id, "tool")
    assert (tool_span.status, tool_span.error_kind) == ("stopped", "cancelled")
    assert_agent_cancelled(result.trace_id)


def test_a_stubborn_model_is_stopped_between_turns(
    fake_llm: FakeLlm, stop: threading.Event, site_tools: None
) -> None:
    agent = Agent.objects.create(name="tutor", tools=["count"], max_iterations=10)
    fake_llm.always(call("count", {"key": "again"}))
    finished: list[LoopEvent] = []

    def on_event(event: LoopEvent) -> None:
        if isinstance(event, ToolFinished):
            finished.append(event)
            if len(finished) == 2:  # the operator stops it after its second turn
                stop.set()

    result = run_agent(agent, [Message("user", "count")], stop=stop, on_event=on_event)
    assert result.finish_reason == "cancelled"
    assert len(fake_llm.requests) == 2
    assert sum(record["ran"] for record in result.tool_calls) == 2
    assert_agent_cancelled(result.trace_id)


def test_the_calls_of_a_reply_that_came_as_the_task_stopped_are_refused(
    fake_llm: FakeLlm, stop: threading.Event, site_tools: None
) -> None:
    agent = Agent.objects.create(name="tutor", tools=["count"])
    fake_llm.script(call("count", {"key": "a"}), say("never asked"))

    def on_event(event: LoopEvent) -> None:
        if isinstance(event, ModelTurn):  # Stop pressed just as the reply came
            stop.set()

    result = run_agent(agent, [Message("user", "count")], stop=stop, on_event=on_event)
    assert result.finish_reason == "cancelled"
    assert len(fake_llm.requests) == 1
    assert [(r["tool"], r["ran"], r["error_kind"]) for r in result.tool_calls] == [
        ("count", False, "cancelled")
    ]
    assert spans(result.trace_id, "tool") == []  # never sent to the engine
    [refused] = spans(result.trace_id, "other")
    assert refused.result == {"refused_by": "stopped"}
    assert (refused.status, refused.error_message) == ("stopped", "not run: the task was stopped")
    assert Trace.objects.get(pk=result.trace_id).failed_calls == 0  # a Stop fails nothing
    assert_agent_cancelled(result.trace_id)


# Plan-execute-replan -----------------------------------------------------------------------


def plan(*steps: dict[str, Any]) -> Reply:
    return say("```json\n" + json.dumps({"steps": list(steps)}) + "\n```")


def calc(step_id: str, expression: str) -> dict[str, Any]:
    return {"id": step_id, "tool": "calculator", "arguments": {"expression": expression}}


def test_the_plan_agent_stopped_while_drafting_ends_cancelled(
    fake_llm: FakeLlm, gate: Gate, stop: threading.Event
) -> None:
    agent = Agent.objects.create(name="planner-bot", tools=["calculator"])
    fake_llm.script(thinking(gate, plan(calc("a", "6*7"))))
    fake_llm.always(say("never asked"))
    press_stop_when(gate.entered, stop)
    result = run_plan_agent(agent, "what is 6*7?", stop=stop)
    assert not gate.finished.is_set()
    assert (result.finish_reason, result.content) == (
        "cancelled",
        "Stopped before the model answered.",
    )
    assert len(fake_llm.requests) == 1
    assert spans(result.trace_id, "tool") == []  # no plan, no step ran
    [llm] = spans(result.trace_id, "llm")
    assert (llm.status, llm.error_kind) == ("stopped", "cancelled")
    assert_agent_cancelled(result.trace_id)


def test_the_plan_agent_stopped_while_a_step_runs_drafts_no_more(
    fake_llm: FakeLlm, gate: Gate, stop: threading.Event, site_tools: None
) -> None:
    agent = Agent.objects.create(name="planner-bot", tools=["slow", "calculator"])
    slow_step = {"id": "a", "tool": "slow", "arguments": {"key": "x"}}
    fake_llm.script(plan(slow_step, {**calc("b", "6*7"), "depends_on": ["a"]}))
    fake_llm.always(say("never asked"))
    press_stop_when(gate.entered, stop)
    result = run_plan_agent(agent, "take your time", stop=stop)
    assert not gate.finished.is_set()
    assert result.finish_reason == "cancelled"
    assert len(fake_llm.requests) == 1  # neither a second draft nor an answer
    tools = [(s.tool_name, s.error_kind) for s in spans(result.trace_id, "tool")]
    assert ("slow", "cancelled") in tools
    assert "calculator" not in [name for name, _ in tools]
    assert_agent_cancelled(result.trace_id)


def test_the_plan_agent_plans_a_follow_up_from_the_conversation(fake_llm: FakeLlm) -> None:
    agent = Agent.objects.create(name="planner-bot", tools=["calculator"])
    fake_llm.script(plan(calc("a", "42*2")), say("84."))
    history = [Message("user", "what is 6*7?"), Message("assistant", "42.")]
    result = run_plan_agent(agent, "and double it", history=history)
    assert (result.finish_reason, result.content) == ("stop", "84.")
    drafting, answering = fake_llm.requests
    assert [(m["role"], m["content"]) for m in drafting["messages"][1:]] == [
        ("user", "what is 6*7?"),
        ("assistant", "42."),
        ("user", "and double it"),
    ]
    assert drafting["messages"][0]["role"] == "system"
    assert [(m["role"], m["content"]) for m in answering["messages"][:2]] == [
        ("user", "what is 6*7?"),
        ("assistant", "42."),
    ]
    assert "and double it" in answering["messages"][-1]["content"]


# Saved workflows ---------------------------------------------------------------------------


def test_a_workflow_run_stopped_mid_way_is_cancelled_and_starts_no_more_steps(
    gate: Gate, stop: threading.Event, site_tools: None
) -> None:
    definition = {
        "max_parallel": 1,
        "steps": [
            {"id": "wait", "tool": "slow", "arguments": {"key": "x"}},
            {"id": "total", "tool": "calculator", "arguments": {"expression": "1+1"}},
        ],
    }
    workflow = Workflow.objects.create(
        name="waits", description="wait, then add", definition=definition
    )
    run = WorkflowRun.objects.create(workflow=workflow, trace_id=secrets.token_hex(16))
    press_stop_when(gate.entered, stop)
    execute_run(run.pk, stop=stop)
    run.refresh_from_db()
    assert not gate.finished.is_set()
    assert run.status == WorkflowRun.Status.CANCELLED
    assert run.progress["status"] == "cancelled"
    steps = {step["step_id"]: step for step in run.progress["steps"]}
    assert steps["wait"]["result"]["error"]["kind"] == "cancelled"
    assert steps["total"]["result"]["error"]["message"] == "not run: the task was stopped"
    tools = [(s.tool_name, s.error_kind) for s in spans(run.trace_id, "tool")]
    assert tools == [("slow", "cancelled")]  # calculator never reached the engine
