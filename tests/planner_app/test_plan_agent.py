"""Plan-execute-replan with an agent's LLM (the scripted server), the Bridge and one trace."""

from __future__ import annotations

import json
from typing import Any

import pytest

from planner_app.agents.loop_events import LoopEvent
from planner_app.agents.plan_agent import PlanAgentResult, run_plan_agent
from planner_app.models import Agent
from tests.planner_app.fake_llm import FakeLlm, fail, say
from traces_app.models import Invocation, Trace

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("llm_settings")]


@pytest.fixture
def planner_agent() -> Agent:
    return Agent.objects.create(
        name="planner-bot", system_prompt="Be exact.", tools=["calculator", "string_utils"]
    )


def plan(*steps: dict[str, Any], usage: dict[str, int] | None = None) -> dict[str, Any]:
    """A model reply holding a plan in a json fence."""
    text = "My plan:\n```json\n" + json.dumps({"steps": list(steps)}) + "\n```"
    return say(text, **({"usage": usage} if usage else {}))


def calc(step_id: str, expression: str, **extra: Any) -> dict[str, Any]:
    return {"id": step_id, "tool": "calculator", "arguments": {"expression": expression},
            "reason": "", **extra}  # fmt: skip


def run(agent: Agent, text: str, **options: Any) -> tuple[PlanAgentResult, list[LoopEvent]]:
    events: list[LoopEvent] = []
    return run_plan_agent(agent, text, on_event=events.append, **options), events


def types(events: list[LoopEvent]) -> list[str]:
    return [event.type for event in events]


def test_it_runs_a_plan_that_works_and_answers_from_the_results(
    fake_llm: FakeLlm, planner_agent: Agent
) -> None:
    fake_llm.script(
        plan(calc("a", "6*7"),
             {"id": "b", "tool": "string_utils", "depends_on": ["a"], "reason": "",
              "arguments": {"operation": "upper", "text": "total {$a.result}"}},
             usage={"prompt_tokens": 400, "completion_tokens": 60}),
        say("The total is 42.", usage={"prompt_tokens": 120, "completion_tokens": 8}),
    )  # fmt: skip
    result, events = run(planner_agent, "what is 6*7, shouted?")
    assert (result.content, result.finish_reason, result.drafts) == ("The total is 42.", "stop", 1)
    assert types(events) == [
        "started", "model_turn", "plan", "tool_started", "tool_finished", "tool_started",
        "tool_finished", "model_turn", "final",
    ]  # fmt: skip
    drafted = events[2].as_dict()
    assert [s["tool"] for s in drafted["steps"]] == ["calculator", "string_utils"]
    assert drafted["problems"] == []
    finished = [e.as_dict() for e in events if e.type == "tool_finished"]
    assert [(f["tool"], f["path"], f["success"]) for f in finished] == [
        ("calculator", 3, True), ("string_utils", 3, True),
    ]  # fmt: skip
    assert "TOTAL 42" in finished[1]["text"]
    system = fake_llm.requests[0]["messages"][0]["content"]
    assert system.startswith("Be exact.") and '"steps"' in system
    assert "- calculator:" in system and '"expression"' in system and "hash_tool" not in system
    assert "tools" not in fake_llm.requests[0]
    assert '"result": "TOTAL 42"' in fake_llm.requests[1]["messages"][-1]["content"]


def test_it_records_one_trace_with_llm_tokens_and_workflow_steps(
    fake_llm: FakeLlm, planner_agent: Agent
) -> None:
    fake_llm.script(
        plan(calc("a", "2+2"), usage={"prompt_tokens": 400, "completion_tokens": 60}),
        say("4", usage={"prompt_tokens": 100, "completion_tokens": 2}),
    )
    result, _ = run(planner_agent, "2+2?")
    spans = Invocation.objects.filter(trace_id=result.trace_id)
    llm = spans.filter(kind="llm").order_by("started_at")
    assert [(s.input_tokens, s.output_tokens, s.arguments["purpose"]) for s in llm] == [
        (400, 60, "plan"), (100, 2, "answer"),
    ]  # fmt: skip
    [tool] = spans.filter(kind="tool")
    assert (tool.tool_name, tool.chosen_by, tool.agent) == ("calculator", "workflow", "planner-bot")
    [root] = spans.filter(kind="agent")
    assert tool.parent_span_id == root.span_id and root.result["finish_reason"] == "stop"
    trace = Trace.objects.get(trace_id=result.trace_id)
    assert (trace.input_tokens, trace.output_tokens) == (500, 62)


def test_a_failing_step_is_replanned_with_the_results_so_far(
    fake_llm: FakeLlm, planner_agent: Agent
) -> None:
    fake_llm.script(
        plan(calc("a", "2+2"), calc("b", "1/0")),
        plan(calc("a", "2+2"), calc("b", "{$a.result} / 2", depends_on=["a"])),
        say("Half of 4 is 2."),
    )
    result, events = run(planner_agent, "half of 2+2")
    assert (result.content, result.finish_reason, result.drafts) == ("Half of 4 is 2.", "stop", 2)
    [replan] = [e.as_dict() for e in events if e.type == "replan"]
    assert replan["attempt"] == 2 and "division by zero" in replan["feedback"].lower()
    feedback = fake_llm.requests[1]["messages"][-1]
    assert feedback["role"] == "user" and feedback["content"] == replan["feedback"]
    assert fake_llm.requests[1]["messages"][-2]["role"] == "assistant"
    failed = [e.as_dict() for e in events if e.type == "tool_finished" and not e.success]
    assert [(f["tool"], f["error_kind"]) for f in failed] == [("calculator", "invalid_arguments")]


def test_an_invalid_plan_gets_feedback_then_a_valid_plan_runs(
    fake_llm: FakeLlm, planner_agent: Agent
) -> None:
    fake_llm.script(
        say("I would first compute it, then answer."),
        plan({"id": "a", "tool": "hash_tool", "arguments": {"operation": "md5", "text": "x"}}),
        plan(calc("a", "3*3")),
        say("9"),
    )
    result, events = run(planner_agent, "3*3")
    assert (result.content, result.finish_reason, result.drafts) == ("9", "stop", 3)
    drafted = [e.as_dict() for e in events if e.type == "plan"]
    assert "not JSON" in drafted[0]["problems"][0]
    assert "hash_tool" in drafted[1]["problems"][0]  # not among the agent's tools
    assert drafted[2]["problems"] == []
    assert "could not be used" in fake_llm.requests[1]["messages"][-1]["content"]
    assert [e.tool for e in events if e.type == "tool_started"] == ["calculator"]


def test_it_stops_at_the_replan_bound_and_answers_from_what_ran(
    fake_llm: FakeLlm, planner_agent: Agent
) -> None:
    fake_llm.script(
        plan(calc("a", "1/0")), plan(calc("a", "2/0")), say("I could not divide by zero.")
    )
    result, events = run(planner_agent, "divide", max_replans=1)
    assert (result.finish_reason, result.drafts) == ("max_replans", 2)
    assert result.content == "I could not divide by zero."
    assert len(fake_llm.requests) == 3
    [notice] = [e.as_dict() for e in events if e.type == "notice"]
    assert "after 2 drafts" in notice["message"]
    assert "[failed]" in fake_llm.requests[2]["messages"][-1]["content"]


def test_it_stops_at_the_bound_when_no_plan_is_usable(
    fake_llm: FakeLlm, planner_agent: Agent
) -> None:
    fake_llm.script(say("no plan"), say("still no plan"))
    result, events = run(planner_agent, "anything", max_replans=1)
    assert result.finish_reason == "max_replans" and result.content.startswith("No plan could")
    assert len(fake_llm.requests) == 2
    assert not [e for e in events if e.type == "tool_started"]


def test_a_failing_endpoint_ends_the_task_with_an_error(
    fake_llm: FakeLlm, planner_agent: Agent
) -> None:
    fake_llm.script(fail(500, "model crashed"), fail(500, "model crashed"))
    result, events = run(planner_agent, "2+2")
    assert result.finish_reason == "error" and "model crashed" in result.error
    assert types(events)[-2:] == ["notice", "final"]
    [llm] = Invocation.objects.filter(trace_id=result.trace_id, kind="llm")
    assert (llm.status, llm.error_kind) == ("error", "llm_error")
