"""Path 1 scenarios through POST /api/v1/chat, one stubborn or clumsy model per row.

Each drives the scripted OpenAI-compatible server and checks what it cost (LLM calls),
what came back (the answer and its finish reason) and what the trace holds (spans, the
spiral and its resolution).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.test import Client

from planner_app.agents.plan_agent import run_plan_agent
from planner_app.models import Agent
from tests.planner_app.fake_llm import FakeLlm, Reply, call, calls, say
from tools_app import site_engine
from tools_app.specs import ErrorKind, ToolFailure, ToolSpec
from traces_app.models import FailureSpiral, Invocation

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("llm_settings", "default_rules"),
]

QUESTION = "what is 6*7?"
BAD_ARGUMENTS = call("calculator", {"expression": 123})
HELLO = {"operation": "sha256", "text": "hello"}


def lookup(key: str) -> None:
    raise ToolFailure("the lookup backend is down", ErrorKind.TOOL_ERROR)


@pytest.fixture(autouse=True)
def failing_tool() -> Iterator[None]:
    """A tool that always fails by itself (tool_error), in the site's registry."""
    site_engine.refresh_tool_settings(force=True)
    registry = site_engine.get_engine().registry
    schema = {"type": "object", "properties": {"key": {"type": "string"}}}
    registry.register(ToolSpec("lookup", "Look a key up.", schema, lookup))
    yield
    registry.unregister("lookup")


@pytest.fixture
def chat(make_key: Callable[..., str]) -> Callable[..., dict[str, Any]]:
    """Return a function that asks an agent QUESTION through the API and returns the body."""

    def send(tools: list[str], tool_choice: str = "auto", **agent: Any) -> dict[str, Any]:
        Agent.objects.create(name="scenario", tools=tools, **agent)
        body = {"agent": "scenario", "messages": [{"role": "user", "content": QUESTION}],
                "tool_choice": tool_choice}  # fmt: skip
        headers = {"Authorization": f"Bearer {make_key('chat')}"}
        response = Client().post("/api/v1/chat", body, "application/json", headers=headers)
        assert response.status_code == 200, response.content
        return response.json()

    return send


def tool_spans(trace_id: str) -> list[tuple[str, str, str, str, str]]:
    spans = Invocation.objects.filter(trace_id=trace_id, kind="tool").order_by("started_at")
    return [(s.tool_name, s.chosen_by, s.error_kind, s.ran_on, s.tool_call_id) for s in spans]


def refused_spans(trace_id: str) -> list[tuple[str, str, str]]:
    spans = Invocation.objects.filter(trace_id=trace_id, kind="other", ran_on="none")
    return [(s.tool_name, s.status, s.error_kind) for s in spans]


def refusers(trace_id: str) -> list[str]:
    spans = Invocation.objects.filter(trace_id=trace_id, kind="other", ran_on="none")
    return [span.result["refused_by"] for span in spans.order_by("started_at")]


def spiral_of(trace_id: str) -> tuple[str, str, int, str, str] | None:
    spiral = FailureSpiral.objects.filter(trace_id=trace_id).first()
    if spiral is None:
        return None
    return (spiral.tool_name, spiral.kind, spiral.attempts, spiral.error_kind, spiral.resolution)


# The spiral breaker ----------------------------------------------------------------------

PLANNED = ("calculator", "planner", "", "builtin", "call_1")

SPIRALS = [
    pytest.param(
        ["calculator"], BAD_ARGUMENTS,
        [("calculator", "llm", "invalid_arguments", "builtin", "call_1")] * 3 + [PLANNED],
        ("calculator", "failing", 3, "invalid_arguments", "planner_fallback"),
        id="bad arguments: the planner calls the same tool with its own",
    ),
    pytest.param(
        ["lookup", "calculator"], call("lookup", {"key": "n"}),
        [("lookup", "llm", "tool_error", "builtin", "call_1")] * 3 + [PLANNED],
        ("lookup", "failing", 3, "tool_error", "planner_fallback"),
        id="a failing tool: the planner leaves it out",
    ),
    pytest.param(
        ["hash_tool", "calculator"], call("hash_tool", HELLO),
        [("hash_tool", "llm", "", "builtin", "call_1")] * 3 + [PLANNED],
        ("hash_tool", "loop", 3, "", "planner_fallback"),
        id="identical successful calls",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("tools", "stubborn", "spans", "spiral"), SPIRALS)
def test_the_spiral_breaker_ends_the_spiral_through_the_planner(
    chat: Callable[..., dict[str, Any]],
    fake_llm: FakeLlm,
    tools: list[str],
    stubborn: Reply,
    spans: list[tuple[str, ...]],
    spiral: tuple[Any, ...],
) -> None:
    fake_llm.always(stubborn)  # the same call every turn, forever
    body = chat(tools)
    assert len(fake_llm.requests) == 4  # three turns, one last call without tools
    assert "tools" not in fake_llm.requests[3]
    assert body["finish_reason"] == "spiral_breaker"
    assert body["content"].startswith("The model gave no answer; the planner's results")
    assert '"result": 42' in body["content"]
    assert tool_spans(body["trace_id"]) == spans
    assert spiral_of(body["trace_id"]) == spiral
    # The planner's step is listed with its arguments; the last, refused call is stored.
    planned = [c for c in body["tool_calls"] if c["path"] == 2]
    assert [(c["tool"], c["arguments"], c["call_id"]) for c in planned] == [
        ("calculator", {"expression": "6*7"}, "call_1")
    ]
    assert [(c["error_kind"], c["ran"]) for c in body["tool_calls"][-1:]] == [("cancelled", False)]
    assert refused_spans(body["trace_id"]) == [(spans[0][0], "error", "cancelled")]
    # In the order things happened: the third call, then the planner's answer to it.
    assert [c["path"] for c in body["tool_calls"]] == [1, 1, 1, 2, 1]
    assert refusers(body["trace_id"]) == ["spiral_breaker"]


def test_the_models_answer_after_the_planner_is_the_answer(
    chat: Callable[..., dict[str, Any]], fake_llm: FakeLlm
) -> None:
    fake_llm.script(BAD_ARGUMENTS, BAD_ARGUMENTS, BAD_ARGUMENTS, say("6*7 = 42"))
    body = chat(["calculator"])
    assert (body["content"], body["finish_reason"], len(fake_llm.requests)) == (
        "6*7 = 42", "spiral_breaker", 4,
    )  # fmt: skip
    assert (
        "The planner's results are in the last tool result"
        in (fake_llm.requests[3]["messages"][-1]["content"])
    )


def test_without_the_planners_help_one_last_call_says_why(
    chat: Callable[..., dict[str, Any]], fake_llm: FakeLlm
) -> None:
    fake_llm.script(*[call("lookup", {"key": "n"})] * 3, say("The lookup service is down."))
    body = chat(["lookup"])
    assert (body["content"], body["finish_reason"], len(fake_llm.requests)) == (
        "The lookup service is down.", "spiral_breaker", 4,
    )  # fmt: skip
    last = fake_llm.requests[3]["messages"][-1]["content"]
    assert "stopped by the spiral breaker" in last and "the planner found no tool" in last
    assert spiral_of(body["trace_id"]) == ("lookup", "failing", 3, "tool_error", "gave_up")


def test_the_spirals_waste_includes_the_llm_turns(
    chat: Callable[..., dict[str, Any]], fake_llm: FakeLlm
) -> None:
    fake_llm.always(BAD_ARGUMENTS)
    body = chat(["calculator"])
    spiral = FailureSpiral.objects.get(trace_id=body["trace_id"])
    turns = Invocation.objects.filter(trace_id=body["trace_id"], kind="llm").order_by("started_at")[
        :3
    ]
    llm_tokens = sum(turn.input_tokens + turn.output_tokens for turn in turns)
    assert spiral.wasted_tokens >= llm_tokens > 0


# Other clumsy models ------------------------------------------------------------------------


def test_an_unknown_tool_is_listed_and_ran_nowhere(
    chat: Callable[..., dict[str, Any]], fake_llm: FakeLlm
) -> None:
    fake_llm.script(call("weather", {"city": "Paris"}), say("6*7 = 42"))
    body = chat(["calculator"])
    assert (body["content"], body["finish_reason"], len(fake_llm.requests)) == (
        "6*7 = 42", "stop", 2,
    )  # fmt: skip
    listed = [(c["tool"], c["error_kind"], c["path"], c["arguments"]) for c in body["tool_calls"]]
    assert listed == [
        ("weather", "not_found", 1, {"city": "Paris"}),
        ("calculator", "", 2, {"expression": "6*7"}),
    ]  # fmt: skip
    assert tool_spans(body["trace_id"]) == [
        ("weather", "llm", "not_found", "none", "call_1"), PLANNED,
    ]  # fmt: skip
    assert spiral_of(body["trace_id"]) is None


@pytest.mark.parametrize(
    ("script", "answer", "llm_calls", "spans"),
    [
        pytest.param(
            [call("calculator", '{"expression": '), call("calculator", {"expression": "6*7"}),
             say("42")],
            "42", 3,
            [("calculator", "llm", "invalid_arguments", "builtin", "call_1"),
             ("calculator", "llm", "", "builtin", "call_1")],
            id="bad JSON arguments, then a good call",
        ),
        pytest.param(
            [calls(("calculator", {"expression": "6*7"}, "a"),
                   ("calculator", {"expression": "2+2"}, "b")),
             say("42 and 4")],
            "42 and 4", 2,
            [("calculator", "llm", "", "builtin", "a"), ("calculator", "llm", "", "builtin", "b")],
            id="parallel calls",
        ),
    ],
)  # fmt: skip
def test_a_model_that_recovers_answers_itself(
    chat: Callable[..., dict[str, Any]],
    fake_llm: FakeLlm,
    script: list[Reply],
    answer: str,
    llm_calls: int,
    spans: list[tuple[str, ...]],
) -> None:
    fake_llm.script(*script)
    body = chat(["calculator"])
    assert (body["content"], body["finish_reason"], len(fake_llm.requests)) == (
        answer, "stop", llm_calls,
    )  # fmt: skip
    assert tool_spans(body["trace_id"]) == spans
    assert spiral_of(body["trace_id"]) is None


@pytest.mark.parametrize(
    ("tool_choice", "stubborn", "llm_calls"),
    [
        pytest.param("auto", say(""), 2, id="silent, auto: asked once more"),
        pytest.param("required", say(""), 1, id="silent, required"),
        pytest.param("required", say("I don't know."), 1, id="talks, required"),
    ],
)
def test_a_model_that_will_not_call_gets_the_planners_answer(
    chat: Callable[..., dict[str, Any]],
    fake_llm: FakeLlm,
    tool_choice: str,
    stubborn: Reply,
    llm_calls: int,
) -> None:
    fake_llm.always(stubborn)
    body = chat(["calculator"], tool_choice)
    assert (body["finish_reason"], len(fake_llm.requests)) == ("planner_answer", llm_calls)
    assert body["content"].startswith("The model gave no answer; the planner's results")
    assert '"result": 42' in body["content"]
    assert tool_spans(body["trace_id"]) == [("calculator", "planner", "", "builtin", "step_1")]


def test_a_silent_model_with_nothing_to_plan_is_no_answer(
    chat: Callable[..., dict[str, Any]], fake_llm: FakeLlm
) -> None:
    fake_llm.always(say(""))
    body = chat(["lookup"])  # the planner has nothing for 6*7 among these tools
    assert (body["finish_reason"], len(fake_llm.requests)) == ("no_answer", 2)
    assert body["content"].startswith("The model gave no answer.")


def test_active_discovery_with_a_direct_call_returns_the_planners_answer(
    chat: Callable[..., dict[str, Any]], fake_llm: FakeLlm
) -> None:
    fake_llm.always(call("calculator", {"expression": "6*7"}))  # never asks for tools
    body = chat(["calculator"], discovery="active")
    assert (body["finish_reason"], len(fake_llm.requests)) == ("planner_answer", 2)
    assert '"result": 42' in body["content"]
    assert [(c["tool"], c["error_kind"], c["ran"]) for c in body["tool_calls"]] == [
        ("calculator", "cancelled", False), ("calculator", "", True),
        ("calculator", "cancelled", False),
    ]  # fmt: skip
    assert refused_spans(body["trace_id"]) == [("calculator", "error", "cancelled")] * 2
    assert refusers(body["trace_id"]) == ["discovery", "discovery"]  # not offered, twice
    assert spiral_of(body["trace_id"]) is None


def test_a_replan_draft_that_is_a_tool_call_runs_as_that_call(fake_llm: FakeLlm) -> None:
    fake_llm.script(call("calculator", {"expression": "6*7"}), say("6*7 = 42"))
    events: list[Any] = []
    agent = Agent.objects.create(name="planner-agent", tools=["calculator"])
    result = run_plan_agent(agent, QUESTION, max_replans=1, on_event=events.append)
    assert (result.content, result.finish_reason, len(fake_llm.requests)) == (
        "6*7 = 42", "stop", 2,
    )  # fmt: skip
    [plan] = [event.as_dict() for event in events if event.type == "plan"]
    assert plan["tool_calls"] == [
        {"id": "call_1", "name": "calculator", "arguments": {"expression": "6*7"}}
    ]
    assert [(s["tool"], s["arguments"]) for s in plan["steps"]] == [
        ("calculator", {"expression": "6*7"})
    ]
    assert plan["problems"] == []
    notices = [event.message for event in events if event.type == "notice"]
    assert any("is a tool call (calculator), not a plan" in notice for notice in notices)
    assert [s[:3] for s in tool_spans(result.trace_id)] == [("calculator", "workflow", "")]
