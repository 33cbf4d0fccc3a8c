"""The Bridge plans only what its caller may use: an agent's allow-list on every planner path.

The demo MCP server really runs (a stdio child, as under `make run`), so its add really adds.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client

from planner_app import bridge
from planner_app.agents.llm.messages import Message
from planner_app.agents.plan_agent import run_plan_agent
from planner_app.agents.site_agents import run_agent
from planner_app.models import Agent
from planner_app.services import plan_request
from tests.planner_app.fake_llm import FakeLlm, call, say
from tools_app.engine import CallContext
from traces_app.models import Invocation

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("demo_server")]

ADD, SHA256 = "mcp.demo.add", "mcp.demo.sha256"
SUM = "what is 1250 plus 370"
MCP_ONLY = frozenset({ADD, SHA256})


def test_the_plan_of_a_restricted_caller_chooses_its_allowed_fallback() -> None:
    anyone = plan_request(SUM)
    assert [(s.tool, s.fallback_tools) for s in anyone.steps] == [("calculator", (ADD,))]
    plan = plan_request(SUM, MCP_ONLY)
    assert [(s.tool, s.arguments, s.fallback_tools) for s in plan.steps] == [
        (ADD, {"a": 1250, "b": 370}, ())
    ]
    assert [c["tool"] for c in plan.explanation["candidates"]["Summation"]] == [ADD]
    assert {"capability": "Summation", "tool": "calculator",
            "why": "the caller may not use it"} in plan.explanation["rejected"]  # fmt: skip


def test_the_bridge_runs_the_allowed_tool_and_says_what_it_passed_over() -> None:
    context = CallContext(agent="mcp-only", allowed_tools=MCP_ONLY)
    outcome = bridge.execute(None, None, SUM, context)
    assert outcome.success, outcome.as_dict()
    [result] = outcome.results
    assert (result.tool, result.data["structured"]["sum"]) == (ADD, 1620)
    assert outcome.warnings == ["calculator passed over for Summation: the caller may not use it"]
    span = Invocation.objects.get(trace_id=context.trace_id)
    assert (span.tool_name, span.status, span.chosen_by, span.ran_on) == (
        ADD, "ok", "planner", "mcp:demo",
    )  # fmt: skip


def test_with_no_allowed_candidate_the_call_is_refused_naming_the_capability_and_tools() -> None:
    context = CallContext(agent="hash-only", allowed_tools=frozenset({SHA256}))
    outcome = bridge.execute(None, None, SUM, context)
    assert not outcome.success
    message = outcome.results[0].text
    assert "no tool the caller may use offers Summation" in message
    assert "calculator, mcp.demo.add would" in message and f"it may use: {SHA256}" in message
    assert not Invocation.objects.filter(trace_id=context.trace_id).exists()  # nothing ran


@pytest.fixture
def mcp_agent() -> Agent:
    return Agent.objects.create(name="mcp-only", tools=sorted(MCP_ONLY))


@pytest.fixture
def post_chat(make_key: Callable[..., str], settings: Any, fake_llm: FakeLlm) -> Callable:
    settings.ARES_LLM_BASE_URL, settings.ARES_LLM_MODEL = fake_llm.base_url, "fake-model"
    headers = {"Authorization": f"Bearer {make_key('chat')}"}

    def post(body: dict[str, Any]) -> Any:
        return Client().post("/api/v1/chat", body, content_type="application/json",
                             headers=headers)  # fmt: skip

    return post


def test_the_chat_apis_planner_fallback_runs_the_agents_allowed_tool(
    post_chat: Callable, mcp_agent: Agent, fake_llm: FakeLlm
) -> None:
    fake_llm.script(say("I cannot add."), say(""))  # told to call a tool, it would not
    body = {"agent": "mcp-only", "messages": [{"role": "user", "content": SUM}],
            "tool_choice": "required"}  # fmt: skip
    response = post_chat(body)
    assert response.status_code == 200, response.content
    answer = response.json()
    assert answer["finish_reason"] == "planner_answer" and "1620" in answer["content"]
    calls = Invocation.objects.filter(trace_id=answer["trace_id"], kind="tool")
    assert [(c.tool_name, c.status) for c in calls] == [(ADD, "ok")]


def test_plan_execute_replan_falls_back_to_the_allowed_tool(
    mcp_agent: Agent, fake_llm: FakeLlm, settings: Any
) -> None:
    settings.ARES_LLM_BASE_URL, settings.ARES_LLM_MODEL = fake_llm.base_url, "fake-model"
    # The model drafts a step that fails (sha256 without its text): the step's reason is
    # planned instead, among the agent's tools, as a workflow step's fallback.
    step = {"id": "sum", "tool": SHA256, "arguments": {}, "reason": SUM}
    fake_llm.script(say(json.dumps({"steps": [step]})), say("It is 1620."))
    result = run_plan_agent(mcp_agent, SUM)
    assert result.finish_reason == "stop", result
    calls = Invocation.objects.filter(trace_id=result.trace_id, kind="tool")
    assert [(c.tool_name, c.status, c.error_kind) for c in calls] == [
        (SHA256, "error", "invalid_arguments"), (ADD, "ok", ""),
    ]  # fmt: skip
    assert calls[1].result["structured"]["sum"] == 1620


def test_the_agent_loops_fallback_for_an_unknown_tool_runs_the_allowed_tool(
    mcp_agent: Agent, fake_llm: FakeLlm, settings: Any
) -> None:
    settings.ARES_LLM_BASE_URL, settings.ARES_LLM_MODEL = fake_llm.base_url, "fake-model"
    fake_llm.script(call("adder", {"x": 1250, "y": 370}), say("1250 + 370 = 1620"))
    result = run_agent(mcp_agent, [Message("user", SUM)])
    assert result.content == "1250 + 370 = 1620"
    calls = Invocation.objects.filter(trace_id=result.trace_id, kind="tool")
    assert [(c.tool_name, c.status) for c in calls] == [("adder", "error"), (ADD, "ok")]
    told = fake_llm.requests[1]["messages"][-1]["content"]
    assert "1620" in told
